"""scripts/bench_model.py's arguments: the comparison modes it accepts and the clear error for an unknown one."""
import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("bench_model", Path(__file__).parents[1] / "scripts" / "bench_model.py")
bench_model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_model)


def test_block_two_phase_variant_builds_a_block_model_with_the_schedule_forced_on():
    args = bench_model.parse_args(["--device", "cpu", "--modes", "standard,block_two_phase", "--hidden", "64",
                                   "--layers", "2", "--skip-memory"])
    assert args.modes == ["standard", "block_two_phase"] and args.skip_memory
    config = bench_model.build_model(args, "block_two_phase").config
    assert config.attn_res_mode == "block" and config.attn_res_two_phase is True
    assert bench_model.build_model(args, "block").config.attn_res_two_phase is None  # follows the backend


def test_unknown_mode_is_named(capsys):
    with pytest.raises(SystemExit):
        bench_model.parse_args(["--device", "cpu", "--modes", "standard,blok"])
    err = capsys.readouterr().err
    assert "--modes: unknown mode 'blok'" in err and "block_two_phase" in err

"""scripts/bench_model.py's arguments (the comparison modes it accepts, the clear error for an unknown one) and
scripts/bench_gpu.sh's refusal without a GPU."""
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


def test_gpu_script_refuses_without_cuda_and_writes_nothing(tmp_path):
    import os
    import subprocess

    out = tmp_path / "results"
    script = Path(__file__).parents[1] / "scripts" / "bench_gpu.sh"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, even on a machine that has one
    result = subprocess.run(["bash", str(script), str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode != 0 and "no CUDA device" in result.stderr
    assert not out.exists()

"""The Inkling-2 benchmark's command line (hf_attnres/cli/bench_inkling2.py): a bad size or measurement is argparse's
one `error:` line naming the flag, with nothing run or written; a tiny run writes its record with both arms checked
against transformers' own model."""
import json
import subprocess
import sys

import pytest

from hf_attnres.cli.bench_inkling2 import main
from tests.helpers.toolchain_fixtures import REPO


@pytest.mark.parametrize("argv, named", [
    (["--layers", "0"], "--layers"),
    (["--repeats", "-1"], "--repeats"),
    (["--measurements", "mix_q1,speed"], "--measurements"),
])
def test_bad_flags_are_one_line_naming_the_flag(argv, named, tmp_path, capsys):
    out = tmp_path / "out.json"
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--output", str(out)])
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert exit_info.value.code == 2 and len(errors) == 1 and named in errors[0], errors
    assert not out.exists()


@pytest.mark.slow  # two child processes, each importing torch and transformers
def test_a_tiny_run_records_both_arms(tmp_path):
    out = tmp_path / "out.json"
    result = subprocess.run([sys.executable, "-m", "hf_attnres.cli.bench_inkling2", "--hidden", "64", "--layers", "4",
                             "--block", "2", "--vocab", "128", "--seq", "16", "--repeats", "1",
                             "--measurements", "mix_q1", "--output", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    assert {r["arm"] for r in record["results"]} == {"transformers", "kernels"}
    assert all(r["max_abs_error_vs_transformers"] < 1e-4 for r in record["results"])

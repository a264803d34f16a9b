"""The cross-stage caching table's command line (hf_attnres/cli/caching_table.py): the simulator's table for the flags
given, `python -m hf_attnres.cli.caching_table` (docs/PIPELINE.md) runs it, and a count below 1 is argparse's one
line."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hf_attnres.cli.caching_table import main
from hf_attnres.pipeline.caching import simulate_interleaved

REPO = Path(__file__).resolve().parents[2]


def test_the_table_of_the_flags_given(capsys):
    main([])
    assert capsys.readouterr().out == simulate_interleaved(4, 2, 1, 2, False).table() + "\n"  # the paper's Fig. 3
    main(["--stages", "3", "--virtual", "3", "--layers-per-chunk", "2", "--block-size", "3", "--cache-own-blocks"])
    assert capsys.readouterr().out == simulate_interleaved(3, 3, 2, 3, True).table() + "\n"


@pytest.mark.parametrize("flag", ["--stages", "--virtual", "--layers-per-chunk", "--block-size"])
def test_a_count_below_one_is_one_line_naming_the_flag(flag, capsys):
    with pytest.raises(SystemExit) as stop:
        main([flag, "0"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"error: {flag} must be >= 1, got 0" in err and "Traceback" not in err


def test_python_m_runs_the_documented_command(capsys):
    done = subprocess.run([sys.executable, "-m", "hf_attnres.cli.caching_table", "--stages", "2"], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == simulate_interleaved(2, 2, 1, 2, False).table() + "\n"

"""The depth-diagnostics plot's command line (hf_attnres/cli/plot_diagnostics.py): it plots the runs it is given,
`python -m hf_attnres.cli.plot_diagnostics` (docs/TRAINING.md) runs it, and a run without diagnostics is one line naming
it, with no PNG."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hf_attnres.cli.plot_diagnostics import main

REPO = Path(__file__).resolve().parents[2]


def diagnosed_run(folder: Path, mode: str) -> Path:
    """A run folder holding one diagnostics record of a 2-layer model (5 mix points in block mode)."""
    folder.mkdir(parents=True)
    weights = [] if mode == "standard" else [[1.0], [0.5, 0.5], [0.2, 0.8], [0.3, 0.3, 0.4], [0.1, 0.2, 0.7]]
    record = dict(step=3, mode=mode, layer_rms=[1.0, 1.5], layer_grad_norm=[0.1, 0.2], depth_weights=weights)
    (folder / "diagnostics.jsonl").write_text(json.dumps(record) + "\n")
    return folder


def test_plots_the_runs_given(tmp_path, capsys):
    runs = [diagnosed_run(tmp_path / mode, mode) for mode in ("standard", "block")]
    out = tmp_path / "plots" / "figure5.png"
    main([*map(str, runs), "--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out.strip() == f"wrote {out}"


@pytest.mark.parametrize("damage", ["missing", "empty"])
def test_a_run_without_diagnostics_is_one_line_and_no_png(tmp_path, damage):
    run = tmp_path / "run"
    run.mkdir()
    if damage == "empty":
        (run / "diagnostics.jsonl").write_text("")
    out = tmp_path / "figure.png"
    with pytest.raises(SystemExit) as stop:
        main([str(run), "--out", str(out)])
    assert str(stop.value.code).startswith("error: ") and "diagnostics.jsonl" in str(stop.value.code)
    assert "\n" not in str(stop.value.code) and not out.exists()


def test_python_m_runs_the_documented_command(tmp_path):
    run, out = diagnosed_run(tmp_path / "block", "block"), tmp_path / "figure.png"
    done = subprocess.run([sys.executable, "-m", "hf_attnres.cli.plot_diagnostics", str(run), "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"wrote {out}" and out.is_file()

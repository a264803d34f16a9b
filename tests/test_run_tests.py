"""The fast lane of `scripts/run_tests.sh` (docs/TESTING.md): it installs nothing, so without its tools it stops before
any work with one line saying how to get them; and what it selects holds every registered family and the saved-folder
generator's tests, so a new family or a generator change is caught on every change."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hf_attnres.families.registry import SUPPORTED

REPO = Path(__file__).resolve().parents[1]


def fast_lane(*args: str, python_dir: Path | None = None, **env_vars: str) -> subprocess.CompletedProcess:
    """`bash scripts/run_tests.sh --fast ARGS`, its `python3` the one in `python_dir` (else the running one's)."""
    bin_dir = python_dir or Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1", **env_vars)
    return subprocess.run(["bash", "scripts/run_tests.sh", "--fast", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def test_without_its_tools_the_fast_lane_names_them_and_the_install_in_one_line(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    done = fast_lane(python_dir=tmp_path / "bare" / "bin")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert "ruff pytest pytest_timeout" in done.stderr and 'pip install -e ".[test]"' in done.stderr


@pytest.mark.slow  # pytest collecting the lane: over 10 s
def test_the_fast_lane_selects_every_family_and_the_folder_generator(tmp_path):
    """What the lane selects, with its lint step stubbed: whether the checkout lints is ruff's own verdict."""
    (tmp_path / "ruff").mkdir()
    for name in ("__init__.py", "__main__.py"):  # a package that shadows the installed ruff and passes
        (tmp_path / "ruff" / name).write_text("")
    done = fast_lane("--collect-only", "-q", PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    selected = [line for line in done.stdout.splitlines() if "::" in line]
    family_tests = [node for node in selected if node.startswith("tests/families/")]
    missing = [family for family in SUPPORTED if not any(f"[{family}-" in node or f"[{family}]" in node
                                                         for node in family_tests)]
    assert missing == [], missing
    assert any(node.startswith("tests/folders/test_remote_code.py::") for node in selected)

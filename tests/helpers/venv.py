"""A fresh virtual environment that sees the packages of the interpreter running the tests, never the checkout.

`python -m venv --system-site-packages` would see the BASE interpreter's packages (the one the running venv was made
from, without torch or transformers when the tests run in a venv), so instead the new venv gets a .pth
file naming the folders the running interpreter imports from (its sys.path as set up at start: site-packages, a
venv's or the system's alike, and what their .pth files added), less the standard library and any folder holding an
attnres package (the checkout). Plain path lines: the .pth files in those folders are not run again, so an editable
install of attnres there (a meta-path finder that would shadow whatever the new venv installs) stays invisible.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path


def running_import_folders() -> list[str]:
    """The running interpreter's package folders (see the module docstring), in its own order, without duplicates."""
    stdlib = {Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "platstdlib")}
    folders = []
    for entry in sys.path:
        folder = Path(entry or ".").resolve()
        if (not folder.is_dir() or folder in stdlib or folder.parent in stdlib and folder.name == "lib-dynload"
                or (folder / "hf_attnres" / "__init__.py").is_file() or str(folder) in folders):
            continue
        folders.append(str(folder))
    return folders


def make_venv(path: Path) -> tuple[Path, Path]:
    """A venv at `path` (no pip of its own: the running interpreter's, seen through the .pth, installs into it).
    Returns (its python, its bin folder)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True,
                   timeout=300)
    python = path / "bin" / "python"
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    (Path(own) / "_attnres_tests_parent_env.pth").write_text("\n".join(running_import_folders()) + "\n")
    return python, path / "bin"


def run(command, **kwargs) -> subprocess.CompletedProcess:
    """`command` to completion (15 minutes at most), its output in the failure message."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, **kwargs)
    assert result.returncode == 0, f"{command[:4]}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result


def build_wheel(repo: Path, work: Path) -> Path:
    """The package's wheel, built from a copy of the sources in `work` (the build writes nothing into the checkout),
    without network (--no-isolation)."""
    src = work / "src"
    shutil.copytree(repo / "hf_attnres", src / "hf_attnres", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(repo / name, src / name)
    run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(work / "dist"), str(src)])
    return next((work / "dist").glob("hf_attnres-*.whl"))

"""Atomic checkpoint folders: every process writes into `.tmp-step-N/`, then the main process renames it to
`step-N/` once everything (including `trainer_state.json`, written last) is on disk.

A process killed mid-write leaves only a `.tmp-*` folder, which is ignored and cleaned up at the next start; the
previous `step-*` folder stays complete and loadable. A rename within one folder is atomic on POSIX file systems.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

STATE_FILE = "trainer_state.json"
STEP_DIR = re.compile(r"^step-(\d+)$")
# Fault injection for the kill test: seconds to sleep after the files are written, before the rename
PAUSE_ENV = "ATTNRES_CHECKPOINT_PAUSE_S"


def checkpoint_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step:08d}"


def resolve_checkpoint(path: str | Path) -> Path:
    """A `--resume` folder: as given, or `step-N` naming the zero-padded `step-0000000N` beside it (`checkpoints/step-100`
    finds `checkpoints/step-00000100`). Raises ValueError naming the path when neither is a complete checkpoint."""
    path = Path(path)
    match = STEP_DIR.match(path.name)
    candidates = [path] + ([checkpoint_dir(path.parent, int(match.group(1)))] if match else [])
    for folder in candidates:
        if (folder / STATE_FILE).is_file():
            return folder
    existing = [d.name for d in complete_checkpoints(path.parent)]
    hint = f"; checkpoints there: {', '.join(existing)}" if existing else ""
    if path.is_dir():
        raise ValueError(f"--resume {path}: not a checkpoint (no {STATE_FILE}){hint}")
    raise ValueError(f"--resume {path}: no such checkpoint folder{hint}")


def complete_checkpoints(root: Path) -> list[Path]:
    """Finished checkpoints under `root`, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [d for d in root.iterdir() if STEP_DIR.match(d.name) and (d / STATE_FILE).is_file()]
    return sorted(found, key=lambda d: int(STEP_DIR.match(d.name).group(1)))


def latest_checkpoint(root: Path) -> Path | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def remove_partial(root: Path) -> None:
    """Delete `.tmp-*` folders left by a killed run (main process only, before training)."""
    for leftover in Path(root).glob(".tmp-*") if Path(root).is_dir() else ():
        shutil.rmtree(leftover, ignore_errors=True)


def _fsync_tree(folder: Path) -> None:
    """Flush every file so the rename never publishes data still in the page cache."""
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def save_checkpoint(root: Path, step: int, state: dict, write: Callable[[Path], None], is_main: bool,
                    barrier: Callable[[], None], keep: int) -> Path:
    """Collective: every process calls it. `write(tmp)` saves the process's share of model/optimizer/RNG state."""
    root, final = Path(root), checkpoint_dir(root, step)
    tmp = root / f".tmp-{final.name}"
    if is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier()
    write(tmp)
    barrier()
    if is_main:
        (tmp / STATE_FILE).write_text(json.dumps(dict(state, step=step), indent=2))
        _fsync_tree(tmp)
        time.sleep(float(os.environ.get(PAUSE_ENV, "0")))
        if final.exists():  # the same step saved again (e.g. the end of a resumed run): replace it
            shutil.rmtree(final)
        tmp.rename(final)
        for old in complete_checkpoints(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    barrier()
    return final


def read_state(folder: Path) -> dict:
    return json.loads((Path(folder) / STATE_FILE).read_text())

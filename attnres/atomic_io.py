"""Write-then-rename: a reader (or a crash) never sees a half-written file or folder.

Files: `atomic_write` writes a hidden sibling and renames it into place. Folders: `temporary_folder` builds a hidden
sibling `.NAME.partial-PID` and `move_into_place` renames it to NAME (an existing NAME steps aside as
`.NAME.replaced-PID` first and is deleted last). `recover_interrupted` cleans what a killed writer left behind.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

# Fault injection for the kill tests: seconds to sleep once the data is written, just before the final rename
PAUSE_ENV = "ATTNRES_PAUSE_BEFORE_RENAME_S"


def pause_before_rename(target) -> None:
    seconds = float(os.environ.get(PAUSE_ENV) or 0)
    if seconds > 0:
        print(f"{PAUSE_ENV}: {target} written, pausing {seconds}s", file=sys.stderr, flush=True)
        time.sleep(seconds)


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` for a hidden sibling of `path`, then rename it into place (same folder: atomic)."""
    path = Path(path)
    recover_interrupted(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        pause_before_rename(path)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json_atomic(path: str | os.PathLike, payload) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2))


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine (signal 0 only checks)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _leftovers(output: Path, kind: str):
    """The `.NAME.<kind>-PID` siblings of `output` whose writer process is dead."""
    for path in output.parent.glob(f".{output.name}.{kind}-*"):
        pid = path.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            yield path


def recover_interrupted(output: str | os.PathLike) -> None:
    """Undo what a killed writer of `output` left: its half-built `.partial-PID` folders (`.tmp-PID` files) are
    deleted; an old output that had stepped aside (`.replaced-PID`) goes back in place if nothing replaced it, else it
    is deleted."""
    output = Path(output)
    if not output.parent.is_dir():
        return
    for partial in _leftovers(output, "partial"):
        recover_interrupted(partial)  # a writer nested in it (save_pretrained into a build folder) left its own
        shutil.rmtree(partial, ignore_errors=True)
    for tmp in _leftovers(output, "tmp"):  # a file written by atomic_write
        tmp.unlink(missing_ok=True)
    for old in _leftovers(output, "replaced"):
        if not output.exists():
            os.rename(old, output)
        elif old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


@contextmanager
def temporary_folder(output: str | os.PathLike):
    """A hidden sibling of `output` (same filesystem, so the final rename is atomic), removed on any failure."""
    output = Path(output)
    recover_interrupted(output)
    folder = output.parent / f".{output.name}.partial-{os.getpid()}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        yield folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def move_into_place(folder: str | os.PathLike, output: str | os.PathLike) -> None:
    """Rename the finished `folder` to `output`; an existing `output` (the caller checked --force) is replaced."""
    folder, output = Path(folder), Path(output)
    pause_before_rename(output)
    if not output.exists():
        os.rename(folder, output)
        return
    # the old output steps aside first, so at every moment one complete copy sits at `output` or beside it
    old = output.parent / f".{output.name}.replaced-{os.getpid()}"
    os.rename(output, old)
    os.rename(folder, output)
    shutil.rmtree(old) if old.is_dir() else old.unlink()

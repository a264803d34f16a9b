"""Write-then-rename: a reader (or a crash) never sees a half-written file or folder.

Files: `atomic_write` writes a hidden sibling and renames it into place. Folders: `temporary_folder` builds a hidden
sibling `.NAME.partial-PID` and `move_into_place` renames it to NAME (an existing NAME steps aside as
`.NAME.replaced-PID` first and is deleted last). `recover_interrupted` cleans what a killed writer left behind.

One writer per output: `claim_output` holds an exclusive lock (`flock` on a hidden sibling `.NAME.lock`, gone with its
process, so a killed writer leaves no stale lock) for as long as a command writes the output; `temporary_folder`
takes it, so every writer of a folder does. A second writer of the same output stops at once with an
`OutputConflictError` naming it, and `move_into_place(..., replace=False)` refuses an output that appeared since
the command checked (another writer finished meanwhile) instead of silently replacing it.

Names are literal: an output that is a symbolic link is replaced as a link (the link is renamed and removed, never
the folder it points to), and sibling names are matched exactly (an output called `f*` touches no other output's
leftovers). A very long output name gets a shortened, hashed sibling name (a file name has at most 255 bytes).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; the final rename still refuses an output that appeared meanwhile
    fcntl = None

# Fault injection for the kill tests: seconds to sleep once the data is written, just before the final rename
PAUSE_ENV = "ATTNRES_PAUSE_BEFORE_RENAME_S"


def pause_before_rename(target) -> None:
    seconds = float(os.environ.get(PAUSE_ENV) or 0)
    if seconds > 0:
        print(f"{PAUSE_ENV}: {target} written, pausing {seconds}s", file=sys.stderr, flush=True)
        time.sleep(seconds)


def _short_name(output: Path) -> str:
    """`output`'s name, shortened and hashed when it is very long (a sibling's name must fit in 255 bytes)."""
    name = output.name
    if len(name.encode()) > 200:
        name = name.encode()[:150].decode(errors="ignore") + "~" + hashlib.sha1(output.name.encode()).hexdigest()[:12]
    return name


def sibling(output: Path, kind: str, pid: int | None = None) -> Path:
    """The hidden sibling `.NAME.<kind>-PID` of `output` (NAME shortened and hashed when it is very long)."""
    return output.parent / f".{_short_name(output)}.{kind}-{os.getpid() if pid is None else pid}"


def lock_path(output: Path) -> Path:
    """The hidden sibling `.NAME.lock` that `claim_output` locks (one fixed name: every writer of `output` meets)."""
    return output.parent / f".{_short_name(output)}.lock"


class OutputConflictError(ValueError):
    """Another process writes the same output now, or wrote it since this command checked that it did not exist."""


_claimed: dict[Path, int] = {}  # outputs this process holds (a nested claim of the same output is no conflict)
_claims_guard = threading.Lock()


def _open_locked(path: Path) -> int | None:
    """A descriptor of `path` holding its exclusive flock; None when another process holds it. The holder removes
    the file on release, so a file that vanished or was replaced between our open and our lock is opened again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


@contextmanager
def claim_output(output: str | os.PathLike):
    """Hold the exclusive lock of `output` for the body (created beside it; the parent folder is created if needed).
    Raises OutputConflictError naming the output and the holder when another live process holds it."""
    output = Path(output).absolute()
    with _claims_guard:
        nested = output in _claimed
        _claimed[output] = _claimed.get(output, 0) + 1
    try:
        if nested or fcntl is None:
            yield
            return
        path = lock_path(output)
        output.parent.mkdir(parents=True, exist_ok=True)
        fd = _open_locked(path)
        if fd is None:
            holder = (path.read_text(errors="replace").strip() if path.is_file() else "") or f"lock {path}"
            raise OutputConflictError(f"{output} is being written by another process ({holder}): wait for it to "
                                      "finish, or write elsewhere")
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
            yield
        finally:
            path.unlink(missing_ok=True)  # still ours: a newcomer that opened it first sees it gone and retries
            os.close(fd)
    finally:
        with _claims_guard:
            _claimed[output] -= 1
            if not _claimed[output]:
                del _claimed[output]


def remove_path(path: Path) -> None:
    """Delete a file, a link (the link only, never its target) or a folder."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` for a hidden sibling of `path`, then rename it into place (same folder: atomic)."""
    path = Path(path)
    recover_interrupted(path)
    tmp = sibling(path, "tmp")
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
    """The `.NAME.<kind>-PID` siblings of `output` whose writer process is dead (names compared literally)."""
    prefix = sibling(output, kind, 0).name[:-1]  # ".NAME.<kind>-"
    for path in list(output.parent.iterdir()):
        pid = path.name[len(prefix):]
        if path.name.startswith(prefix) and pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            yield path


def recover_interrupted(output: str | os.PathLike) -> None:
    """Undo what a killed writer of `output` left: its half-built `.partial-PID` folders (`.tmp-PID` files) are
    deleted; an old output that had stepped aside (`.replaced-PID`) goes back in place if nothing replaced it, else it
    is deleted."""
    output = Path(output)
    if not output.parent.is_dir():
        return
    for partial in _leftovers(output, "partial"):
        if partial.is_dir() and not partial.is_symlink():
            recover_interrupted(partial)  # a writer nested in it (save_pretrained into a build folder) left its own
        remove_path(partial)
    for tmp in _leftovers(output, "tmp"):  # a file written by atomic_write
        remove_path(tmp)
    for old in _leftovers(output, "replaced"):
        if not os.path.lexists(output):
            os.rename(old, output)
        else:
            remove_path(old)
    _remove_stale_lock(output)


def _remove_stale_lock(output: Path) -> None:
    """The lock file of a killed writer of `output` (no process holds it) goes; a held one stays."""
    path = lock_path(output)
    if fcntl is None or not path.is_file():
        return
    fd = _open_locked(path)
    if fd is not None:
        path.unlink(missing_ok=True)
        os.close(fd)


@contextmanager
def temporary_folder(output: str | os.PathLike):
    """A hidden sibling of `output` (same filesystem, so the final rename is atomic), removed on any failure. The
    output is claimed (`claim_output`) for the body: call `move_into_place` inside it."""
    output = Path(output)
    with claim_output(output):
        recover_interrupted(output)
        folder = sibling(output, "partial")
        remove_path(folder)
        folder.mkdir(parents=True)
        try:
            yield folder
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise


def move_into_place(folder: str | os.PathLike, output: str | os.PathLike, *, replace: bool) -> None:
    """Rename the finished `folder` to `output`. An existing `output` is replaced only when `replace` (the command's
    --force, or an output the command owns: a run's checkpoint): a folder or file by the new folder, a link as a
    link (the folder it pointed to is left alone). Otherwise an `output` that appeared since the command checked
    raises OutputConflictError and stays as it is."""
    folder, output = Path(folder), Path(output)
    pause_before_rename(output)
    if not os.path.lexists(output):
        os.rename(folder, output)
        return
    if not replace:
        raise OutputConflictError(f"{output} appeared while this command was writing it (another process wrote it "
                                  "meanwhile): it is kept as it is; pass --force to replace it")
    # the old output steps aside first, so at every moment one complete copy sits at `output` or beside it
    old = sibling(output, "replaced")
    os.rename(output, old)  # renames a link itself, not its target
    pause_before_rename(old)
    os.rename(folder, output)
    remove_path(old)

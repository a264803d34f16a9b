"""Which folder a tool may create or replace, and what a failed or interrupted write of it tells the user.

`check_output_folder` is the one output rule of every command that writes a folder (convert, push-to-hub, export,
prepare-data): never its input, a folder holding its input, the current folder or home (or a folder holding them),
never a file. Names are literal: an output that is a symbolic link is, with `--force`, replaced as a link (the link
goes, the folder it points to is left alone), and the containment rules look at the link's target as well, so a link
to the input or to home is refused. Checked before any work starts; `--force` replaces the output itself and nothing
else (the replacing itself is `hf_attnres.folders.atomic_io`'s)."""
from __future__ import annotations

import errno
import os
import re
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

from ..folders.atomic_io import remove_path, sibling

# A file name has at most NAME_MAX bytes (255 on Linux, macOS and Windows filesystems)
_NAME_MAX = 255
# safetensors' Rust writer reports I/O errors as text: "... No space left on device (os error 28)"
_RUST_OS_ERROR = re.compile(r"os error (\d+)")


class UnsafeOutputError(ValueError):
    """The output folder would overwrite or delete something the user did not give as the output."""


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def literal_path(path) -> Path:
    """`path` made absolute with its parent resolved and its last component kept as given: a link stays the link.
    (`.` and `..` name no entry of their own, so such a path is resolved whole.)"""
    absolute = Path(path).expanduser().absolute()
    if absolute.name in ("", ".", ".."):
        return absolute.resolve()
    return absolute.parent.resolve() / absolute.name


def check_output_folder(output, inputs=(), force: bool = False, flag: str = "output") -> Path:
    """Return `output` as a literal absolute path (see `literal_path`), or raise UnsafeOutputError naming the flag
    and the path.

    `inputs`: files or folders the run reads (must neither contain nor lie inside the output, nor the folder a link
    output points to). `force`: an existing output (folder or link) may be replaced; otherwise it is refused."""
    given = output
    output = literal_path(output)
    if len(output.name.encode()) > _NAME_MAX:
        raise UnsafeOutputError(f"{flag} {given}: the name is {len(output.name.encode())} bytes, longer than a file "
                                f"name may be ({_NAME_MAX}): choose a shorter name")
    is_link = output.is_symlink()
    check_overlap(given, output, inputs, flag)
    if is_link:  # what a write through the name would reach: refused where the output itself would be
        check_overlap(f"{given} (a link to {output.resolve()})", output.resolve(), inputs, flag)
    if is_link and not force:
        raise UnsafeOutputError(f"{flag} {given} already exists, a link to {os.readlink(output)} (pass --force to "
                                "replace the link; the folder it points to is kept)")
    if not is_link and output.exists() and not output.is_dir():
        raise UnsafeOutputError(f"{flag} {given} exists and is a file, not a folder: choose a folder path")
    if not is_link and output.exists() and not force:
        raise UnsafeOutputError(f"{flag} {given} already exists (pass --force to replace it)")
    parent = output.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UnsafeOutputError(f"{flag} {given}: {parent} is a file, so the folder cannot be created")
    if not os.access(parent, os.W_OK):
        raise UnsafeOutputError(f"{flag} {given}: {parent} is not writable")
    return output


def check_overlap(given, output: Path, inputs, flag: str) -> None:
    """`output` (absolute) must not be, hold or lie inside an input, nor be or hold the current folder or home."""
    for source in inputs:
        source_path = Path(source).expanduser().resolve()
        if source_path == output:
            raise UnsafeOutputError(f"{flag} {given} is the input {source}: write to another folder")
        if _inside(source_path, output):
            raise UnsafeOutputError(
                f"{flag} {given} contains the input {source}: replacing it would delete the input; write elsewhere")
        if _inside(output, source_path):
            raise UnsafeOutputError(f"{flag} {given} lies inside the input {source}: write outside it")
    for name, protected in (("the current folder", Path.cwd()), ("your home folder", Path.home())):
        if _inside(protected.resolve(), output):
            raise UnsafeOutputError(f"{flag} {given} is or contains {name} ({protected}): choose a new folder")


def write_failure(output, error: Exception) -> str | None:
    """One line for a write of `output` that failed on the filesystem (an OSError, or safetensors' error text with
    an OS error code), naming the error (ENOSPC: disk full) and the output; None for any other error."""
    code = getattr(error, "errno", None) if isinstance(error, OSError) else None
    if code is None and type(error).__name__ == "SafetensorError":
        match = _RUST_OS_ERROR.search(str(error))
        code = int(match.group(1)) if match else None
    if code is None:
        return None
    name = errno.errorcode.get(code, f"errno {code}")
    where = f" at {error.filename}" if getattr(error, "filename", None) else ""
    hint = ": free some space or write elsewhere" if code in (errno.ENOSPC, errno.EDQUOT) else ""
    return f"writing {output} failed{where}: {os.strerror(code)} ({name}){hint}"


# A full or read-only disk (or quota): what `disk_errors_named` turns into one message
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


@contextmanager
def disk_errors_named(target: str, consequence: str, error_class: type[Exception]):
    """Turn a disk-full / quota / read-only OSError raised inside into `error_class(write_failure(target, error) +
    "; <consequence>")`. Other OSErrors pass through."""
    try:
        yield
    except OSError as error:
        if error.errno not in DISK_ERRORS:
            raise
        raise error_class(f"{write_failure(target, error)}; {consequence}") from None


@contextmanager
def signals_interrupt():
    """SIGTERM raises KeyboardInterrupt as SIGINT does, so a terminated writer also cleans up on its way out (its
    `temporary_folder` goes) instead of dying mid-write. The signal's name is the interrupt's message."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupt_signal(interrupt: KeyboardInterrupt) -> signal.Signals:
    """The signal behind a KeyboardInterrupt (SIGTERM through `signals_interrupt`, else SIGINT)."""
    return signal.SIGTERM if interrupt.args == ("SIGTERM",) else signal.SIGINT


def settle_interrupted(output) -> bool:
    """After an interrupt while this process was replacing `output` (`atomic_io.move_into_place`): the old output
    that had stepped aside goes back if the new one never arrived. Returns whether `output` now holds the new copy
    (the interrupt came while the old one was being deleted). `recover_interrupted` does this for dead writers only."""
    output, old = literal_path(output), sibling(literal_path(output), "replaced")
    if not os.path.lexists(old):
        return False
    if not os.path.lexists(output):
        os.rename(old, output)
        return False
    remove_path(old)
    return True

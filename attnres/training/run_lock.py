"""One run per output folder: the run that writes to a folder holds an exclusive lock on `<folder>/.lock` until it
ends. A second run in the same folder stops at once with a message naming the holder. The lock is the kernel's
(`flock`): it disappears with its process, so a killed run never leaves a stale lock behind."""
from __future__ import annotations

import fcntl
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from .args import SetupError

LOCK_FILE = ".lock"


class OutputLockedError(SetupError):
    """Another live process writes to this output folder."""


def is_rank_zero() -> bool:
    """The process that writes run outputs (torchrun, accelerate and deepspeed all set RANK)."""
    return int(os.environ.get("RANK", "0")) == 0


@contextmanager
def output_lock(folder: str | os.PathLike, flag: str = "--output-dir", enabled: bool = True):
    """Hold the lock of `folder` (created if needed) for the body; raise OutputLockedError if another run has it."""
    if not enabled:
        yield
        return
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise SetupError(f"{flag} {folder} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise SetupError(f"{flag} {folder}: cannot create it ({error.strerror or error})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode("utf-8", "replace").strip() or "unknown process"
            raise OutputLockedError(f"{flag} {folder} is in use by another run ({holder}); wait for it to finish "
                                    "or choose another folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}"
                  .encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock (the file stays: removing it would race with a run opening it)

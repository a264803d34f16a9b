"""A run's state files read back safely, its RNG state, and the output folder's lock (checkpoint folders, their
atomic save and the choice of one to resume: `checkpoints.py`).

- Reading a checkpoint back without ever running code from it: torch files load with `weights_only=True` (tensors,
  numbers, strings, numpy arrays: no pickled objects), and every file is checked first, so a damaged or missing one
  gets a message naming it instead of a traceback or, as accelerate does for RNG states, silence.
- One run per output folder: the run that writes to a folder holds an exclusive lock on `<folder>/.lock` until it
  ends. A second run in the same folder stops at once with a message naming the holder. The lock is the kernel's
  (`flock`): it disappears with its process, so a killed run never leaves a stale lock behind.
- A run never deletes or replaces files that no run wrote: the lock file (or complete checkpoints) is the mark of a
  run's folder (`is_run_folder`); in any other folder, an entry with a name that a run writes (final/, checkpoints/,
  its logs) is refused by name (`check_not_foreign`): a run replaces final/ and deletes `checkpoints/.tmp-*`, which
  must never hit a user's `final/` (or `--output-dir .` in a folder holding one). Other files there are left alone.
"""
from __future__ import annotations

import fcntl
import os
import random
import re
import socket
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from ..folders.checkpoint_files import check_safetensors, read_json_file
from ..utils import finite_weights
from ..utils.finite_weights import NonFiniteWeightsError
from . import SetupError
from .checkpoints import STATE_FILE, ResumeFileError, checkpoints_root, complete_checkpoints

# The scheduler's state (a plain dict of numbers), saved by torch.save and read back with weights_only=True
SCHEDULER_FILE = "lr_scheduler.pt"
LOCK_FILE = ".lock"


# --- resuming: reading the files back as plain data ----------------------------------------------------------------


def load_weights_only(path: str | Path):
    """torch.load with weights_only=True (accelerate's helper also allows numpy RNG arrays); errors name the file."""
    from accelerate.utils import load

    path = Path(path)
    if not path.is_file():
        raise ResumeFileError(f"{path}: missing from the checkpoint")
    try:
        return load(str(path), map_location="cpu")
    except Exception as error:  # noqa: BLE001  torch raises many types for bad files; one message for all
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ResumeFileError(f"{path}: cannot be read as a plain-data torch file ({first}); the checkpoint "
                                  "is damaged or holds pickled objects, which are never loaded") from None


def check_torch_file(path: Path) -> None:
    """A torch.save file is a zip archive: a truncated one has no central directory. Reads no data."""
    if not path.is_file():
        raise ResumeFileError(f"{path}: missing from the checkpoint")
    try:
        with zipfile.ZipFile(path) as archive:
            archive.infolist()
    except (zipfile.BadZipFile, OSError):
        raise ResumeFileError(f"{path}: truncated or not a torch checkpoint file") from None


def check_accelerate_checkpoint(folder: str | Path, rank: int = 0) -> None:
    """Every file accelerate's load_state and our scheduler load will read, before any state changes."""
    folder = Path(folder)
    read_json_file(folder / STATE_FILE, "training state")
    model_files = sorted(folder.glob("model*.safetensors"))
    fsdp_files = sorted(folder.glob("pytorch_model_fsdp*.bin"))  # an FSDP2 run's full state dict (accelerate)
    if not model_files and not fsdp_files:
        raise ResumeFileError(f"{folder}: no model.safetensors (not a complete checkpoint)")
    for path in model_files:
        check_safetensors(path)
        try:
            finite_weights.check_file(path)  # a NaN weight is named: resuming from it would write NaN over finite
        except NonFiniteWeightsError as error:
            raise ResumeFileError(str(error)) from None
    for path in fsdp_files:
        check_torch_file(path)
    for name in ("optimizer.bin", SCHEDULER_FILE, f"random_states_{rank}.pkl"):
        check_torch_file(folder / name)
    load_weights_only(folder / f"random_states_{rank}.pkl")  # small; accelerate would skip a bad one silently


def check_deepspeed_checkpoint(folder: str | Path, rank: int = 0) -> None:
    """DeepSpeed's own files (under the `deepspeed/` tag) and our RNG state, checked without loading them."""
    folder = Path(folder)
    read_json_file(folder / STATE_FILE, "training state")
    files = sorted((folder / "deepspeed").glob("*.pt"))
    if not files:
        raise ResumeFileError(f"{folder / 'deepspeed'}: no DeepSpeed state files (not a complete checkpoint)")
    for path in files:
        check_torch_file(path)
    load_weights_only(folder / f"rng_state_{rank}.pt")


def check_checkpoint(folder: str | Path, deepspeed: bool) -> None:
    """The --resume checkpoint's files, for the engine that will read them (this process's rank)."""
    rank = int(os.environ.get("RANK", "0"))
    (check_deepspeed_checkpoint if deepspeed else check_accelerate_checkpoint)(folder, rank)


def _deepspeed_safe_globals() -> list:
    """The plain-data classes DeepSpeed stores in its state files (found by loading ZeRO checkpoints with
    weights_only=True), plus the numpy types accelerate allows for RNG states."""
    from accelerate.utils.other import TORCH_SAFE_GLOBALS
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, ZeroStageEnum, fragment_address, *TORCH_SAFE_GLOBALS]


def read_deepspeed_weights_only(checkpoint_engine) -> None:
    """DeepSpeed's checkpoint engine loads with weights_only=False: make this one load plain data only."""
    def load(path, map_location=None):
        try:
            with torch.serialization.safe_globals(_deepspeed_safe_globals()):
                return torch.load(path, map_location=map_location, weights_only=True)
        except Exception as error:  # noqa: BLE001  one message naming the file
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ResumeFileError(f"{path}: cannot be read as plain data ({first}); the checkpoint is damaged or "
                                  "holds pickled objects, which are never loaded") from None

    checkpoint_engine.load = load


def rng_state() -> dict:
    state = dict(python=random.getstate(), numpy=np.random.get_state(), torch=torch.get_rng_state())
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --- the output folder's lock --------------------------------------------------------------------------------------


class OutputLockedError(SetupError):
    """Another live process writes to this output folder."""


# What every run writes into its lock file (`output_lock`); empty: a run killed between creating and writing it
_RUN_LOCK_TEXT = re.compile(r"(pid \d+ on .*)?")


def is_run_folder(folder: Path) -> bool:
    """Whether `folder` is a run's: it holds the lock file every training run creates first, or complete checkpoints
    (a run's folder copied without its lock file)."""
    lock = Path(folder) / LOCK_FILE
    try:
        if lock.is_file() and _RUN_LOCK_TEXT.fullmatch(lock.read_text()[:1000].strip()) is not None:
            return True
    except (OSError, UnicodeDecodeError):
        pass
    return bool(complete_checkpoints(checkpoints_root(folder)))


# What a run (train, pipeline train) writes, replaces or cleans up in its folder: loop.py, logs.py, pipeline/
RUN_ENTRIES = frozenset({
    "checkpoints", "final", ".tmp-final", "metrics.jsonl", "tensorboard", "diagnostics.jsonl",
    "depth_diagnostics.png", "depth_diagnostics.tmp.png", "log.jsonl", "comms.json", "model",
})


def check_not_foreign(folder: Path, flag: str = "--output-dir") -> None:
    """Refuse a folder that is not a run's (`is_run_folder`) but holds an entry a run would write, replace or delete
    (`RUN_ENTRIES`, a `.final.*` swap leftover): a run never touches files it did not write. Other entries stay."""
    folder = Path(folder)
    if not folder.is_dir() or is_run_folder(folder):
        return
    clashing = sorted(p.name for p in folder.iterdir() if p.name in RUN_ENTRIES or p.name.startswith(".final."))
    if clashing:
        raise SetupError(f"{flag} {folder} holds {', '.join(clashing)}, which no training run wrote there (no "
                         f"{LOCK_FILE} of a run): a run would replace or delete them; choose another --output-dir, "
                         "or move them away first")


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
    check_not_foreign(folder, flag)  # before the lock file marks it as a run's
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

"""Reading a training checkpoint back without ever running code from it: torch files load with `weights_only=True`
(tensors, numbers, strings, numpy arrays: no pickled objects), and every file is checked first, so a damaged or
missing one gets a message naming it instead of a traceback or, as accelerate does for RNG states, silence."""
from __future__ import annotations

import zipfile
from pathlib import Path

from ..checkpoint_files import CheckpointFileError, check_safetensors, read_json_file
from .args import SetupError


class ResumeFileError(CheckpointFileError, SetupError):
    """A damaged checkpoint file found while resuming: scripts print its message alone."""


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
    read_json_file(folder / "trainer_state.json", "training state")
    model_files = sorted(folder.glob("model*.safetensors"))
    if not model_files:
        raise ResumeFileError(f"{folder}: no model.safetensors (not a complete checkpoint)")
    for path in model_files:
        check_safetensors(path)
    for name in ("optimizer.bin", "lr_scheduler.pt", f"random_states_{rank}.pkl"):
        check_torch_file(folder / name)
    load_weights_only(folder / f"random_states_{rank}.pkl")  # small; accelerate would skip a bad one silently


def check_deepspeed_checkpoint(folder: str | Path, rank: int = 0) -> None:
    """DeepSpeed's own files (under the `deepspeed/` tag) and our RNG state, checked without loading them."""
    folder = Path(folder)
    read_json_file(folder / "trainer_state.json", "training state")
    files = sorted((folder / "deepspeed").glob("*.pt"))
    if not files:
        raise ResumeFileError(f"{folder / 'deepspeed'}: no DeepSpeed state files (not a complete checkpoint)")
    for path in files:
        check_torch_file(path)
    load_weights_only(folder / f"rng_state_{rank}.pt")


def check_checkpoint(folder: str | Path, deepspeed: bool) -> None:
    """The --resume checkpoint's files, for the engine that will read them (this process's rank)."""
    import os

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
    import torch

    def load(path, map_location=None):
        try:
            with torch.serialization.safe_globals(_deepspeed_safe_globals()):
                return torch.load(path, map_location=map_location, weights_only=True)
        except Exception as error:  # noqa: BLE001  one message naming the file
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ResumeFileError(f"{path}: cannot be read as plain data ({first}); the checkpoint is damaged or "
                                  "holds pickled objects, which are never loaded") from None

    checkpoint_engine.load = load

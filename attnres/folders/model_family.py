"""Which family a model folder holds, read from its config.json: the tools' side of `families.registry`, which maps a
model_type to its family and reads no file."""
from __future__ import annotations

from pathlib import Path

from ..families.registry import family_of_model_type
from .checkpoint_files import read_json_file


def family_of_folder(folder) -> tuple[str, str | None]:
    """(family, the config.json's own model_type) of a model folder; ValueError (CheckpointFileError for a missing
    or damaged config.json) naming the file or the reason."""
    model_type = read_json_file(Path(folder) / "config.json", "config.json").get("model_type")
    return family_of_model_type(model_type), model_type


def require_kimi_linear(folder, flag: str, trainer: str) -> None:
    """A trainer built from Kimi Linear AttnRes layers refuses another family's folder by name (ValueError, one line
    naming the flag, the folder and its model_type), so it is never loaded as Kimi Linear."""
    try:
        family, model_type = family_of_folder(folder)
    except ValueError as error:
        raise ValueError(f"{flag} {folder}: {error}") from None
    if family != "kimi_linear":
        raise ValueError(f"{flag} {folder} is a {model_type} checkpoint ({family} family): {trainer} trains Kimi "
                         f"Linear AttnRes models only; fine-tune it with `attnres train --init-from {folder}`")

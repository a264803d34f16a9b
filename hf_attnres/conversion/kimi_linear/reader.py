"""Read a safetensors checkpoint folder lazily: names, shapes and dtypes from the headers, tensors on demand."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from ...families.kimi_linear.conversion_mapping import LANGUAGE_MODEL_PREFIX, canonical_name
from ...folders.checkpoint_files import CheckpointFileError, weight_files
from ...utils.finite_weights import NonFiniteWeightsError, check_tensor
from ..errors import ConversionError

SUPPORTED_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


@dataclass(frozen=True)
class TensorInfo:
    file: str
    stored_name: str  # the name in the file (with K3's `language_model.` prefix when present)
    shape: tuple[int, ...]
    dtype: str  # safetensors' code: F32, BF16, I32, U8, ...

    def meta(self) -> torch.Tensor:
        return torch.empty(self.shape, dtype=SUPPORTED_DTYPES[self.dtype], device="meta")


class CheckpointReader:
    """The tensors of one folder, keyed by their canonical name (`mapping.canonical_name`)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        files = self._weight_files()
        stored = {}
        for file in files:
            with safe_open(self.folder / file, framework="pt") as handle:
                for name in handle.keys():
                    view = handle.get_slice(name)
                    stored[name] = TensorInfo(file, name, tuple(view.get_shape()), view.get_dtype())
        self.wrapped = any(name.startswith(LANGUAGE_MODEL_PREFIX) for name in stored)
        # A multimodal wrapper: only its language model converts, the vision tower and projector stay behind
        self.skipped = sorted(n for n in stored if self.wrapped and not n.startswith(LANGUAGE_MODEL_PREFIX))
        self.tensors = {canonical_name(name): info for name, info in stored.items() if name not in self.skipped}

    def _weight_files(self) -> list[str]:
        if not self.folder.is_dir():
            raise ConversionError(f"{self.folder}: not a folder")
        try:
            # the index's names as checked there (inside the folder, regular files), kept relative to it
            files = [path.relative_to(self.folder).as_posix() for path in weight_files(self.folder)]
        except CheckpointFileError as error:
            raise ConversionError(str(error)) from None
        if not files:
            other = sorted(p.name for p in self.folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".gguf"))
            hint = f" (found {other}: convert them to safetensors first)" if other else ""
            raise ConversionError(f"{self.folder}: no *.safetensors weights{hint}")
        return files

    def load(self, names: list[str]) -> dict[str, torch.Tensor]:
        """Read `names`, one file open at a time; files are closed again so their pages leave memory."""
        by_file: dict[str, list[str]] = {}
        for name in names:
            by_file.setdefault(self.tensors[name].file, []).append(name)
        loaded = {}
        for file, file_names in by_file.items():
            with safe_open(self.folder / file, framework="pt") as handle:
                for name in file_names:
                    loaded[name] = handle.get_tensor(self.tensors[name].stored_name)
                    # a NaN or inf weight is named, never converted or exported (`hf_attnres.utils.finite_weights`)
                    try:
                        check_tensor(self.tensors[name].stored_name, loaded[name], self.folder / file)
                    except NonFiniteWeightsError as error:
                        raise ConversionError(str(error)) from None
        return loaded

"""The tools' numeric guard: a weight holding a NaN or an infinity is named (tensor and file) wherever a tool reads
weights (convert, export, compare, `train --init-from`, a resumed checkpoint) and where a run writes a checkpoint or
its final model, so nothing non-finite is converted, evaluated, trained from, or written over a finite checkpoint.

Tool layer only: the model core (`from_pretrained`) never imports it. Reads one tensor at a time (safetensors
memory-maps the file), so a large checkpoint is checked in the memory of its largest tensor.
"""
from __future__ import annotations

from pathlib import Path

import torch


class NonFiniteWeightsError(ValueError):
    """A weight file holds NaN or infinite values: the message names the file and the tensor."""


def check_tensor(name: str, tensor: torch.Tensor, source) -> None:
    """Raise NonFiniteWeightsError naming `source` (the file) and `name` when a floating tensor is not all finite."""
    if not tensor.is_floating_point() or bool(torch.isfinite(tensor).all()):
        return
    nan = int(torch.isnan(tensor).sum())
    inf = int(torch.isinf(tensor).sum())
    raise NonFiniteWeightsError(
        f"{source}: tensor {name} holds non-finite values ({nan} NaN, {inf} inf of {tensor.numel()}): the weights "
        "are damaged (a diverged run?); use an earlier, finite checkpoint")


def check_file(path: str | Path) -> None:
    """Every tensor of one safetensors file (its header already checked by the caller)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        for name in handle.keys():
            check_tensor(name, handle.get_tensor(name), path)


def check_folder(folder: str | Path) -> None:
    """Every tensor of a model folder's safetensors files (from its index when there is one)."""
    from ..folders.checkpoint_files import weight_files

    for path in weight_files(folder):
        check_file(path)


def check_files(paths) -> None:
    for path in paths:
        check_file(path)

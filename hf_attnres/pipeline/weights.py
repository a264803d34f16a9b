"""Where pipeline stages read their initial weights: tensors under the model's module names (`model.state_dict()`).

A checkpoint folder is read with `from_pretrained`, because transformers converts checkpoint names and layouts on load
(e.g. Kimi Linear's split q/k/v convolutions and per-expert MoE weights become fused module tensors; a family's plain
checkpoint loads as its AttnRes model in standard mode, with the same tensors): the pipeline must
not re-implement that. Each process loads the model on CPU once, its stages copy their own tensors, and `release()`
then drops the rest, so the peak CPU memory is one model per process during construction.
"""
from __future__ import annotations

from pathlib import Path

import torch


def load_pipeline_model(folder: str | Path, config):
    """The model in `folder`, of `config`'s family, in fp32 (the pipelines train fp32 master weights)."""
    from ..folders.model_folder import load as load_model_folder
    from .layout import causal_lm_class

    return load_model_folder(folder, model_class=causal_lm_class(config), config=config, dtype=torch.float32)


class StateDictWeights:
    """Tensors by module name. `get` hands out what a stage asks for; `release` frees everything."""

    def __init__(self, state_dict: dict[str, torch.Tensor]):
        self.state_dict = state_dict

    @classmethod
    def from_pretrained(cls, folder: str | Path, config) -> StateDictWeights:
        """The tensors of the model in `folder`, loaded as `config` (the folder's, read by its family's config class)
        describes it."""
        return cls(load_pipeline_model(folder, config).state_dict())

    def get(self, names: list[str]) -> dict[str, torch.Tensor]:
        if self.state_dict is None:
            raise RuntimeError("weights were released: build every stage before calling release()")
        missing = [name for name in names if name not in self.state_dict]
        if missing:
            raise KeyError(f"state dict lacks {len(missing)} tensor(s) the stage needs, e.g. {missing[:3]}")
        return {name: self.state_dict[name] for name in names}

    def release(self) -> None:
        self.state_dict = None


__all__ = ["StateDictWeights", "load_pipeline_model"]

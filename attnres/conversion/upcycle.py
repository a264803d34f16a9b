"""Upcycling: a standard-residual checkpoint becomes Block or Full AttnRes. The new pseudo-queries are zero (uniform
depth softmax, as at the start of AttnRes training) and the new key norms are ones (RMSNorm's init)."""
from __future__ import annotations

import math

import torch

from ..configuration_attnres import KimiLinearAttnResConfig
from .errors import ConversionError

UPCYCLE_MODES = ("block", "full")
# Paper and K3 both use about 8 blocks (K3: 12 of 93 layers per block)
DEFAULT_NUM_BLOCKS = 8


def is_attn_res_tensor(name: str) -> bool:
    return name.endswith(("_res_norm.weight", "_res_proj.weight"))


def default_block_size(num_layers: int) -> int:
    return max(1, math.ceil(num_layers / DEFAULT_NUM_BLOCKS))


def upcycled_config(
    config: KimiLinearAttnResConfig, mode: str, block_size: int | None = None
) -> KimiLinearAttnResConfig:
    if mode not in UPCYCLE_MODES:
        raise ConversionError(f"--upcycle must be one of {UPCYCLE_MODES}, got {mode!r}")
    if config.attn_res_mode != "standard":
        raise ConversionError(
            "--upcycle needs a standard-residual checkpoint, "
            f"but config.json has attn_res_mode={config.attn_res_mode!r}"
        )
    if mode == "full" and block_size is not None:
        raise ConversionError("--block-size applies to --upcycle block only (Full AttnRes has no blocks)")
    if mode == "block":
        block_size = default_block_size(config.num_hidden_layers) if block_size is None else block_size
        if block_size < 1:
            raise ConversionError(f"--block-size must be >= 1 (decoder layers per block), got {block_size}")
    fields = config.to_dict()
    fields.update(attn_res_mode=mode, attn_res_block_size=block_size if mode == "block" else 0)
    return KimiLinearAttnResConfig.from_dict(fields)


def new_attn_res_tensor(meta: torch.Tensor, name: str) -> torch.Tensor:
    """The starting value of an AttnRes tensor the standard checkpoint does not have."""
    if name.endswith("_res_norm.weight"):
        return torch.ones(meta.shape, dtype=meta.dtype)
    return torch.zeros(meta.shape, dtype=meta.dtype)

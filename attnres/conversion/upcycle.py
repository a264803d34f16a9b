"""Upcycling: a standard-residual checkpoint becomes Block or Full AttnRes. The new pseudo-queries are zero (uniform
depth softmax, as at the start of AttnRes training) and the new key norms are ones (RMSNorm's init).

Why the function is kept: with zero queries the softmax over the n sources of a mix point is uniform, so the mix is
their sum divided by n, and their sum is exactly the standard residual stream h. The RMSNorm that reads every mix (each
sub-layer's pre-norm, and the final norm) removes the scale: norm(h / n) = w * h / sqrt(mean(h^2) + n^2 * eps). So the
upcycled model *is* the source model with each reading norm's epsilon multiplied by n^2 at its point (tests check
that to rounding), and differs from the source only by that epsilon (README "Upcycling" states the bound and why no
exactly preserving variant is offered).

One path serves a loaded model (`upcycle`, exported as `attnres.upcycle`) and the convert command on a folder or
GGUF file of any supported family (`attnres.conversion.family_convert`); Kimi Linear folders keep the streaming
converter (`attnres.conversion.convert`), which uses `upcycled_config` and `new_attn_res_tensor` below.
"""
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


def resolve_block_size(mode: str, block_size: int | None, num_layers: int) -> int:
    """The block size of the upcycled model (0 in full mode); ConversionError naming the flag when it is invalid."""
    if mode not in UPCYCLE_MODES:
        raise ConversionError(f"--upcycle must be one of {UPCYCLE_MODES}, got {mode!r}")
    if mode == "full":
        if block_size is not None:
            raise ConversionError("--block-size applies to --upcycle block only (Full AttnRes has no blocks)")
        return 0
    block_size = default_block_size(num_layers) if block_size is None else block_size
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ConversionError(f"--block-size must be >= 1 (decoder layers per block), got {block_size!r}")
    return block_size


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
    block_size = resolve_block_size(mode, block_size, config.num_hidden_layers)
    fields = config.to_dict()
    fields.update(attn_res_mode=mode, attn_res_block_size=block_size)
    return KimiLinearAttnResConfig.from_dict(fields)


def new_attn_res_tensor(meta: torch.Tensor, name: str) -> torch.Tensor:
    """The starting value of an AttnRes tensor the standard checkpoint does not have."""
    if name.endswith("_res_norm.weight"):
        return torch.ones(meta.shape, dtype=meta.dtype)
    return torch.zeros(meta.shape, dtype=meta.dtype)


def upcycled_family_config(config, mode: str, block_size: int | None = None):
    """The AttnRes config of a standard-residual config of any supported family (its own, or a standard-mode AttnRes
    one): every field kept, the AttnRes mode and block size set. ConversionError naming an unsupported family."""
    from ..families.registry import family_classes, source_family

    try:
        family = source_family(config)
    except ValueError as error:
        raise ConversionError(str(error)) from None
    config_class, model_class = family_classes(family)
    block_size = resolve_block_size(mode, block_size, config.num_hidden_layers)
    fields = {key: value for key, value in config.to_dict().items()
              if key not in ("model_type", "architectures", "auto_map", "transformers_version")}
    fields.update(attn_res_mode=mode, attn_res_block_size=block_size)
    target = config_class.from_dict(fields)
    target.architectures = [model_class.__name__]
    return target, model_class


@torch.no_grad()
def upcycle(model, mode: str = "block", block_size: int | None = None):
    """The Block or Full AttnRes model of a loaded standard-residual causal LM of a supported family (Llama, Mistral,
    Qwen2, Qwen3, Gemma 3 text, Kimi Linear; README "Model families"), of the same family, dtype and device.

    Every weight of `model` is copied; the new pseudo-queries are zero and the key norms one, so the logits equal the
    source's up to the RMSNorm epsilon (module docstring). `block_size`: decoder layers per block (default: about 8
    blocks, as the paper and Kimi K3). ConversionError (a ValueError) naming the reason for an unsupported family,
    a model that is already AttnRes, or a bad mode / block size.
    """
    config, model_class = upcycled_family_config(model.config, mode, block_size)
    parameter = next(model.parameters())
    target = model_class._from_config(config, dtype=parameter.dtype)
    state = model.state_dict()
    missing, unexpected = target.load_state_dict(state, strict=False)
    stray = [name for name in missing if not is_attn_res_tensor(name)]
    if unexpected or stray:
        raise ConversionError.from_problems(
            [f"{name}: not in the AttnRes model" for name in unexpected] + [f"{name}: missing" for name in stray],
            f"{type(model).__name__} does not map onto {model_class.__name__}",
        )
    for name in missing:  # set explicitly: the zero-query / unit-gain start the argument relies on
        tensor = target.get_parameter(name)
        tensor.copy_(new_attn_res_tensor(tensor, name))
    target.to(parameter.device)
    target.train(model.training)
    if getattr(model, "generation_config", None) is not None:
        target.generation_config = model.generation_config
    return target

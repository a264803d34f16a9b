# Generated from modular_qwen2_attnres.py by `python hf_attnres/utils/modular.py`: edit that file, not this one.
"""Qwen2 with Attention Residuals: `Qwen2Config` plus the AttnRes fields (`AttnResConfigMixin`)."""
from huggingface_hub.dataclasses import strict
from transformers import Qwen2Config

from hf_attnres.core.config import AttnResConfigMixin


@strict
class Qwen2AttnResConfig(AttnResConfigMixin, Qwen2Config):
    r"""`Qwen2Config` (Qwen2 and Qwen2.5 (sliding-window layers where the config sets them))
    plus the AttnRes fields `attn_res_mode`, `attn_res_block_size`, `attn_res_backend`, ... (`ATTN_RES_FIELDS`),
    validated at construction. `attn_res_mode="standard"` is Qwen2 itself.
    """

    model_type = "qwen2_attnres"
    attn_res_family = "qwen2"


__all__ = ["Qwen2AttnResConfig"]

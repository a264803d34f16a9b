# Generated from modular_qwen3_attnres.py by `python hf_attnres/utils/modular.py`: edit that file, not this one.
"""Qwen3 with Attention Residuals: `Qwen3Config` plus the AttnRes fields (`AttnResConfigMixin`)."""
from huggingface_hub.dataclasses import strict
from transformers import Qwen3Config

from hf_attnres.core.config import AttnResConfigMixin


@strict
class Qwen3AttnResConfig(AttnResConfigMixin, Qwen3Config):
    r"""`Qwen3Config` (Qwen3 dense models (q/k norms inside attention))
    plus the AttnRes fields `attn_res_mode`, `attn_res_block_size`, `attn_res_backend`, ... (`ATTN_RES_FIELDS`),
    validated at construction. `attn_res_mode="standard"` is Qwen3 itself.
    """

    model_type = "qwen3_attnres"
    attn_res_family = "qwen3"


__all__ = ["Qwen3AttnResConfig"]

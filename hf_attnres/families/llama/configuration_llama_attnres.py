# Generated from modular_llama_attnres.py by `python hf_attnres/utils/modular.py`: edit that file, not this one.
"""Llama with Attention Residuals: `LlamaConfig` plus the AttnRes fields (`AttnResConfigMixin`)."""
from huggingface_hub.dataclasses import strict
from transformers import LlamaConfig

from hf_attnres.core.config import AttnResConfigMixin


@strict
class LlamaAttnResConfig(AttnResConfigMixin, LlamaConfig):
    r"""`LlamaConfig` (Llama 2/3, SmolLM2, TinyLlama)
    plus the AttnRes fields `attn_res_mode`, `attn_res_block_size`, `attn_res_backend`, ... (`ATTN_RES_FIELDS`),
    validated at construction. `attn_res_mode="standard"` is Llama itself.
    """

    model_type = "llama_attnres"
    attn_res_family = "llama"


__all__ = ["LlamaAttnResConfig"]

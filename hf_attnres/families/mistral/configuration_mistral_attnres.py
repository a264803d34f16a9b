# Generated from modular_mistral_attnres.py by `python hf_attnres/utils/modular.py`: edit that file, not this one.
"""Mistral with Attention Residuals: `MistralConfig` plus the AttnRes fields (`AttnResConfigMixin`)."""
from huggingface_hub.dataclasses import strict
from transformers import MistralConfig

from hf_attnres.core.config import AttnResConfigMixin


@strict
class MistralAttnResConfig(AttnResConfigMixin, MistralConfig):
    r"""`MistralConfig` (Mistral 7B (sliding-window attention where the config sets it))
    plus the AttnRes fields `attn_res_mode`, `attn_res_block_size`, `attn_res_backend`, ... (`ATTN_RES_FIELDS`),
    validated at construction. `attn_res_mode="standard"` is Mistral itself.
    """

    model_type = "mistral_attnres"
    attn_res_family = "mistral"


__all__ = ["MistralAttnResConfig"]

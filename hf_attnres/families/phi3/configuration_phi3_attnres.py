# Generated from modular_phi3_attnres.py by `python hf_attnres/utils/modular.py`: edit that file, not this one.
"""Phi-3 with Attention Residuals: `Phi3Config` plus the AttnRes fields (`AttnResConfigMixin`)."""
from huggingface_hub.dataclasses import strict
from transformers import Phi3Config

from hf_attnres.core.config import AttnResConfigMixin


@strict
class Phi3AttnResConfig(AttnResConfigMixin, Phi3Config):
    r"""`Phi3Config` (Phi-3 and Phi-3.5 mini / medium (`Phi3ForCausalLM` checkpoints))
    plus the AttnRes fields `attn_res_mode`, `attn_res_block_size`, `attn_res_backend`, ... (`ATTN_RES_FIELDS`),
    validated at construction. `attn_res_mode="standard"` is Phi-3 itself.
    """

    model_type = "phi3_attnres"
    attn_res_family = "phi3"


__all__ = ["Phi3AttnResConfig"]

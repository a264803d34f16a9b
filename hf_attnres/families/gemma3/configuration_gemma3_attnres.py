# Generated from modular_gemma3_attnres.py by `python hf_attnres/utils/modular.py`: edit that file, not this one.
"""Gemma 3 with Attention Residuals: `Gemma3TextConfig` plus the AttnRes fields (`AttnResConfigMixin`)."""
from huggingface_hub.dataclasses import strict
from transformers import Gemma3TextConfig

from hf_attnres.core.config import AttnResConfigMixin


@strict
class Gemma3TextAttnResConfig(AttnResConfigMixin, Gemma3TextConfig):
    r"""`Gemma3TextConfig` (Gemma 3 1B and the text tower of the larger ones)
    plus the AttnRes fields `attn_res_mode`, `attn_res_block_size`, `attn_res_backend`, ... (`ATTN_RES_FIELDS`),
    validated at construction. `attn_res_mode="standard"` is Gemma 3 itself.

    `use_bidirectional_attention` is refused: an embedding model (EmbeddingGemma), not a causal decoder.
    """

    model_type = "gemma3_text_attnres"
    attn_res_family = "gemma3_text"
    attn_res_refused_flags = {
        "use_bidirectional_attention": "an embedding model (EmbeddingGemma), not a causal decoder",
    }


__all__ = ["Gemma3TextAttnResConfig"]

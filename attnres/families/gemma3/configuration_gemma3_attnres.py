"""Gemma 3 with Attention Residuals: `Gemma3TextConfig` plus the AttnRes fields (`attnres.core.config`).

Generated from `modular_gemma3_attnres.py` by `python attnres/utils/modular.py`: edit that file, not this one.
"""
from huggingface_hub.dataclasses import strict
from transformers import Gemma3TextConfig

from attnres.core.config import AttnResConfigMixin


@strict
class Gemma3TextAttnResConfig(AttnResConfigMixin, Gemma3TextConfig):
    r"""`Gemma3TextConfig` (Gemma 3 1B and the text tower of the larger ones) plus the AttnRes fields
    `attn_res_mode`, `attn_res_block_size`, `attn_res_backend`, ..., documented on `KimiLinearAttnResConfig` and
    validated the same way. `attn_res_mode="standard"` is Gemma 3 itself.

    Where the mix goes: a Gemma 3 sub-layer is `post_norm(f(pre_norm(h)))` added to `h`. The mix replaces `h` where
    the pre-norm reads it (`input_layernorm`, `pre_feedforward_layernorm`, and `norm` for the output mix); the
    post-norm belongs to the sub-layer's output, the source it adds. The first source is the embedding as Gemma's
    stream starts, scaled by sqrt(hidden_size). `use_bidirectional_attention` (EmbeddingGemma) is refused: not a
    causal decoder.
    """

    model_type = "gemma3_text_attnres"
    attn_res_family = "gemma3_text"

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.use_bidirectional_attention:
            raise ValueError("use_bidirectional_attention=True (an embedding model) is not supported with AttnRes: "
                             "the families here are causal decoders")


__all__ = ["Gemma3TextAttnResConfig"]

"""Gemma 3 (text) with Attention Residuals (model_type `gemma3_text_attnres`), declared: its configuration and
modeling files are generated from this file (`python attnres/utils/modular.py`)."""
from transformers import Gemma3TextConfig
from transformers.models.gemma3.modeling_gemma3 import (
    Gemma3Attention,
    Gemma3DecoderLayer,
    Gemma3ForCausalLM,
    Gemma3PreTrainedModel,
    Gemma3RMSNorm,
    Gemma3RotaryEmbedding,
    Gemma3TextScaledWordEmbedding,
)

from attnres.families.declaration import Family

FAMILY = Family(
    model_type="gemma3_text", name="Gemma3Text", label="Gemma 3",
    about="Gemma 3 1B and the text tower of the larger ones",
    config=Gemma3TextConfig, decoder_layer=Gemma3DecoderLayer, pretrained_model=Gemma3PreTrainedModel,
    causal_lm=Gemma3ForCausalLM, norm=Gemma3RMSNorm, rotary=Gemma3RotaryEmbedding, attention=Gemma3Attention,
    fusable_norm=False,  # Gemma's `(1 + weight)` RMSNorm: applied after the mix as its own module
)


class Gemma3TextAttnResConfig:
    """`Gemma3TextConfig` (Gemma 3 1B and the text tower of the larger ones) plus the AttnRes fields
    `attn_res_mode`, `attn_res_block_size`, `attn_res_backend`, ..., documented on `KimiLinearAttnResConfig` and
    validated the same way. `attn_res_mode="standard"` is Gemma 3 itself.

    Where the mix goes: a Gemma 3 sub-layer is `post_norm(f(pre_norm(h)))` added to `h`. The mix replaces `h` where
    the pre-norm reads it (`input_layernorm`, `pre_feedforward_layernorm`, and `norm` for the output mix); the
    post-norm belongs to the sub-layer's output, the source it adds. The first source is the embedding as Gemma's
    stream starts, scaled by sqrt(hidden_size). `use_bidirectional_attention` (EmbeddingGemma) is refused: not a
    causal decoder.
    """

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.use_bidirectional_attention:
            raise ValueError("use_bidirectional_attention=True (an embedding model) is not supported with AttnRes: "
                             "the families here are causal decoders")


class Gemma3TextAttnResDecoderLayer:
    """Gemma 3's decoder layer reading its input from the depth sources; its post-norms end each sub-layer."""

    attn_res_input_norms = ("input_layernorm", "pre_feedforward_layernorm")

    def attention(self, hidden_states, attention_mask, position_ids, past_key_values, use_cache, **kwargs):
        out = super().attention(hidden_states, attention_mask, position_ids, past_key_values, use_cache, **kwargs)
        return self.post_attention_layernorm(out)

    def feed_forward(self, hidden_states):
        return self.post_feedforward_layernorm(self.mlp(hidden_states))


class Gemma3TextAttnResPreTrainedModel:
    input_modalities = ("text",)


class Gemma3TextAttnResModel:
    rotary_per_layer_type = True  # local (sliding) and global layers have their own rotary bases

    def build_embedding(self, config):
        return Gemma3TextScaledWordEmbedding(
            config.vocab_size, config.hidden_size, self.padding_idx, embed_scale=config.hidden_size**0.5
        )

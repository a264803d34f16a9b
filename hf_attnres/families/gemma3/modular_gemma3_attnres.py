"""Gemma 3 (text) with Attention Residuals (model_type `gemma3_text_attnres`), declared: its configuration and
modeling files are generated from this file (`python hf_attnres/utils/modular.py`).

A Gemma 3 sub-layer is `post_norm(f(pre_norm(h)))` added to `h`: the mix replaces `h` where the pre-norms read it, and
the post-norms belong to the sub-layer's output, the source it adds. The first source is the embedding as Gemma's
stream starts, scaled by sqrt(hidden_size)."""
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

from hf_attnres.families.declaration import Family

FAMILY = Family(
    model_type="gemma3_text", name="Gemma3Text", label="Gemma 3",
    about="Gemma 3 1B and the text tower of the larger ones",
    config=Gemma3TextConfig, decoder_layer=Gemma3DecoderLayer, pretrained_model=Gemma3PreTrainedModel,
    causal_lm=Gemma3ForCausalLM, norm=Gemma3RMSNorm, rotary=Gemma3RotaryEmbedding, attention=Gemma3Attention,
    fusable_norm=False,  # Gemma's `(1 + weight)` RMSNorm: applied after the mix as its own module
    input_norms=("input_layernorm", "pre_feedforward_layernorm"),
    output_modules=("post_attention_layernorm", "post_feedforward_layernorm"),
    embedding=Gemma3TextScaledWordEmbedding, embedding_scale="sqrt_hidden_size",
    rotary_per_layer_type=True,  # local (sliding) and global layers have their own rotary bases
    refused_config_flags={"use_bidirectional_attention": "an embedding model (EmbeddingGemma), not a causal decoder"},
)


class Gemma3TextAttnResForCausalLM:
    def postprocess_logits(self, logits):
        """Gemma's final logit soft-capping, `cap * tanh(logits / cap)`, where the config has it (as its own
        ForCausalLM applies it)."""
        cap = self.config.final_logit_softcapping
        return logits if cap is None else (logits / cap).tanh() * cap

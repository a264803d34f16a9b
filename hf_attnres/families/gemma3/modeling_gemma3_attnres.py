# Generated from modular_gemma3_attnres.py by `python hf_attnres/utils/modular.py`: edit that file, not this one.
"""Gemma 3 with Attention Residuals: Gemma 3, except the residual.

Every module (Gemma 3's attention, MLP, RMSNorm, rotary embedding, cache, masks) is transformers' own; the decoder layer
mixes the depth sources before its two sub-layers and the model mixes them before the final norm
(`AttnResDecoderLayerMixin`, `AttnResDecoderModel`).
"""
from transformers.models.gemma3.modeling_gemma3 import (
    Gemma3Attention,
    Gemma3DecoderLayer,
    Gemma3ForCausalLM,
    Gemma3PreTrainedModel,
    Gemma3RMSNorm,
    Gemma3RotaryEmbedding,
    Gemma3TextScaledWordEmbedding,
)

from hf_attnres.core.decoder_layer import AttnResDecoderLayerMixin
from hf_attnres.core.decoder_model import AttnResDecoderForCausalLM, AttnResDecoderModel
from hf_attnres.core.model import AttnResPreTrainedMixin

from .configuration_gemma3_attnres import Gemma3TextAttnResConfig


class Gemma3TextAttnResDecoderLayer(AttnResDecoderLayerMixin, Gemma3DecoderLayer):
    """Gemma 3's decoder layer reading its input from the depth sources (`AttnResDecoderLayerMixin`): `input_layernorm`
    / `pre_feedforward_layernorm` read the mixes, and `post_attention_layernorm` / `post_feedforward_layernorm` end each
    sub-layer's output."""

    attn_res_input_norms = ("input_layernorm", "pre_feedforward_layernorm")
    attn_res_output_modules = ("post_attention_layernorm", "post_feedforward_layernorm")


class Gemma3TextAttnResPreTrainedModel(AttnResPreTrainedMixin, Gemma3PreTrainedModel):
    config: Gemma3TextAttnResConfig
    config_class = Gemma3TextAttnResConfig
    _no_split_modules = ["Gemma3TextAttnResDecoderLayer"]
    # hidden states are collected by the model itself: what a layer "outputs" depends on the AttnRes mode
    _can_record_outputs = {"attentions": Gemma3Attention}


class Gemma3TextAttnResModel(AttnResDecoderModel, Gemma3TextAttnResPreTrainedModel):
    decoder_layer_class, norm_class, rotary_class = Gemma3TextAttnResDecoderLayer, Gemma3RMSNorm, Gemma3RotaryEmbedding
    rotary_per_layer_type = True  # a rotary base per type of `config.layer_types`
    embedding_class = Gemma3TextScaledWordEmbedding
    embedding_scale = "sqrt_hidden_size"


class Gemma3TextAttnResForCausalLM(AttnResDecoderForCausalLM, Gemma3TextAttnResPreTrainedModel, Gemma3ForCausalLM):
    model_class = Gemma3TextAttnResModel

    def postprocess_logits(self, logits):
        """Gemma's final logit soft-capping, `cap * tanh(logits / cap)`, where the config has it (as its own
        ForCausalLM applies it)."""
        cap = self.config.final_logit_softcapping
        return logits if cap is None else (logits / cap).tanh() * cap


__all__ = ["Gemma3TextAttnResDecoderLayer", "Gemma3TextAttnResPreTrainedModel", "Gemma3TextAttnResModel",
           "Gemma3TextAttnResForCausalLM"]

# Generated from modular_mistral_attnres.py by `python hf_attnres/utils/modular.py`: edit that file, not this one.
"""Mistral with Attention Residuals: Mistral, except the residual.

Every module (Mistral's attention, MLP, RMSNorm, rotary embedding, cache, masks) is transformers' own; the decoder layer
mixes the depth sources before its two sub-layers and the model mixes them before the final norm
(`AttnResDecoderLayerMixin`, `AttnResDecoderModel`).
"""
from transformers.models.mistral.modeling_mistral import (
    MistralAttention,
    MistralDecoderLayer,
    MistralForCausalLM,
    MistralPreTrainedModel,
    MistralRMSNorm,
    MistralRotaryEmbedding,
)

from hf_attnres.core.decoder_layer import AttnResDecoderLayerMixin
from hf_attnres.core.decoder_model import AttnResDecoderForCausalLM, AttnResDecoderModel
from hf_attnres.core.model import AttnResPreTrainedMixin

from .configuration_mistral_attnres import MistralAttnResConfig


class MistralAttnResDecoderLayer(AttnResDecoderLayerMixin, MistralDecoderLayer):
    """Mistral's decoder layer reading its input from the depth sources (`AttnResDecoderLayerMixin`)."""

    fusable_norm = MistralRMSNorm  # Llama's RMSNorm formula: the mix kernels may apply it fused


class MistralAttnResPreTrainedModel(AttnResPreTrainedMixin, MistralPreTrainedModel):
    config: MistralAttnResConfig
    config_class = MistralAttnResConfig
    _no_split_modules = ["MistralAttnResDecoderLayer"]
    # hidden states are collected by the model itself: what a layer "outputs" depends on the AttnRes mode
    _can_record_outputs = {"attentions": MistralAttention}


class MistralAttnResModel(AttnResDecoderModel, MistralAttnResPreTrainedModel):
    decoder_layer_class, norm_class, rotary_class = MistralAttnResDecoderLayer, MistralRMSNorm, MistralRotaryEmbedding
    fusable_norm = MistralRMSNorm


class MistralAttnResForCausalLM(AttnResDecoderForCausalLM, MistralAttnResPreTrainedModel, MistralForCausalLM):
    model_class = MistralAttnResModel


__all__ = ["MistralAttnResDecoderLayer", "MistralAttnResPreTrainedModel", "MistralAttnResModel",
           "MistralAttnResForCausalLM"]

# Generated from modular_llama_attnres.py by `python hf_attnres/utils/modular.py`: edit that file, not this one.
"""Llama with Attention Residuals: Llama, except the residual.

Every module (Llama's attention, MLP, RMSNorm, rotary embedding, cache, masks) is transformers' own; the decoder layer
mixes the depth sources before its two sub-layers and the model mixes them before the final norm
(`AttnResDecoderLayerMixin`, `AttnResDecoderModel`).
"""
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaForCausalLM,
    LlamaPreTrainedModel,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
)

from hf_attnres.core.decoder_layer import AttnResDecoderLayerMixin
from hf_attnres.core.decoder_model import AttnResDecoderForCausalLM, AttnResDecoderModel
from hf_attnres.core.model import AttnResPreTrainedMixin

from .configuration_llama_attnres import LlamaAttnResConfig


class LlamaAttnResDecoderLayer(AttnResDecoderLayerMixin, LlamaDecoderLayer):
    """Llama's decoder layer reading its input from the depth sources (`AttnResDecoderLayerMixin`)."""

    fusable_norm = LlamaRMSNorm  # Llama's RMSNorm formula: the mix kernels may apply it fused


class LlamaAttnResPreTrainedModel(AttnResPreTrainedMixin, LlamaPreTrainedModel):
    config: LlamaAttnResConfig
    config_class = LlamaAttnResConfig
    _no_split_modules = ["LlamaAttnResDecoderLayer"]
    # hidden states are collected by the model itself: what a layer "outputs" depends on the AttnRes mode
    _can_record_outputs = {"attentions": LlamaAttention}


class LlamaAttnResModel(AttnResDecoderModel, LlamaAttnResPreTrainedModel):
    decoder_layer_class, norm_class, rotary_class = LlamaAttnResDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding
    fusable_norm = LlamaRMSNorm


class LlamaAttnResForCausalLM(AttnResDecoderForCausalLM, LlamaAttnResPreTrainedModel, LlamaForCausalLM):
    model_class = LlamaAttnResModel


__all__ = ["LlamaAttnResDecoderLayer", "LlamaAttnResPreTrainedModel", "LlamaAttnResModel", "LlamaAttnResForCausalLM"]

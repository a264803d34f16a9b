# Generated from modular_qwen3_attnres.py by `python hf_attnres/utils/modular.py`: edit that file, not this one.
"""Qwen3 with Attention Residuals: Qwen3, except the residual.

Every module (Qwen3's attention, MLP, RMSNorm, rotary embedding, cache, masks) is transformers' own; the decoder layer
mixes the depth sources before its two sub-layers and the model mixes them before the final norm
(`AttnResDecoderLayerMixin`, `AttnResDecoderModel`).
"""
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3Attention,
    Qwen3DecoderLayer,
    Qwen3ForCausalLM,
    Qwen3PreTrainedModel,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
)

from hf_attnres.core.decoder_layer import AttnResDecoderLayerMixin
from hf_attnres.core.decoder_model import AttnResDecoderForCausalLM, AttnResDecoderModel
from hf_attnres.core.model import AttnResPreTrainedMixin

from .configuration_qwen3_attnres import Qwen3AttnResConfig


class Qwen3AttnResDecoderLayer(AttnResDecoderLayerMixin, Qwen3DecoderLayer):
    """Qwen3's decoder layer reading its input from the depth sources (`AttnResDecoderLayerMixin`)."""

    fusable_norm = Qwen3RMSNorm  # Llama's RMSNorm formula: the mix kernels may apply it fused


class Qwen3AttnResPreTrainedModel(AttnResPreTrainedMixin, Qwen3PreTrainedModel):
    config: Qwen3AttnResConfig
    config_class = Qwen3AttnResConfig
    _no_split_modules = ["Qwen3AttnResDecoderLayer"]
    # hidden states are collected by the model itself: what a layer "outputs" depends on the AttnRes mode
    _can_record_outputs = {"attentions": Qwen3Attention}


class Qwen3AttnResModel(AttnResDecoderModel, Qwen3AttnResPreTrainedModel):
    decoder_layer_class, norm_class, rotary_class = Qwen3AttnResDecoderLayer, Qwen3RMSNorm, Qwen3RotaryEmbedding
    fusable_norm = Qwen3RMSNorm


class Qwen3AttnResForCausalLM(AttnResDecoderForCausalLM, Qwen3AttnResPreTrainedModel, Qwen3ForCausalLM):
    model_class = Qwen3AttnResModel


__all__ = ["Qwen3AttnResDecoderLayer", "Qwen3AttnResPreTrainedModel", "Qwen3AttnResModel", "Qwen3AttnResForCausalLM"]

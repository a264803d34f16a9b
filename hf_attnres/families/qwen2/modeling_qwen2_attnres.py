# Generated from modular_qwen2_attnres.py by `python hf_attnres/utils/modular.py`: edit that file, not this one.
"""Qwen2 with Attention Residuals: Qwen2, except the residual.

Every module (Qwen2's attention, MLP, RMSNorm, rotary embedding, cache, masks) is transformers' own; the decoder layer
mixes the depth sources before its two sub-layers and the model mixes them before the final norm
(`AttnResDecoderLayerMixin`, `AttnResDecoderModel`).
"""
from transformers.models.qwen2.modeling_qwen2 import (
    Qwen2Attention,
    Qwen2DecoderLayer,
    Qwen2ForCausalLM,
    Qwen2PreTrainedModel,
    Qwen2RMSNorm,
    Qwen2RotaryEmbedding,
)

from hf_attnres.core.decoder_layer import AttnResDecoderLayerMixin
from hf_attnres.core.decoder_model import AttnResDecoderForCausalLM, AttnResDecoderModel
from hf_attnres.core.model import AttnResPreTrainedMixin

from .configuration_qwen2_attnres import Qwen2AttnResConfig


class Qwen2AttnResDecoderLayer(AttnResDecoderLayerMixin, Qwen2DecoderLayer):
    """Qwen2's decoder layer reading its input from the depth sources (`AttnResDecoderLayerMixin`)."""

    fusable_norm = Qwen2RMSNorm  # Llama's RMSNorm formula: the mix kernels may apply it fused


class Qwen2AttnResPreTrainedModel(AttnResPreTrainedMixin, Qwen2PreTrainedModel):
    config: Qwen2AttnResConfig
    config_class = Qwen2AttnResConfig
    _no_split_modules = ["Qwen2AttnResDecoderLayer"]
    # hidden states are collected by the model itself: what a layer "outputs" depends on the AttnRes mode
    _can_record_outputs = {"attentions": Qwen2Attention}


class Qwen2AttnResModel(AttnResDecoderModel, Qwen2AttnResPreTrainedModel):
    decoder_layer_class, norm_class, rotary_class = Qwen2AttnResDecoderLayer, Qwen2RMSNorm, Qwen2RotaryEmbedding
    fusable_norm = Qwen2RMSNorm


class Qwen2AttnResForCausalLM(AttnResDecoderForCausalLM, Qwen2AttnResPreTrainedModel, Qwen2ForCausalLM):
    model_class = Qwen2AttnResModel


__all__ = ["Qwen2AttnResDecoderLayer", "Qwen2AttnResPreTrainedModel", "Qwen2AttnResModel", "Qwen2AttnResForCausalLM"]

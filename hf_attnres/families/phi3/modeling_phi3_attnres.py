# Generated from modular_phi3_attnres.py by `python hf_attnres/utils/modular.py`: edit that file, not this one.
"""Phi-3 with Attention Residuals: Phi-3, except the residual.

Every module (Phi-3's attention, MLP, RMSNorm, rotary embedding, cache, masks) is transformers' own; the decoder layer
mixes the depth sources before its two sub-layers and the model mixes them before the final norm
(`AttnResDecoderLayerMixin`, `AttnResDecoderModel`).
"""
from transformers.models.phi3.modeling_phi3 import (
    Phi3Attention,
    Phi3DecoderLayer,
    Phi3ForCausalLM,
    Phi3PreTrainedModel,
    Phi3RMSNorm,
    Phi3RotaryEmbedding,
)

from hf_attnres.core.decoder_layer import AttnResDecoderLayerMixin
from hf_attnres.core.decoder_model import AttnResDecoderForCausalLM, AttnResDecoderModel
from hf_attnres.core.model import AttnResPreTrainedMixin

from .configuration_phi3_attnres import Phi3AttnResConfig


class Phi3AttnResDecoderLayer(AttnResDecoderLayerMixin, Phi3DecoderLayer):
    """Phi-3's decoder layer reading its input from the depth sources (`AttnResDecoderLayerMixin`): `resid_attn_dropout`
    / `resid_mlp_dropout` end each sub-layer's output."""

    fusable_norm = Phi3RMSNorm  # Llama's RMSNorm formula: the mix kernels may apply it fused
    attn_res_output_modules = ("resid_attn_dropout", "resid_mlp_dropout")


class Phi3AttnResPreTrainedModel(AttnResPreTrainedMixin, Phi3PreTrainedModel):
    config: Phi3AttnResConfig
    config_class = Phi3AttnResConfig
    _no_split_modules = ["Phi3AttnResDecoderLayer"]
    # hidden states are collected by the model itself: what a layer "outputs" depends on the AttnRes mode
    _can_record_outputs = {"attentions": Phi3Attention}


class Phi3AttnResModel(AttnResDecoderModel, Phi3AttnResPreTrainedModel):
    decoder_layer_class, norm_class, rotary_class = Phi3AttnResDecoderLayer, Phi3RMSNorm, Phi3RotaryEmbedding
    fusable_norm = Phi3RMSNorm


class Phi3AttnResForCausalLM(AttnResDecoderForCausalLM, Phi3AttnResPreTrainedModel, Phi3ForCausalLM):
    model_class = Phi3AttnResModel


__all__ = ["Phi3AttnResDecoderLayer", "Phi3AttnResPreTrainedModel", "Phi3AttnResModel", "Phi3AttnResForCausalLM"]

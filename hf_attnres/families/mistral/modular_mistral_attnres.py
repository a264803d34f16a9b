"""Mistral with Attention Residuals (model_type `mistral_attnres`), declared: its configuration and modeling files
are generated from this file (`python hf_attnres/utils/modular.py`)."""
from transformers import MistralConfig
from transformers.models.mistral.modeling_mistral import (
    MistralAttention,
    MistralDecoderLayer,
    MistralForCausalLM,
    MistralPreTrainedModel,
    MistralRMSNorm,
    MistralRotaryEmbedding,
)

from hf_attnres.families.declaration import Family

FAMILY = Family(
    model_type="mistral", name="Mistral", about="Mistral 7B (sliding-window attention where the config sets it)",
    config=MistralConfig, decoder_layer=MistralDecoderLayer, pretrained_model=MistralPreTrainedModel,
    causal_lm=MistralForCausalLM, norm=MistralRMSNorm, rotary=MistralRotaryEmbedding, attention=MistralAttention,
    fusable_norm=True,  # Llama's RMSNorm formula
)

"""Llama with Attention Residuals (model_type `llama_attnres`), declared: its configuration and modeling files
are generated from this file (`python hf_attnres/utils/modular.py`)."""
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaForCausalLM,
    LlamaPreTrainedModel,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
)

from hf_attnres.families.declaration import Family

FAMILY = Family(
    model_type="llama", name="Llama", about="Llama 2/3, SmolLM2, TinyLlama",
    config=LlamaConfig, decoder_layer=LlamaDecoderLayer, pretrained_model=LlamaPreTrainedModel,
    causal_lm=LlamaForCausalLM, norm=LlamaRMSNorm, rotary=LlamaRotaryEmbedding, attention=LlamaAttention,
    fusable_norm=True,  # Llama's RMSNorm formula
)

"""Qwen3 with Attention Residuals (model_type `qwen3_attnres`), declared: its configuration and modeling files
are generated from this file (`python hf_attnres/utils/modular.py`)."""
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3Attention,
    Qwen3DecoderLayer,
    Qwen3ForCausalLM,
    Qwen3PreTrainedModel,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
)

from hf_attnres.families.declaration import Family

FAMILY = Family(
    model_type="qwen3", name="Qwen3", about="Qwen3 dense models (q/k norms inside attention)",
    config=Qwen3Config, decoder_layer=Qwen3DecoderLayer, pretrained_model=Qwen3PreTrainedModel,
    causal_lm=Qwen3ForCausalLM, norm=Qwen3RMSNorm, rotary=Qwen3RotaryEmbedding, attention=Qwen3Attention,
    fusable_norm=True,  # Llama's RMSNorm formula
)

"""Qwen2 with Attention Residuals (model_type `qwen2_attnres`), declared: its configuration and modeling files
are generated from this file (`python hf_attnres/utils/modular.py`)."""
from transformers import Qwen2Config
from transformers.models.qwen2.modeling_qwen2 import (
    Qwen2Attention,
    Qwen2DecoderLayer,
    Qwen2ForCausalLM,
    Qwen2PreTrainedModel,
    Qwen2RMSNorm,
    Qwen2RotaryEmbedding,
)

from hf_attnres.families.declaration import Family

FAMILY = Family(
    model_type="qwen2", name="Qwen2", about="Qwen2 and Qwen2.5 (sliding-window layers where the config sets them)",
    config=Qwen2Config, decoder_layer=Qwen2DecoderLayer, pretrained_model=Qwen2PreTrainedModel,
    causal_lm=Qwen2ForCausalLM, norm=Qwen2RMSNorm, rotary=Qwen2RotaryEmbedding, attention=Qwen2Attention,
    fusable_norm=True,  # Llama's RMSNorm formula
)

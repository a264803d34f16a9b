"""Phi-3 with Attention Residuals (model_type `phi3_attnres`), declared: its configuration and modeling files are
generated from this file (`python hf_attnres/utils/modular.py`). Phi-3's fused `qkv_proj` / `gate_up_proj` and partial
rotary embedding are its own modules; its residual dropouts end each sub-layer's output."""
from transformers import Phi3Config
from transformers.models.phi3.modeling_phi3 import (
    Phi3Attention,
    Phi3DecoderLayer,
    Phi3ForCausalLM,
    Phi3PreTrainedModel,
    Phi3RMSNorm,
    Phi3RotaryEmbedding,
)

from hf_attnres.families.declaration import Family

FAMILY = Family(
    model_type="phi3", name="Phi3", label="Phi-3",
    about="Phi-3 and Phi-3.5 mini / medium (`Phi3ForCausalLM` checkpoints)",
    config=Phi3Config, decoder_layer=Phi3DecoderLayer, pretrained_model=Phi3PreTrainedModel,
    causal_lm=Phi3ForCausalLM, norm=Phi3RMSNorm, rotary=Phi3RotaryEmbedding, attention=Phi3Attention,
    fusable_norm=True,  # Llama's RMSNorm formula
    output_modules=("resid_attn_dropout", "resid_mlp_dropout"),
)

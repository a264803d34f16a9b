"""Kimi Linear with Attention Residuals (model_type `kimi_linear_attnres`), declared. Its configuration and modeling
files are written by hand (`generated=False`): KDA and MLA layers, MoE, and Kimi K3's modules (`k3/`)."""
from transformers import KimiLinearConfig
from transformers.models.kimi_linear.modeling_kimi_linear import (
    KimiLinearAttention,
    KimiLinearDecoderLayer,
    KimiLinearForCausalLM,
    KimiLinearPreTrainedModel,
    KimiLinearRMSNorm,
)

from hf_attnres.families.declaration import Family
from hf_attnres.families.kimi_linear.k3.config import K3_WRAPPER_TYPE

FAMILY = Family(
    model_type="kimi_linear", name="KimiLinear", label="Kimi Linear",
    about="Kimi Linear (KDA and MLA layers, MoE) and Kimi K3's text backbone",
    config=KimiLinearConfig, decoder_layer=KimiLinearDecoderLayer, pretrained_model=KimiLinearPreTrainedModel,
    causal_lm=KimiLinearForCausalLM, norm=KimiLinearRMSNorm, attention=KimiLinearAttention,
    fusable_norm=True,  # Llama's RMSNorm formula
    generated=False, wrapper_model_types=(K3_WRAPPER_TYPE,),
)

"""Kimi Linear with Attention Residuals (model_type `kimi_linear_attnres`), the original family: KDA and MLA attention,
MoE, and Kimi K3's text backbone (`k3/`, read from a `kimi_k3` folder). The configuration and modeling files follow
transformers' layout; `conversion_mapping` holds Moonshot's / K3's tensor names for `from_pretrained`."""
from .configuration_kimi_linear_attnres import KimiLinearAttnResConfig
from .modeling_kimi_linear_attnres import (
    KimiLinearAttnResDecoderLayer,
    KimiLinearAttnResForCausalLM,
    KimiLinearAttnResModel,
    KimiLinearAttnResPreTrainedModel,
)

__all__ = ["KimiLinearAttnResConfig", "KimiLinearAttnResModel", "KimiLinearAttnResForCausalLM",
           "KimiLinearAttnResPreTrainedModel", "KimiLinearAttnResDecoderLayer"]

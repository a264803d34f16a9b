"""attnres: Attention Residuals (Kimi Team, 2026) for Hugging Face Transformers' Kimi Linear.

`import attnres` registers the config and models with the Auto classes, and marks them for `save_pretrained` to
write `auto_map` plus the code files, so a saved folder also loads with `trust_remote_code=True`.
"""
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from .configuration_attnres import KimiLinearAttnResConfig
from .modeling_attnres import (
    KimiLinearAttnResDecoderLayer,
    KimiLinearAttnResForCausalLM,
    KimiLinearAttnResModel,
    KimiLinearAttnResPreTrainedModel,
)
from .kernels import attn_res, attn_res_naive

__version__ = "0.1.0"

AutoConfig.register(KimiLinearAttnResConfig.model_type, KimiLinearAttnResConfig, exist_ok=True)
AutoModel.register(KimiLinearAttnResConfig, KimiLinearAttnResModel, exist_ok=True)
AutoModelForCausalLM.register(KimiLinearAttnResConfig, KimiLinearAttnResForCausalLM, exist_ok=True)
KimiLinearAttnResConfig.register_for_auto_class()
KimiLinearAttnResModel.register_for_auto_class("AutoModel")
KimiLinearAttnResForCausalLM.register_for_auto_class("AutoModelForCausalLM")

__all__ = [
    "KimiLinearAttnResConfig",
    "KimiLinearAttnResModel",
    "KimiLinearAttnResForCausalLM",
    "KimiLinearAttnResPreTrainedModel",
    "KimiLinearAttnResDecoderLayer",
    "attn_res",
    "attn_res_naive",
]

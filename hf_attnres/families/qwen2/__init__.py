"""Qwen2 with Attention Residuals (model_type `qwen2_attnres`)."""
from .configuration_qwen2_attnres import Qwen2AttnResConfig
from .modeling_qwen2_attnres import Qwen2AttnResForCausalLM, Qwen2AttnResModel

__all__ = ["Qwen2AttnResConfig", "Qwen2AttnResModel", "Qwen2AttnResForCausalLM"]

"""Qwen3 with Attention Residuals (model_type `qwen3_attnres`)."""
from .configuration_qwen3_attnres import Qwen3AttnResConfig
from .modeling_qwen3_attnres import Qwen3AttnResForCausalLM, Qwen3AttnResModel

__all__ = ["Qwen3AttnResConfig", "Qwen3AttnResModel", "Qwen3AttnResForCausalLM"]

"""Llama with Attention Residuals (model_type `llama_attnres`)."""
from .configuration_llama_attnres import LlamaAttnResConfig
from .modeling_llama_attnres import LlamaAttnResForCausalLM, LlamaAttnResModel

__all__ = ["LlamaAttnResConfig", "LlamaAttnResModel", "LlamaAttnResForCausalLM"]

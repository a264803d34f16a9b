"""Mistral with Attention Residuals (model_type `mistral_attnres`)."""
from .configuration_mistral_attnres import MistralAttnResConfig
from .modeling_mistral_attnres import MistralAttnResForCausalLM, MistralAttnResModel

__all__ = ["MistralAttnResConfig", "MistralAttnResModel", "MistralAttnResForCausalLM"]

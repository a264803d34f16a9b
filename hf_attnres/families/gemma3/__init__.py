"""Gemma 3 text with Attention Residuals (model_type `gemma3_text_attnres`)."""
from .configuration_gemma3_attnres import Gemma3TextAttnResConfig
from .modeling_gemma3_attnres import Gemma3TextAttnResForCausalLM, Gemma3TextAttnResModel

__all__ = ["Gemma3TextAttnResConfig", "Gemma3TextAttnResModel", "Gemma3TextAttnResForCausalLM"]

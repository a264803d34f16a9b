"""Phi-3 with Attention Residuals (model_type `phi3_attnres`)."""
from .configuration_phi3_attnres import Phi3AttnResConfig
from .modeling_phi3_attnres import Phi3AttnResForCausalLM, Phi3AttnResModel

__all__ = ["Phi3AttnResConfig", "Phi3AttnResModel", "Phi3AttnResForCausalLM"]

"""Kimi Linear checkpoints in Moonshot's layout <-> this project's HF-native layout, with or without AttnRes.

Importing this package registers the Moonshot weight mapping for model_type "kimi_linear_attnres", so
`KimiLinearAttnResForCausalLM.from_pretrained(moonshot_folder)` works directly. `convert_checkpoint` streams a
conversion with bounded memory (see scripts/convert_checkpoint.py); `hub` builds and uploads a Hub folder.
"""
from ..families.kimi_linear.conversion_mapping import convert_tensors, moonshot_transforms, register_moonshot_mapping
from .convert import bitwise_equal, convert_checkpoint, verify_conversion
from .errors import ConversionError
from .plan import plan_conversion

__all__ = [
    "ConversionError",
    "bitwise_equal",
    "convert_checkpoint",
    "convert_tensors",
    "moonshot_transforms",
    "plan_conversion",
    "register_moonshot_mapping",
    "verify_conversion",
]

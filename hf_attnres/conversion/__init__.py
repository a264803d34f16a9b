"""Checkpoint conversion, the code behind `attnres convert`, `attnres export` and `attnres push-to-hub`.

- Any supported family (docs/FAMILIES.md), from a model folder or a GGUF file: the family's own plain folder, or its
  Block / Full AttnRes upcycle through `hf_attnres.upcycle` (`family_convert`, `family_source`), with `--check`'s
  comparison against the source (`upcycle_check`).
- Kimi Linear and Kimi K3 (`hf_attnres.conversion.kimi_linear`): Moonshot's layout <-> this project's HF-native
  layout, with or without AttnRes, streamed with bounded memory (`convert_checkpoint`, `plan_conversion`), and
  `attnres export` to the serving runtimes' layouts. Importing this package registers the Moonshot weight mapping for
  model_type "kimi_linear_attnres", so `KimiLinearAttnResForCausalLM.from_pretrained(moonshot_folder)` works
  directly.
- Every input is checked before anything is written (`guards`); the output appears all at once, by rename (`atomic`).
  `hub` builds and uploads a Hub folder.
"""
from ..families.kimi_linear.conversion_mapping import convert_tensors, moonshot_transforms, register_moonshot_mapping
from .errors import ConversionError
from .kimi_linear.convert import bitwise_equal, convert_checkpoint, verify_conversion
from .kimi_linear.plan import plan_conversion

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

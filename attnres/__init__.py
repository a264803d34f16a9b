"""attnres: Attention Residuals (Kimi Team, 2026) for Hugging Face Transformers' PreNorm decoders.

`import attnres` registers the configs and models of every family with the Auto classes (`<family>_attnres`; the
families are the folders of `attnres.families`, listed by `attnres.families.registry.SUPPORTED`), each marked for
`save_pretrained` to write `auto_map` plus the generated code files (attnres.core.remote_code), so a saved folder also
loads with `trust_remote_code=True` without this package. `attnres.upcycle(model)` turns a loaded standard model of
any of them into Block or Full AttnRes.
"""
from .core import remote_code  # noqa: F401  (the package's models write their folder's code on save)
from .families.kimi_linear.configuration_kimi_linear_attnres import KimiLinearAttnResConfig
from .families.kimi_linear.modeling_kimi_linear_attnres import (
    KimiLinearAttnResDecoderLayer,
    KimiLinearAttnResForCausalLM,
    KimiLinearAttnResModel,
    KimiLinearAttnResPreTrainedModel,
)
from .families.registry import register_auto_classes
from .families.upcycle import upcycle
from .kernels import attn_res, attn_res_naive

__version__ = "0.1.0"

register_auto_classes()

__all__ = [
    "upcycle",
    "KimiLinearAttnResConfig",
    "KimiLinearAttnResModel",
    "KimiLinearAttnResForCausalLM",
    "KimiLinearAttnResPreTrainedModel",
    "KimiLinearAttnResDecoderLayer",
    "attn_res",
    "attn_res_naive",
]

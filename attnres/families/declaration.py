"""A decoder family with AttnRes, declared: the transformers classes it extends and its norm policy.

A family's folder `attnres/families/<folder>/` holds `modular_<folder>_attnres.py`, which binds `FAMILY` to a
`Family`. For a rotary PreNorm family that declaration is the whole port: its `configuration_<folder>_attnres.py` and
`modeling_<folder>_attnres.py` are generated from it (`python attnres/utils/modular.py`), as transformers' modular
converter generates `modeling_*.py` from `modular_*.py`. Where a family differs, its modular file defines a class
under the generated class's name (`class Gemma3TextAttnResDecoderLayer:` with the methods that differ); the generator
puts that class's body into the generated class (its docstring replaces the default one). The registry
(`attnres.families.registry`) reads the declarations, so a family is supported exactly when its folder declares it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """`model_type`: transformers' model_type of the family (its AttnRes one adds `_attnres`). `name`: the prefix of
    the AttnRes class names (`Gemma3Text` -> `Gemma3TextAttnResConfig`). `about`: the checkpoints it covers, in the
    config's docstring and the families table. The classes: the family's own, which the AttnRes ones extend.
    `fusable_norm`: whether the family's RMSNorm is transformers' Llama formula, which the mix kernels may apply fused
    (`attnres.core.mix_point.AttnResMixing.fusable_norm`). `generated`: False where the configuration and modeling
    files are written by hand (Kimi Linear: KDA and MLA layers, MoE, Kimi K3's modules)."""

    model_type: str
    name: str
    about: str
    config: type
    decoder_layer: type
    pretrained_model: type
    causal_lm: type
    norm: type
    rotary: type | None = None
    attention: type | None = None
    fusable_norm: bool = False
    generated: bool = True
    label: str = ""  # the family's name in prose ("Gemma 3"); `name` where empty
    # model_types of wrapper configs that read as this family's AttnRes config (Kimi K3's `kimi_k3` unwraps its
    # `text_config`), registered where transformers has none of its own
    wrapper_model_types: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return self.label or self.name

    @property
    def attn_res_model_type(self) -> str:
        return f"{self.model_type}_attnres"

    @property
    def config_name(self) -> str:
        return f"{self.name}AttnResConfig"

    @property
    def causal_lm_name(self) -> str:
        return f"{self.name}AttnResForCausalLM"


__all__ = ["Family"]

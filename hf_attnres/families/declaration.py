"""A decoder family with AttnRes, declared: the transformers classes it extends and its norm policy.

A family's folder `hf_attnres/families/<folder>/` holds `modular_<folder>_attnres.py`, which binds `FAMILY` to a
`Family`. For a rotary PreNorm family that declaration is the whole port: its `configuration_<folder>_attnres.py` and
`modeling_<folder>_attnres.py` are generated from it (`python hf_attnres/utils/modular.py`), as transformers' modular
converter generates `modeling_*.py` from `modular_*.py`. Where a family's layer differs from Llama's, the declaration
says how, as data the core runs (which norms read the mixes, what ends each sub-layer's output, the embedding's scale,
per-type rotary bases, refused config fields). What data cannot say, a class under the generated class's name adds
(`class <name>AttnResDecoderLayer:` with the methods that differ): the generator puts that class's body into the
generated class (its docstring replaces the default one). The registry (`hf_attnres.families.registry`) reads the
declarations, so a family is supported exactly when its folder declares it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hf_attnres.core.decoder_model import EMBEDDING_SCALES


@dataclass(frozen=True)
class Family:
    """`model_type`: transformers' model_type of the family (its AttnRes one adds `_attnres`). `name`: the prefix of
    the AttnRes class names (`Gemma3Text` -> `Gemma3TextAttnResConfig`). `about`: the checkpoints it covers, in the
    config's docstring and the families table. The classes: the family's own, which the AttnRes ones extend.
    `fusable_norm`: whether the family's RMSNorm is transformers' Llama formula, which the mix kernels may apply fused
    (`hf_attnres.core.mix_point.AttnResMixing.fusable_norm`). `generated`: False where the configuration and modeling
    files are written by hand (Kimi Linear: KDA and MLA layers, MoE, Kimi K3's modules).

    How the layer differs from Llama's `h + attn(norm1(h))`, `h + mlp(norm2(h))` (`hf_attnres.core.decoder_layer`):
    `input_norms`: the decoder layer's modules that read the attention and the MLP mix (its pre-norms; empty: Llama's
    `input_layernorm`, `post_attention_layernorm`). `output_modules`: the layer's modules applied to the attention and
    the MLP output, part of the sub-layer, before the output joins the depth sources (Gemma 3's post-norms
    `post_norm(f(pre_norm(h)))`, Phi-3's residual dropouts); empty: none.

    The model: `embedding`: the token embedding class, called `(vocab_size, hidden_size, padding_idx)` (None:
    `nn.Embedding`); `embedding_scale`: a rule of `hf_attnres.core.decoder_model.EMBEDDING_SCALES` given to it as
    `embed_scale=` (`"sqrt_hidden_size"`: Gemma's stream starts at sqrt(hidden_size) times the embedding).
    `rotary_per_layer_type`: the rotary embedding is called with each layer type (`config.layer_types`) for its own
    base (Gemma 3's local and global layers). `refused_config_flags`: config field -> why AttnRes refuses it set
    (the config raises naming the field when it is truthy, e.g. an embedding model's bidirectional attention)."""

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
    input_norms: tuple[str, ...] = ()
    output_modules: tuple[str, ...] = ()
    embedding: type | None = None
    embedding_scale: str | None = None
    rotary_per_layer_type: bool = False
    refused_config_flags: dict[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self):
        for name in ("input_norms", "output_modules"):
            modules = getattr(self, name)
            if len(modules) not in (0, 2) or not all(isinstance(module, str) for module in modules):
                raise ValueError(f"Family {self.name}: {name} must name two modules (attention, MLP) or none, "
                                 f"got {modules!r}")
        if self.embedding_scale is not None and self.embedding_scale not in EMBEDDING_SCALES:
            raise ValueError(f"Family {self.name}: embedding_scale must be one of {sorted(EMBEDDING_SCALES)} or "
                             f"None, got {self.embedding_scale!r}")
        if self.embedding_scale is not None and self.embedding is None:
            raise ValueError(f"Family {self.name}: embedding_scale needs an `embedding` class that takes `embed_scale`")

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

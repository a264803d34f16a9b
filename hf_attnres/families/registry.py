"""Which of transformers' decoder families take AttnRes, by the family's own `model_type`, and why the others do not.

AttnRes replaces the residual stream of a *PreNorm* decoder (`h + f(norm(h))`, twice per layer) by a learned mix of
depth sources read where the stream was read. A family is supported when its layer is exactly that (post-norms on a
sub-layer's *output*, as in Gemma 3, belong to the output and are fine), and refused by name otherwise, with the
reason. The supported ones are the folders of `hf_attnres.families` that declare one (`modular_<folder>_attnres.py`,
`hf_attnres.families.declaration`); docs/FAMILIES.md has the table.
"""
from __future__ import annotations

import importlib
from pathlib import Path

from hf_attnres.families.declaration import Family

FAMILIES_DIR = Path(__file__).resolve().parent


def _declarations() -> dict[str, tuple[str, Family]]:
    """The family's own model_type -> (its package, its declaration), for every folder with a modular file."""
    found = {}
    for path in sorted(FAMILIES_DIR.glob("*/modular_*_attnres.py")):
        package = f"{__package__}.{path.parent.name}"
        family = importlib.import_module(f"{package}.{path.stem}").FAMILY
        found[family.model_type] = (package, family)
    return found


DECLARATIONS = _declarations()
# the family's own model_type -> (module, AttnRes config class, AttnRes causal LM class)
SUPPORTED = {model_type: (package, family.config_name, family.causal_lm_name)
             for model_type, (package, family) in DECLARATIONS.items()}
# model_types of wrapper configs (Kimi K3's `kimi_k3`) -> the family they read as
WRAPPERS = {wrapper: model_type for model_type, (_, family) in DECLARATIONS.items()
            for wrapper in family.wrapper_model_types}
PARALLEL = ("parallel residual: attention and MLP read the same input and are added together, so a layer has one "
            "mix point, not the two of Kimi K3's layout")
NOT_YET = "PreNorm, so it could take AttnRes, but it is not ported yet (its layer is not Llama's)"
REFUSED = {
    "gpt_neox": PARALLEL,
    "gptj": PARALLEL,
    "phi": PARALLEL,
    "falcon": PARALLEL + " (Falcon-7B/40B; new_decoder_architecture too)",
    "cohere": PARALLEL,
    "cohere2": PARALLEL,
    "olmo2": "post-norm: the RMSNorm normalises each sub-layer's output and the stream itself is read un-normed, so "
             "no norm removes the scale of a mix (the upcycling argument and the mix's input both need a pre-norm)",
    "granite": "residual multipliers: `residual_multiplier` scales every sub-layer output before the add, and "
               "`embedding_multiplier` the embedding; a depth mix replaces exactly that weighting",
    "granitemoe": "residual multipliers (`residual_multiplier`, `embedding_multiplier`), as Granite",
    "minicpm": "residual multipliers: `scale_depth / sqrt(num_hidden_layers)` scales every sub-layer output",
    "gpt2": "learned absolute positions and LayerNorm; " + NOT_YET,
    "gemma": NOT_YET,
    "gemma2": NOT_YET + " (Gemma 2: pre- and post-norms as Gemma 3, soft-capped attention)",
    "olmo": NOT_YET + " (non-parametric LayerNorm)",
    "starcoder2": NOT_YET + " (LayerNorm with bias)",
    "mixtral": NOT_YET + " (MoE MLP)",
    "qwen2_moe": NOT_YET + " (MoE MLP with a shared expert)",
    "qwen3_moe": NOT_YET + " (MoE MLP)",
    "deepseek_v3": NOT_YET + " (MLA attention, MoE)",
    "mamba": "not an attention decoder (a state-space model: one mixer per layer, no attention/MLP pair)",
    "jamba": "hybrid Mamba/attention layers with one mixer each, not the attention/MLP pair",
}
ATTN_RES_SUFFIX = "_attnres"


def declaration(model_type: str) -> Family:
    """The declaration of a supported family, by its own model_type."""
    return DECLARATIONS[model_type][1]


def module_path_of(model_type: str) -> str:
    return SUPPORTED[model_type][0]


def family_classes(model_type: str):
    """(AttnRes config class, AttnRes causal LM class) of a supported family's own model_type."""
    module, config_name, model_name = SUPPORTED[model_type]
    loaded = importlib.import_module(module)
    return getattr(loaded, config_name), getattr(loaded, model_name)


def family_exports() -> dict[str, type]:
    """Every supported family's public classes by name (its package's `__all__`), in the registry's order: what the
    package's top level offers for each family alike. Two families exporting one name is an error, not a shadowing."""
    exports: dict[str, type] = {}
    for module in sorted({module for module, _, _ in SUPPORTED.values()}):
        loaded = importlib.import_module(module)
        for name in loaded.__all__:
            if name in exports:
                raise RuntimeError(f"{module} exports {name!r}, which another family exports too")
            exports[name] = getattr(loaded, name)
    return exports


def source_family(config) -> str:
    """The family's own model_type of a standard-residual checkpoint to upcycle; ValueError naming why not."""
    return source_family_of(getattr(config, "model_type", None), getattr(config, "attn_res_mode", None),
                            getattr(config, "attn_res_family", None))


def source_family_of(model_type: str | None, mode: str | None = None, family: str | None = None) -> str:
    """`source_family` from a config's fields (a config.json read as a dict: `mode` None reads as K3's rule would,
    from the block size, so only "standard" passes)."""
    model_type = model_type or ""
    if model_type.endswith(ATTN_RES_SUFFIX) or model_type in WRAPPERS:
        check_standard_residual(model_type, mode)
        return family or WRAPPERS.get(model_type) or model_type.removesuffix(ATTN_RES_SUFFIX)
    if model_type in SUPPORTED:
        return model_type
    if model_type in REFUSED:
        raise ValueError(f"model_type {model_type!r} is not supported by AttnRes: {REFUSED[model_type]}")
    raise ValueError(f"model_type {model_type!r} is not a supported family (supported: {sorted(SUPPORTED)}; "
                     "docs/FAMILIES.md lists the refused ones and why)")


def check_standard_residual(model_type: str | None, mode: str | None) -> None:
    """ValueError when a config's model_type is AttnRes (or a wrapper's) in another mode than standard: what is
    upcycled, or written as the family's own plain model, has the standard residual stream."""
    if ((model_type or "").endswith(ATTN_RES_SUFFIX) or model_type in WRAPPERS) and mode != "standard":
        raise ValueError(f"model_type {model_type!r} with attn_res_mode={mode!r} is already AttnRes: upcycling "
                         "turns a standard-residual checkpoint into Block or Full AttnRes")


def family_of_model_type(model_type: str | None) -> str:
    """The family (its own model_type) of a config.json's `model_type`, AttnRes or not: `llama_attnres` and `llama`
    are Llama; a wrapper's (K3's `kimi_k3`) is the family it wraps, and a config.json without one (Moonshot's layout)
    is Kimi Linear. ValueError naming the reason for a refused or unknown family."""
    if model_type in (None, ""):
        return "kimi_linear"
    if model_type in WRAPPERS:
        return WRAPPERS[model_type]
    if not isinstance(model_type, str):
        raise ValueError(f"model_type must be a string, got {model_type!r}")
    family = model_type.removesuffix(ATTN_RES_SUFFIX)
    if family in SUPPORTED:
        return family
    return source_family_of(family)  # raises, naming why (refused with its reason, or unknown)


def register_auto_classes() -> None:
    """AutoConfig / AutoModel / AutoModelForCausalLM for every family's `<model_type>_attnres`, each marked for remote
    code: `save_pretrained` writes `auto_map` and the generated code files (hf_attnres.folders.remote_code). A wrapper's
    model_type (K3's `kimi_k3`) reads as its family's config, unless transformers ships its own."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    for module, config_name, model_name in SUPPORTED.values():
        loaded = importlib.import_module(module)
        config_class = getattr(loaded, config_name)
        causal_lm = getattr(loaded, model_name)
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, causal_lm.model_class, exist_ok=True)
        AutoModelForCausalLM.register(config_class, causal_lm, exist_ok=True)
        config_class.register_for_auto_class()
        causal_lm.model_class.register_for_auto_class("AutoModel")
        causal_lm.register_for_auto_class("AutoModelForCausalLM")
    for wrapper, model_type in WRAPPERS.items():
        if wrapper not in CONFIG_MAPPING_NAMES:
            CONFIG_MAPPING.register(wrapper, family_classes(model_type)[0], exist_ok=True)


__all__ = ["SUPPORTED", "REFUSED", "DECLARATIONS", "WRAPPERS", "declaration", "family_classes", "family_exports",
           "family_of_model_type",
           "check_standard_residual", "source_family", "source_family_of", "register_auto_classes"]

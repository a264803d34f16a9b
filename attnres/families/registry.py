"""Which of transformers' decoder families take AttnRes, by the family's own `model_type`, and why the others do not.

AttnRes replaces the residual stream of a *PreNorm* decoder (`h + f(norm(h))`, twice per layer) by a learned mix of
depth sources read where the stream was read. A family is supported when its layer is exactly that (post-norms on a
sub-layer's *output*, as in Gemma 3, belong to the output and are fine), and refused by name otherwise, with the
reason. README "Model families" has the table.
"""
from __future__ import annotations

import importlib
from pathlib import Path

# the family's own model_type -> (module, AttnRes config class, AttnRes causal LM class)
SUPPORTED = {
    "llama": ("attnres.families.llama", "LlamaAttnResConfig", "LlamaAttnResForCausalLM"),
    "mistral": ("attnres.families.mistral", "MistralAttnResConfig", "MistralAttnResForCausalLM"),
    "qwen2": ("attnres.families.qwen2", "Qwen2AttnResConfig", "Qwen2AttnResForCausalLM"),
    "qwen3": ("attnres.families.qwen3", "Qwen3AttnResConfig", "Qwen3AttnResForCausalLM"),
    "gemma3_text": ("attnres.families.gemma3", "Gemma3TextAttnResConfig", "Gemma3TextAttnResForCausalLM"),
    "kimi_linear": ("attnres.families.kimi_linear", "KimiLinearAttnResConfig", "KimiLinearAttnResForCausalLM"),
}
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
    "phi3": NOT_YET,
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


def module_path_of(model_type: str) -> str:
    return SUPPORTED[model_type][0]


def family_classes(model_type: str):
    """(AttnRes config class, AttnRes causal LM class) of a supported family's own model_type."""
    module, config_name, model_name = SUPPORTED[model_type]
    loaded = importlib.import_module(module)
    return getattr(loaded, config_name), getattr(loaded, model_name)


def source_family(config) -> str:
    """The family's own model_type of a standard-residual checkpoint to upcycle; ValueError naming why not."""
    return source_family_of(getattr(config, "model_type", None), getattr(config, "attn_res_mode", None),
                            getattr(config, "attn_res_family", None))


def source_family_of(model_type: str | None, mode: str | None = None, family: str | None = None) -> str:
    """`source_family` from a config's fields (a config.json read as a dict: `mode` None reads as K3's rule would,
    from the block size, so only "standard" passes)."""
    model_type = model_type or ""
    if model_type.endswith(ATTN_RES_SUFFIX) or model_type == "kimi_k3":
        if mode != "standard":
            raise ValueError(f"model_type {model_type!r} with attn_res_mode={mode!r} is already AttnRes: upcycling "
                             "turns a standard-residual checkpoint into Block or Full AttnRes")
        return family or (model_type.removesuffix(ATTN_RES_SUFFIX) if model_type != "kimi_k3" else "kimi_linear")
    if model_type in SUPPORTED:
        return model_type
    if model_type in REFUSED:
        raise ValueError(f"model_type {model_type!r} is not supported by AttnRes: {REFUSED[model_type]}")
    raise ValueError(f"model_type {model_type!r} is not a supported family (supported: {sorted(SUPPORTED)}; "
                     "README 'Model families' lists the refused ones and why)")


def family_of_model_type(model_type: str | None) -> str:
    """The family (its own model_type) of a config.json's `model_type`, AttnRes or not: `llama_attnres` and `llama`
    are Llama; Kimi Linear's own, K3's and a config.json without one (Moonshot's layout) are Kimi Linear. ValueError
    naming the reason for a refused or unknown family."""
    if model_type in (None, "", "kimi_k3"):
        return "kimi_linear"
    if not isinstance(model_type, str):
        raise ValueError(f"model_type must be a string, got {model_type!r}")
    family = model_type.removesuffix(ATTN_RES_SUFFIX)
    if family in SUPPORTED:
        return family
    return source_family_of(family)  # raises, naming why (refused with its reason, or unknown)


def family_of_folder(folder) -> tuple[str, str | None]:
    """(family, the config.json's own model_type) of a model folder; ValueError (CheckpointFileError for a missing
    or damaged config.json) naming the file or the reason."""
    from ..folders.checkpoint_files import read_json_file

    model_type = read_json_file(Path(folder) / "config.json", "config.json").get("model_type")
    return family_of_model_type(model_type), model_type


def register_auto_classes() -> None:
    """AutoConfig / AutoModel / AutoModelForCausalLM for every family's `<model_type>_attnres` (Kimi Linear registers
    itself in `attnres/__init__.py`), each marked for remote code as Kimi Linear is: `save_pretrained` writes `auto_map`
    and the generated code files (attnres.folders.remote_code)."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    for model_type, (module, config_name, model_name) in SUPPORTED.items():
        if model_type == "kimi_linear":
            continue
        loaded = importlib.import_module(module)
        config_class = getattr(loaded, config_name)
        causal_lm = getattr(loaded, model_name)
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, causal_lm.model_class, exist_ok=True)
        AutoModelForCausalLM.register(config_class, causal_lm, exist_ok=True)
        config_class.register_for_auto_class()
        causal_lm.model_class.register_for_auto_class("AutoModel")
        causal_lm.register_for_auto_class("AutoModelForCausalLM")


__all__ = ["SUPPORTED", "REFUSED", "family_classes", "family_of_model_type", "family_of_folder", "source_family",
           "source_family_of", "register_auto_classes"]

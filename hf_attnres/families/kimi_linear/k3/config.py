"""Kimi K3's config.json, read strictly: every field is known, checked, or an error naming it.

K3 nests its text backbone (a Kimi Linear config plus K3 fields) under `text_config`, next to a `vision_config` we do
not load. K3-only fields are `KimiLinearAttnResConfig` fields (unset: Kimi Linear's modules); a few K3 fields only
restate what transformers' Kimi Linear already does and must hold the one value it supports (`FIXED_FIELDS`). A config
with any K3 marker is checked field by field: an unknown field is an error, never a silent default.
"""
from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

# Fields K3 (and Moonshot's Kimi Linear) write whose only supported value is what transformers' modules compute:
# sigmoid router scores with DeepSeek-V3's bias-corrected grouped top-k, NoPE MLA, no multi-token prediction layers.
FIXED_FIELDS = {
    "moe_router_activation_func": ("sigmoid",),
    "topk_method": ("noaux_tc",),
    "use_grouped_topk": (True,),
    "num_nextn_predict_layers": (0,),
    "mla_use_nope": (True,),
}
# `linear_attn_config` keys: Kimi Linear's (read by transformers) and K3's two KDA gate fields (ours, renamed)
LINEAR_ATTN_KEYS = {"kda_layers", "full_attn_layers", "head_dim", "num_heads", "short_conv_kernel_size"}
LINEAR_ATTN_K3_KEYS = {"use_full_rank_gate": "linear_use_full_rank_gate", "gate_lower_bound": "linear_gate_lower_bound"}
# Moonshot's layout fields our config translates (conversion/kimi_linear/config.py) and generic PreTrainedConfig keys
MOONSHOT_KEYS = {"linear_attn_config", "first_k_dense_replace", "moe_layer_freq", "auto_map", "head_dim",
                 "qk_head_dim", "_name_or_path", "torch_dtype", "output_attentions", "quantization_config"}
# Fields whose presence makes a config a K3 one (Kimi Linear has none of them)
K3_MARKERS = {"activation_situ_beta", "activation_situ_linear_beta", "routed_expert_hidden_size",
              "latent_moe_use_norm", "mla_use_output_gate"}
# The multimodal wrapper's own keys; `vision_config` describes the tower we skip
WRAPPER_KEYS = {"architectures", "auto_map", "bos_token_id", "dtype", "torch_dtype", "eos_token_id", "ignore_index",
                "image_placeholder", "media_placeholder_token_id", "model_type", "pad_token_id", "tie_word_embeddings",
                "text_config", "vision_config", "transformers_version", "quantization_config", "_name_or_path"}
K3_WRAPPER_TYPE = "kimi_k3"


def is_wrapper(config_dict: dict) -> bool:
    return "text_config" in config_dict and "num_hidden_layers" not in config_dict


def is_k3(text: dict) -> bool:
    linear = text.get("linear_attn_config") or {}
    return (
        text.get("hidden_act") == "situ"
        or any(key in text for key in K3_MARKERS)
        or any(key in linear for key in LINEAR_ATTN_K3_KEYS)
    )


def known_text_keys(config_class) -> set[str]:
    return (
        set(config_class.__dataclass_fields__) | set(config_class.attribute_map)
        | set(config_class.attribute_map.values()) | set(FIXED_FIELDS) | MOONSHOT_KEYS | {"model_type"}
    )


def check_k3_dict(config_dict: dict, config_class) -> None:
    """Raise a ValueError naming every unknown or unsupported field of a K3 config (wrapper or bare text config)."""
    problems = []
    if "text_config" in config_dict and not isinstance(config_dict["text_config"], dict):
        raise ValueError(f"Kimi K3 config.json: text_config must be a JSON object, got "
                         f"{type(config_dict['text_config']).__name__}")
    if is_wrapper(config_dict):
        problems += [f"{key}: unknown Kimi K3 field" for key in config_dict if key not in WRAPPER_KEYS]
        text = config_dict["text_config"]
    else:
        text = config_dict
    # a config this class saved (its own model_type) writes every K3 field, set or not, beside any extra attribute a
    # user added: it is not a K3 checkpoint, and its extra attributes stay as transformers keeps them
    ours = config_dict.get("model_type") == config_class.model_type
    if is_wrapper(config_dict) or (is_k3(text) and not ours):
        known = known_text_keys(config_class)
        problems += [f"text_config.{key}: unknown Kimi K3 field" for key in text if key not in known]
        for key, allowed in FIXED_FIELDS.items():
            if key in text and text[key] not in allowed:
                problems.append(f"text_config.{key}={text[key]!r}: only {allowed} is supported")
        linear = text.get("linear_attn_config") or {}
        problems += [
            f"text_config.linear_attn_config.{key}: unknown Kimi K3 field"
            for key in linear if key not in LINEAR_ATTN_KEYS | set(LINEAR_ATTN_K3_KEYS)
        ]
    if problems:
        raise ValueError("Kimi K3 config.json: " + "; ".join(problems))


def unwrap(config_dict: dict) -> dict:
    """The text config of a K3 wrapper (vision left behind, with a note), K3 gate fields lifted out of
    `linear_attn_config`, and the MXFP4 quantization_config checked and dropped (experts are dequantized on load)."""
    from .mxfp4 import check_quantization_config

    if is_wrapper(config_dict):
        text = dict(config_dict["text_config"])
        for key in ("torch_dtype", "dtype", "transformers_version", "quantization_config"):
            if key in config_dict and key not in text:
                text[key] = config_dict[key]
        if "vision_config" in config_dict:
            logger.warning("Kimi K3: loading the text model only; the vision tower and projector are skipped")
    else:
        text = dict(config_dict)
    if not (is_wrapper(config_dict) or is_k3(text)):
        return text  # Kimi Linear's config, read exactly as before
    if "quantization_config" in text:
        check_quantization_config(text.pop("quantization_config"))
    linear = text.get("linear_attn_config")
    if linear:
        for key, our_key in LINEAR_ATTN_K3_KEYS.items():
            if key in linear:
                text.setdefault(our_key, linear[key])
    return text


def check_k3_fields(config) -> None:
    """Values of the K3 fields on a built config (ValueError naming the field)."""
    if config.hidden_act == "situ" and config.activation_situ_beta is None:
        raise ValueError("hidden_act='situ' needs activation_situ_beta (Kimi K3: 4.0)")
    for field in ("activation_situ_beta", "activation_situ_linear_beta"):
        value = getattr(config, field)
        if value is not None and not value > 0:
            raise ValueError(f"{field} must be > 0, got {value}")
    latent = config.routed_expert_hidden_size
    if latent is not None and latent < 1:
        raise ValueError(f"routed_expert_hidden_size must be >= 1, got {latent}")
    if config.latent_moe_use_norm and latent is None:
        raise ValueError("latent_moe_use_norm needs routed_expert_hidden_size (the latent width the norm reads)")
    if not config.mla_use_nope:
        raise ValueError("mla_use_nope=False (RoPE MLA) is not supported: Kimi Linear's and K3's MLA are NoPE")
    bound = config.linear_gate_lower_bound
    if bound is not None and not bound < 0:
        raise ValueError(f"linear_gate_lower_bound must be < 0 (a log-decay floor; K3: -5.0), got {bound}")


def uses_k3(config) -> bool:
    """Whether any K3 module replaces a Kimi Linear one."""
    return (
        config.hidden_act == "situ" or config.routed_expert_hidden_size is not None or config.mla_use_output_gate
        or config.linear_use_full_rank_gate or config.linear_gate_lower_bound is not None
    )

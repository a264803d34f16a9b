"""config.json in both layouts: Moonshot's (`linear_attn_config`, 1-indexed, `first_k_dense_replace`, model_type
"kimi_linear", optionally nested under K3's `text_config`) and ours (`layer_types`, `mlp_layer_types`)."""
from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub.errors import StrictDataclassError

from ...families.kimi_linear.configuration_kimi_linear_attnres import KimiLinearAttnResConfig
from ...families.kimi_linear.k3.config import check_k3_dict
from ...families.kimi_linear.k3.layout import k3_linear_attn_config
from ...families.kimi_linear.k3.mxfp4 import check_quantization_config
from ...folders.checkpoint_files import CheckpointFileError, read_json_file
from ..errors import ConversionError
from ..guards import check_layer_count

MOONSHOT_MODEL_TYPE = "kimi_linear"
MOONSHOT_ARCHITECTURE = "KimiLinearForCausalLM"
HF_ARCHITECTURE = "KimiLinearAttnResForCausalLM"
# Moonshot-only structure fields: ours spells them as per-layer lists
MOONSHOT_ONLY_FIELDS = ("linear_attn_config", "first_k_dense_replace", "moe_layer_freq")
# Moonshot's remote code pointers do not describe our classes; derived fields are recomputed on load
DROPPED_FIELDS = ("auto_map", "architectures", "head_dim", "qk_head_dim", "transformers_version", "_name_or_path")
ATTN_RES_FIELDS = ("attn_res_mode", "attn_res_block_size", "attn_res_backend")


def read_config_dict(folder: Path) -> dict:
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise ConversionError(f"{path}: not found (a checkpoint folder needs its config.json)")
    try:
        config = read_json_file(path, "model config")
    except CheckpointFileError as error:
        raise ConversionError(str(error)) from None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    for where in (config, text):
        if where.get("quantization_config"):
            try:  # Kimi K3's MXFP4 experts are dequantized on the way; nothing else is
                check_quantization_config(where["quantization_config"])
            except ValueError as error:
                raise ConversionError(f"{path}: field {error} (dequantize first)") from error
    return config


def parse_config(config_dict: dict) -> KimiLinearAttnResConfig:
    """Either layout -> our config (K3's `text_config` is unwrapped by `KimiLinearAttnResConfig.from_dict`)."""
    try:
        check_k3_dict(config_dict, KimiLinearAttnResConfig)  # the wrapper's own fields, before it is unwrapped
        text = dict(KimiLinearAttnResConfig.text_config_dict(config_dict))
    except ValueError as error:
        raise ConversionError(f"config.json: {error}") from None
    text.pop("model_type", None)  # "kimi_linear" in Moonshot's file; the class knows its own
    try:
        check_layer_count(text)  # before a per-layer list is built from it
    except ValueError as error:
        raise ConversionError(f"config.json: {error}") from None
    if "mlp_layer_types" not in text and text.get("moe_layer_freq", 1) != 1:
        # Moonshot: a layer is MoE from `first_k_dense_replace` on, every `moe_layer_freq`-th layer
        first_dense, freq = text.get("first_k_dense_replace", 1), text["moe_layer_freq"]
        text["mlp_layer_types"] = [
            "sparse" if i >= first_dense and i % freq == 0 else "dense" for i in range(text["num_hidden_layers"])
        ]
    try:
        return KimiLinearAttnResConfig.from_dict(text)
    except (ValueError, TypeError, StrictDataclassError) as error:
        raise ConversionError(f"config.json: {error}") from error


def hf_config_dict(config: KimiLinearAttnResConfig) -> dict:
    """Our HF-native config.json: per-layer lists, model_type "kimi_linear_attnres", no Moonshot leftovers."""
    config_dict = config.to_diff_dict()
    for field in (*MOONSHOT_ONLY_FIELDS, *DROPPED_FIELDS):
        config_dict.pop(field, None)
    config_dict["architectures"] = [HF_ARCHITECTURE]
    return config_dict


def moonshot_config_dict(config: KimiLinearAttnResConfig) -> dict:
    """Moonshot's config.json layout; AttnRes fields stay (named as our config names them) unless standard."""
    config_dict = hf_config_dict(config)
    layer_types = config_dict.pop("layer_types")
    config_dict["linear_attn_config"] = {
        "kda_layers": [i + 1 for i, kind in enumerate(layer_types) if kind == "linear_attention"],
        "full_attn_layers": [i + 1 for i, kind in enumerate(layer_types) if kind == "full_attention"],
        "head_dim": config_dict.pop("linear_head_dim"),
        "num_heads": config_dict.pop("linear_num_heads"),
        "short_conv_kernel_size": config_dict.pop("linear_conv_kernel_dim"),
    }
    config_dict["first_k_dense_replace"] = _first_k_dense(config_dict.pop("mlp_layer_types"))
    config_dict["moe_layer_freq"] = 1
    if config.attn_res_mode == "standard":
        for field in ATTN_RES_FIELDS:
            config_dict.pop(field, None)
    config_dict.update(model_type=MOONSHOT_MODEL_TYPE, architectures=[MOONSHOT_ARCHITECTURE])
    return k3_linear_attn_config(config_dict)


def _first_k_dense(mlp_layer_types: list[str]) -> int:
    first_k = next((i for i, kind in enumerate(mlp_layer_types) if kind != "dense"), len(mlp_layer_types))
    if any(kind != "sparse" for kind in mlp_layer_types[first_k:]):
        raise ConversionError(
            f"config field mlp_layer_types={mlp_layer_types}: Moonshot's layout needs dense layers first, then MoE "
            "(first_k_dense_replace); this pattern has no Moonshot equivalent"
        )
    return first_k


def drop_moonshot_fields(config: KimiLinearAttnResConfig) -> None:
    """Strip what a Moonshot config.json left on a loaded config (its model_type and remote-code auto_map, 1-indexed
    layer lists) so `save_pretrained` writes our layout only."""
    for field in (*MOONSHOT_ONLY_FIELDS, "auto_map", "model_type"):
        if field in config.__dict__:
            delattr(config, field)


def write_config(config_dict: dict, folder: Path) -> None:
    (Path(folder) / "config.json").write_text(json.dumps(config_dict, indent=2, sort_keys=True) + "\n")

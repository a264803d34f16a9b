"""What each evaluated model is, and whether a pair is really matched: same architecture except the residual, same
parameter count outside the AttnRes additions, same tokens trained, same training data.

Read from the model folder alone (config.json, safetensors headers, tokenizer.json, and training_info.json that
scripts/train.py writes into final/); a plain Hub-format folder gives what it has and the rest is reported unknown.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..folders.checkpoint_files import weight_files

# Config fields that define the residual itself (or only how it is computed): allowed to differ in a matched pair
RESIDUAL_FIELDS = ("attn_res_mode", "attn_res_block_size", "attn_res_backend", "attn_res_two_phase",
                   "attn_res_fuse_norm", "attn_res_recompute", "attn_res_query_init_std", "attn_res_key_norm_init",
                   "auto_map", "architectures", "model_type",
                   "transformers_version", "dtype", "torch_dtype")
RESIDUAL_PARAM = "_res_"  # AttnRes' own tensors: {point}_res_norm / {point}_res_proj


def check_model_dir(model_dir: Path) -> None:
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model folder {model_dir} " + ("is a file, not a folder" if model_dir.exists()
                                                                else "does not exist"))
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"model folder {model_dir} has no config.json (not a save_pretrained folder)")
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise FileNotFoundError(f"{model_dir / 'config.json'} is not valid UTF-8 JSON ({error})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise FileNotFoundError(f"{model_dir / 'config.json'} is not a model config (a JSON object with model_type)")
    if not any(model_dir.glob("*.safetensors")):
        raise FileNotFoundError(f"model folder {model_dir} has no weights (*.safetensors)")
    weight_files(model_dir)  # every header and weight dtype, as from_pretrained, convert and export check them


def parameter_counts(model_dir: Path) -> tuple[int, int] | tuple[None, None]:
    """(all parameters, AttnRes parameters) from the safetensors headers, without loading any weight."""
    from safetensors import safe_open

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None, None
    total = residual = 0
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                count = 1
                for dim in f.get_slice(name).get_shape():
                    count *= dim
                total += count
                residual += count if RESIDUAL_PARAM in name else 0
    return total, residual


def file_hash(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else None


def describe_model(model_dir: Path, label: str) -> dict:
    from ..training.logs import INFO_FILE  # not at import: training's modules load `datasets`

    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    info_file = model_dir / INFO_FILE
    info = json.loads(info_file.read_text()) if info_file.is_file() else {}
    total, residual = parameter_counts(model_dir)
    return dict(
        label=label, path=str(model_dir.resolve()), attn_res_mode=config.get("attn_res_mode", "standard"),
        parameters=total, attn_res_parameters=residual,
        tokens_trained=info.get("tokens_trained"), data_fingerprint=info.get("data_fingerprint"),
        tokenizer=file_hash(model_dir / "tokenizer.json"),
        architecture={k: v for k, v in sorted(config.items()) if k not in RESIDUAL_FIELDS},
    )


def matched_check(models: list[dict]) -> list[dict]:
    """One row per property: its value per model and whether all models agree ("unknown" when not recorded)."""
    rows = []
    base_params = [None if m["parameters"] is None else m["parameters"] - m["attn_res_parameters"] for m in models]
    props = [
        ("parameters excluding AttnRes", base_params),
        ("tokens trained", [m["tokens_trained"] for m in models]),
        ("training data fingerprint", [m["data_fingerprint"] for m in models]),
        ("tokenizer", [m["tokenizer"] for m in models]),
    ]
    for name, values in props:
        status = "unknown" if any(v is None for v in values) else ("match" if len(set(values)) == 1 else "MISMATCH")
        rows.append(dict(property=name, values=values, status=status))
    arch = [m["architecture"] for m in models]
    keys = sorted(set().union(*arch))
    differing = [k for k in keys if len({json.dumps(a.get(k), sort_keys=True) for a in arch}) > 1]
    rows.append(dict(property="architecture (config, residual fields aside)",
                     values=differing or ["identical"], status="MISMATCH" if differing else "match"))
    return rows

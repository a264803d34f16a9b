"""What each evaluated model is, and whether a pair is really matched: same architecture except the residual, same
parameter count outside the AttnRes additions, same tokens trained, same training data.

Read from the model folder alone (config.json, safetensors headers, tokenizer.json, and training_info.json that
scripts/train.py writes into final/); a plain Hub-format folder gives what it has and the rest is reported unknown.
"""
from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

from ..folders.checkpoint_files import weight_files

# Fields a save writes about the file rather than the network (the class, its code, the versions, the storage dtype);
# the family itself is compared under "family"
META_FIELDS = ("auto_map", "architectures", "model_type", "transformers_version", "dtype", "torch_dtype")
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
        architecture=architecture(config),
    )


@cache
def _defaults(config_class: type) -> dict:
    return config_class().to_dict()


@cache
def family_fields(family: str) -> tuple[dict, dict, frozenset]:
    """(the family's own config defaults, its AttnRes config defaults, the residual fields): read from the two config
    classes, so a field the AttnRes config gains is covered without a list here. Residual fields are those the AttnRes
    config adds over its family's (the mixin's `ATTN_RES_FIELDS`, and any other `attn_res_*`); another added field (Kimi
    K3's switches) is architecture, and a plain config, which lacks it, reads as the AttnRes default: what upcycling
    writes."""
    from ..core.config import ATTN_RES_FIELDS
    from ..families.registry import declaration, family_classes

    own, attn_res = _defaults(declaration(family).config), _defaults(family_classes(family)[0])
    added = set(attn_res) - set(own)
    residual = frozenset(k for k in added if k in ATTN_RES_FIELDS or k.startswith("attn_res_"))
    return own, attn_res, residual | frozenset(ATTN_RES_FIELDS)


def architecture(config: dict) -> dict:
    """The config's architecture, residual and file fields aside: a supported family's config is read over its class
    defaults (a save omits fields at their defaults, and a plain config lacks the AttnRes config's additions), so a
    plain model and its upcycled copy give the same dict; an unknown family's is its config.json as written."""
    from ..families.registry import ATTN_RES_SUFFIX, SUPPORTED, family_of_model_type

    model_type = config.get("model_type")
    try:
        family = family_of_model_type(model_type)
    except ValueError:
        family = None
    if family not in SUPPORTED or model_type not in (family, family + ATTN_RES_SUFFIX):
        return dict(sorted((k, v) for k, v in config.items() if k not in META_FIELDS and not k.startswith("attn_res_")),
                    family=model_type)
    own, attn_res, residual = family_fields(family)
    base = attn_res if model_type != family else {**own, **{k: v for k, v in attn_res.items() if k not in own}}
    full = {**base, **config}
    return dict(sorted((k, v) for k, v in full.items() if k not in residual and k not in META_FIELDS), family=family)


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


def matched_verdict(rows: list[dict]) -> str:
    """The Matched? table in a few words: "matched" when every property agrees, else which differ or are unknown."""
    differ = [row["property"] for row in rows if row["status"] == "MISMATCH"]
    unknown = [row["property"] for row in rows if row["status"] == "unknown"]
    if differ:
        return f"not matched (differing: {'; '.join(differ)})"
    return f"matched where recorded (not recorded: {'; '.join(unknown)})" if unknown else "matched"

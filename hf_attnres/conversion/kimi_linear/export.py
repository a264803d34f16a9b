"""Export a model folder to the layout the serving runtimes read: Kimi K3's wrapper, or Kimi Linear's.

`--to k3`: config.json `{"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
"text_config": {...K3's field names...}}`, tensors in Moonshot's names under `language_model.`, KDA `A_log` as K3
stores it ([head_dim], first num_heads used); read by vLLM, SGLang, llama.cpp, TensorRT-LLM and MLX.
`--to kimi-linear`: Moonshot's Kimi Linear folder (`KimiLinearForCausalLM`, model_type "kimi_linear") with
`attn_res_block_size`, which vLLM maps to its `kimi_k3` model.

Both carry the tokenizer files. Experts stay unquantized (no quantization_config; K3's MXFP4 experts are written as
their exact bf16 values). Like the converter (convert.py): every check runs before anything is written (what a runtime
cannot represent is refused by name, runtimes.py), tensors stream one decoder layer at a time into a hidden folder
renamed into place, and `verify` re-reads the export and loads it back with `from_pretrained`.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ...families.kimi_linear.conversion_mapping import LANGUAGE_MODEL_PREFIX, convert_tensors
from ...families.kimi_linear.k3.config import FIXED_FIELDS, K3_WRAPPER_TYPE
from ..atomic import move_into_place, output_folder
from ..errors import ConversionError
from ..guards import check_max_shard_size, check_output
from .config import (
    MOONSHOT_ARCHITECTURE,
    hf_config_dict,
    moonshot_config_dict,
    parse_config,
    read_config_dict,
    write_config,
)
from .convert import DEFAULT_MAX_SHARD_SIZE, bitwise_equal, convert_unit
from .k3_preset import K3_TEXT_CONFIG
from .plan import ConversionPlan, plan_conversion
from .runtimes import ExportRefused, check_representable
from .writer import ShardedWriter

K3_ARCHITECTURE = "KimiK3ForConditionalGeneration"
DTYPES = {"auto": None, "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# The text config keeps K3's field names only (a K3 text config is a Kimi Linear one plus K3's fields); anything else
# of ours must hold its default, which `_check_config_round_trip` proves before writing
TEXT_FIELDS = (set(K3_TEXT_CONFIG) - {"quantization_config"}) | {"attn_res_block_size"}
# Ours only, and execution choices rather than the model: they do not travel to a runtime
EXECUTION_FIELDS = ("attn_res_backend", "attn_res_two_phase", "attn_res_fuse_norm", "attn_res_recompute", "dtype",
                    # initialization only: the trained tensors are the model
                    "attn_res_query_init_std", "attn_res_key_norm_init")
# Files a runtime reads beside the weights: tokenizer (HF, tiktoken, remote code), chat template, generation defaults
SIDE_FILES = re.compile(r"^(tokeniz.*|special_tokens_map\.json|added_tokens\.json|vocab\.(json|txt)|merges\.txt|"
                        r".*\.tiktoken|.*\.model|chat_template\.(jinja|json)|generation_config\.json)$")
_A_LOG = re.compile(r"\.self_attn\.A_log$")


def export_checkpoint(
    input: str | Path,
    output: str | Path,
    to: str = "k3",
    dtype: str = "auto",
    force: bool = False,
    verify: bool = False,
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    progress: bool = True,
) -> dict:
    """Write `input` (any folder `convert_checkpoint` reads) as the `to` layout into `output`; return a summary.

    Raises ExportRefused (what the runtime cannot represent) or ConversionError before anything is written.
    """
    if dtype not in DTYPES:
        raise ConversionError(f"--dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    input = Path(input).resolve()
    refuse_other_families(input)
    plan = plan_conversion(input, to="moonshot")  # reads headers and config only
    check_representable(plan.source_config, to)
    config_dict = export_config_dict(plan.source_config, to, _written_dtype(plan, DTYPES[dtype]))
    output = check_output(output, force, inputs=[input])
    check_max_shard_size(max_shard_size)
    planned = {export_name(name, to): export_tensor(name, t, plan, to, DTYPES[dtype])
               for name, t in plan.target.items()}
    with output_folder(output) as folder:
        writer = ShardedWriter(folder, planned, max_shard_size)
        for tensors in _exported_units(plan, to, DTYPES[dtype], progress):
            for name, tensor in tensors.items():
                writer.add(name, tensor)
        writer.finish()
        write_config(config_dict, folder)
        side_files = copy_side_files(input, folder)
        if verify:
            verify_export(plan, folder, to, DTYPES[dtype], progress)
        move_into_place(folder, output, replace=force)
    return {"input": str(input), "output": str(output), "to": to, "tensors": len(planned),
            "bytes": sum(t.numel() * t.element_size() for t in planned.values()), "side_files": side_files,
            "verified": verify, "skipped": list(plan.reader.skipped)}


def refuse_other_families(input: Path) -> None:
    """The serving runtimes (vLLM, SGLang, llama.cpp, TensorRT-LLM, MLX) read AttnRes only in Kimi K3's layout: a
    model of another family (Llama, Qwen, ... with AttnRes, or without) is refused by its model_type."""
    from ...folders.model_family import GGUF_SUFFIX
    from ..guards import KIMI, resolve_family

    if input.suffix != GGUF_SUFFIX:  # a GGUF file is never in K3's layout: refused without parsing it
        try:
            if resolve_family(input)[0] == KIMI:
                return
        except ConversionError:
            pass  # a refused family: named below as any other family
    model_type = read_config_dict(input).get("model_type") if input.is_dir() else "a GGUF file"
    raise ExportRefused(f"{input}: model_type {model_type!r}: export for serving writes Kimi K3's layout, the only "
                        "AttnRes layout the runtimes read, so only Kimi Linear / K3 models export; other families "
                        "have no serving runtime for AttnRes yet (docs/FAMILIES.md)")


def export_config_dict(config, to: str, dtype: torch.dtype | None) -> dict:
    """config.json of the export: Moonshot's Kimi Linear config with K3's field names, wrapped for `to="k3"`."""
    text = moonshot_config_dict(config)
    text["max_position_embeddings"] = text.pop("model_max_length", config.max_position_embeddings)
    text.update({field: allowed[0] for field, allowed in FIXED_FIELDS.items()})  # what our modules compute
    text = {key: value for key, value in text.items() if key in TEXT_FIELDS or key == "linear_attn_config"}
    if dtype is not None:
        text["dtype"] = str(dtype).removeprefix("torch.")
    _check_config_round_trip(config, text)
    if to == "kimi-linear":
        return {**text, "architectures": [MOONSHOT_ARCHITECTURE]}
    return {"architectures": [K3_ARCHITECTURE], "model_type": K3_WRAPPER_TYPE, "text_config": text}


def _check_config_round_trip(config, text: dict) -> None:
    """Every field the export drops must be one our loader restores as it was: else a runtime would serve another
    model. Names each field that would change."""
    def comparable(c) -> dict:
        # FIXED_FIELDS restate what the modules compute (the refusal rules have checked any value a config held)
        return {key: value for key, value in hf_config_dict(c).items()
                if key not in EXECUTION_FIELDS and key not in FIXED_FIELDS}

    before, after = comparable(config), comparable(parse_config(dict(text)))
    changed = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
    if changed:
        raise ConversionError.from_problems(
            [f"{key}={before.get(key)!r}: the exported config.json cannot hold it (it would load as "
             f"{after.get(key)!r})" for key in changed], "cannot export")


def export_name(name: str, to: str) -> str:
    return LANGUAGE_MODEL_PREFIX + name if to == "k3" else name


def kept_in_fp32(name: str, dtype) -> bool:
    """Whether a cast to `dtype` leaves the tensor `name` in fp32, as the installed transformers keeps it when it loads
    Kimi Linear in 16 bits (`_keep_in_fp32_modules_strict`: `dt_bias`, the router's `gate.weight` and
    `e_score_correction_bias` from transformers 5.25, none before); the names match in either layout."""
    from transformers import KimiLinearForCausalLM

    kept = getattr(KimiLinearForCausalLM, "_keep_in_fp32_modules_strict", None) or ()
    return dtype in (torch.bfloat16, torch.float16) and any(pattern in name for pattern in kept)


def cast_for_export(name: str, tensor: torch.Tensor, dtype) -> torch.Tensor:
    """`tensor` in the export's dtype, except where transformers keeps it in fp32 (`kept_in_fp32`)."""
    if dtype is None or not tensor.is_floating_point():
        return tensor
    return tensor.to(torch.float32 if kept_in_fp32(name, dtype) else dtype)


def export_tensor(name: str, tensor: torch.Tensor, plan: ConversionPlan, to: str, dtype) -> torch.Tensor:
    """A Moonshot-layout tensor as the export stores it (works on meta tensors, to plan the shards)."""
    tensor = cast_for_export(name, tensor, dtype)
    if to == "k3" and _A_LOG.search(name):
        # K3 stores A_log as [head_dim] (SGLang and FLA's kernels index it per head; llama.cpp reads [:num_heads])
        heads = tensor.numel()
        padded = torch.zeros(max(plan.source_config.linear_head_dim, heads), dtype=tensor.dtype, device=tensor.device)
        if tensor.device.type != "meta":
            padded[:heads] = tensor.reshape(-1)
        tensor = padded
    return tensor


def _exported_units(plan: ConversionPlan, to: str, dtype, progress: bool):
    for unit in tqdm(plan.units, desc=f"exporting to {to}", unit="unit", disable=not progress):
        tensors = convert_unit(plan, unit)
        yield {export_name(name, to): export_tensor(name, t, plan, to, dtype) for name, t in tensors.items()}


def _written_dtype(plan: ConversionPlan, dtype) -> torch.dtype | None:
    """The dtype config.json states: the cast one, else the input's if all its float tensors agree."""
    if dtype is not None:
        return dtype
    dtypes = {t.dtype for t in plan.target.values() if t.is_floating_point()}
    return dtypes.pop() if len(dtypes) == 1 else None


def copy_side_files(input: Path, folder: Path) -> list[str]:
    """The tokenizer and generation files (not training state, model code or cards): what a runtime reads."""
    copied = sorted(p.name for p in input.iterdir() if p.is_file() and SIDE_FILES.match(p.name))
    for name in copied:
        shutil.copy2(input / name, folder / name)
    return copied


def verify_export(plan: ConversionPlan, folder: Path, to: str, dtype, progress: bool = True) -> None:
    """Re-read every exported tensor bit for bit, then load the folder with our `from_pretrained` and compare every
    parameter with the input's (identical parameters and config: identical logits)."""
    from .reader import CheckpointReader

    written = CheckpointReader(folder)  # keys without K3's `language_model.` prefix
    problems = []
    for tensors in _exported_units(plan, to, dtype, progress=False):
        names = {name.removeprefix(LANGUAGE_MODEL_PREFIX): tensor for name, tensor in tensors.items()}
        stored = written.load([name for name in names if name in written.tensors])
        problems += [f"{name}: planned but not written" for name in names if name not in stored]
        problems += [f"{name}: written tensor differs from the export of the input" for name, tensor in names.items()
                     if name in stored and not bitwise_equal(stored[name], tensor)]
    problems += _load_back_problems(plan, folder, dtype, progress)
    if problems:
        raise ConversionError.from_problems(problems, "export verification failed")


def _load_back_problems(plan: ConversionPlan, folder: Path, dtype, progress: bool) -> list[str]:
    from ...families.kimi_linear.modeling_kimi_linear_attnres import KimiLinearAttnResForCausalLM

    model = KimiLinearAttnResForCausalLM.from_pretrained(folder, dtype=dtype or "auto")
    state = model.state_dict()
    problems = []
    for unit in tqdm(plan.units, desc="loading back", unit="unit", disable=not progress):
        source = plan.reader.load(unit.source_names)
        if plan.source_layout != "hf":
            source = convert_tensors(source, plan.source_config, "hf")
        for name, tensor in source.items():
            # the value as written, then as loaded (transformers may load a module in another dtype than stored)
            expected = cast_for_export(name, tensor, dtype).to(state[name].dtype) if name in state else None
            if expected is None or not bitwise_equal(state[name], expected):
                problems.append(f"{name}: from_pretrained of the export does not give the input's tensor")
    return problems

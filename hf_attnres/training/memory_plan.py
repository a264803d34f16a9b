"""What a model needs, from its config alone: parameter counts, weight memory per storage format, the AttnRes depth
bank for a batch and context, and the bytes crossing each pipeline boundary per micro-batch; `plan_memory` is the
`attnres plan-memory` command (scripts/plan_memory.py): a config file or preset in, the plan printed.

Kimi Linear's counts are closed-form over the config (the same shapes `KimiLinearAttnResForCausalLM` builds; tests
check them against instantiated models). Buffers (the routers' `e_score_correction_bias`, E floats a layer) are not
parameters and are left out. Every other family (`hf_attnres.families.registry.SUPPORTED`; AttnRes or the family's
own config.json) is counted on the meta device: its model is built there, which allocates nothing, and its parameters
are sorted into the same parts by name.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.depth_layout import DepthLayout
from ..families.kimi_linear.model_size import ParameterCounts, count_parameters, kda_params, mla_params, moe_params  # noqa: F401
from ..families.registry import SUPPORTED, family_classes, family_of_model_type
from ..folders.checkpoint_files import read_json_file
from ..utils.tiny import DEFAULT_FAMILY

GiB = 2**30


@dataclass(frozen=True)
class PlanPreset:
    """A config `attnres plan-memory` names without a file: the family it is built in, how the plan names it, and
    `build(parse_config)`, which returns the config (`parse_config` reads a config.json dict in any layout)."""

    family: str
    title: str
    build: Callable


def _tiny(family: str) -> PlanPreset:
    from ..utils.tiny import tiny_config

    return PlanPreset(family, f"tiny-{family}", lambda parse: tiny_config(family=family))


def _k3(parse):
    from ..conversion.kimi_linear.k3_preset import k3_config_dict

    return parse(k3_config_dict())


def _tiny_k3(parse):
    from ..conversion.kimi_linear.k3_fixtures import tiny_k3_config

    return tiny_k3_config()


# "tiny" is the default family's (Llama) tiny model, as `hf_attnres.utils.tiny.tiny_config` builds it; "tiny-<family>"
# any family's; "k3" and "tiny-k3" Kimi K3's text architecture (a Kimi Linear config)
PLAN_PRESETS: dict[str, PlanPreset] = {
    "k3": PlanPreset("kimi_linear", "Kimi K3 (published config)", _k3),
    "tiny": PlanPreset(DEFAULT_FAMILY, "tiny", _tiny(DEFAULT_FAMILY).build),
    "tiny-k3": PlanPreset("kimi_linear", "tiny-k3", _tiny_k3),
    **{f"tiny-{family}": _tiny(family) for family in SUPPORTED},
}
PRESETS = tuple(PLAN_PRESETS)
DTYPE_BYTES = {"fp32": 4, "bf16": 2}
# MXFP4: 4 bits a weight plus one 8-bit scale per 32 weights
MXFP4_BYTES = 0.5 + 1 / 32


def weight_bytes(counts: ParameterCounts) -> dict[str, float]:
    """Weights only (no optimizer state, activations or caches), per storage format."""
    rest = counts.total - counts.routed_experts
    return {
        "fp32": 4 * counts.total,
        "bf16": 2 * counts.total,
        "bf16 + MXFP4 routed experts": 2 * rest + MXFP4_BYTES * counts.routed_experts,
    }


# parameter name part -> ParameterCounts field, first match wins (a family model built on the meta device)
FAMILY_PARTS = (("embed_tokens", "embedding"), ("lm_head", "lm_head"), ("_res_", "attn_res"),
                ("self_attn.", "attention"), ("mlp.", "dense_mlp"), ("norm", "norms"))


def plan_counts(config) -> ParameterCounts:
    """Parameter counts of a config of any family: Kimi Linear's in closed form, the others' from their model built on
    the meta device (a tied lm_head is the embedding: 0)."""
    if family_of_model_type(config.model_type) == "kimi_linear":
        return count_parameters(config)
    import torch

    with torch.device("meta"):
        model = family_classes(family_of_model_type(config.model_type))[1](config)
    counts = ParameterCounts()
    layers = {}
    for name, parameter in model.named_parameters():  # each tensor once: a tied lm_head is not listed
        part = next((field for key, field in FAMILY_PARTS if key in name), None)
        if part is None:
            raise ValueError(f"{type(model).__name__}: parameter {name} has no part in the plan")
        setattr(counts, part, getattr(counts, part) + parameter.numel())
        if name.startswith("model.layers."):
            index = int(name.split(".")[2])
            layers[index] = layers.get(index, 0) + parameter.numel()
    counts.per_layer = [layers[i] for i in sorted(layers)]
    return counts


def depth_bank_bytes(c, batch: int, tokens: int, dtype_bytes: int = 2) -> int:
    """The AttnRes sources alive at the output mix (the most at any point of a forward; `c`: an AttnRes config of any
    family) for `tokens` tokens of each of `batch` sequences: the embedding, the completed blocks and the running
    partial sum (block mode), every sub-layer output (full mode), or one stream (standard). A forward over T tokens
    holds this for T; a chunked prefill (`prefill_chunk_size`) for one chunk; a decode step for one token."""
    return max_sources(c) * batch * tokens * c.hidden_size * dtype_bytes


def max_sources(c) -> int:
    return DepthLayout.of(c).sources_before_layers()[-1]


def pipeline_boundaries(c, stages: int, micro_batch: int, seq_len: int,
                        dtype_bytes: int = 2) -> list[tuple[int, int, int]]:
    """(decoder layer the boundary precedes, source tensors crossing it, bytes per micro-batch per direction) for
    decoder layers split evenly over `stages` stages: the minimum `hf_attnres.pipeline.comms` measures traffic
    against."""
    if not 1 <= stages <= c.num_hidden_layers:
        raise ValueError(f"stages must be between 1 and num_hidden_layers={c.num_hidden_layers}, got {stages}")
    counts = DepthLayout.of(c).sources_before_layers()
    one = micro_batch * seq_len * c.hidden_size * dtype_bytes
    firsts = [round(s * c.num_hidden_layers / stages) for s in range(1, stages)]
    return [(layer, counts[layer], counts[layer] * one) for layer in firsts]


def load_plan_config(spec: str):
    """(config, name) of a preset or a config.json (or a folder holding one) in any layout the converter reads.
    ValueError (ConversionError is one) names the file and the problem."""
    from ..conversion.kimi_linear.config import parse_config

    if spec in PLAN_PRESETS:
        preset = PLAN_PRESETS[spec]
        return preset.build(parse_config), preset.title
    config_dict, path = read_config_dict(spec)
    try:
        family = family_of_model_type(config_dict.get("model_type"))
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    if family == "kimi_linear":
        try:
            return parse_config(config_dict), str(path)
        except ValueError as error:  # parse_config speaks of "config.json": the file given is named instead
            raise ValueError(f"{path}: {str(error).removeprefix('config.json: ')}") from None
    from ..conversion.guards import check_source_fields

    fields = {key: value for key, value in config_dict.items() if key not in ("model_type", "auto_map")}
    try:  # the family's own config.json reads as its standard-residual AttnRes config: the family's model itself
        check_source_fields(fields)  # from the numbers: a 1e9-layer config is refused, never built layer by layer
        return family_classes(family)[0].from_dict(fields), str(path)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from error


def read_config_dict(spec: str) -> tuple[dict, Path]:
    """(config.json as a dict, its path) of a file or a folder; ValueError naming the file and the problem."""
    path = Path(spec)
    path = path / "config.json" if path.is_dir() else path
    if not path.is_file():
        raise ValueError(f"{spec}: neither a config.json, a folder holding one, nor a preset ({', '.join(PRESETS)})")
    return read_json_file(path, "config.json"), path  # CheckpointFileError (a ValueError) names the file


def size_text(n: float) -> str:
    """Bytes in the largest binary unit up to GiB that keeps the number >= 1 (a tiny model is not "0.00 GiB"); GiB
    stays the largest unit, so big models read as docs/K3.md's tables."""
    for unit, size in (("GiB", GiB), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} bytes"


def format_plan(config, name: str, batch: int, context: int, stages: int, micro_batch: int,
                activation_dtype: str) -> str:
    """The printed plan: parameters by part, weights per format, the depth bank, the pipeline boundaries."""
    counts = plan_counts(config)
    act = DTYPE_BYTES[activation_dtype]
    block = f" (block size {config.attn_res_block_size})" if config.attn_res_mode == "block" else ""
    lines = [f"{name}: {config.num_hidden_layers} layers, hidden {config.hidden_size}, attn_res_mode="
             f"{config.attn_res_mode}" + block, "", "parameters"]
    for part in ("embedding", "lm_head", "attention", "dense_mlp", "routed_experts", "moe_other", "norms", "attn_res"):
        lines.append(f"  {part:<16}{getattr(counts, part):>20,}")
    lines += [f"  {'total':<16}{counts.total:>20,}", "",
              "weights (parameters only: no optimizer state, caches, activations)"]
    lines += [f"  {fmt:<30}{size_text(n):>16}" for fmt, n in weight_bytes(counts).items()
              if counts.routed_experts or "MXFP4" not in fmt]  # no routed experts: the line is bf16's
    bank = depth_bank_bytes(config, batch, context, act)
    lines += ["", f"AttnRes depth bank, batch {batch} x {context} tokens, {activation_dtype}: "
              f"{max_sources(config)} sources of [batch, tokens, hidden] = {size_text(bank)}",
              "  (a chunked prefill holds it for one chunk, a decode step for one token)"]
    lines += ["", f"pipeline boundaries, {stages} stages, micro-batch {micro_batch} x {context} tokens, "
              f"{activation_dtype} (each direction: activations forward, gradients back)",
              "  before-layer  tensors  bytes/micro-batch"]
    for layer, tensors, nbytes in pipeline_boundaries(config, stages, micro_batch, context, act):
        lines.append(f"  {layer:>12}  {tensors:>7}  {nbytes:>17,}  ({size_text(nbytes)})")
    return "\n".join(lines)


def plan_memory(spec: str, batch: int, context: int, stages: int, micro_batch: int, activation_dtype: str) -> int:
    """The plan of the config `spec` (a file, a folder or a preset) printed; a config that cannot be read, or more
    stages than it has layers, is one line, exit 1 (`attnres plan-memory` checks its flags first: cli/plan_memory)."""
    try:
        config, name = load_plan_config(spec)
        plan = format_plan(config, name, batch, context, stages, micro_batch, activation_dtype)
    except ValueError as error:  # ConversionError is one; more stages than layers is another
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(plan)
    return 0

"""Plan a conversion from headers alone: which tensors the input must hold (names, shapes, dtypes), which the output
will hold, grouped into units (one decoder layer, or one other tensor) that convert independently. Every check runs
here, on meta tensors, before a byte is read or written."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...families.kimi_linear.configuration_kimi_linear_attnres import KimiLinearAttnResConfig
from ...families.kimi_linear.conversion_mapping import convert_tensors
from ...families.upcycle import BLOCK_SIZE_MODES, UpcycleError, is_attn_res_tensor, upcycled_family_config
from ..errors import ConversionError
from .config import parse_config, read_config_dict
from .k3_source import K3SourceReader
from .reader import SUPPORTED_DTYPES, CheckpointReader

LAYOUTS = ("hf", "moonshot")
# Names only Moonshot's layout has: per-expert w1/w2/w3 under block_sparse_moe, split q/k/v convolutions, the forget
# gate's tensors directly on self_attn
_MOONSHOT_ONLY = re.compile(r"\.block_sparse_moe\.|\.[qkv]_conv1d\.|self_attn\.(f_a_proj|f_b_proj|A_log|dt_bias)")
_LAYER = re.compile(r"^(model\.layers\.\d+)\.")


def detect_layout(names) -> str:
    return "moonshot" if any(_MOONSHOT_ONLY.search(name) for name in names) else "hf"


def unit_of(name: str) -> str:
    """A decoder layer converts as one unit (its experts and convolutions merge); any other tensor on its own."""
    match = _LAYER.match(name)
    return match.group(1) if match else name


def expected_tensors(config: KimiLinearAttnResConfig, layout: str) -> dict[str, torch.Tensor]:
    """The meta tensors of a checkpoint of `config` in `layout`, in the model's order."""
    from ...families.kimi_linear.modeling_kimi_linear_attnres import KimiLinearAttnResForCausalLM

    with torch.device("meta"):
        state = dict(KimiLinearAttnResForCausalLM(config).state_dict())
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return convert_tensors(state, config, "moonshot") if layout == "moonshot" else state


@dataclass
class Unit:
    name: str
    source_names: list[str] = field(default_factory=list)
    target_names: list[str] = field(default_factory=list)


@dataclass
class ConversionPlan:
    input: Path
    reader: CheckpointReader
    source_layout: str
    target_layout: str
    source_config: KimiLinearAttnResConfig
    target_config: KimiLinearAttnResConfig
    target: dict[str, torch.Tensor]  # meta tensors of the output, in order
    units: list[Unit]

    @property
    def total_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.target.values())


def plan_conversion(
    input: str | Path, to: str = "hf", upcycle: str | None = None, block_size: int | None = None
) -> ConversionPlan:
    """Raise one ConversionError listing every problem (names, shapes, dtypes, config) or return the plan."""
    if to not in LAYOUTS:
        raise ConversionError(f"--to must be one of {LAYOUTS}, got {to!r}")
    if block_size is not None and upcycle not in BLOCK_SIZE_MODES:
        raise ConversionError(f"--block-size applies with --upcycle {' or '.join(BLOCK_SIZE_MODES)} only (it sets "
                              "the new block size)")
    input = Path(input)
    source_config = parse_config(read_config_dict(input))
    reader = K3SourceReader(input, source_config)  # a Kimi Linear folder reads as plain; K3's MXFP4 experts dequantized
    source_layout = detect_layout(reader.tensors)
    target_config = upcycled_config(source_config, upcycle, block_size) if upcycle else source_config
    check_tensors(reader, expected_tensors(source_config, source_layout), source_layout)
    target = expected_tensors(target_config, to)
    # Output tensors keep the input's dtypes, tensor by tensor (a checkpoint may mix them); nothing is cast
    source_dtypes = {name: SUPPORTED_DTYPES[info.dtype] for name, info in reader.tensors.items()}
    target = _with_dtypes(target, source_dtypes, source_layout, to, target_config)
    units: dict[str, Unit] = {}
    for name in target:
        units.setdefault(unit_of(name), Unit(unit_of(name))).target_names.append(name)
    for name in reader.tensors:
        units[unit_of(name)].source_names.append(name)
    return ConversionPlan(input, reader, source_layout, to, source_config, target_config, target, list(units.values()))


def upcycled_config(config: KimiLinearAttnResConfig, mode: str, block_size: int | None = None):
    """The upcycled Kimi Linear config, from the one builder of every family's (`upcycled_family_config`)."""
    if config.attn_res_mode != "standard":
        raise ConversionError("--upcycle needs a standard-residual checkpoint, "
                              f"but config.json has attn_res_mode={config.attn_res_mode!r}")
    try:
        return upcycled_family_config(config, mode, block_size, family="kimi_linear")[0]
    except UpcycleError as error:
        raise ConversionError(str(error)) from None


def check_tensors(reader: CheckpointReader, expected: dict[str, torch.Tensor], layout: str) -> None:
    found = reader.tensors
    problems = [
        f"{name}: dtype {info.dtype} is not supported (expected one of {sorted(SUPPORTED_DTYPES)}; quantized or "
        "packed weights, e.g. 4-bit experts, must be dequantized first)"
        for name, info in found.items()
        if info.dtype not in SUPPORTED_DTYPES
    ]
    problems += [
        f"{name}: missing (expected shape {list(tensor.shape)})"
        for name, tensor in expected.items()
        if name not in found
    ]
    problems += [
        f"{name}: unexpected tensor (not part of this config's model)" for name in found if name not in expected
    ]
    problems += [
        f"{name}: shape {list(found[name].shape)}, expected {list(tensor.shape)}"
        for name, tensor in expected.items()
        if name in found and tuple(found[name].shape) != tuple(tensor.shape)
    ]
    if problems:
        raise ConversionError.from_problems(
            problems, f"{reader.folder} ({layout} layout) does not match its config.json"
        )


def _with_dtypes(target, source_dtypes, source_layout, to, config) -> dict[str, torch.Tensor]:
    """Meta output tensors carrying the dtypes the conversion will produce (it never casts)."""
    source = expected_tensors(config, source_layout) if source_layout != to else dict(target)
    source = {
        name: t.to(source_dtypes[name] if name in source_dtypes else _new_tensor_dtype(name, source_dtypes))
        for name, t in source.items()
    }
    return convert_tensors(source, config, to) if source_layout != to else source


def _new_tensor_dtype(name: str, source_dtypes: dict[str, torch.dtype]) -> torch.dtype:
    """Upcycled AttnRes tensors follow their nearest kin: norm gains the final norm, queries the embedding."""
    if not is_attn_res_tensor(name):
        raise KeyError(name)
    kin = "model.norm.weight" if name.endswith("_res_norm.weight") else "model.embed_tokens.weight"
    return source_dtypes.get(kin, torch.float32)

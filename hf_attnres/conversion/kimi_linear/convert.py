"""Run a planned conversion: stream unit by unit into a temporary folder, optionally verify, then rename into place."""
from __future__ import annotations

import shutil
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ...families.kimi_linear.conversion_mapping import convert_tensors
from ...families.kimi_linear.modeling_kimi_linear_attnres import KimiLinearAttnResForCausalLM
from ...families.upcycle import new_attn_res_tensor
from ...folders.checkpoint_files import INDEX_NAME
from ...folders.remote_code import auto_map, write_code_files
from ...folders.saved_model import RECORD_FILE, write_weights_record
from ..args import DEFAULT_MAX_SHARD_SIZE
from ..atomic import move_into_place, output_folder
from ..errors import ConversionError
from ..guards import check_max_shard_size, check_output
from .config import hf_config_dict, moonshot_config_dict, parse_config, read_config_dict, write_config
from .plan import ConversionPlan, Unit, plan_conversion
from .reader import CheckpointReader
from .writer import ShardedWriter

# Model code of either layout does not describe the other; tokenizer files and code travel with the weights
_NOT_COPIED = ("config.json", INDEX_NAME, RECORD_FILE)
_MODEL_CODE_PREFIXES = ("modeling_", "configuration_")


def convert_checkpoint(
    input: str | Path,
    output: str | Path,
    to: str = "hf",
    upcycle: str | None = None,
    block_size: int | None = None,
    force: bool = False,
    verify: bool = False,
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    progress: bool = True,
) -> ConversionPlan:
    """Convert `input` into `output` (HF-native with `to="hf"`, Moonshot's layout with `to="moonshot"`).

    All checks run first; on any error nothing is written. The output appears all at once, by rename.
    """
    input = Path(input).resolve()
    output = check_output(output, force, inputs=[input])
    check_max_shard_size(max_shard_size)
    plan = plan_conversion(input, to=to, upcycle=upcycle, block_size=block_size)
    with output_folder(output) as folder:
        writer = ShardedWriter(folder, plan.target, max_shard_size)
        for unit in tqdm(plan.units, desc=f"converting to {to}", unit="unit", disable=not progress):
            for name, tensor in convert_unit(plan, unit).items():
                writer.add(name, tensor)
        writer.finish()
        config_dict = hf_config_dict(plan.target_config) if to == "hf" else moonshot_config_dict(plan.target_config)
        if to == "hf":  # as a save_pretrained folder: loads with the Auto classes and trust_remote_code
            config_dict["auto_map"] = auto_map(KimiLinearAttnResForCausalLM.__module__)
        write_config(config_dict, folder)
        _copy_side_files(input, folder, code_too=plan.source_layout == to)
        write_weights_record(folder, plan.target_config)  # what these weights are, checked by from_pretrained
        if to == "hf":
            write_code_files(folder, KimiLinearAttnResForCausalLM.__module__)  # ours, current: replaces any copied code
        if verify:
            verify_conversion(plan, folder, progress)
        move_into_place(folder, output, replace=force)
    return plan


def convert_unit(plan: ConversionPlan, unit: Unit) -> dict[str, torch.Tensor]:
    """One unit's output tensors, in the planned order: read, convert, and add upcycled AttnRes tensors."""
    tensors = plan.reader.load(unit.source_names)
    if plan.source_layout != plan.target_layout:
        tensors = convert_tensors(tensors, plan.target_config, plan.target_layout)
    return {
        name: tensors[name] if name in tensors else new_attn_res_tensor(plan.target[name], name)
        for name in unit.target_names
    }


def verify_conversion(plan: ConversionPlan, folder: Path, progress: bool = True) -> None:
    """Re-read every written tensor and compare it bit for bit with a fresh conversion of the input; check the
    config."""
    written = CheckpointReader(folder)
    problems = [f"{name}: planned but not written" for name in plan.target if name not in written.tensors]
    problems += [f"{name}: written but not planned" for name in written.tensors if name not in plan.target]
    for unit in tqdm(plan.units, desc="verifying", unit="unit", disable=not progress):
        expected = convert_unit(plan, unit)
        actual = written.load([name for name in unit.target_names if name in written.tensors])
        problems += [
            f"{name}: written tensor differs from the converted input" for name, tensor in actual.items()
            if not bitwise_equal(tensor, expected[name])
        ]
    if hf_config_dict(parse_config(read_config_dict(folder))) != hf_config_dict(plan.target_config):
        problems.append(f"{folder / 'config.json'}: does not describe the planned model")
    if problems:
        raise ConversionError.from_problems(problems, "verification failed")


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bits (NaNs included, unlike torch.equal)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def _copy_side_files(input: Path, folder: Path, code_too: bool) -> None:
    """Tokenizer, generation config, README...: every top-level file that is not weights, index or config."""
    for path in input.iterdir():
        if not path.is_file() or path.name.startswith(".") or path.name in _NOT_COPIED:
            continue
        if path.suffix == ".safetensors" or (not code_too and path.name.startswith(_MODEL_CODE_PREFIXES)):
            continue
        shutil.copy2(path, folder / path.name)

"""`attnres convert IN OUT --upcycle block|full` for a checkpoint of any supported family: a model folder
(config.json + weights) or a GGUF file that transformers reads (dequantized on load). The same path as the Python
call `attnres.upcycle(model)`: the folder is loaded with transformers' Auto classes, upcycled, and saved with its
tokenizer, all at once by rename. Kimi Linear folders keep the streaming converter (`attnres.conversion.convert`).

Every check runs before the weights are read: the output (exists without --force, inside the input), the flags, and
the family (an unsupported or already-AttnRes checkpoint is refused by name, with the reason).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from ..families.registry import source_family, source_family_of
from ..families.upcycle import UPCYCLE_MODES, UpcycleError, is_attn_res_tensor, resolve_block_size, upcycle
from ..folders.checkpoint_files import CheckpointFileError, read_json_file
from ..folders.saved_model import write_weights_record
from ..utils import finite_weights
from .atomic import check_output, move_into_place, output_folder
from .errors import ConversionError

# Kimi Linear's own model types: converted tensor by tensor (Moonshot's layout, K3's MXFP4 experts)
KIMI_MODEL_TYPES = ("kimi_linear", "kimi_linear_attnres", "kimi_k3")
logger = logging.getLogger(__name__)


@dataclass
class FamilyConversion:
    source_type: str
    target_type: str
    mode: str
    block_size: int
    tensors: int
    bytes: int


def is_family_input(input: Path) -> bool:
    """Whether `input` goes through this path: a GGUF file, or a folder whose config.json is not Kimi Linear's."""
    input = Path(input)
    if input.suffix == ".gguf":
        return True
    if not (input / "config.json").is_file():
        return False  # the Kimi converter names the missing file, after the checks every convert makes
    try:
        model_type = read_json_file(input / "config.json", "model config").get("model_type")
    except CheckpointFileError:
        return False  # the Kimi converter names the missing or damaged file
    # no model_type: the Kimi converter's checks name it (config.json must say which model it is)
    return model_type is not None and model_type not in KIMI_MODEL_TYPES


def _location(input: Path) -> tuple[Path, str | None]:
    """(folder, GGUF file name or None)."""
    if input.suffix == ".gguf":
        if not input.is_file():
            raise ConversionError(f"{input}: not found (a GGUF file)")
        return input.parent, input.name
    return input, None


def _load_config(folder: Path, gguf_file: str | None):
    from transformers import AutoConfig

    if gguf_file is None:  # refuse an unsupported family by its model_type before transformers tries to read it
        try:
            fields = read_json_file(folder / "config.json", "model config")
            source_family_of(fields.get("model_type"), fields.get("attn_res_mode", "standard"))
        except (CheckpointFileError, ValueError) as error:
            raise ConversionError(str(error)) from None
    try:
        return AutoConfig.from_pretrained(folder, gguf_file=gguf_file)
    except (OSError, ValueError, KeyError, ImportError) as error:
        where = folder / gguf_file if gguf_file else folder / "config.json"
        raise ConversionError(f"{where}: transformers cannot read it ({type(error).__name__}: {error})") from None


def _family(config) -> str:
    try:
        return source_family(config)
    except ValueError as error:
        raise ConversionError(str(error)) from None


def convert_family(input, output, upcycle_mode: str | None, block_size: int | None = None, to: str = "hf",
                   force: bool = False, verify: bool = False, max_shard_size="5GB") -> FamilyConversion:
    """Upcycle the checkpoint at `input` (folder or .gguf) into the model folder `output`; nothing written on error."""
    input = Path(input).resolve()
    if upcycle_mode is None:
        raise ConversionError(f"{input}: a checkpoint of this family converts only with --upcycle "
                              f"{'|'.join(UPCYCLE_MODES)} (the hf / moonshot layouts are Kimi Linear's)")
    if to != "hf":
        raise ConversionError("--to moonshot is Kimi Linear's layout; other families are written as model folders")
    output = check_output(output, force, inputs=[input])
    folder, gguf_file = _location(input)
    config = _load_config(folder, gguf_file)
    _family(config)  # standard-mode AttnRes configs pass; block / full ones are refused here
    try:
        resolve_block_size(upcycle_mode, block_size, config.num_hidden_layers)  # flags checked before the weights
        from transformers import AutoModelForCausalLM, AutoTokenizer

        source = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype="auto")
        for name, tensor in source.state_dict().items():  # the numeric guard: a NaN weight is named, never written
            finite_weights.check_tensor(name, tensor, input)
        target = upcycle(source, upcycle_mode, block_size)
    except (UpcycleError, finite_weights.NonFiniteWeightsError) as error:
        raise ConversionError(str(error)) from None
    del source
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    except Exception as error:  # noqa: BLE001  a folder without a tokenizer is still a model
        logger.warning("no tokenizer saved: %s cannot be read as one (%s)", input, type(error).__name__)
        tokenizer = None
    with output_folder(output) as building:
        target.save_pretrained(building, max_shard_size=max_shard_size)
        write_weights_record(building, target.config)
        if tokenizer is not None:
            tokenizer.save_pretrained(building)
        if verify:
            verify_saved(target, building)
        move_into_place(building, output, replace=force)
    state = target.state_dict()
    return FamilyConversion(
        source_type=config.model_type, target_type=target.config.model_type, mode=upcycle_mode,
        block_size=target.config.attn_res_block_size, tensors=len(state),
        bytes=sum(t.numel() * t.element_size() for t in state.values()),
    )


def verify_saved(model, folder: Path) -> None:
    """Every tensor written equals the model's, bit for bit (tied copies are written once)."""
    from safetensors.torch import load_file

    state = model.state_dict()
    written = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        written.update(load_file(path))
    problems = [f"{name}: not written" for name in state if name not in written and not _tied(model, name)]
    problems += [f"{name}: differs from the upcycled model" for name, tensor in written.items()
                 if name not in state or not torch.equal(tensor, state[name])]
    attn_res = [name for name in written if is_attn_res_tensor(name)]
    if not attn_res:
        problems.append("no AttnRes tensor written")
    if problems:
        raise ConversionError.from_problems(problems, f"--verify: {folder}")


def _tied(model, name: str) -> bool:
    return name == "lm_head.weight" and getattr(model.config, "tie_word_embeddings", False)


__all__ = ["convert_family", "is_family_input", "FamilyConversion", "KIMI_MODEL_TYPES"]

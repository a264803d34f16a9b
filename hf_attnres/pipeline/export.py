"""Save a pipeline-trained model as a Hugging Face folder: one safetensors shard per stage plus the index.

Every stage writes only its own tensors (nothing is gathered on one rank), in the checkpoint format `save_pretrained`
writes (transformers' `revert_weight_conversion` on the stage's tensors: a stage holds whole layers, so every conversion
finds all its inputs); rank 0 then writes the index and the config.
The result loads with the family's `<Family>AttnResForCausalLM.from_pretrained(folder)` like any sharded checkpoint,
and, as a
`save_pretrained` folder does, with the Auto classes and `trust_remote_code=True` (the code files, `auto_map`, the
tokenizer when there is one). Each file is written to a temporary name and renamed, so an interrupted save never
leaves a half-written file under a final name.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch.distributed as dist
from safetensors.torch import save_file
from transformers.core_model_loading import revert_weight_conversion
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME

from ..folders.atomic_io import atomic_write, write_json_atomic
from ..folders.remote_code import mark_remote_code, write_code_files
from ..folders.saved_model import write_weights_record
from .stages import local_model_state_dict, meta_model


def shard_name(stage: int, num_stages: int) -> str:
    return f"model-{stage + 1:05d}-of-{num_stages:05d}.safetensors"


def save_tokenizer(tokenizer, folder: Path) -> None:
    """`tokenizer.save_pretrained` into a temporary sibling, then each file renamed into `folder`."""
    with tempfile.TemporaryDirectory(dir=folder, prefix=".tokenizer-") as tmp:
        for path in tokenizer.save_pretrained(tmp):
            if Path(path).is_file():
                os.replace(path, folder / Path(path).name)


def save_pipeline_checkpoint(pipe, config, folder: str | Path, stage: int, num_stages: int,
                             is_data_rank0: bool, tokenizer=None) -> None:
    """Collective over the pipeline: call on every rank. Only data-parallel replica 0 of each stage writes.
    `tokenizer`: saved beside the weights (the folder then loads with AutoTokenizer too)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    skeleton = meta_model(config)  # the family's model: its checkpoint format and its code files
    tensors = {name: t.detach().to("cpu") for name, t in local_model_state_dict(pipe).items()}
    tensors = {name: t.contiguous() for name, t in revert_weight_conversion(skeleton, tensors).items()}
    held = [None] * dist.get_world_size()
    dist.all_gather_object(held, (stage, sorted(tensors)))
    # a tensor several stages hold (a tied embedding's copies) is written once, by the first of them
    earlier = {name for other, names in held if other < stage for name in names}
    tensors = {name: tensor for name, tensor in tensors.items() if name not in earlier}
    shard = shard_name(stage, num_stages)
    if is_data_rank0:
        atomic_write(folder / shard, lambda p: save_file(tensors, str(p), metadata={"format": "pt"}))
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    mine = {"file": shard, "names": sorted(tensors), "bytes": size} if is_data_rank0 else None
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, mine)
    if dist.get_rank() == 0:
        parts = [part for part in parts if part is not None]
        weight_map = {name: part["file"] for part in parts for name in part["names"]}
        index = {"metadata": {"total_size": sum(part["bytes"] for part in parts)},
                 "weight_map": dict(sorted(weight_map.items()))}
        write_json_atomic(folder / SAFE_WEIGHTS_INDEX_NAME, index)
        if tokenizer is not None:
            save_tokenizer(tokenizer, folder)
        mark_remote_code(config, type(skeleton).__module__)
        atomic_write(folder / "config.json", lambda p: config.to_json_file(p))
        write_code_files(folder, type(skeleton).__module__)  # after config.json: the code ships what it uses
    dist.barrier()
    if dist.get_rank() == 0:  # every shard is on disk now: record what the weights are (checked by from_pretrained)
        write_weights_record(folder, config)


__all__ = ["save_pipeline_checkpoint", "shard_name"]

"""Write converted tensors as sharded safetensors + index while they stream in, one shard in memory at a time."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from huggingface_hub import split_torch_state_dict_into_shards
from safetensors.torch import save_file

from ...folders.checkpoint_files import INDEX_NAME


class ShardedWriter:
    """Shards are planned up front by huggingface_hub from the (meta) output tensors, in the order they will arrive,
    so each shard is written and freed as soon as its last tensor comes in."""

    def __init__(self, folder: Path, planned: dict[str, torch.Tensor], max_shard_size: int | str):
        self.folder = Path(folder)
        self.split = split_torch_state_dict_into_shards(planned, max_shard_size=max_shard_size)
        self.buffers: dict[str, dict[str, torch.Tensor]] = {}
        self.written: list[str] = []

    def add(self, name: str, tensor: torch.Tensor) -> None:
        file = self.split.tensor_to_filename[name]
        buffer = self.buffers.setdefault(file, {})
        buffer[name] = tensor
        if len(buffer) == len(self.split.filename_to_tensors[file]):
            save_file(self.buffers.pop(file), self.folder / file, metadata={"format": "pt"})
            self.written.append(file)

    def finish(self) -> list[str]:
        """Write the index (when sharded); every planned tensor must have arrived."""
        if self.buffers:
            missing = {f: sorted(set(self.split.filename_to_tensors[f]) - set(b)) for f, b in self.buffers.items()}
            raise RuntimeError(f"conversion ended before these tensors were produced: {missing}")
        if self.split.is_sharded:
            index = {"metadata": self.split.metadata, "weight_map": self.split.tensor_to_filename}
            (self.folder / INDEX_NAME).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        return self.written


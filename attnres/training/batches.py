"""The prepared dataset on the training side, and which sequences every rank reads at every step.

The batch plan is a pure function of (seed, step, micro-step, rank): resuming at step k reads exactly the sequences
the uninterrupted run would have read, with no data-loader state to save, and a global batch is the same set of
sequences whatever the number of processes (the ranks read consecutive slices of it).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from .packing import DATASET_DIR, META_FILE, TOKENIZER_DIR


def check_prepared(data_dir: Path) -> dict:
    """meta.json of a prepared dataset folder, or a clear error before any work starts."""
    data_dir = Path(data_dir)
    meta_file = data_dir / META_FILE
    if not meta_file.is_file() or not (data_dir / DATASET_DIR).is_dir():
        raise FileNotFoundError(
            f"--data {data_dir}: no prepared dataset there (missing {META_FILE} or {DATASET_DIR}/). "
            f"Run `python scripts/prepare_data.py --output-dir {data_dir}` first."
        )
    return json.loads(meta_file.read_text())


def load_prepared(data_dir: Path):
    """(train, validation) as torch-formatted `datasets` splits, and the tokenizer saved beside them."""
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    splits = load_from_disk(str(Path(data_dir) / DATASET_DIR)).with_format("torch")
    from .tokenizer import with_pad_token

    tokenizer = AutoTokenizer.from_pretrained(str(Path(data_dir) / TOKENIZER_DIR))
    return splits["train"], splits["validation"], with_pad_token(tokenizer)  # data prepared before pad = EOS


@dataclass(frozen=True)
class BatchPlan:
    """Global batch = micro_batch * grad_accum * world sequences per optimizer step, drawn epoch by epoch from a
    seeded permutation of the `num_sequences` training sequences."""

    num_sequences: int
    micro_batch: int
    grad_accum: int
    world_size: int
    seed: int

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.world_size

    def indices(self, step: int, micro_step: int, rank: int) -> torch.Tensor:
        """Dataset indices of rank `rank`'s micro-batch `micro_step` at optimizer step `step` (0-based)."""
        start = step * self.global_batch + (micro_step * self.world_size + rank) * self.micro_batch
        positions = torch.arange(start, start + self.micro_batch)
        return torch.stack([self._permutation(int(p) // self.num_sequences)[int(p) % self.num_sequences] for p in positions])

    @lru_cache(maxsize=4)
    def _permutation(self, epoch: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.num_sequences, generator=generator)


def batch_tensors(split, indices, seq_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, labels) of the rows `indices`, cut to `seq_len`. Labels are the inputs (the model shifts them), with
    -100 where instruction data's `loss_mask` is 0 (prompts: only assistant tokens are learned)."""
    rows = split[indices]
    ids = rows["input_ids"][:, :seq_len].to(device)
    if "loss_mask" not in rows:
        return ids, ids
    return ids, ids.masked_fill(rows["loss_mask"][:, :seq_len].to(device) == 0, -100)


def loss_normalizer(batches: list[tuple[torch.Tensor, torch.Tensor]], engine, grad_accum: int) -> dict:
    """Forward kwargs for a step's micro-batches (`batches`: their (input_ids, labels)). With a loss mask, micro-batches
    hold different numbers of target tokens: each one's summed loss is divided by its share of the step's global
    count (transformers' `num_items_in_batch`), so after the accumulation and data-parallel averages a step's loss and
    gradient are the token mean over the whole global batch, whatever the process count and accumulation. Without a
    mask every micro-batch has the same count: {} (the plain mean)."""
    if all(labels is ids for ids, labels in batches):
        return {}
    local = sum(int((labels[:, 1:] != -100).sum()) for _, labels in batches)  # the model predicts labels[:, 1:]
    share = engine.mean_tensor(torch.tensor(float(local))) / grad_accum
    return {"num_items_in_batch": torch.where(share > 0, share, torch.ones_like(share))}

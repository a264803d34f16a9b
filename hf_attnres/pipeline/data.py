"""Micro-batches for the pipeline engine: (input_ids, labels) pairs, the same on every stage of a replica.

DeepSpeed reads the iterator on the first stage (inputs) and on the last stage (labels); both must see the same
sequence of micro-batches, so a micro-batch is a pure function of (step, micro-step, data-parallel rank).
"""
from __future__ import annotations

from collections.abc import Iterator

import torch


def synthetic_micro_batch(seed: int, step: int, micro_step: int, dp_rank: int, micro_batch: int, seq_len: int,
                          vocab_size: int) -> torch.Tensor:
    """Random token ids [micro_batch, seq_len] for smoke runs and tests (no dataset needed)."""
    generator = torch.Generator().manual_seed(hash((seed, step, micro_step, dp_rank)) & 0x7FFFFFFF)
    return torch.randint(0, vocab_size, (micro_batch, seq_len), generator=generator)


def micro_batches(fetch, start_step: int, grad_accum: int, dp_rank: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless (input_ids, labels) from `fetch(step, micro_step, dp_rank) -> input_ids`; labels = inputs (the loss
    shifts them)."""
    step = start_step
    while True:
        for micro_step in range(grad_accum):
            ids = fetch(step, micro_step, dp_rank)
            yield ids, ids
        step += 1


__all__ = ["synthetic_micro_batch", "micro_batches"]

"""Repair of input-embedding rows frozen at zero by an embedding `padding_idx` (issue 9).

Models built before the fix (or Kimi Linear checkpoints, which pass `pad_token_id` as the padding index) keep the pad
token's embedding at exactly zero. When pad is a real token (pad = EOS in most BPE tokenizers), every position holding
it starts from a zero residual stream, and RMSNorm's backward at zero input scales by 1/sqrt(eps) per layer: a deep
model's gradients overflow. Before training such a model on data that contains the token, its row is re-initialised.
"""
from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)


def data_token_ids(dataset, column: str = "input_ids", chunk: int = 4096) -> torch.Tensor:
    """Sorted ids of the tokens that occur in `dataset[column]` (a torch-formatted `datasets` split or any sliceable
    of {column: LongTensor [n, seq]}), read in chunks of rows."""
    seen = torch.zeros(0, dtype=torch.bool)
    for start in range(0, len(dataset), chunk):
        ids = torch.as_tensor(dataset[start : start + chunk][column]).flatten()
        if ids.numel() == 0:
            continue
        if int(ids.max()) >= len(seen):
            seen = torch.cat([seen, seen.new_zeros(int(ids.max()) + 1 - len(seen))])
        seen[ids] = True
    return seen.nonzero().flatten()


@torch.no_grad()
def reinit_zero_embedding_rows(model, token_ids: torch.Tensor, seed: int = 0, log=logger.warning) -> list[int]:
    """Re-initialise the input-embedding rows of `token_ids` that are exactly zero; returns the repaired ids.

    New rows are Gaussian at the median RMS of the used non-zero rows (the init std when there are none), drawn from a
    generator seeded by `seed`: every process of a distributed run repairs identically. `log` gets one note per call
    that repairs anything. The embedding must be materialised (call before ZeRO-3 partitions it).
    """
    weight = model.get_input_embeddings().weight
    token_ids = torch.as_tensor(token_ids, dtype=torch.long).flatten()
    token_ids = token_ids[(token_ids >= 0) & (token_ids < weight.shape[0])]
    rows = weight[token_ids]
    zero = (rows == 0).all(dim=-1)
    if not zero.any():
        return []
    repaired = token_ids[zero]
    rms = rows[~zero].float().pow(2).mean(-1).sqrt()
    std = float(rms.median()) if rms.numel() else float(model.config.initializer_range)
    generator = torch.Generator().manual_seed(seed)
    fresh = torch.randn(len(repaired), weight.shape[1], generator=generator) * std
    weight[repaired.to(weight.device)] = fresh.to(weight.device, weight.dtype)
    ids = repaired.tolist()
    log(f"re-initialised {len(ids)} all-zero input-embedding row(s) of tokens that occur in the data (ids "
        f"{ids[:10]}{' ...' if len(ids) > 10 else ''}, std {std:.3g}): a zero row (an embedding padding_idx, as in "
        f"models trained before the fix of issue 9) makes deep models' gradients overflow")
    return ids

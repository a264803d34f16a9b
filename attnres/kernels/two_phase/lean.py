"""Phase 1 of the two-phase schedule in plain PyTorch (the path off CUDA): a depth bank grown one source at a time.

The bank of block b is the embedding plus the b completed block sums, and it only ever grows by one source per block.
`DepthBank` keeps it token-major in one preallocated fp32 buffer [tokens, capacity, d]: each source is copied in once
(with its query-independent key statistic rsqrt(mean(v^2) + eps), also computed once), and Phase 1 of a block is then
two batched matmuls over the filled part of the buffer, a view, for all the block's queries at once:
    scores [T, n, Q] = rstd * (bank @ w^T),   out [T, Q, d] = softmax_n(scores)^T @ bank
No stack of the sources at any mix point; the bank costs one copy of each source per forward.
Phase 2 (the online-softmax merge with the running partial sum) is elementwise: `naive.phase2_naive` is that path.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from attnres.core.depth_layout import DepthBank


def phase1_lean(
    bank: Sequence[torch.Tensor], queries: torch.Tensor, norm_weights: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`phase1_naive`'s contract for a one-off bank (the schedule keeps a `DepthBank` across blocks instead)."""
    depth_bank = DepthBank(len(bank), eps)
    depth_bank.extend(bank)
    return depth_bank.phase1(queries, norm_weights)

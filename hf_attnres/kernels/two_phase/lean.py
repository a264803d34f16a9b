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


class DepthBank:
    """Token-major fp32 copy of the completed depth sources, grown in place; `capacity`: the most sources it holds."""

    def __init__(self, capacity: int, eps: float):
        self.capacity, self.eps = capacity, eps
        self.values = self.rstd = None
        self.shape = None
        self.size = 0

    def extend(self, bank: Sequence[torch.Tensor]) -> None:
        """Append the sources of `bank` beyond those already held (`bank` starts with what the bank already holds)."""
        if self.values is None:
            self.shape = bank[0].shape
            tokens, hidden = bank[0].numel() // self.shape[-1], self.shape[-1]
            self.values = bank[0].new_empty(tokens, self.capacity, hidden, dtype=torch.float32)
            self.rstd = bank[0].new_empty(tokens, self.capacity, 1, dtype=torch.float32)
        if len(bank) > self.capacity:
            raise ValueError(f"depth bank holds {self.capacity} sources, got {len(bank)}")
        for j in range(self.size, len(bank)):
            slot = self.values[:, j]
            slot.copy_(bank[j].reshape(slot.shape))
            self.rstd[:, j] = torch.rsqrt(slot.pow(2).mean(-1, keepdim=True) + self.eps)
        self.size = max(self.size, len(bank))

    def phase1(self, queries: torch.Tensor, norm_weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Bank-only mixes of Q queries ([Q, d]): (out fp32 [Q, ..., d], lse fp32 [Q, ...]), as `phase1_naive`."""
        values = self.values[:, : self.size]  # [T, n, d], a view of the buffer
        w = (queries * norm_weights).float()  # [Q, d]
        scores = self.rstd[:, : self.size] * (values @ w.T)  # [T, n, Q]
        lse = scores.logsumexp(dim=1)  # [T, Q]
        probs = torch.exp(scores - lse.unsqueeze(1))
        out = probs.transpose(1, 2) @ values  # [T, Q, d]
        queries_first = (queries.shape[0], *self.shape)
        return out.transpose(0, 1).reshape(queries_first), lse.T.reshape(queries_first[:-1])


def phase1_lean(
    bank: Sequence[torch.Tensor], queries: torch.Tensor, norm_weights: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`phase1_naive`'s contract for a one-off bank (the schedule keeps a `DepthBank` across blocks instead)."""
    depth_bank = DepthBank(len(bank), eps)
    depth_bank.extend(bank)
    return depth_bank.phase1(queries, norm_weights)

"""Reference two-phase inference schedule (paper section 4), plain PyTorch.

The pseudo-queries do not depend on the input, so the mixes of a whole block can be split exactly:
- Phase 1, once per block: every query of the block against the completed blocks (the *bank*), reading the bank once:
  the bank-only softmax mix `out_q` (fp32) and its log-sum-exp `lse_q`.
- Phase 2, per sub-layer: merge `(out_q, lse_q)` with the block's running partial sum by online softmax,
      lse = logaddexp(lse_q, s_partial),  mix = out_q * exp(lse_q - lse) + partial * exp(s_partial - lse)
  which equals the softmax over bank + [partial] (up to fp32 rounding).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def source_scores(values: torch.Tensor, weights: torch.Tensor, eps: float) -> torch.Tensor:
    """score = rsqrt(mean(v^2) + eps) * (v . w): the RMS-normalised key against `weights` (= norm gain * query)."""
    rstd = torch.rsqrt(values.pow(2).mean(-1) + eps)
    return rstd * (values @ weights.T).movedim(-1, 0) if weights.dim() == 2 else rstd * (values @ weights)


def phase1_naive(
    bank: Sequence[torch.Tensor], queries: torch.Tensor, norm_weights: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bank-only mixes of Q queries (rows of `queries`, [Q, d]). Returns (out fp32 [Q, ..., d], lse fp32 [Q, ...])."""
    values = torch.stack(tuple(bank)).float()  # [n, ..., d]
    scores = source_scores(values, (queries * norm_weights).float(), eps)  # [Q, n, ...]
    lse = scores.logsumexp(dim=1)
    probs = torch.exp(scores - lse.unsqueeze(1))
    out = torch.einsum("qn...,n...d->q...d", probs, values)
    return out, lse


def phase2_naive(
    bank_out: torch.Tensor,
    bank_lse: torch.Tensor,
    partial: torch.Tensor | None,
    query: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    dtype: torch.dtype,
) -> torch.Tensor:
    """One sub-layer's mix over bank + [partial], from its Phase-1 result. No partial: the bank-only mix."""
    if partial is None:
        return bank_out.to(dtype)
    values = partial.float()
    score = source_scores(values, (query * norm_weight).float(), eps)
    lse = torch.logaddexp(bank_lse, score)
    mixed = bank_out * torch.exp(bank_lse - lse).unsqueeze(-1) + values * torch.exp(score - lse).unsqueeze(-1)
    return mixed.to(dtype)

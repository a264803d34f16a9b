"""The paper's ablations of the depth mix (section 5.3), in plain PyTorch: a reference op, no fused kernel.

The default mix (`naive.attn_res_naive`, K3's numerics) is softmax over RMS-normalised keys scored by a learned
pseudo-query. Each ablation changes one piece:

- static mixing (DenseFormer-style): the scores are learned logits, one per source, the same for every token
  (input-independent); softmax over them.
- sigmoid scores: p_i = sigmoid(score_i), each source gated on its own, NOT normalised over the sources (the paper's
  point is softmax's competition between sources; sigmoid removes it). Every mix is read by an RMSNorm, so only the
  ratios between the gates matter, not their sum.
- no key norm: score_i = <v_i, query>, the raw source (no RMSNorm and so no gain on the keys).

The values are always the raw sources, mixed in fp32 and returned in their dtype, as in the default mix.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def depth_scores(values: torch.Tensor, query, norm_weight, eps: float, logits) -> torch.Tensor:
    """Scores [n, ...] of fp32 sources [n, ..., d]: static `logits` [n], or pseudo-query `query` [d] against the keys
    (RMS-normalised with gain `norm_weight` [d], or raw when `norm_weight` is None)."""
    if logits is not None:
        return logits.float().view(-1, *([1] * (values.dim() - 2))).expand(values.shape[:-1])
    if norm_weight is None:
        return (values * query.float()).sum(-1)
    keys = values * torch.rsqrt(values.pow(2).mean(-1, keepdim=True) + eps)
    return (keys * (norm_weight * query).float()).sum(-1)


def attn_res_variant(
    sources: Sequence[torch.Tensor] | torch.Tensor,
    query: torch.Tensor | None = None,
    norm_weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    logits: torch.Tensor | None = None,
    score: str = "softmax",
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """An ablated depth mix. `logits` given: static mixing (query and norm unused); else `query` scores the keys,
    normalised by `norm_weight`/`eps` unless `norm_weight` is None. `score`: "softmax" or "sigmoid" (see above).

    Returns the mix [..., d] in the sources' dtype, and the fp32 weights [..., n] (sources last) when asked.
    """
    if score not in ("softmax", "sigmoid"):
        raise ValueError(f"score must be 'softmax' or 'sigmoid', got {score!r}")
    if logits is None and query is None:
        raise ValueError("attn_res_variant needs either static logits or a pseudo-query")
    stacked = sources if isinstance(sources, torch.Tensor) else torch.stack(tuple(sources))
    values = stacked.float()
    if logits is not None and logits.shape != (values.shape[0],):
        raise ValueError(f"static logits must have one entry per source ({values.shape[0]}), got {tuple(logits.shape)}")
    scores = depth_scores(values, query, norm_weight, eps, logits)
    probs = scores.softmax(dim=0) if score == "softmax" else scores.sigmoid()
    mixed = (probs.unsqueeze(-1) * values).sum(0).to(stacked.dtype)
    if return_weights:
        return mixed, probs.movedim(0, -1)
    return mixed


__all__ = ["attn_res_variant", "depth_scores"]

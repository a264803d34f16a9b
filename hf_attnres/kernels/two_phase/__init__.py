"""Two-phase inference schedule of the AttnRes mix (no gradient): Phase 1 per block, Phase 2 per sub-layer."""
from __future__ import annotations

from ..mix import rms_norm_naive, use_triton
from .lean import DepthBank, phase1_lean
from .naive import phase1_naive, phase2_naive


def phase1(bank, queries, norm_weights, eps, backend="auto"):
    """All Q queries ([Q, d]) of a block against the bank. Returns (bank-only mix fp32 [Q, ..., d], lse [Q, ...]).

    `bank`: the sources, or (PyTorch path) a `DepthBank` already holding them."""
    if isinstance(bank, DepthBank):
        return bank.phase1(queries, norm_weights)
    if use_triton(backend, bank[0]):
        from .triton import phase1_triton

        return phase1_triton(list(bank), queries, norm_weights, float(eps))
    return phase1_lean(bank, queries, norm_weights, eps)


def phase2(bank_out, bank_lse, partial, query, norm_weight, eps, dtype, backend="auto", out_norm=None):
    """Merge one query's Phase-1 result with the partial sum (None: none yet). `out_norm`: (weight, eps) of the
    following RMSNorm, then `norm(mix)` is returned (fused on Triton)."""
    if use_triton(backend, bank_out):
        from .triton import phase2_triton

        return phase2_triton(bank_out, bank_lse, partial, query, norm_weight, eps, dtype, norm2=out_norm)
    mixed = phase2_naive(bank_out, bank_lse, partial, query, norm_weight, eps, dtype)
    return mixed if out_norm is None else rms_norm_naive(mixed, *out_norm)


__all__ = ["phase1", "phase2", "phase1_naive", "phase2_naive", "phase1_lean", "DepthBank"]

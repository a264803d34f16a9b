"""Triton two-phase schedule: both phases are the fused mix kernel (`hf_attnres.kernels.mix.kernels.mix_fwd_kernel`).

Phase 1 launches it once for all Q queries of a block (adjacent programs are the Q queries of one row block, so the
bank is read once from memory); Phase 2 starts its online softmax from the Phase-1 state and folds in the partial sum,
with the following RMSNorm fused. Both are `torch.library` custom ops, so a compiled model keeps one graph.
"""
from __future__ import annotations

import torch

from ..mix.triton import OPS, mix_forward


@torch.library.custom_op(f"{OPS}::two_phase_bank", mutates_args=())
def phase1_triton(
    bank: list[torch.Tensor], queries: torch.Tensor, norm_weights: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(bank-only mix fp32 [Q, ..., d], lse fp32 [Q, ...]) of the Q rows of `queries` / `norm_weights`."""
    shape = bank[0].shape
    out, lse, _, _ = mix_forward(list(bank), queries, norm_weights, eps, out_dtype=torch.float32, store_lse=True)
    return out.view(len(queries), *shape), lse.view(len(queries), *shape[:-1])


@phase1_triton.register_fake
def _(bank, queries, norm_weights, eps):
    shape = (queries.shape[0], *bank[0].shape)
    return bank[0].new_empty(shape, dtype=torch.float32), bank[0].new_empty(shape[:-1], dtype=torch.float32)


@torch.library.custom_op(f"{OPS}::two_phase_merge", mutates_args=())
def phase2_merge(
    bank_out: torch.Tensor,
    bank_lse: torch.Tensor,
    partial: torch.Tensor | None,
    query: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    dtype: torch.dtype,
    norm2_weight: torch.Tensor | None,
    eps2: float,
) -> torch.Tensor:
    """The mix over bank + [partial] in `dtype`, or its RMSNorm (`norm2_weight`) when given."""
    shape = bank_out.shape
    out, _, _, normed = mix_forward(
        [partial] if partial is not None else [], query.reshape(1, -1), norm_weight.reshape(1, -1), eps,
        out_dtype=dtype, prior=(bank_out.reshape(1, -1, shape[-1]), bank_lse.reshape(1, -1)),
        norm2=(norm2_weight, eps2) if norm2_weight is not None else None, store_out=norm2_weight is None,
    )
    return (normed if norm2_weight is not None else out).view(shape)


@phase2_merge.register_fake
def _(bank_out, bank_lse, partial, query, norm_weight, eps, dtype, norm2_weight, eps2):
    if norm2_weight is not None:
        dtype = torch.promote_types(dtype, norm2_weight.dtype)
    return bank_out.new_empty(bank_out.shape, dtype=dtype)


def phase2_triton(bank_out, bank_lse, partial, query, norm_weight, eps, dtype, norm2=None):
    """`norm2`: (weight, eps) of the RMSNorm that follows, fused; then returns the normalised mix."""
    norm2_weight, eps2 = norm2 if norm2 is not None else (None, 0.0)
    return phase2_merge(bank_out, bank_lse, partial, query, norm_weight, float(eps), dtype, norm2_weight, float(eps2))

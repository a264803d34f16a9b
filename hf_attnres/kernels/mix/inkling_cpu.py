"""Inkling-2's depth mix (`inkling.attn_res_inkling_naive`) as one fused C++ CPU kernel, forward and backward.

Per token the kernel reads the bank's rows and the partial in place (no concatenated copy of the bank), computes
every row's RMS factor and all Q queries' scores in one pass, then mixes the cache-resident rows. Autograd saves the
inputs by reference plus fp32 statistics per token (rstd [n], probs and scores [Q, n]); the backward recomputes
g . out from them, so the fp32 [Q, d] output is not kept. The kernel is compiled into the same extension as
`cpu_fused` (one build, one cache entry); where that extension cannot be built, `fits` answers False.
"""
from __future__ import annotations

import torch

from .cpu_fused import PLAIN, load_extension


def fits(bank: torch.Tensor, partial: torch.Tensor, queries: torch.Tensor) -> bool:
    """Whether the kernel takes these inputs (see the C++ `inkling_fits`): plain contiguous CPU tensors, fp32 or bf16
    bank and partial, fp32 queries [Q, d], outside torch.compile's tracing."""
    if not partial.is_cpu or torch.compiler.is_compiling():
        return False
    if type(bank) not in PLAIN or type(partial) not in PLAIN or type(queries) not in PLAIN:
        return False
    extension = load_extension()
    return extension is not None and extension.inkling_fits(bank, partial, queries)


class FusedInklingMix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, queries, bank, partial, scale, eps, normed_values):
        out, probs, rstd, scores = load_extension().inkling_forward(bank, partial, queries, scale, eps, normed_values,
                                                                   True)
        ctx.save_for_backward(queries, bank, partial, probs, rstd, scores)
        ctx.scale, ctx.normed_values = scale, normed_values
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        queries, bank, partial, probs, rstd, scores = ctx.saved_tensors
        grad_q, grad_bank, grad_partial = load_extension().inkling_backward(
            bank, partial, queries, ctx.scale, ctx.normed_values, grad_out, probs, rstd, scores,
            ctx.needs_input_grad[1], ctx.needs_input_grad[2],
        )
        return grad_q if ctx.needs_input_grad[0] else None, grad_bank, grad_partial, None, None, None


def attn_res_inkling_cpu(bank, partial, queries, scale: float, eps: float = 1e-6, normed_values: bool = True):
    """`inkling.attn_res_inkling_naive`'s contract (fp32 [..., Q, d]) on the fused kernel, for fp32 queries [Q, d];
    the caller checks `fits` first."""
    if torch.is_grad_enabled() and (queries.requires_grad or bank.requires_grad or partial.requires_grad):
        return FusedInklingMix.apply(queries, bank, partial, float(scale), float(eps), bool(normed_values))
    return load_extension().inkling_forward(bank, partial, queries, float(scale), float(eps), bool(normed_values),
                                            False)[0]


__all__ = ["attn_res_inkling_cpu", "fits"]

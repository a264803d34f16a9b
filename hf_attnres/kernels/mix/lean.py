"""The AttnRes mix in plain PyTorch at kernel quality: the path of backend "torch" (and "auto" off CUDA).

Same semantics as `naive.attn_res_naive` (the reference), computed the way the Triton kernel does it:
    w   = norm_weight * query                       (in the parameters' dtype, as the reference)
    r_j = rsqrt(mean(v_j^2) + eps)                  per token and source, fp32
    s_j = r_j * (v_j . w)                           the RMS-normalised key against w, no normalised copy of v_j
    p   = softmax_j(s)                              fp32
    out = sum_j p_j v_j                             accumulated in fp32, cast to the sources' dtype

Each source is read where it lies (never stacked into one [n, ..., d] copy, never upcast as a whole bank). Autograd
saves the sources *by reference* (the model keeps them alive anyway) plus per-token fp32 statistics ([n, ...]: r, s, p);
the backward recomputes the mix from them. With `out_norm_weight` the RMSNorm that reads the mix is fused in, so neither
the mix nor its normalised copy is kept for the backward either. Memory saved per mix point: O(tokens * n) floats,
against O(tokens * n * hidden) for the reference.

Backward, per token (g = dLoss/d mix, fp32):
    ds_j = p_j * (g . v_j - g . out)                               the softmax backward (g . out = sum_j p_j g . v_j)
    dv_j = p_j g + ds_j * (r_j w - (s_j r_j^2 / d) v_j)
    dw   = sum_tokens sum_j ds_j r_j v_j
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def source_stats(sources: Sequence[torch.Tensor], w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per source and token: (r = rsqrt(mean(v^2) + eps), s = r * (v . w)), each fp32 [n, ...]."""
    norms, dots = [], []
    for source in sources:  # the two reads of each source; the per-token arithmetic below runs once for all sources
        values = source.float()
        # ||v||: one fused reduction, no [..., d] temporary (v.pow(2).mean(-1) writes one); same to fp32 rounding
        norms.append(torch.linalg.vector_norm(values, dim=-1))
        dots.append(values @ w)
    rstd = torch.rsqrt(torch.stack(norms).square() / w.shape[-1] + eps)
    return rstd, rstd * torch.stack(dots)


def weighted_sum(sources: Sequence[torch.Tensor], probs: torch.Tensor) -> torch.Tensor:
    """sum_j probs[j] * sources[j], fp32, one running accumulator (no [n, ..., d] product)."""
    acc = sources[0].float() * probs[0].unsqueeze(-1)
    for source, p in zip(sources[1:], probs[1:]):
        acc.addcmul_(source, p.unsqueeze(-1))  # in place on a tensor this function owns; fp32 whatever the source
    return acc


def rms_norm_forward(mixed: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' KimiLinearRMSNorm of the mix (model dtype): (unscaled normalised mix in its dtype, rstd fp32)."""
    values = mixed.float()
    rstd = torch.rsqrt(values.pow(2).mean(-1, keepdim=True) + eps)
    return (values * rstd).to(mixed.dtype), rstd


def rms_norm_backward(mixed, weight, eps, grad_out):
    """Gradients of `weight * rms_norm_forward(mixed)` w.r.t. the mix (fp32) and the gain."""
    normed, rstd = rms_norm_forward(mixed, weight, eps)
    grad_weight = (grad_out * normed).reshape(-1, mixed.shape[-1]).sum(0).to(weight.dtype)
    grad_normed = (grad_out * weight).to(mixed.dtype).float()  # autograd casts at each dtype boundary, as here
    x_hat = mixed.float() * rstd
    grad_mixed = rstd * (grad_normed - x_hat * (grad_normed * x_hat).mean(-1, keepdim=True))
    return grad_mixed.to(mixed.dtype).float(), grad_weight


# Up to this many values per source the forward stacks the sources (a copy smaller than ~32 KiB) and runs ~10 batched
# ops: at decode sizes the per-op overhead of the source-by-source loop (~8 ops per source) costs more than the copy.
# The choice depends on the shape only, never on grad mode, so training and inference forwards stay bit-identical.
SMALL_SOURCE_NUMEL = 8192


def lean_forward(query, norm_weight, out_norm_weight, eps, out_norm_eps, sources):
    """(out, probs [n, ...], rstd [n, ...], scores [n, ...]): the forward and the statistics its backward needs."""
    w = (norm_weight * query).float()
    if sources[0].numel() <= SMALL_SOURCE_NUMEL:
        values = torch.stack(sources).float()  # [n, ..., d], small: a temporary, never saved
        rstd = torch.rsqrt(values.pow(2).mean(-1) + eps)  # the reference's ops: fewest calls at this size
        scores = rstd * (values @ w)
        probs = scores.softmax(0)
        out = (probs.unsqueeze(-1) * values).sum(0).to(sources[0].dtype)
    else:
        rstd, scores = source_stats(sources, w, eps)
        probs = scores.softmax(0)
        out = weighted_sum(sources, probs).to(sources[0].dtype)
    if out_norm_weight is not None:
        out = out_norm_weight * rms_norm_forward(out, out_norm_weight, out_norm_eps)[0]
    return out, probs, rstd, scores


class LeanMix(torch.autograd.Function):
    """out = mix(sources) (or `out_norm_weight * rms_norm(mix)`), probs [n, ...]. Gradients of the sources, query, norm
    gain and the output norm's gain; the weights `probs` are a diagnostic output without gradient."""

    @staticmethod
    def forward(ctx, query, norm_weight, out_norm_weight, eps, out_norm_eps, *sources):
        out, probs, rstd, scores = lean_forward(query, norm_weight, out_norm_weight, eps, out_norm_eps, sources)
        ctx.save_for_backward(query, norm_weight, out_norm_weight, rstd, scores, probs, *sources)
        ctx.eps, ctx.out_norm_eps = eps, out_norm_eps
        ctx.mark_non_differentiable(probs)
        return out, probs

    @staticmethod
    def backward(ctx, grad_out, _grad_probs):
        query, norm_weight, out_norm_weight, rstd, scores, probs, *sources = ctx.saved_tensors
        w = (norm_weight * query).float()
        grad_out_norm = None
        if out_norm_weight is not None:
            mixed = weighted_sum(sources, probs).to(sources[0].dtype)  # recomputed: one read of the sources
            grad, grad_out_norm = rms_norm_backward(mixed, out_norm_weight, ctx.out_norm_eps, grad_out)
        else:
            grad = grad_out.float()
        grad_dot_v = torch.stack([(grad * source.float()).sum(-1) for source in sources])  # [n, ...]
        grad_scores = probs * (grad_dot_v - (probs * grad_dot_v).sum(0, keepdim=True))
        key_coef = grad_scores * rstd  # dLoss/ds_j * r_j
        value_coef = key_coef * scores * rstd / w.shape[-1]
        grad_w = torch.zeros_like(w)
        grad_sources = []
        for j, source in enumerate(sources):
            values = source.float()
            grad_w += key_coef[j].reshape(-1) @ values.reshape(-1, values.shape[-1])
            if not ctx.needs_input_grad[5 + j]:  # e.g. frozen embeddings: no gradient buffer for this source
                grad_sources.append(None)
                continue
            dv = values * -value_coef[j].unsqueeze(-1)  # one buffer, two in-place updates
            dv.addcmul_(grad, probs[j].unsqueeze(-1)).addcmul_(key_coef[j].unsqueeze(-1), w)
            grad_sources.append(dv.to(source.dtype))
        grad_w = grad_w.to(torch.promote_types(query.dtype, norm_weight.dtype))
        return grad_w * norm_weight, grad_w * query, grad_out_norm, None, None, *grad_sources


def attn_res_lean(
    sources: Sequence[torch.Tensor] | torch.Tensor,
    query: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    return_weights: bool = False,
    out_norm_weight: torch.Tensor | None = None,
    out_norm_eps: float = 1e-6,
):
    """`attn_res_naive`'s contract (plus the fused output RMSNorm of `hf_attnres.kernels.attn_res`), lean in memory."""
    sources = tuple(sources.unbind(0)) if isinstance(sources, torch.Tensor) else tuple(sources)
    params = (query, norm_weight, out_norm_weight, eps, out_norm_eps)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (*sources, query, norm_weight,
                                                                                   out_norm_weight)):
        out, probs = LeanMix.apply(*params, *sources)
    else:  # inference: no autograd node (torch.compile also inlines the plain function more simply)
        out, probs = lean_forward(*params, sources)[:2]
    return (out, probs.movedim(0, -1)) if return_weights else out

"""The AttnRes mix in plain PyTorch at kernel quality, lean in memory: the path of backend "torch" (and "auto" off
CUDA) in the installed package. Its forward is `lean_ops.lean_forward` (the arithmetic, documented there).

Autograd saves the sources *by reference* (the model keeps them alive anyway) plus per-token fp32 statistics
([n, ...]: r, s, p); the backward recomputes the mix from them. With `out_norm_weight` the RMSNorm that reads the mix
is fused in, so neither the mix nor its normalised copy is kept for the backward either. Memory saved per mix point:
O(tokens * n) floats, against O(tokens * n * hidden) for the reference.

Backward, per token (g = dLoss/d mix, fp32):
    ds_j = p_j * (g . v_j - g . out)                               the softmax backward (g . out = sum_j p_j g . v_j)
    dv_j = p_j g + ds_j * (r_j w - (s_j r_j^2 / d) v_j)
    dw   = sum_tokens sum_j ds_j r_j v_j
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from .lean_ops import lean_forward, rms_norm_forward, weighted_sum


def rms_norm_backward(mixed, weight, eps, grad_out):
    """Gradients of `weight * rms_norm_forward(mixed)` w.r.t. the mix (fp32) and the gain."""
    normed, rstd = rms_norm_forward(mixed, weight, eps)
    grad_weight = (grad_out * normed).reshape(-1, mixed.shape[-1]).sum(0).to(weight.dtype)
    grad_normed = (grad_out * weight).to(mixed.dtype).float()  # autograd casts at each dtype boundary, as here
    x_hat = mixed.float() * rstd
    grad_mixed = rstd * (grad_normed - x_hat * (grad_normed * x_hat).mean(-1, keepdim=True))
    return grad_mixed.to(mixed.dtype).float(), grad_weight


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

"""The AttnRes mix's forward in plain PyTorch at kernel quality: the lean path's arithmetic, and on its own the
forward of the kernelizable depth mix where no kernel is mapped (`depth_mix.py`; autograd then differentiates it).

Same semantics as `naive.attn_res_naive` (the reference), computed the way the Triton kernel does it:
    w   = norm_weight * query                       (in the parameters' dtype, as the reference)
    r_j = rsqrt(mean(v_j^2) + eps)                  per token and source, fp32
    s_j = r_j * (v_j . w)                           the RMS-normalised key against w, no normalised copy of v_j
    p   = softmax_j(s)                              fp32
    out = sum_j p_j v_j                             accumulated in fp32, cast to the sources' dtype

Each source is read where it lies (never stacked into one [n, ..., d] copy, never upcast as a whole bank), except
at decode sizes (`SMALL_SOURCE_NUMEL`).
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
    """The Llama-formula RMSNorm of the mix (model dtype): (unscaled normalised mix in its dtype, rstd fp32)."""
    values = mixed.float()
    rstd = torch.rsqrt(values.pow(2).mean(-1, keepdim=True) + eps)
    return (values * rstd).to(mixed.dtype), rstd


# Up to this many values per source the forward stacks the sources (a copy smaller than ~32 KiB) and runs ~10 batched
# ops: at decode sizes the per-op overhead of the source-by-source loop (~8 ops per source) costs more than the copy.
# The choice depends on the shape only, never on grad mode, so training and inference forwards stay bit-identical.
SMALL_SOURCE_NUMEL = 8192


def lean_forward(query, norm_weight, out_norm_weight, eps, out_norm_eps, sources):
    """(out, probs [n, ...], rstd [n, ...], scores [n, ...]): the forward and the statistics its backward needs.

        w   = norm_weight * query                       (in the parameters' dtype)
        r_j = rsqrt(mean(v_j^2) + eps)                  per token and source, fp32
        s_j = r_j * (v_j . w)                           the RMS-normalised key against w, no normalised copy of v_j
        p   = softmax_j(s)                              fp32
        out = sum_j p_j v_j                             accumulated in fp32, cast to the sources' dtype

    Each source is read where it lies (never stacked into one [n, ..., d] copy, never upcast as a whole bank), except
    at decode sizes (`SMALL_SOURCE_NUMEL`)."""
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


def lean_mix(sources, query, norm_weight, eps, return_weights=False, out_norm_weight=None, out_norm_eps=1e-6):
    """`attn_res_naive`'s contract (plus the fused output RMSNorm of `out_norm_weight`), through `lean_forward`."""
    sources = tuple(sources.unbind(0)) if isinstance(sources, torch.Tensor) else tuple(sources)
    out, probs = lean_forward(query, norm_weight, out_norm_weight, eps, out_norm_eps, sources)[:2]
    return (out, probs.movedim(0, -1)) if return_weights else out


__all__ = ["lean_forward", "lean_mix", "source_stats", "weighted_sum", "rms_norm_forward", "SMALL_SOURCE_NUMEL"]

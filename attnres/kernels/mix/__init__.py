"""The Attention-Residual mix: one public function, `attn_res`, over interchangeable backends."""
from __future__ import annotations

import importlib.util

import torch

from .cpu_fused import attn_res_cpu, fits, load_extension
from .lean import attn_res_lean
from .naive import attn_res_naive, rms_norm_naive

BACKENDS = ("auto", "torch", "triton", "cpp")
CPP_BACKENDS = ("auto", "cpp")
TRITON_AVAILABLE = importlib.util.find_spec("triton") is not None


def use_triton(backend: str, tensor: torch.Tensor) -> bool:
    """Resolve a backend name for one call: "auto" means Triton on CUDA tensors, the reference elsewhere."""
    if backend not in BACKENDS:
        raise ValueError(f"attn_res backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "triton" and not TRITON_AVAILABLE:
        raise ImportError('attn_res backend "triton" needs the triton package: pip install "attnres[triton]"')
    return backend == "triton" or (backend == "auto" and TRITON_AVAILABLE and tensor.is_cuda)


def use_cpp(backend: str, sources, query, norm_weight, out_norm_weight) -> bool:
    """Whether one call runs the fused C++ CPU kernel: backend "auto" or "cpp", and inputs it takes
    (`cpu_fused.fits`, which builds the kernel on first use; a failed build warns once and every call then takes the
    lean path)."""
    return backend in CPP_BACKENDS and fits(sources, query, norm_weight, out_norm_weight)


def as_vector(query: torch.Tensor) -> torch.Tensor:
    """The pseudo-query as [hidden]: a Linear(hidden, 1)'s [1, hidden] weight viewed as its row (the C++ kernel takes
    either; the other paths take the vector)."""
    return query[0] if query.dim() == 2 else query


def attn_res(
    sources,
    query,
    norm_weight,
    eps,
    return_weights=False,
    backend="auto",
    out_norm_weight=None,
    out_norm_eps=1e-6,
    recompute=False,
):
    """Mix `sources` by softmax attention over depth (see `naive.attn_res_naive` for the exact semantics).

    `query`: [hidden], or the [1, hidden] weight of the point's Linear (read without a view: cheaper at decode).
    `backend`: "torch" (`lean.attn_res_lean`: plain PyTorch that saves no stacked copy), "triton" (fused kernels),
    "cpp" (`cpu_fused.attn_res_cpu`: one fused C++ kernel on CPU tensors, built on first use; the lean path for any
    input it does not take or where it cannot be built), or "auto" (Triton on CUDA, "cpp" on CPU, lean elsewhere).
    `naive.attn_res_naive` stays the reference all are tested on.
    `out_norm_weight`/`out_norm_eps`: also apply the RMSNorm that follows the mix and return `norm(mix)` (fused into the
    kernel on Triton). `recompute`: Triton keeps no forward statistics and re-reads the sources in the backward.
    """
    first = sources if isinstance(sources, torch.Tensor) else sources[0]
    if use_triton(backend, first):
        from .triton import attn_res_triton  # imported lazily: defining the kernels needs triton

        return attn_res_triton(
            sources, as_vector(query), norm_weight, eps, return_weights=return_weights,
            out_norm_weight=out_norm_weight, out_norm_eps=out_norm_eps, recompute=recompute,
        )
    sources = sources.unbind(0) if isinstance(sources, torch.Tensor) else sources
    if use_cpp(backend, sources, query, norm_weight, out_norm_weight):
        return attn_res_cpu(sources, query, norm_weight, eps, return_weights, out_norm_weight, out_norm_eps)
    return attn_res_lean(
        sources, as_vector(query), norm_weight, eps, return_weights=return_weights,
        out_norm_weight=out_norm_weight, out_norm_eps=out_norm_eps,
    )


__all__ = [
    "attn_res", "attn_res_cpu", "attn_res_lean", "attn_res_naive", "rms_norm_naive", "use_triton", "use_cpp",
    "load_extension", "BACKENDS", "TRITON_AVAILABLE",
]

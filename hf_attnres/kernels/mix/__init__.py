"""The Attention-Residual mix: one public function, `attn_res`, over interchangeable backends.

The fused CPU kernel is a registration (`register_cpu_kernel`), not an import: the installed package registers its C++
kernel (hf_attnres/__init__.py), while a saved folder's generated copy of these kernels registers none and so carries no
compiler, build cache or file lock; there backends "auto" and "cpp" take the lean path on CPU.
"""
from __future__ import annotations

import importlib.util
import warnings

import torch

from .lean import attn_res_lean
from .naive import attn_res_naive, rms_norm_naive

BACKENDS = ("auto", "torch", "triton", "cpp")
CPP_BACKENDS = ("auto", "cpp")
TRITON_AVAILABLE = importlib.util.find_spec("triton") is not None
CPU_KERNEL = {}  # "fits", "run": the fused CPU kernel (register_cpu_kernel); empty: none
_warned = {"cpp": False}


def register_cpu_kernel(fits, run) -> None:
    """Make `run` the kernel of backends "auto" and "cpp" on CPU tensors. `fits(sources, query, norm_weight,
    out_norm_weight)` says whether it takes one call's inputs (it may build the kernel on first use, and answers False
    where it cannot); `run(sources, query, norm_weight, eps, return_weights, out_norm_weight, out_norm_eps)` keeps
    `lean.attn_res_lean`'s contract. A later registration replaces an earlier one."""
    CPU_KERNEL.update(fits=fits, run=run)


def use_triton(backend: str, tensor: torch.Tensor) -> bool:
    """Resolve a backend name for one call: "auto" means Triton on CUDA tensors, the reference elsewhere."""
    if backend not in BACKENDS:
        raise ValueError(f"attn_res backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "triton" and not TRITON_AVAILABLE:
        raise ImportError('attn_res backend "triton" needs the triton package: pip install "hf-attnres[triton]"')
    return backend == "triton" or (backend == "auto" and TRITON_AVAILABLE and tensor.is_cuda)


def use_cpp(backend: str, sources, query, norm_weight, out_norm_weight) -> bool:
    """Whether one call runs the registered CPU kernel: backend "auto" or "cpp", and inputs it takes (the package's
    `cpu_fused.fits` builds the kernel on first use; a failed build warns once and every call then takes the lean
    path). Backend "cpp" with no kernel registered warns once, as a failed build does, and takes the lean path."""
    if backend not in CPP_BACKENDS:
        return False
    if not CPU_KERNEL:
        if backend == "cpp" and not _warned["cpp"]:
            _warned["cpp"] = True
            warnings.warn("attnres: backend 'cpp' has no fused CPU kernel here (it comes with the installed attnres "
                          "package, not with a saved folder's code); using the eager PyTorch path (backend 'torch')",
                          RuntimeWarning, stacklevel=3)
        return False
    return CPU_KERNEL["fits"](sources, query, norm_weight, out_norm_weight)


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
    "cpp" (the registered CPU kernel, with the installed package `cpu_fused.attn_res_cpu`: one fused C++ kernel on CPU
    tensors, built on first use; the lean path for any input it does not take, where it cannot be built, or where
    none is registered), or "auto" (Triton on CUDA, "cpp" on CPU, lean elsewhere).
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
        return CPU_KERNEL["run"](sources, query, norm_weight, eps, return_weights, out_norm_weight, out_norm_eps)
    return attn_res_lean(
        sources, as_vector(query), norm_weight, eps, return_weights=return_weights,
        out_norm_weight=out_norm_weight, out_norm_eps=out_norm_eps,
    )


__all__ = [
    "attn_res", "attn_res_lean", "attn_res_naive", "rms_norm_naive", "use_triton", "use_cpp", "register_cpu_kernel",
    "BACKENDS", "CPU_KERNEL", "TRITON_AVAILABLE",
]

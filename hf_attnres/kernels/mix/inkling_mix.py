"""Inkling-2's depth mix over interchangeable backends: `attn_res_inkling`, the entry point of the Inkling paths.

Backends: "torch" (the reference, `inkling.attn_res_inkling_naive`), "cpp" (the fused C++ kernel, `inkling_cpu`,
built on first use into the package's CPU extension; strided inputs are read through a contiguous copy; the reference
serves inputs it does not take, or every call where it cannot be built), "triton" (`inkling_triton`), "auto" (Triton
on CUDA tensors, "cpp" on CPU). These modules belong to the installed package only: the generated code of a saved
folder carries none of them.
"""
from __future__ import annotations

import torch

from . import TRITON_AVAILABLE
from .inkling import attn_res_inkling_naive

INKLING_BACKENDS = ("auto", "torch", "triton", "cpp")


def attn_res_inkling(
    bank: torch.Tensor,
    partial: torch.Tensor,
    queries: torch.Tensor,
    scale: float | None = None,
    eps: float = 1e-6,
    normed_values: bool = True,
    backend: str = "auto",
) -> torch.Tensor:
    """Q queries' softmax attention over depth: fp32 [..., Q, d] (see `inkling.attn_res_inkling_naive`).

    `bank` [..., nb, d] (the block states), `partial` [..., d] (the running partial sum), `queries` [Q, d] or [d];
    `scale` None means hidden**-0.5, transformers' Inkling-2 scale."""
    if backend not in INKLING_BACKENDS:
        raise ValueError(f"attn_res_inkling backend must be one of {INKLING_BACKENDS}, got {backend!r}")
    hidden = partial.shape[-1]
    scale = hidden**-0.5 if scale is None else float(scale)
    rows = queries.float().view(-1, hidden)  # a no-op view of transformers' fp32 [Q, d] or [d] parameter
    if backend == "triton" or (backend == "auto" and TRITON_AVAILABLE and partial.is_cuda):
        if not TRITON_AVAILABLE:
            raise ImportError('attn_res_inkling backend "triton" needs the triton package')
        from .inkling_triton import attn_res_inkling_triton  # defining the kernels needs triton

        return attn_res_inkling_triton(bank, partial, rows, scale, eps, normed_values)
    if backend in ("auto", "cpp") and partial.is_cpu:
        from . import inkling_cpu

        # transformers' partial sum is often the channel-major output of a convolution, and the looped model's
        # message bank a slice: the kernel reads rows, so those come as one contiguous copy (of [..., d] for the
        # partial, where transformers' own path copies the whole bank)
        bank, partial = bank.contiguous(), partial.contiguous()
        if inkling_cpu.fits(bank, partial, rows):
            return inkling_cpu.attn_res_inkling_cpu(bank, partial, rows, scale, eps, normed_values)
    return attn_res_inkling_naive(bank, partial, rows, scale, eps, normed_values)


__all__ = ["attn_res_inkling", "INKLING_BACKENDS"]

"""Inkling-2's depth mix on the Triton kernels of `inkling_kernels.py`: launch helpers and autograd.

`attn_res_inkling_triton(bank, partial, queries, scale, eps, normed_values)` keeps `inkling.attn_res_inkling_naive`'s
contract (fp32 [..., Q, d]). Saved for the backward: the inputs by reference, the fp32 output (the tensor returned,
so no extra memory while the caller keeps it) and one fp32 log-sum-exp per token and query.
"""
from __future__ import annotations

import torch

# Imported only where triton is installed, as triton.py
try:
    import triton
except ImportError as error:
    raise ImportError('the Triton kernels need triton: pip install "hf-attnres[triton]"') from error

from .inkling_kernels import inkling_bwd_kernel, inkling_fwd_kernel
from .triton import backward_programs, interpreting

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def launch_config(tokens: int, queries: int, hidden: int) -> tuple[int, int, int, int]:
    """(BLOCK_T, BLOCK_Q, BLOCK_D, num_warps): a program holds BLOCK_T tokens x all queries x the whole hidden size,
    so its fp32 accumulator has BLOCK_T * BLOCK_Q * BLOCK_D values, kept near `triton.launch_config`'s budget."""
    block_q, block_d = triton.next_power_of_2(queries), triton.next_power_of_2(hidden)
    budget = 16384 if interpreting() else 4096
    block_t = max(1, min(triton.next_power_of_2(tokens), budget // (block_q * block_d)))
    size = block_t * block_q * block_d
    num_warps = 4 if size <= 2048 else 8 if size <= 8192 else 16
    return block_t, block_q, block_d, num_warps


def check_inputs(bank, partial, queries):
    if bank.dtype not in DTYPES or partial.dtype not in DTYPES:
        raise TypeError(f"Inkling mix: bank and partial must be one of {DTYPES}, got {bank.dtype}, {partial.dtype}")
    if bank.shape[:-2] != partial.shape[:-1] or bank.shape[-1] != partial.shape[-1]:
        raise ValueError(f"Inkling mix: bank {tuple(bank.shape)} must be [..., nb, d], partial {tuple(partial.shape)}")
    if queries.shape[-1] != partial.shape[-1] or bank.device != partial.device or queries.device != partial.device:
        raise ValueError(f"Inkling mix: queries {tuple(queries.shape)} must be [Q, d] on the partial's device")


def inkling_forward(bank, partial, queries, scale, eps, normed_values, store_lse):
    hidden, nb, nq = partial.shape[-1], bank.shape[-2], queries.shape[0]
    tokens = partial.numel() // hidden
    block_t, block_q, block_d, num_warps = launch_config(tokens, nq, hidden)
    out = torch.empty(*partial.shape[:-1], nq, hidden, dtype=torch.float32, device=partial.device)
    lse = torch.empty(tokens, nq if store_lse else 0, dtype=torch.float32, device=partial.device)
    inkling_fwd_kernel[(triton.cdiv(tokens, block_t),)](
        bank, partial, queries, out, lse, tokens, nb, hidden, nq, scale, eps,
        NORMED_VALUES=normed_values, STORE_LSE=store_lse, BLOCK_T=block_t, BLOCK_Q=block_q, BLOCK_D=block_d,
        num_warps=num_warps,
    )
    return out, lse


class TritonInklingMix(torch.autograd.Function):
    @staticmethod
    def forward(ctx, queries, bank, partial, scale, eps, normed_values):
        out, lse = inkling_forward(bank, partial, queries, scale, eps, normed_values, True)
        ctx.save_for_backward(queries, bank, partial, out, lse)
        ctx.scale, ctx.eps, ctx.normed_values = scale, eps, normed_values
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        queries, bank, partial, out, lse = ctx.saved_tensors
        hidden, nb, nq = partial.shape[-1], bank.shape[-2], queries.shape[0]
        tokens = partial.numel() // hidden
        block_t, block_q, block_d, num_warps = launch_config(tokens, nq, hidden)
        programs = min(triton.cdiv(tokens, block_t), backward_programs(partial.device))
        bank_grad, partial_grad = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        grad_bank = torch.empty_like(bank) if bank_grad else bank.new_empty(0)
        grad_partial = torch.empty_like(partial) if partial_grad else partial.new_empty(0)
        grad_q = torch.empty(programs, block_q, hidden, dtype=torch.float32, device=partial.device)
        inkling_bwd_kernel[(programs,)](
            bank, partial, queries, out, lse, grad_out.float().contiguous(), grad_bank, grad_partial, grad_q,
            tokens, nb, hidden, nq, ctx.scale, ctx.eps, programs,
            NORMED_VALUES=ctx.normed_values, BANK_GRAD=bank_grad, PARTIAL_GRAD=partial_grad,
            BLOCK_T=block_t, BLOCK_Q=block_q, BLOCK_D=block_d, num_warps=num_warps,
        )
        return (grad_q.sum(0)[:nq] if ctx.needs_input_grad[0] else None, grad_bank if bank_grad else None,
                grad_partial if partial_grad else None, None, None, None)


def attn_res_inkling_triton(bank, partial, queries, scale: float, eps: float = 1e-6, normed_values: bool = True):
    """`inkling.attn_res_inkling_naive`'s contract on the Triton kernels, for fp32 queries [Q, d]."""
    check_inputs(bank, partial, queries)
    bank, partial, queries = bank.contiguous(), partial.contiguous(), queries.float().contiguous()
    if torch.is_grad_enabled() and (queries.requires_grad or bank.requires_grad or partial.requires_grad):
        return TritonInklingMix.apply(queries, bank, partial, float(scale), float(eps), bool(normed_values))
    return inkling_forward(bank, partial, queries, float(scale), float(eps), bool(normed_values), False)[0]


__all__ = ["attn_res_inkling_triton", "launch_config"]

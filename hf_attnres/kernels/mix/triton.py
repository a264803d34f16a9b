"""The fused Triton mix: launch helpers, `torch.library` custom ops (so `torch.compile` keeps one graph) and autograd.

Public entry point: `attn_res_triton(sources, query, norm_weight, eps, ...)`, same contract as `attn_res_naive`,
plus an optional fused output RMSNorm (`out_norm_weight`, `out_norm_eps`): then it returns `norm(mix)`, with the
gradient of both. Saved for the backward: the mix (model dtype) and one fp32 log-sum-exp per token; with
`recompute=True` only the inputs, and the backward re-reads the sources once more.
"""
from __future__ import annotations

import hashlib
import os

import torch

# Imported only where triton is installed (`attn_res` picks the backend). The try block is how transformers'
# remote-code loader learns that triton is optional for a saved folder (remote_code.py)
try:
    import triton
    import triton.language as tl
except ImportError as error:
    raise ImportError('the Triton kernels need triton: pip install "hf-attnres[triton]"') from error

from .kernels import mix_bwd_kernel, mix_fwd_kernel


def op_namespace(module_name: str) -> str:
    """The `torch.library` namespace of our custom ops: `hf_attnres` in the package (not `attnres`: fast-attnres
    registers its ops there). A saved model folder's copy of
    this module (loaded as transformers remote code, maybe beside the package or another folder's copy) takes one of
    its own: torch silently re-binds a registered name to the latest definition, for every caller."""
    if module_name.startswith("hf_attnres."):
        return "hf_attnres"
    return "hf_attnres_" + hashlib.sha1(module_name.encode()).hexdigest()[:12]


OPS = op_namespace(__name__)
TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def launch_config(tokens: int, hidden: int) -> tuple[int, int, int]:
    """(BLOCK_T, BLOCK_D, num_warps): one row block holds the whole hidden size (any size: masked to a power of two).

    Fixed, not autotuned: under the CPU interpreter few large programs are fastest; on a GPU about 4-8k fp32 values per
    program keeps the running sum in registers (hidden 7168: one token per program, 8 warps).
    """
    block_d = triton.next_power_of_2(hidden)
    budget = 16384 if interpreting() else 4096
    block_t = max(1, min(triton.next_power_of_2(tokens), budget // block_d))
    num_warps = 4 if block_t * block_d <= 2048 else 8 if block_t * block_d <= 8192 else 16
    return block_t, block_d, num_warps


def backward_programs(device: torch.device) -> int:
    """Programs of the backward: each strides over row blocks and keeps one fp32 [hidden] weight-gradient partial, so
    a few per streaming multiprocessor fill the GPU without a [tokens, hidden] partial buffer."""
    if device.type == "cuda":
        return 4 * torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def check_inputs(sources, query, norm_weight):
    if len(sources) == 0:
        raise ValueError("attn_res needs at least one source")
    first = sources[0]
    if first.dtype not in TL_DTYPES:
        raise TypeError(f"attn_res Triton backend supports {list(TL_DTYPES)}, got sources of dtype {first.dtype}")
    for i, source in enumerate(sources):
        if source.shape != first.shape or source.dtype != first.dtype or source.device != first.device:
            raise ValueError(
                f"sources[{i}] is {tuple(source.shape)} {source.dtype} on {source.device}; sources[0] is "
                f"{tuple(first.shape)} {first.dtype} on {first.device}: all must match"
            )
    if query.shape[-1] != first.shape[-1] or norm_weight.shape[-1] != first.shape[-1]:
        raise ValueError(
            f"query {tuple(query.shape)} and norm_weight {tuple(norm_weight.shape)} must end in the hidden size "
            f"{first.shape[-1]} of the sources"
        )


def pointer_table(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The sources' addresses, so the kernel reads them in place (no stack/cat of the bank).

    On CUDA the table is staged in pinned memory and copied asynchronously: `torch.tensor(..., device="cuda")` would
    synchronise the stream on every call, which costs more than the mix itself at decode sizes.
    """
    addresses = [t.data_ptr() for t in tensors] or [0]
    if device.type != "cuda":
        return torch.tensor(addresses, dtype=torch.int64, device=device)
    return torch.tensor(addresses, dtype=torch.int64, pin_memory=True).to(device, non_blocking=True)


def mix_forward(
    sources: list[torch.Tensor],
    queries: torch.Tensor,
    norm_weights: torch.Tensor,
    eps: float,
    *,
    out_dtype: torch.dtype,
    prior: tuple[torch.Tensor, torch.Tensor] | None = None,
    norm2: tuple[torch.Tensor, float] | None = None,
    store_out: bool = True,
    store_lse: bool = False,
    store_scores: bool = False,
):
    """Launch the forward kernel for Q queries (rows of `queries`/`norm_weights`) over the same sources.

    `prior`: (out fp32 [Q, T, d], lse [Q, T]) of sources already mixed (Phase 2); then `sources` may be empty.
    Returns (out [Q, T, d] | None, lse [Q, T] | None, scores [n, T] | None, normed [T, d] | None), T = tokens.
    """
    sources = [s.contiguous() for s in sources]
    like = sources[0] if sources else prior[0]
    src_dtype = sources[0].dtype if sources else out_dtype
    hidden = like.shape[-1]
    tokens = like.numel() // hidden // (1 if sources else like.shape[0])
    n_queries = queries.shape[0]
    device = like.device
    block_t, block_d, num_warps = launch_config(tokens, hidden)
    empty = torch.empty(0, device=device)
    out = torch.empty(n_queries, tokens, hidden, dtype=out_dtype, device=device) if store_out else empty
    lse = torch.empty(n_queries, tokens, dtype=torch.float32, device=device) if store_lse else empty
    scores = torch.empty(len(sources), tokens, dtype=torch.float32, device=device) if store_scores else empty
    normed = empty
    if norm2 is not None:
        normed_dtype = torch.promote_types(src_dtype, norm2[0].dtype)
        normed = torch.empty(tokens, hidden, dtype=normed_dtype, device=device)
    prior_out, prior_lse = (t.contiguous() for t in prior) if prior is not None else (empty, empty)
    grid = (n_queries * triton.cdiv(tokens, block_t),)
    mix_fwd_kernel[grid](
        pointer_table(sources, device), len(sources), queries.contiguous(), norm_weights.contiguous(), eps,
        prior_out, prior_lse, out, lse, scores,
        norm2[0] if norm2 is not None else empty, norm2[1] if norm2 is not None else 0.0, normed,
        tokens, hidden, n_queries,
        SRC_DTYPE=TL_DTYPES[src_dtype], HAS_PRIOR=prior is not None, STORE_OUT=store_out,
        STORE_LSE=store_lse, STORE_SCORES=store_scores, HAS_NORM=norm2 is not None,
        BLOCK_T=block_t, BLOCK_D=block_d, num_warps=num_warps,
    )
    return (
        out if store_out else None,
        lse if store_lse else None,
        scores if store_scores else None,
        normed if norm2 is not None else None,
    )


# ---- custom ops: opaque to torch.compile (one graph), with a fake (meta) implementation and autograd ----


@torch.library.custom_op(f"{OPS}::mix_fwd", mutates_args=())
def mix_fwd_op(
    sources: list[torch.Tensor],
    query: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    norm2_weight: torch.Tensor | None,
    eps2: float,
    save_lse: bool,
    store_scores: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mix [..., d], normed mix or empty, lse [T] or empty, scores [n, T] or empty)."""
    shape = sources[0].shape
    out, lse, scores, normed = mix_forward(
        list(sources), query.reshape(1, -1), norm_weight.reshape(1, -1), eps, out_dtype=sources[0].dtype,
        norm2=(norm2_weight, eps2) if norm2_weight is not None else None,
        store_lse=save_lse, store_scores=store_scores,
    )
    def empty():  # a fresh one per unused output: custom-op outputs must not alias each other
        return sources[0].new_empty(0, dtype=torch.float32)

    return (
        out.view(shape),
        normed.view(shape) if normed is not None else empty(),
        lse.view(-1) if lse is not None else empty(),
        scores if scores is not None else empty(),
    )


@mix_fwd_op.register_fake
def _(sources, query, norm_weight, eps, norm2_weight, eps2, save_lse, store_scores):
    first = sources[0]
    tokens = first.numel() // first.shape[-1]
    normed = (
        first.new_empty(first.shape, dtype=torch.promote_types(first.dtype, norm2_weight.dtype))
        if norm2_weight is not None else first.new_empty(0, dtype=torch.float32)
    )
    return (
        torch.empty_like(first),
        normed,
        first.new_empty(tokens if save_lse else 0, dtype=torch.float32),
        first.new_empty((len(sources), tokens) if store_scores else (0,), dtype=torch.float32),
    )


@torch.library.custom_op(f"{OPS}::mix_bwd", mutates_args=())
def mix_bwd_op(
    sources: list[torch.Tensor],
    query: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    saved_out: torch.Tensor,
    saved_lse: torch.Tensor,
    grad_out: torch.Tensor | None,
    norm2_weight: torch.Tensor | None,
    eps2: float,
    grad_normed: torch.Tensor | None,
    recompute: bool,
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
    """(grad of each source, grad query, grad norm_weight, grad norm2_weight or empty)."""
    sources = [s.contiguous() for s in sources]
    hidden = sources[0].shape[-1]
    tokens = sources[0].numel() // hidden
    device = sources[0].device
    block_t, block_d, num_warps = launch_config(tokens, hidden)
    programs = min(triton.cdiv(tokens, block_t), backward_programs(device))
    grads = [torch.empty_like(s) for s in sources]
    grad_w = torch.empty(programs, hidden, dtype=torch.float32, device=device)
    has_norm = norm2_weight is not None and grad_normed is not None
    grad_norm2 = torch.empty(programs if has_norm else 0, hidden, dtype=torch.float32, device=device)
    empty = torch.empty(0, device=device)
    mix_bwd_kernel[(programs,)](
        pointer_table(sources, device), pointer_table(grads, device), len(sources), query, norm_weight, eps,
        empty if recompute else saved_out.contiguous(), empty if recompute else saved_lse,
        grad_out.contiguous() if grad_out is not None else empty,
        norm2_weight if has_norm else empty, eps2, grad_normed.contiguous() if has_norm else empty,
        grad_w, grad_norm2, tokens, hidden, programs,
        SRC_DTYPE=TL_DTYPES[sources[0].dtype], RECOMPUTE=recompute, HAS_GRAD_OUT=grad_out is not None,
        HAS_NORM=has_norm, BLOCK_T=block_t, BLOCK_D=block_d, num_warps=num_warps,
    )
    grad_w = grad_w.sum(0)  # d loss / d (norm_weight * query)
    grad_query = (grad_w * norm_weight.float()).to(query.dtype)
    grad_norm_weight = (grad_w * query.float()).to(norm_weight.dtype)
    grad_norm2_weight = grad_norm2.sum(0).to(norm2_weight.dtype) if has_norm else grad_w.new_empty(0)
    return grads, grad_query, grad_norm_weight, grad_norm2_weight


@mix_bwd_op.register_fake
def _(sources, query, norm_weight, eps, saved_out, saved_lse, grad_out, norm2_weight, eps2, grad_normed, recompute):
    has_norm = norm2_weight is not None and grad_normed is not None
    return (
        [torch.empty_like(s) for s in sources],
        torch.empty_like(query),
        torch.empty_like(norm_weight),
        torch.empty_like(norm2_weight) if has_norm else query.new_empty(0, dtype=torch.float32),
    )


def _setup_context(ctx, inputs, output):
    sources, query, norm_weight, eps, norm2_weight, eps2, save_lse, _ = inputs
    out, _, lse, _ = output
    ctx.eps, ctx.eps2, ctx.recompute, ctx.n = eps, eps2, not save_lse, len(sources)
    ctx.has_norm2 = norm2_weight is not None
    saved = (out, lse) if save_lse else ()
    ctx.save_for_backward(query, norm_weight, norm2_weight, *saved, *sources)


def _backward(ctx, grad_out, grad_normed, _grad_lse, _grad_scores):
    query, norm_weight, norm2_weight, *rest = ctx.saved_tensors
    saved_out, saved_lse = (None, None) if ctx.recompute else rest[:2]
    sources = rest if ctx.recompute else rest[2:]
    grads, grad_query, grad_norm_weight, grad_norm2_weight = mix_bwd_op(
        sources, query, norm_weight, ctx.eps,
        saved_out if saved_out is not None else query.new_empty(0),
        saved_lse if saved_lse is not None else query.new_empty(0),
        grad_out, norm2_weight, ctx.eps2, grad_normed if ctx.has_norm2 else None, ctx.recompute,
    )
    if not ctx.has_norm2:
        grad_norm2_weight = None
    return grads, grad_query, grad_norm_weight, None, grad_norm2_weight, None, None, None


mix_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def attn_res_triton(
    sources,
    query: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    return_weights: bool = False,
    out_norm_weight: torch.Tensor | None = None,
    out_norm_eps: float = 1e-6,
    recompute: bool = False,
):
    """The fused mix (see the module docstring). With `out_norm_weight`, returns the normalised mix instead."""
    sources = list(sources.unbind(0) if isinstance(sources, torch.Tensor) else sources)
    check_inputs(sources, query, norm_weight)
    out, normed, lse, scores = torch.ops.hf_attnres.mix_fwd(
        sources, query, norm_weight, float(eps), out_norm_weight, float(out_norm_eps), not recompute or return_weights,
        return_weights,
    )
    result = normed if out_norm_weight is not None else out
    if not return_weights:
        return result
    probs = torch.exp(scores.detach() - lse.detach()).movedim(0, -1)  # [T, n]
    return result, probs.reshape(*sources[0].shape[:-1], len(sources))

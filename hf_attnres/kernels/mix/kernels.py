"""Triton kernels of the AttnRes mix: one forward kernel (training mix, Phase 1 and Phase 2 of the inference schedule)
and one backward kernel. Math is fp32 inside whatever the input dtype.

Sources are read through a *pointer table* (an int64 tensor of `data_ptr()`s), so the n source tensors are never
stacked or concatenated: each is read once per pass, in place. Per token and source the kernels derive
    r_j = rsqrt(mean(v_j^2) + eps),  s_j = r_j * (v_j . w),  w = norm_weight * query
and run an online softmax over j (exact: the same max/sum-exp rescaling as flash attention).
"""
from __future__ import annotations

# Imported only where triton is installed (`attn_res` picks the backend). The try block is how transformers'
# remote-code loader learns that triton is optional for a saved folder (remote_code.py)
try:
    import triton
    import triton.language as tl
except ImportError as error:
    raise ImportError('the Triton kernels need triton: pip install "hf-attnres[triton]"') from error


@triton.jit
def _source_stats(v, w, eps, d):
    """Per row: the key RMS factor r and the score s = r * (v . w)."""
    r = tl.rsqrt(tl.sum(v * v, axis=1) / d + eps)
    return r, r * tl.sum(v * w[None, :], axis=1)


@triton.jit
def _load_source(table, j, offsets, mask, SRC_DTYPE: tl.constexpr):
    base = tl.load(table + j).to(tl.pointer_type(SRC_DTYPE))
    return tl.load(base + offsets, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _online_mix(table, n_sources, w, eps, d, offsets, mask, m, l, acc, scores_ptr, rows, row_mask, T,
                SRC_DTYPE: tl.constexpr, STORE_SCORES: tl.constexpr):
    """Fold sources 0..n-1 into the running softmax state (m: max, l: sum of exp, acc: weighted value sum)."""
    for j in range(n_sources):
        v = _load_source(table, j, offsets, mask, SRC_DTYPE)
        _, s = _source_stats(v, w, eps, d)
        if STORE_SCORES:
            tl.store(scores_ptr + j * T + rows, s, mask=row_mask)
        m_new = tl.maximum(m, s)
        scale = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        l = l * scale + p
        acc = acc * scale[:, None] + p[:, None] * v
        m = m_new
    return m, l, acc


@triton.jit
def _rms_norm_rows(x, weight, eps2, d, SRC_DTYPE: tl.constexpr):
    """transformers' KimiLinearRMSNorm, step for step: normalise in fp32, cast to the input dtype, then scale."""
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / d + eps2)
    return (x * rstd[:, None]).to(SRC_DTYPE).to(tl.float32) * weight[None, :], rstd


@triton.jit
def mix_fwd_kernel(
    table, n_sources, query, norm_weight, eps,  # query, norm_weight: [Q, d]; program q uses row q
    prior_out, prior_lse,  # Phase 2: a finished partial mix (fp32 [Q, T, d]) and its log-sum-exp ([Q, T])
    out, lse, scores,  # out [Q, T, d] (any dtype), lse [Q, T] fp32, scores [n, T] fp32
    norm2_weight, eps2, normed,  # the RMSNorm that follows the mix, fused: normed [T, d]
    T, d, n_queries,
    SRC_DTYPE: tl.constexpr, HAS_PRIOR: tl.constexpr, STORE_OUT: tl.constexpr, STORE_LSE: tl.constexpr,
    STORE_SCORES: tl.constexpr, HAS_NORM: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # queries vary fastest, so the programs sharing a row block run together and read the bank from cache
    pid = tl.program_id(0)
    q = pid % n_queries
    rows = (pid // n_queries) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_D)
    row_mask = rows < T
    col_mask = cols < d
    mask = row_mask[:, None] & col_mask[None, :]
    offsets = rows.to(tl.int64)[:, None] * d + cols[None, :]

    w = tl.load(query + q * d + cols, mask=col_mask, other=0.0).to(tl.float32)
    w = w * tl.load(norm_weight + q * d + cols, mask=col_mask, other=0.0).to(tl.float32)
    q_offsets = q.to(tl.int64) * T * d + offsets
    if HAS_PRIOR:
        m = tl.load(prior_lse + q * T + rows, mask=row_mask, other=0.0)
        l = tl.full([BLOCK_T], 1.0, tl.float32)
        acc = tl.load(prior_out + q_offsets, mask=mask, other=0.0)
    else:
        m = tl.full([BLOCK_T], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_T], tl.float32)
        acc = tl.zeros([BLOCK_T, BLOCK_D], tl.float32)
    m, l, acc = _online_mix(table, n_sources, w, eps, d, offsets, mask, m, l, acc, scores, rows, row_mask, T,
                            SRC_DTYPE, STORE_SCORES)
    mixed = acc / l[:, None]
    if STORE_OUT:
        tl.store(out + q_offsets, mixed, mask=mask)
    if STORE_LSE:
        tl.store(lse + q * T + rows, m + tl.log(l), mask=row_mask)
    if HAS_NORM:
        x = mixed.to(SRC_DTYPE).to(tl.float32)  # the norm sees the mix in the model dtype, as unfused
        weight2 = tl.load(norm2_weight + cols, mask=col_mask, other=0.0).to(tl.float32)
        y, _ = _rms_norm_rows(x, weight2, eps2, d, SRC_DTYPE)
        tl.store(normed + offsets, y, mask=mask)


@triton.jit
def mix_bwd_kernel(
    table, grad_table, n_sources, query, norm_weight, eps,
    saved_out, saved_lse,  # the mix (model dtype) and its log-sum-exp, unless RECOMPUTE
    grad_out, norm2_weight, eps2, grad_normed,
    grad_w_partial, grad_norm2_partial,  # [programs, d] fp32, summed over programs by the caller
    T, d, n_programs,
    SRC_DTYPE: tl.constexpr, RECOMPUTE: tl.constexpr, HAS_GRAD_OUT: tl.constexpr, HAS_NORM: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # a fixed number of programs strides over the row blocks: the per-program weight-gradient partials stay small
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_D)
    col_mask = cols < d
    w = tl.load(query + cols, mask=col_mask, other=0.0).to(tl.float32)
    w = w * tl.load(norm_weight + cols, mask=col_mask, other=0.0).to(tl.float32)
    grad_w = tl.zeros([BLOCK_D], tl.float32)
    grad_norm2 = tl.zeros([BLOCK_D], tl.float32)
    for row_block in range(pid, tl.cdiv(T, BLOCK_T), n_programs):
        rows = row_block * BLOCK_T + tl.arange(0, BLOCK_T)
        gw, gn = _mix_bwd_rows(
            table, grad_table, n_sources, w, eps, saved_out, saved_lse, grad_out, norm2_weight, eps2, grad_normed,
            rows, cols, T, d, SRC_DTYPE, RECOMPUTE, HAS_GRAD_OUT, HAS_NORM, BLOCK_T, BLOCK_D,
        )
        grad_w += gw
        grad_norm2 += gn
    tl.store(grad_w_partial + pid * d + cols, grad_w, mask=col_mask)
    if HAS_NORM:
        tl.store(grad_norm2_partial + pid * d + cols, grad_norm2, mask=col_mask)


@triton.jit
def _mix_bwd_rows(
    table, grad_table, n_sources, w, eps, saved_out, saved_lse, grad_out, norm2_weight, eps2, grad_normed,
    rows, cols, T, d,
    SRC_DTYPE: tl.constexpr, RECOMPUTE: tl.constexpr, HAS_GRAD_OUT: tl.constexpr, HAS_NORM: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Gradients of the sources of one row block (stored), and its share of the weight gradients (returned)."""
    row_mask = rows < T
    col_mask = cols < d
    mask = row_mask[:, None] & col_mask[None, :]
    offsets = rows.to(tl.int64)[:, None] * d + cols[None, :]
    if RECOMPUTE:  # one extra read of the sources instead of keeping the mix and lse alive since the forward
        m = tl.full([BLOCK_T], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_T], tl.float32)
        acc = tl.zeros([BLOCK_T, BLOCK_D], tl.float32)
        m, l, acc = _online_mix(table, n_sources, w, eps, d, offsets, mask, m, l, acc, saved_lse, rows, row_mask, T,
                                SRC_DTYPE, False)
        lse = m + tl.log(l)
        mixed = acc / l[:, None]
        x = mixed.to(SRC_DTYPE).to(tl.float32)
    else:
        lse = tl.load(saved_lse + rows, mask=row_mask, other=0.0)
        x = tl.load(saved_out + offsets, mask=mask, other=0.0).to(tl.float32)
        mixed = x

    g = tl.zeros([BLOCK_T, BLOCK_D], tl.float32)  # dLoss / d mix
    grad_norm2 = tl.zeros([BLOCK_D], tl.float32)
    if HAS_GRAD_OUT:
        g += tl.load(grad_out + offsets, mask=mask, other=0.0).to(tl.float32)
    if HAS_NORM:
        gy = tl.load(grad_normed + offsets, mask=mask, other=0.0).to(tl.float32)
        weight2 = tl.load(norm2_weight + cols, mask=col_mask, other=0.0).to(tl.float32)
        y_unscaled, rstd = _rms_norm_rows(x, tl.full([BLOCK_D], 1.0, tl.float32), eps2, d, SRC_DTYPE)
        grad_norm2 = tl.sum(gy * y_unscaled, axis=0)
        gh = gy * weight2[None, :]
        xh = x * rstd[:, None]
        g += rstd[:, None] * (gh - xh * (tl.sum(gh * xh, axis=1) / d)[:, None])

    # sum_j p_j (g . v_j) = g . mix: the softmax backward needs no second pass over the sources
    g_dot_mix = tl.sum(g * mixed, axis=1)
    grad_w = tl.zeros([BLOCK_D], tl.float32)
    for j in range(n_sources):
        v = _load_source(table, j, offsets, mask, SRC_DTYPE)
        r, s = _source_stats(v, w, eps, d)
        p = tl.where(row_mask, tl.exp(s - lse), 0.0)
        ds = p * (tl.sum(g * v, axis=1) - g_dot_mix)  # dLoss / d score_j
        dv = p[:, None] * g + ds[:, None] * (r[:, None] * w[None, :] - (s * r * r / d)[:, None] * v)
        dst = tl.load(grad_table + j).to(tl.pointer_type(SRC_DTYPE))
        tl.store(dst + offsets, dv, mask=mask)
        grad_w += tl.sum((ds * r)[:, None] * v, axis=0)
    return grad_w, grad_norm2

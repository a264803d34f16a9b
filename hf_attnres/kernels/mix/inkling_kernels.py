"""Triton kernels of Inkling-2's depth mix (`inkling.attn_res_inkling_naive`): one forward, one backward.

A program owns BLOCK_T tokens and all Q queries (padded to BLOCK_Q): each bank row is loaded once and scored by every
query, with an online softmax per (token, query) over the n = nb + 1 rows (the bank's nb, then the partial). The bank
[T, nb, d] and the partial [T, d] are read in place: no concatenated copy. Math is fp32 whatever the inputs' dtypes.
Per row j and query k (c_j = r_j with normed values, else 1; g_k = dLoss/dout_k):
    r_j = rsqrt(mean(v_j^2) + eps),  s_kj = scale * r_j * (q_k . v_j),  out_k = sum_j p_kj c_j v_j
    ds_kj = p_kj (c_j g_k . v_j - g_k . out_k)
    dv_j = c_j sum_k p_kj g_k + r_j scale sum_k ds_kj q_k - r_j^2 / d * e_j v_j,
    e_j = sum_k ds_kj s_kj (+ sum_k p_kj r_j g_k . v_j with normed values),   dq_k = scale sum_j ds_kj r_j v_j
"""
from __future__ import annotations

# Imported only where triton is installed, as kernels.py
try:
    import triton
    import triton.language as tl
except ImportError as error:
    raise ImportError('the Triton kernels need triton: pip install "hf-attnres[triton]"') from error


@triton.jit
def _row_scores(v, qv, scale, eps, d):
    """Per token: the RMS factor r [BT] and every query's score s [BT, BQ] of one row v [BT, BD]."""
    r = tl.rsqrt(tl.sum(v * v, axis=1) / d + eps)
    return r, scale * r[:, None] * tl.sum(v[:, None, :] * qv[None, :, :], axis=2)


@triton.jit
def _fold_row(v, qv, scale, eps, d, m, l, acc, NORMED_VALUES: tl.constexpr):
    """Fold one row into the running softmax state (m: max, l: sum of exp, acc: weighted value sum), per query."""
    r, s = _row_scores(v, qv, scale, eps, d)
    val = v * r[:, None] if NORMED_VALUES else v
    m_new = tl.maximum(m, s)
    alpha = tl.exp(m - m_new)
    p = tl.exp(s - m_new)
    l = l * alpha + p
    acc = acc * alpha[:, :, None] + p[:, :, None] * val[:, None, :]
    return m_new, l, acc


@triton.jit
def inkling_fwd_kernel(
    bank, partial, queries, out, lse,  # bank [T, nb, d], partial [T, d], queries fp32 [Q, d]; out [T, Q, d], lse [T, Q]
    T, nb, d, nq, scale, eps,
    NORMED_VALUES: tl.constexpr, STORE_LSE: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    qs = tl.arange(0, BLOCK_Q)
    cols = tl.arange(0, BLOCK_D)
    row_mask, q_mask, col_mask = rows < T, qs < nq, cols < d
    mask = row_mask[:, None] & col_mask[None, :]
    qv = tl.load(queries + qs[:, None] * d + cols[None, :], mask=q_mask[:, None] & col_mask[None, :], other=0.0)
    rows64 = rows.to(tl.int64)
    m = tl.full([BLOCK_T, BLOCK_Q], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_T, BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_T, BLOCK_Q, BLOCK_D], tl.float32)
    for j in range(nb):
        v = tl.load(bank + rows64[:, None] * nb * d + j * d + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        m, l, acc = _fold_row(v, qv, scale, eps, d, m, l, acc, NORMED_VALUES)
    v = tl.load(partial + rows64[:, None] * d + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    m, l, acc = _fold_row(v, qv, scale, eps, d, m, l, acc, NORMED_VALUES)
    out_offsets = (rows64[:, None, None] * nq + qs[None, :, None]) * d + cols[None, None, :]
    out_mask = row_mask[:, None, None] & q_mask[None, :, None] & col_mask[None, None, :]
    tl.store(out + out_offsets, acc / l[:, :, None], mask=out_mask)
    if STORE_LSE:
        tl.store(lse + rows64[:, None] * nq + qs[None, :], m + tl.log(l), mask=row_mask[:, None] & q_mask[None, :])


@triton.jit
def _row_grad(v, g, g_out, lse, qv, pq_mask, scale, eps, d, NORMED_VALUES: tl.constexpr):
    """(dLoss/dv [BT, BD], this row's share of dLoss/dqueries [BQ, BD]) of one row v [BT, BD]."""
    r, s = _row_scores(v, qv, scale, eps, d)
    p = tl.where(pq_mask, tl.exp(s - lse), 0.0)
    a = tl.sum(g * v[:, None, :], axis=2)  # g_k . v_j
    c = r if NORMED_VALUES else tl.full(r.shape, 1.0, tl.float32)
    ds = p * (c[:, None] * a - g_out)
    e = tl.sum(ds * s, axis=1)
    if NORMED_VALUES:
        e += tl.sum(p * r[:, None] * a, axis=1)
    dv = (c[:, None] * tl.sum(p[:, :, None] * g, axis=1)
          + (r * scale)[:, None] * tl.sum(ds[:, :, None] * qv[None, :, :], axis=1)
          - (r * r * e / d)[:, None] * v)
    dq = scale * tl.sum(ds[:, :, None] * (v * r[:, None])[:, None, :], axis=0)
    return dv, dq


@triton.jit
def inkling_bwd_kernel(
    bank, partial, queries, saved_out, saved_lse, grad_out,
    grad_bank, grad_partial, grad_q_partial,  # grad_q_partial [programs, BLOCK_Q, d] fp32, summed by the caller
    T, nb, d, nq, scale, eps, n_programs,
    NORMED_VALUES: tl.constexpr, BANK_GRAD: tl.constexpr, PARTIAL_GRAD: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # a fixed number of programs strides over the row blocks: the per-program query-gradient partials stay small
    pid = tl.program_id(0)
    qs = tl.arange(0, BLOCK_Q)
    cols = tl.arange(0, BLOCK_D)
    q_mask, col_mask = qs < nq, cols < d
    qv = tl.load(queries + qs[:, None] * d + cols[None, :], mask=q_mask[:, None] & col_mask[None, :], other=0.0)
    grad_q = tl.zeros([BLOCK_Q, BLOCK_D], tl.float32)
    for row_block in range(pid, tl.cdiv(T, BLOCK_T), n_programs):
        rows = row_block * BLOCK_T + tl.arange(0, BLOCK_T)
        rows64 = rows.to(tl.int64)
        row_mask = rows < T
        mask = row_mask[:, None] & col_mask[None, :]
        pq_mask = row_mask[:, None] & q_mask[None, :]
        out_offsets = (rows64[:, None, None] * nq + qs[None, :, None]) * d + cols[None, None, :]
        out_mask = pq_mask[:, :, None] & col_mask[None, None, :]
        g = tl.load(grad_out + out_offsets, mask=out_mask, other=0.0).to(tl.float32)
        o = tl.load(saved_out + out_offsets, mask=out_mask, other=0.0)
        g_out = tl.sum(g * o, axis=2)  # g_k . out_k: one term of every ds_kj, so no extra pass over the rows
        lse = tl.load(saved_lse + rows64[:, None] * nq + qs[None, :], mask=pq_mask, other=0.0)
        for j in range(nb):
            offsets = rows64[:, None] * nb * d + j * d + cols[None, :]
            v = tl.load(bank + offsets, mask=mask, other=0.0).to(tl.float32)
            dv, dq = _row_grad(v, g, g_out, lse, qv, pq_mask, scale, eps, d, NORMED_VALUES)
            grad_q += dq
            if BANK_GRAD:
                tl.store(grad_bank + offsets, dv, mask=mask)
        offsets = rows64[:, None] * d + cols[None, :]
        v = tl.load(partial + offsets, mask=mask, other=0.0).to(tl.float32)
        dv, dq = _row_grad(v, g, g_out, lse, qv, pq_mask, scale, eps, d, NORMED_VALUES)
        grad_q += dq
        if PARTIAL_GRAD:
            tl.store(grad_partial + offsets, dv, mask=mask)
    tl.store(grad_q_partial + (pid * BLOCK_Q + qs[:, None]) * d + cols[None, :], grad_q,
             mask=q_mask[:, None] & col_mask[None, :])

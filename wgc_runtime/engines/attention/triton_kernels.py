"""Triton kernels for paged attention over the pool's ``[pages, 2, page_size, kv_heads, dim]``
layer layout: one decode kernel (one query per sequence) and one prefill kernel (ragged query
blocks, bottom-right causal). Both walk a sequence's pages through its ``block_tables`` row with
an online softmax (running max, running sum, rescaled accumulator), in fp32.

Importing this module imports triton. On a machine without a GPU the kernels run under the
Triton interpreter (``TRITON_INTERPRET=1``, set before triton is first imported).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def paged_decode_kernel(
    Q,  # [batch, heads, dim]
    KV,  # [pages, 2, page_size, kv_heads, dim]
    BLOCK_TABLES,  # int32 [batch, max_pages]
    KV_LENS,  # int32 [batch]
    Out,  # [batch, heads, dim]
    scale,
    stride_qb,
    stride_qh,
    stride_page,
    stride_kv,
    stride_tok,
    stride_head,
    stride_bt,
    stride_ob,
    stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PAGE: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // GROUP
    d = tl.arange(0, BLOCK_D)
    dmask = d < HEAD_DIM
    t = tl.arange(0, PAGE)
    q = tl.load(Q + b * stride_qb + h * stride_qh + d, mask=dmask, other=0.0).to(tl.float32)
    kv_len = tl.load(KV_LENS + b)
    m_i = tl.zeros([], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([], dtype=tl.float32)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for j in range(0, tl.cdiv(kv_len, PAGE)):
        page = tl.load(BLOCK_TABLES + b * stride_bt + j).to(tl.int64)
        base = KV + page * stride_page + kvh * stride_head
        tmask = (j * PAGE + t) < kv_len
        offs = t[:, None] * stride_tok + d[None, :]
        lmask = tmask[:, None] & dmask[None, :]
        k = tl.load(base + offs, mask=lmask, other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * scale
        s = tl.where(tmask, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)
        v = tl.load(base + stride_kv + offs, mask=lmask, other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    out = acc / l_i
    tl.store(Out + b * stride_ob + h * stride_oh + d, out.to(Out.dtype.element_ty), mask=dmask)


@triton.jit
def paged_prefill_kernel(
    Q,  # [total_q, heads, dim]
    KV,  # [pages, 2, page_size, kv_heads, dim]
    BLOCK_TABLES,  # int32 [batch, max_pages]
    QO_INDPTR,  # int32 [batch + 1]
    KV_LENS,  # int32 [batch]
    Out,  # [total_q, heads, dim]
    scale,
    stride_qt,
    stride_qh,
    stride_page,
    stride_kv,
    stride_tok,
    stride_head,
    stride_bt,
    stride_ot,
    stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    USE_DOT: tl.constexpr,  # tensor-core dots need every block dim >= 16
    IEEE: tl.constexpr,  # fp32 data: exact fp32 dots, not tf32
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    mblk = tl.program_id(2)
    q_start = tl.load(QO_INDPTR + b)
    q_len = tl.load(QO_INDPTR + b + 1) - q_start
    kvh = h // GROUP
    kv_len = tl.load(KV_LENS + b)
    m = mblk * BLOCK_M + tl.arange(0, BLOCK_M)
    mmask = m < q_len
    qpos = kv_len - q_len + m  # bottom-right causal: the queries are the last q_len tokens
    d = tl.arange(0, BLOCK_D)
    dmask = d < HEAD_DIM
    t = tl.arange(0, PAGE)
    qmask = mmask[:, None] & dmask[None, :]
    q = tl.load(
        Q + (q_start + m)[:, None] * stride_qt + h * stride_qh + d[None, :], mask=qmask, other=0.0
    )
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # the block's last row sees positions < hi; later pages are fully masked
    hi = tl.minimum(kv_len, kv_len - q_len + (mblk + 1) * BLOCK_M)
    # a block past this sequence's queries (the grid is sized for the longest) does no work and
    # stores nothing; no early return, which older Triton compilers reject
    hi = tl.where(mblk * BLOCK_M < q_len, hi, 0)
    for j in range(0, tl.cdiv(hi, PAGE)):
        page = tl.load(BLOCK_TABLES + b * stride_bt + j).to(tl.int64)
        base = KV + page * stride_page + kvh * stride_head
        kpos = j * PAGE + t
        tmask = kpos < kv_len
        offs = t[:, None] * stride_tok + d[None, :]
        lmask = tmask[:, None] & dmask[None, :]
        k = tl.load(base + offs, mask=lmask, other=0.0)
        v = tl.load(base + stride_kv + offs, mask=lmask, other=0.0)
        if USE_DOT:
            if IEEE:  # noqa: SIM108 (one dot per branch keeps input_precision a literal)
                s = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                s = tl.dot(q, tl.trans(k))
        else:
            s = tl.sum(q.to(tl.float32)[:, None, :] * k.to(tl.float32)[None, :, :], axis=2)
        s = s * scale
        visible = (kpos[None, :] <= qpos[:, None]) & tmask[None, :]
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # every row sees position 0 on page 0, so m_new is finite from the first page on
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        if USE_DOT:
            if IEEE:
                pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v)
        else:
            pv = tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)
        acc = acc * alpha[:, None] + pv
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    out = acc / l_i[:, None]
    optr = Out + (q_start + m)[:, None] * stride_ot + h * stride_oh + d[None, :]
    tl.store(optr, out.to(Out.dtype.element_ty), mask=qmask)


def next_pow2(n: int) -> int:
    return triton.next_power_of_2(n)

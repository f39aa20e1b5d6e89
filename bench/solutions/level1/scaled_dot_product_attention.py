import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, D, scale,
                     CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    # One program per (batch*head, block of queries); keys and values stream through
    # with an online softmax, so the S x S score matrix never exists.
    bh = tl.program_id(0)
    qs = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    ds = tl.arange(0, BLOCK_D)
    base = bh * S * D
    q = tl.load(q_ptr + base + qs[:, None] * D + ds[None, :], mask=(qs[:, None] < S) & (ds[None, :] < D), other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    hi = S
    if CAUSAL:
        hi = tl.minimum(S, (tl.program_id(1) + 1) * BLOCK_M)
    for start in range(0, hi, BLOCK_N):
        ks = start + tl.arange(0, BLOCK_N)
        kv_mask = (ks[:, None] < S) & (ds[None, :] < D)
        k = tl.load(k_ptr + base + ks[:, None] * D + ds[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + base + ks[:, None] * D + ds[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        valid = ks[None, :] < S
        if CAUSAL:
            valid = valid & (ks[None, :] <= qs[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
    out = acc / l[:, None]
    tl.store(o_ptr + base + qs[:, None] * D + ds[None, :], out, mask=(qs[:, None] < S) & (ds[None, :] < D))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        b, h, s, d = q.shape
        o = torch.empty_like(q)
        BLOCK_M, BLOCK_N = 64, 64
        BLOCK_D = max(16, triton.next_power_of_2(d))
        attention_kernel[(b * h, triton.cdiv(s, BLOCK_M))](
            q, k, v, o, s, d, 1.0 / (d ** 0.5),
            CAUSAL=False, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D)
        return o

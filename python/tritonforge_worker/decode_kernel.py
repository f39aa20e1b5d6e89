"""The engine's decode attention on CUDA: one Triton kernel, split over the keys.

Why: at batch 256 the decode step's attention (cuDNN's SDPA with the engine's boolean mask)
took about half of the step on an H100, several times what reading the keys and values
costs. Its tiles are sized for long query blocks, and a decode step has one query per row.
Here each program takes one row, one key/value head (all the query heads that share it:
grouped-query attention reads each key once) and one span of `SPLIT` keys, and keeps a
running softmax over blocks of `BLOCK_N` keys. The keys a row's mask refuses are never
loaded, so a row pays for its own length, not its batch's longest. The spans are merged in
a few tensor ops (`attend`), which torch.compile fuses.

The mask is the engine's `[rows, 1, 1, keys]` boolean mask, read as it is: padding rows,
rows of any length and the scratch column need no special case here.
"""

from __future__ import annotations

import os
from typing import Any, Optional

# Keys per program and per inner block.
SPLIT = 256
BLOCK_N = 64
# The query heads of one key/value head, padded up to a dot product's smallest tile.
MIN_GROUP = 16

_KERNEL: Any = None


def _kernel() -> Any:
    """The Triton kernel, built once (importing triton costs a second). The engine builds it
    when it registers its attention, before any torch.compile traces `attend`: dynamo
    cannot trace the building itself."""
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def decode_split(Q, K, V, M, Acc, L, Mx,  # type: ignore[no-untyped-def]
                     sqb, sqh, skb, skh, skn, svb, svh, svn, smb, smn,
                     sab, sah, sas, sag, slb, slh, sls,
                     keys, scale,
                     G: tl.constexpr, BLOCK_G: tl.constexpr, D: tl.constexpr,
                     BLOCK_N: tl.constexpr, SPLIT: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)
        s = tl.program_id(2)
        g = tl.arange(0, BLOCK_G)
        d = tl.arange(0, D)
        q = tl.load(Q + b * sqb + (h * G + g)[:, None] * sqh + d[None, :], mask=(g < G)[:, None], other=0.0)
        m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_G, D], tl.float32)
        for start in range(0, SPLIT, BLOCK_N):
            n = s * SPLIT + start + tl.arange(0, BLOCK_N)
            seen = tl.load(M + b * smb + n * smn, mask=n < keys, other=0) != 0
            k = tl.load(K + b * skb + h * skh + n[:, None] * skn + d[None, :], mask=seen[:, None], other=0.0)
            qk = tl.dot(q, tl.trans(k)).to(tl.float32) * scale
            qk = tl.where(seen[None, :], qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            base = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(qk - base[:, None])
            alpha = tl.exp(m_i - base)
            v = tl.load(V + b * svb + h * svh + n[:, None] * svn + d[None, :], mask=seen[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
        rows = (g < G)[:, None]
        tl.store(Acc + b * sab + h * sah + s * sas + g[:, None] * sag + d[None, :], acc, mask=rows)
        tl.store(L + b * slb + h * slh + s * sls + g, l_i, mask=g < G)
        tl.store(Mx + b * slb + h * slh + s * sls + g, m_i, mask=g < G)

    _KERNEL = decode_split
    return _KERNEL


def enabled() -> bool:
    """Whether decode steps may take the kernel: a CUDA device is there, triton imports,
    and `TRITONFORGE_POLICY_DECODE_KERNEL=0` does not keep SDPA for every decode step.
    Builds the kernel when they may."""
    if os.environ.get("TRITONFORGE_POLICY_DECODE_KERNEL", "1") == "0":
        return False
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        _kernel()
    except ImportError:
        return False
    return True


def usable(query: Any, key: Any, value: Any, mask: Optional[Any]) -> bool:
    """Whether `attend` takes this call: one query per row on a CUDA device, half
    precision, a power-of-two head size, whole groups of query heads, and the engine's
    one-line mask. (Triton's interpreter runs `attend` in float16 for tests; its bfloat16
    loads are wrong, so the engine never sends it a CPU tensor.)"""
    import torch

    if mask is None or mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[2] != 1 or mask.dtype != torch.bool:
        return False
    b, h, t, d = query.shape
    kv = key.shape[1]
    return (t == 1 and h % kv == 0 and d in (16, 32, 64, 128, 256) and h // kv <= 64
            and query.dtype in (torch.bfloat16, torch.float16) and key.dtype == query.dtype
            and query.is_cuda and key.stride(-1) == 1 and value.stride(-1) == 1 and query.stride(-1) == 1)


def attend(query: Any, key: Any, value: Any, mask: Any, scale: Optional[float]) -> Any:
    """Attention of one query per row: `query [b, h, 1, d]`, `key`/`value [b, kv, keys, d]`
    (any strides but the last), `mask [b, 1, 1, keys]` (True: seen). Returns `[b, 1, h, d]`
    in the query's dtype, as transformers' attention functions do."""
    import torch

    b, h, _, d = query.shape
    kv, keys = key.shape[1], key.shape[2]
    # Head counts and size are the model's (fixed): plain ints for the kernel's constants.
    h, kv, d = int(h), int(kv), int(d)
    g = h // kv
    splits = (keys + SPLIT - 1) // SPLIT
    dev = query.device
    acc = torch.empty((b, kv, splits, g, d), dtype=torch.float32, device=dev)
    lse = torch.empty((b, kv, splits, g), dtype=torch.float32, device=dev)
    mx = torch.empty((b, kv, splits, g), dtype=torch.float32, device=dev)
    m = mask[:, 0, 0, :].to(torch.uint8)  # a copy of rows x keys bytes; inductor lowers no bool view
    q = query[:, :, 0, :]
    block_g = max(MIN_GROUP, 1 << (g - 1).bit_length())
    _kernel()[(b, kv, splits)](
        q, key, value, m, acc, lse, mx,
        q.stride(0), q.stride(1), key.stride(0), key.stride(1), key.stride(2),
        value.stride(0), value.stride(1), value.stride(2), m.stride(0), m.stride(1),
        acc.stride(0), acc.stride(1), acc.stride(2), acc.stride(3), lse.stride(0), lse.stride(1), lse.stride(2),
        keys, float(scale if scale is not None else d ** -0.5),
        G=g, BLOCK_G=block_g, D=d, BLOCK_N=BLOCK_N, SPLIT=SPLIT)
    # Merge the spans: each weighs exp(its max - the overall max). A span whose keys
    # were all refused has max -inf and weight 0.
    top = mx.amax(dim=2, keepdim=True)
    w = torch.exp(mx - top.masked_fill(top == float("-inf"), 0.0))
    out = (acc * w.unsqueeze(-1)).sum(2) / (lse * w).sum(2).unsqueeze(-1)
    return out.reshape(b, 1, h, d).to(query.dtype)

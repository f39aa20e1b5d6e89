"""The engine's decode attention on CUDA: one Triton kernel.

Why: at batch 256 the decode step's attention (cuDNN's SDPA with the engine's boolean mask)
took about half of an H100's decode step, several times what reading the keys and values
costs: its tiles are sized for long query blocks, and a decode step has one query per row.
Here each program takes one row and one key/value head with all the query heads that share
it (grouped-query attention reads each key once), and keeps a running softmax over blocks
of `BLOCK_N` keys. The keys a row's mask refuses are never loaded, so a row pays for its
own length, not its batch's longest. Below `MIN_ROWS` rows there are too few programs to
fill the GPU, and SDPA stays.

The mask is the engine's `[rows, 1, 1, keys]` boolean mask, read as it is: padding rows,
rows of any length and the scratch column need no special case here.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

# Keys per inner block.
BLOCK_N = 64
# Rows below which a decode step keeps SDPA: a program per row and key/value head leaves
# most of the GPU idle at a few rows, where SDPA splits the keys.
MIN_ROWS = 32
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
    def decode_rows(Q, K, V, M, Out,  # type: ignore[no-untyped-def]
                    sqb, sqh, skb, skh, skn, svb, svh, svn, smb, smn, sob, soh,
                    keys, scale,
                    G: tl.constexpr, BLOCK_G: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
        b = tl.program_id(0).to(tl.int64)  # offsets past 2**31 elements in a large cache
        h = tl.program_id(1)
        g = tl.arange(0, BLOCK_G)
        d = tl.arange(0, D)
        q = tl.load(Q + b * sqb + (h * G + g)[:, None] * sqh + d[None, :], mask=(g < G)[:, None], other=0.0)
        m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_G, D], tl.float32)
        for start in range(0, keys, BLOCK_N):
            n = start + tl.arange(0, BLOCK_N)
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
        # A row that sees no key has acc 0 and l 0: its output is 0, as SDPA's.
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(Out + b * sob + (h * G + g)[:, None] * soh + d[None, :], out.to(Out.dtype.element_ty),
                 mask=(g < G)[:, None])

    _KERNEL = decode_rows
    return _KERNEL


def enabled() -> bool:
    """Whether decode steps may take the kernel: a CUDA device of compute capability 8 or
    later is there, triton imports, and `TRITONFORGE_POLICY_DECODE_KERNEL=0` does not keep
    SDPA for every decode step. Builds the kernel and its operator when they may: before
    torch.compile traces `attend`, which cannot trace their making."""
    if os.environ.get("TRITONFORGE_POLICY_DECODE_KERNEL", "1") == "0":
        return False
    try:
        import torch

        # Triton's bfloat16 dot products need Ampere or later.
        if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 8:
            return False
        _kernel()
        _op()
    except ImportError:
        return False
    return True


# Arguments of transformers' attention functions the kernel does not implement: a call
# giving any of them keeps SDPA.
UNSUPPORTED = ("softcap", "s_aux", "sinks", "sliding_window", "position_bias")


def usable(query: Any, key: Any, value: Any, mask: Optional[Any], **kw: Any) -> bool:
    """Whether `attend` takes this call: one query per row on a CUDA device, half
    precision, a power-of-two head size, whole groups of query heads, and the engine's
    one-line mask. (Triton's interpreter runs `attend` in float16 for tests; its bfloat16
    loads are wrong, so the engine never sends it a CPU tensor.)"""
    import torch

    if mask is None or mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[2] != 1 or mask.dtype != torch.bool:
        return False
    b, h, t, d = query.shape
    kv = key.shape[1]
    if any(kw.get(k) is not None and kw.get(k) is not False for k in UNSUPPORTED):
        return False
    if key.dim() != 4 or value.shape != key.shape or key.shape[0] != b or key.shape[3] != d:
        return False
    if mask.shape[0] != b or mask.shape[3] != key.shape[2]:
        return False
    return (t == 1 and b >= MIN_ROWS and h % kv == 0 and value.dtype == query.dtype
            and d in (16, 32, 64, 128, 256) and h // kv <= 64
            and query.dtype in (torch.bfloat16, torch.float16) and key.dtype == query.dtype
            and query.is_cuda and key.stride(-1) == 1 and value.stride(-1) == 1 and query.stride(-1) == 1)


def _launch(query: Any, key: Any, value: Any, mask: Any, scale: float) -> Any:
    """Run the kernel: `query [b, h, 1, d]`, `key`/`value [b, kv, keys, d]` (any strides but
    the last), `mask [b, keys]` as bytes (nonzero: seen); returns `[b, 1, h, d]`."""
    import torch

    b, h, _, d = query.shape
    kv, keys = key.shape[1], key.shape[2]
    g = h // kv
    shape = (g, d, str(query.dtype), str(query.device))
    if shape not in _BROKEN:
        out = torch.empty((b, 1, h, d), dtype=query.dtype, device=query.device)
        q = query[:, :, 0, :]
        try:
            _kernel()[(b, kv)](
                q, key, value, mask, out,
                q.stride(0), q.stride(1), key.stride(0), key.stride(1), key.stride(2),
                value.stride(0), value.stride(1), value.stride(2), mask.stride(0), mask.stride(1),
                out.stride(0), out.stride(2), keys, scale,
                G=g, BLOCK_G=max(MIN_GROUP, 1 << (g - 1).bit_length()), D=d, BLOCK_N=BLOCK_N)
            return out
        except Exception as exc:  # noqa: BLE001 - a kernel that cannot build here: SDPA, for good
            _BROKEN.add(shape)
            sys.stderr.write(f"decode kernel: {type(exc).__name__} for {g} query heads per key/value "
                             f"head of size {d}; SDPA from now on\n")
    # SDPA over the same grouped heads (the first launch, which compiles, runs outside
    # any CUDA graph capture: the engine warms up first).
    return sdpa_grouped(query, key, value, mask.to(torch.bool).view(b, 1, 1, keys), scale)


def sdpa_grouped(query: Any, key: Any, value: Any, mask: Optional[Any], scale: Optional[float]) -> Any:
    """SDPA of one query per row with the query heads sharing a key/value head taken as
    that head's queries, so keys and values are read in place (no `repeat_kv` copies):
    `query [b, h, 1, d]`, `key`/`value [b, kv, keys, d]`, `mask [b, 1, 1, keys]` or None;
    returns `[b, 1, h, d]`."""
    import torch

    b, h, _, d = query.shape
    kv = key.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(query.reshape(b, kv, h // kv, d), key, value,
                                                           attn_mask=mask, scale=scale)
    return out.reshape(b, 1, h, d)


_OP: Any = None
# (query heads per key/value head, head size, dtype, device) the kernel failed to build for.
_BROKEN: set = set()


def _op() -> Any:
    """`_launch` as a custom operator (`tritonforge::decode_attention`): torch.compile
    treats it as one opaque call with a known output shape, and a CUDA graph captures its
    launch. (Traced as a user-defined Triton kernel instead, inductor 2.11 failed on it.)"""
    global _OP
    if _OP is None:
        import torch

        @torch.library.custom_op("tritonforge::decode_attention", mutates_args=(),
                                 schema="(Tensor query, Tensor key, Tensor value, Tensor mask, float scale) -> Tensor")
        def decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                             scale: float) -> torch.Tensor:
            return _launch(query, key, value, mask, scale)

        @decode_attention.register_fake
        def _(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
              scale: float) -> torch.Tensor:
            b, h, _, d = query.shape
            return query.new_empty((b, 1, h, d))

        _OP = decode_attention
    return _OP


def attend(query: Any, key: Any, value: Any, mask: Any, scale: Optional[float]) -> Any:
    """Attention of one query per row: `query [b, h, 1, d]`, `key`/`value [b, kv, keys, d]`
    (any strides but the last), `mask [b, 1, 1, keys]` (True: seen). Returns `[b, 1, h, d]`
    in the query's dtype, as transformers' attention functions do."""
    import torch

    d = int(query.shape[-1])
    m = mask[:, 0, 0, :].to(torch.uint8)  # rows x keys bytes; inductor lowers no bool view
    return _op()(query, key, value, m, float(scale if scale is not None else d ** -0.5))

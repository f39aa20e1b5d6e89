"""The engine's decode attention on CUDA: Triton kernels.

Why: at batch 256 the decode step's attention (cuDNN's SDPA with the engine's boolean mask)
took about half of an H100's decode step, several times what reading the keys and values
costs: its tiles are sized for long query blocks, and a decode step has one query per row.
Here each program takes one row and one key/value head with all the query heads that share
it (grouped-query attention reads each key once), and keeps a running softmax over blocks
of `BLOCK_N` keys. The keys a row's mask refuses are never loaded, so a row pays for its
own length, not its batch's longest.

A few rows make too few programs to fill the GPU (one row of SmolLM2 is three), so where
there are no more (row, head) pairs than multiprocessors the keys are split too
(`shares`): each program keeps a partial softmax over its share of the keys, and the last
program of each row and head to finish combines the shares (counted by an atomic counter
it leaves at zero; `TRITONFORGE_POLICY_DECODE_COMBINE=kernel`: a second kernel does it).
At batch 1 and 16 the decode step is launch- and latency-bound, and SDPA there took
20-23 us a layer.

The mask is the engine's `[rows, 1, 1, keys]` boolean mask, read as it is: padding rows,
rows of any length and the scratch column need no special case here.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional, Tuple

# Keys per inner block.
BLOCK_N = 64
# Programs per streaming multiprocessor a split launch aims for (`shares`): (row, head)
# pairs up to the number of multiprocessors split their keys; more take one pass.
PROGRAMS_PER_SM = 2
# Streaming multiprocessors assumed where none can be asked (Triton's interpreter).
DEFAULT_SMS = 132
# The query heads of one key/value head, padded up to a dot product's smallest tile.
MIN_GROUP = 16

_KERNELS: Any = None


def _kernels() -> Any:
    """The Triton kernels (one pass, split, combine), built once (importing triton costs a
    second). The engine builds them when it registers its attention, before any
    torch.compile traces `attend`: dynamo cannot trace the building itself."""
    global _KERNELS, _span, _combine
    if _KERNELS is not None:
        return _KERNELS
    import triton
    import triton.language as tl

    @triton.jit
    def _span(Q, K, V, M, b, h, lo, hi, sqb, sqh, skb, skh, skn, svb, svh, svn, smb, smn, scale,  # type: ignore[no-untyped-def]
             G: tl.constexpr, BLOCK_G: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
        """Running softmax of the query heads of (row b, key/value head h) over keys lo..hi:
        (max, sum, unnormalised output)."""
        g = tl.arange(0, BLOCK_G)
        d = tl.arange(0, D)
        q = tl.load(Q + b * sqb + (h * G + g)[:, None] * sqh + d[None, :], mask=(g < G)[:, None], other=0.0)
        m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_G, D], tl.float32)
        for start in range(lo, hi, BLOCK_N):
            n = start + tl.arange(0, BLOCK_N)
            seen = tl.load(M + b * smb + n * smn, mask=n < hi, other=0) != 0
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
        return m_i, l_i, acc

    @triton.jit
    def decode_rows(Q, K, V, M, Out,  # type: ignore[no-untyped-def]
                    sqb, sqh, skb, skh, skn, svb, svh, svn, smb, smn, sob, soh,
                    keys, scale,
                    G: tl.constexpr, BLOCK_G: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
        b = tl.program_id(0).to(tl.int64)  # offsets past 2**31 elements in a large cache
        h = tl.program_id(1)
        _, l_i, acc = _span(Q, K, V, M, b, h, 0, keys, sqb, sqh, skb, skh, skn, svb, svh, svn, smb, smn, scale,
                           G, BLOCK_G, D, BLOCK_N)
        # A row that sees no key has acc 0 and l 0: its output is 0, as SDPA's.
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        g = tl.arange(0, BLOCK_G)
        d = tl.arange(0, D)
        tl.store(Out + b * sob + (h * G + g)[:, None] * soh + d[None, :], out.to(Out.dtype.element_ty),
                 mask=(g < G)[:, None])

    @triton.jit
    def _combine(Pm, Pl, Pacc, Out, b, h, heads, shares, sob, soh,  # type: ignore[no-untyped-def]
                 G: tl.constexpr, BLOCK_G: tl.constexpr, D: tl.constexpr):
        """The shares of (row b, key/value head h) combined, rescaled to their common
        maximum, into Out. Loads bypass L1 (`.cg`): other programs wrote the shares."""
        g = tl.arange(0, BLOCK_G)
        d = tl.arange(0, D)
        m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_G, D], tl.float32)
        for s in range(0, shares):
            part = (b * heads + h) * shares + s
            m_s = tl.load(Pm + part * BLOCK_G + g, cache_modifier=".cg")
            l_s = tl.load(Pl + part * BLOCK_G + g, cache_modifier=".cg")
            a_s = tl.load(Pacc + (part * BLOCK_G + g)[:, None] * D + d[None, :], cache_modifier=".cg")
            m_new = tl.maximum(m_i, m_s)
            base = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp(m_i - base)
            beta = tl.exp(m_s - base)
            acc = acc * alpha[:, None] + a_s * beta[:, None]
            l_i = l_i * alpha + l_s * beta
            m_i = m_new
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(Out + b * sob + (h * G + g)[:, None] * soh + d[None, :], out.to(Out.dtype.element_ty),
                 mask=(g < G)[:, None])

    @triton.jit
    def decode_split(Q, K, V, M, Pm, Pl, Pacc, Count, Out,  # type: ignore[no-untyped-def]
                     sqb, sqh, skb, skh, skn, svb, svh, svn, smb, smn, sob, soh,
                     keys, per_split, scale,
                     G: tl.constexpr, BLOCK_G: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr,
                     LAST_COMBINES: tl.constexpr):
        """One share of one row's keys: the partial softmax into Pm/Pl `[rows, kv, shares,
        BLOCK_G]` and Pacc `[rows, kv, shares, BLOCK_G, D]` (float32, contiguous). With
        LAST_COMBINES, the last program of a (row, head) to finish (counted in Count, which
        it leaves at zero again) combines the shares into Out: no second kernel."""
        b = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        s = tl.program_id(2)
        heads = tl.num_programs(1)
        shares = tl.num_programs(2)
        lo = s * per_split
        hi = tl.minimum(lo + per_split, keys)
        m_i, l_i, acc = _span(Q, K, V, M, b, h, lo, hi, sqb, sqh, skb, skh, skn, svb, svh, svn, smb, smn, scale,
                              G, BLOCK_G, D, BLOCK_N)
        part = (b * heads + h) * shares + s
        g = tl.arange(0, BLOCK_G)
        d = tl.arange(0, D)
        tl.store(Pm + part * BLOCK_G + g, m_i)
        tl.store(Pl + part * BLOCK_G + g, l_i)
        tl.store(Pacc + (part * BLOCK_G + g)[:, None] * D + d[None, :], acc)
        if LAST_COMBINES:
            # Every thread's stores done before the count (a release at GPU scope); the
            # program that counts last sees every share (an acquire).
            tl.debug_barrier()
            before = tl.atomic_add(Count + b * heads + h, 1, sem="acq_rel", scope="gpu")
            if before == shares - 1:
                _combine(Pm, Pl, Pacc, Out, b, h, heads, shares, sob, soh, G, BLOCK_G, D)
                tl.atomic_xchg(Count + b * heads + h, 0, sem="relaxed", scope="gpu")

    @triton.jit
    def decode_combine(Pm, Pl, Pacc, Out, sob, soh, shares,  # type: ignore[no-untyped-def]
                       G: tl.constexpr, BLOCK_G: tl.constexpr, D: tl.constexpr):
        """The shares of each (row, key/value head) combined, a program each."""
        _combine(Pm, Pl, Pacc, Out, tl.program_id(0).to(tl.int64), tl.program_id(1), tl.num_programs(1), shares,
                 sob, soh, G, BLOCK_G, D)

    _KERNELS = (decode_rows, decode_split, decode_combine)
    return _KERNELS


# The shared body of the one-pass and split kernels, a module global (Triton resolves a
# kernel's callees among its module's globals, not its closure); set by `_kernels`.
_span: Any = None
_combine: Any = None
_SMS: dict = {}
# Per device: zeroed int32 counters, one per (row, key/value head) of a split launch,
# which the kernel leaves at zero again. Shared by every launch: the engine runs one
# decode step at a time on one stream.
_COUNTS: dict = {}
# Whether the last program of a split (row, head) combines the shares itself (one kernel)
# rather than a second kernel doing it; `TRITONFORGE_POLICY_DECODE_COMBINE=kernel` for the
# second kernel.
LAST_COMBINES = os.environ.get("TRITONFORGE_POLICY_DECODE_COMBINE", "last") != "kernel"


# Counters per device: more than any split launch has (row, head) pairs, since a launch
# splits only below `PROGRAMS_PER_SM` programs per multiprocessor.
_COUNT_SIZE = 4096


def _counts(device: Any) -> Any:
    """The device's counters, made (zeroed) on first use: outside any CUDA graph capture
    in the engine, whose warm-up runs every step once first."""
    import torch

    if device not in _COUNTS:
        _COUNTS[device] = torch.zeros(_COUNT_SIZE, dtype=torch.int32, device=device)
    return _COUNTS[device]


def shares(pairs: int, keys: int, device: Any) -> Tuple[int, int]:
    """(shares, keys per share) for a launch of `pairs` (row, head) pairs over `keys`
    keys: shares of whole blocks, as many as bring the programs to `PROGRAMS_PER_SM` a
    multiprocessor, none left empty; (1, keys) is one pass."""
    import torch

    if device not in _SMS:
        cuda = getattr(device, "type", str(device)).startswith("cuda") and torch.cuda.is_available()
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count if cuda else DEFAULT_SMS
    blocks = -(-keys // BLOCK_N)
    n = max(1, min(blocks, (PROGRAMS_PER_SM * int(_SMS[device])) // max(pairs, 1)))
    if n == 1:
        return 1, keys
    per_share = -(-keys // (n * BLOCK_N)) * BLOCK_N
    return -(-keys // per_share), per_share


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
        _kernels()
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
    return (t == 1 and h % kv == 0 and value.dtype == query.dtype
            and d in (16, 32, 64, 128, 256) and h // kv <= 64
            and query.dtype in (torch.bfloat16, torch.float16) and key.dtype == query.dtype
            and query.is_cuda and key.stride(-1) == 1 and value.stride(-1) == 1 and query.stride(-1) == 1)


def _launch(query: Any, key: Any, value: Any, mask: Any, scale: float) -> Any:
    """Run the kernels: `query [b, h, 1, d]`, `key`/`value [b, kv, keys, d]` (any strides
    but the last), `mask [b, 1, 1, keys]` (nonzero: seen); returns `[b, 1, h, d]`."""
    import torch

    b, h, _, d = query.shape
    kv, keys = key.shape[1], key.shape[2]
    g = h // kv
    n, per_share = shares(b * kv, keys, query.device)
    shape = (g, d, str(query.dtype), str(query.device))
    # A split launch that failed once takes one pass from then on; a one-pass launch that
    # failed, SDPA.
    if n > 1 and ("split", *shape) in _BROKEN:
        n, per_share = 1, keys
    path = "split" if n > 1 else "one pass"
    if (path, *shape) not in _BROKEN:
        one_pass, split, combine = _kernels()
        out = torch.empty((b, 1, h, d), dtype=query.dtype, device=query.device)
        q = query[:, :, 0, :]
        block_g = max(MIN_GROUP, 1 << (g - 1).bit_length())
        strides = (q.stride(0), q.stride(1), key.stride(0), key.stride(1), key.stride(2),
                   value.stride(0), value.stride(1), value.stride(2), mask.stride(0), mask.stride(3))
        const = {"G": g, "BLOCK_G": block_g, "D": d}
        try:
            if n == 1:
                one_pass[(b, kv)](q, key, value, mask, out, *strides, out.stride(0), out.stride(2), keys, scale,
                                  BLOCK_N=BLOCK_N, **const)
                return out
            f32 = {"dtype": torch.float32, "device": query.device}
            pm = torch.empty((b, kv, n, block_g), **f32)
            pl = torch.empty((b, kv, n, block_g), **f32)
            pacc = torch.empty((b, kv, n, block_g, d), **f32)
            last = LAST_COMBINES and b * kv <= _COUNT_SIZE
            count = _counts(query.device) if last else pm
            split[(b, kv, n)](q, key, value, mask, pm, pl, pacc, count, out, *strides, out.stride(0),
                              out.stride(2), keys, per_share, scale, BLOCK_N=BLOCK_N, LAST_COMBINES=last,
                              **const)
            if not last:
                combine[(b, kv)](pm, pl, pacc, out, out.stride(0), out.stride(2), n, **const)
            return out
        except Exception as exc:  # noqa: BLE001 - a kernel that cannot build here: another path, for good
            _BROKEN.add((path, *shape))
            sys.stderr.write(f"decode kernel: {type(exc).__name__} in the {path} launch for {g} query heads per "
                             f"key/value head of size {d}; {'one pass' if n > 1 else 'SDPA'} from now on\n")
            if n > 1:
                return _launch(query, key, value, mask, scale)
    # SDPA over the same grouped heads (the first launch, which compiles, runs outside
    # any CUDA graph capture: the engine warms up first).
    return sdpa_grouped(query, key, value, mask.to(torch.bool), scale)


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
# (path, query heads per key/value head, head size, dtype, device) a launch failed for.
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
    d = int(query.shape[-1])
    # The boolean mask as it is (Triton loads a bool as a byte): a conversion here would
    # be one more kernel a layer, and a step at batch 1 is bound by its kernel count.
    return _op()(query, key, value, mask, float(scale if scale is not None else d ** -0.5))

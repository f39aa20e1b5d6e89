"""The policy worker's generation engine: continuous batching over a slot KV cache.

Built on torch and the model's own transformers code only. The pieces:

- `SlotCache`: per layer one key and one value tensor of `[slots, kv_heads, capacity + 1,
  head_dim]`. A request owns one slot (a row) for its life; position p of its sequence
  lives at column p. The last column is scratch: rows of a decode step that hold no
  running request write there and nothing ever reads it; such a row sees key 0 alone, so
  the decode attention loads next to nothing for it. The model's attention calls
  `update(key, value, layer)`; the cache writes the new keys at each row's own positions
  and hands back that row's keys (a view of the first B slots for a decode step, no
  copy). The mask is a 4-D boolean `[rows, 1, queries, keys]` built here (transformers
  uses such a mask as it is), so rows of different lengths share one step. On a CPU the
  capacity grows by doubling as requests need it (memory follows use); on a GPU it is
  `max_len` from the start, so captured graphs stay valid.
- Continuous batching: `submit` queues a request; every `step` first prefills waiting
  requests into free slots (each joins the very next decode step) and then runs one
  decode step over the first B slots, B the smallest bucket holding every running slot.
  A finished row frees its slot at once. Before a step, running rows above the bucket
  their number needs trade places with free slots below it (`_compact`, KV and state
  both ways), so B follows the running rows, not the highest slot an episode's next turn
  came back to for its prefix.
- Batched prefill: the requests admitted in one step are prefilled together, in forwards
  of rows of similar length (left-padded; padding writes to the scratch column), up to
  `prefill_tokens` padded tokens each. A request sharing a long prefix with another of
  the same wave waits for the next wave and copies that prefix (below). While rows are
  decoding, a request that comes alone is held up to `admit_wait` seconds (CUDA: 0.25)
  for others to share its forward (`_hold`): in a multi-turn rollout the next turns come
  back one at a time, as their verdicts do, and an eager forward costs about the same
  for one row as for several, while every running row waits for it.
- Sampling on the device for the whole batch: per-row temperature, top-k, top-p, seed,
  stop tokens and token budget live in device tensors indexed by slot. The draw is the
  Gumbel-max trick with noise from a counter-based hash of (seed, token index, vocab
  id): a row's tokens depend on its seed and its own history only, never on its
  batch-mates or on when it joined. Tokens and log-probs are written into per-slot
  device buffers; the host reads them back only when it checks for finished rows (every
  `sync_every` steps, or when a row has used its budget, which the host knows without
  asking).
- Log-probs: `logprobs` are the model's own distribution (untempered, unfiltered: what a
  trainer recomputes); `sampling_logprobs` the distribution the token was drawn from
  (temperature, top-k, top-p applied and renormalised; 0 for greedy rows).
- Prefix reuse: each slot remembers the tokens its KV holds (a running row: its prompt;
  a finished row: prompt and completion) and the weights version that computed them. A
  new request takes the free slot sharing its longest prefix (an episode's next turn
  extends the previous turn's slot) or copies a longer shared prefix from any slot (the
  n samples of one prompt, a system prompt); only the rest is prefilled. A weights
  change (`weights_changed`) forgets every remembered prefix.
- Prompt-lookup speculation on eager steps (the CPU's): each row also feeds the tokens
  that followed the latest earlier occurrence of its last few tokens (`Drafts`), and keeps
  the drawn tokens its draft agrees with (`_speculate`); the same tokens as one step at a
  time, in fewer forwards. Outside CUDA graphs a top-k/top-p draw is made among the 256
  most likely tokens where that set is known to hold it (`sample`'s `candidates`).
- On CUDA the decode step (forward, sampling and recording) is captured in a CUDA graph
  per (batch bucket, key-length bucket, filtering or not, sampling or greedy) and
  replayed; on the CPU it runs eagerly. With `compile` (the default on CUDA) the
  forward inside the graph is torch.compile'd with symbolic sizes (one compile for every
  bucket): fused kernels, about a third as many launches, half the step time.
- With `prefill_graphs` (off by default) a CUDA prefill forward of up to
  `PREFILL_GRAPH_TOKENS` padded tokens runs at a bucketed shape (rows to a power of two,
  new tokens and keys to steps of at most 1.5x; padding rows and tokens write the scratch
  column, padded keys are masked) and is replayed from a CUDA graph captured on the
  shape's first use (eager inside: prefill shapes vary too much for one compile). Alone
  on an H200 that is 2-5x faster than the eager forward, which is bound by its launches;
  beside 16 candidate processes' contexts it is no faster (time-slicing between contexts
  sets the cost), so it pays only on a GPU the engine does not share. With
  `prefill_buckets` alone the bucketed shapes run eagerly (fewer distinct shapes).
"""

from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Optional, Tuple

# Padded tokens per prefill forward (`Engine.prefill_tokens`), on the CPU and on CUDA.
PREFILL_TOKENS = 8192
PREFILL_TOKENS_CUDA = 32768
# Padded tokens (rows x new tokens) up to which a prefill forward runs at bucketed shapes
# from a CUDA graph (`Engine._prefill_shape`): the engine's waves are mostly a few rows of
# a few hundred new tokens, whose eager forward is its launches (28 ms alone on an H200
# for one row of 1,000 tokens, 67-118 ms beside 16 busy candidate contexts).
PREFILL_GRAPH_TOKENS = 16384
# How long (s) a request that arrives while rows decode may wait for others to share its
# prefill forward (`Engine._hold`), on CUDA; and how many waiting requests end the wait.
ADMIT_WAIT_CUDA = 0.25
HOLD_ROWS = 8
# Bounds of one row's stop tokens (padded with -1) and of the buckets.
MAX_STOPS = 8
LEN_BUCKET = 128
# Top-k/top-p sets are looked for among this many tokens first, outside CUDA graphs
# (`sample`'s `candidates`).
CANDIDATES = 256
# What `Engine.stats` counts. decode_rows: rows with a request, summed over decode steps;
# decode_width: rows computed (the batch bucket), likewise. prefill_padded: tokens computed
# by prefill forwards, padding included; prefill_graphs: prefill shapes captured. decode_ms and prefill_ms: the
# device's time in decode steps and prefill forwards (`Engine._clock`).
STAT_KEYS = ("prefill_tokens", "reused_tokens", "prefill_forwards", "decode_steps", "decode_rows",
             "decode_width", "graphs", "drafted", "accepted", "moved_rows", "decode_ms", "prefill_ms",
             "held_steps", "prefill_graphs", "prefill_padded")
_MASK64 = (1 << 64) - 1


class EngineError(ValueError):
    """A request the engine cannot take (too long for the cache, more samples than slots)."""


def _signed(c: int) -> int:
    """A 64-bit constant as the signed value torch's int64 arithmetic wraps around."""
    c &= _MASK64
    return c - (1 << 64) if c >> 63 else c


_C_SEED = _signed(0x9E3779B97F4A7C15)
_C_STEP = _signed(0xD1B54A32D192ED03)
_C_VOCAB = _signed(0x8CB92BA72F3D8DD7)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)


def _shr(x: Any, n: int) -> Any:
    """Logical right shift of int64 (torch's `>>` is arithmetic)."""
    return (x >> n) & ((1 << (64 - n)) - 1)


def uniform_noise(seed: Any, step: Any, vocab: int) -> Any:
    """Uniform (0, 1) floats `[rows, vocab]` from a splitmix64 hash of (seed, step, id):
    the same numbers on any device and in any batch."""
    import torch

    return noise_at(seed, step, torch.arange(vocab, device=seed.device, dtype=torch.int64).unsqueeze(0))


def noise_at(seed: Any, step: Any, ids: Any) -> Any:
    """`uniform_noise` at the vocabulary ids `ids` only (`[1 or rows, n]`): a token's noise
    depends on (seed, step, id) alone, so drawing among a few candidates gives the draw
    the whole vocabulary would."""
    x = (seed * _C_SEED + step * _C_STEP).unsqueeze(1) + ids * _C_VOCAB
    x = (x ^ _shr(x, 30)) * _MIX1
    x = (x ^ _shr(x, 27)) * _MIX2
    x = x ^ _shr(x, 31)
    return unit_interval(_shr(x, 41))


def unit_interval(bits: Any) -> Any:
    """23-bit integers to float32 strictly inside (0, 1). Not 24 bits: (2^24 - 0.5) / 2^24
    rounds to 1.0 in float32, whose Gumbel noise is +inf, and -inf + inf is NaN, which
    argmax picks: about one token in 300 was drawn from outside the top-p/top-k set."""
    import torch

    return (bits.to(torch.float32) + 0.5) * (1.0 / (1 << 23))


def sample(logits: Any, temp: Any, top_p: Any, top_k: Any, seed: Any, step: Any,
           filtered: bool, drawn: bool = True, candidates: int = 0) -> Tuple[Any, Any, Any]:
    """(token, model log-prob, sampling log-prob) per row, all on the device.

    `filtered`: whether any row asks for top-k or top-p (a sort of the vocabulary is
    skipped otherwise); `drawn`: whether any row samples (no noise is made otherwise).
    Greedy rows (temperature <= 0) take the argmax. `candidates` (eager callers only: it
    reads one flag back): look for each row's top-k/top-p set among its `candidates` most
    likely tokens, and sort the whole vocabulary only for the rows whose set may reach
    past them (`_sample_among`)."""
    import torch

    logits = logits.float()
    model_lp = torch.log_softmax(logits, dim=-1)
    greedy = temp <= 0
    scaled = logits / torch.where(greedy, torch.ones_like(temp), temp).unsqueeze(1)
    if filtered and drawn and 0 < candidates < scaled.shape[-1]:
        token, slp, outside = _sample_among(scaled, greedy, top_p, top_k, seed, step, candidates)
        if bool(outside.any()):  # those rows sort the whole vocabulary
            rows = outside.nonzero().squeeze(1)
            full = sample(logits[rows], temp[rows], top_p[rows], top_k[rows], seed[rows], step[rows], True, True)
            token, slp = token.index_copy(0, rows, full[0]), slp.index_copy(0, rows, full[2])
        token = torch.where(greedy, torch.argmax(logits, dim=-1), token)
        lp = model_lp.gather(1, token.unsqueeze(1)).squeeze(1)
        return token, lp, torch.where(greedy, torch.zeros_like(lp), slp)
    if filtered:
        ordered, order = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        rank = torch.arange(scaled.shape[-1], device=scaled.device).unsqueeze(0)
        k = torch.where(top_k > 0, top_k, torch.full_like(top_k, scaled.shape[-1])).unsqueeze(1)
        # The smallest prefix whose mass reaches top_p (the first token always stays).
        drop = ((torch.cumsum(probs, dim=-1) - probs) >= top_p.unsqueeze(1)) | (rank >= k)
        scaled = torch.full_like(scaled, float("-inf")).scatter(1, order, ordered.masked_fill(drop, float("-inf")))
    token = torch.argmax(logits, dim=-1)
    pick = token.unsqueeze(1)
    if not drawn:  # every row greedy: the sampling distribution is a point mass
        lp = model_lp.gather(1, pick).squeeze(1)
        return token, lp, torch.zeros_like(lp)
    samp_lp = torch.log_softmax(scaled, dim=-1)
    gumbel = -torch.log(-torch.log(uniform_noise(seed, step, scaled.shape[-1])))
    token = torch.where(greedy, token, torch.argmax(samp_lp + gumbel, dim=-1))
    pick = token.unsqueeze(1)
    lp = model_lp.gather(1, pick).squeeze(1)
    slp = torch.where(greedy, torch.zeros_like(lp), samp_lp.gather(1, pick).squeeze(1))
    return token, lp, slp


def _sample_among(scaled: Any, greedy: Any, top_p: Any, top_k: Any, seed: Any, step: Any,
                  n: int) -> Tuple[Any, Any, Any]:
    """(token, sampling log-prob, outside) per row, drawn among the row's `n` highest
    scores; `outside` marks the sampling rows whose top-k/top-p set might reach past them
    (their draw must come from a sort of the whole vocabulary). Elsewhere the set is the
    one such a sort gives: the tokens past the n-th are all dropped when the n before them
    already hold `top_p` of the mass, or when top-k is at most n. The Gumbel noise of a
    token depends on its id, not its rank, so the draw is the same too. A sort of 49,152
    scores per row per step was a sixth of a CPU decode step at ten rows."""
    import torch

    lse = torch.logsumexp(scaled, dim=-1, keepdim=True)
    vals, ids = torch.topk(scaled, n, dim=-1)
    probs = torch.exp(vals - lse)
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, scaled.shape[-1]))
    outside = ~(greedy | (k <= n) | (probs.sum(dim=-1) >= top_p))
    rank = torch.arange(n, device=scaled.device).unsqueeze(0)
    drop = ((torch.cumsum(probs, dim=-1) - probs) >= top_p.unsqueeze(1)) | (rank >= k.unsqueeze(1))
    kept = vals.masked_fill(drop, float("-inf"))
    samp_lp = kept - torch.logsumexp(kept, dim=-1, keepdim=True)
    gumbel = -torch.log(-torch.log(noise_at(seed, step, ids)))
    choice = torch.argmax(samp_lp + gumbel, dim=-1, keepdim=True)
    return ids.gather(1, choice).squeeze(1), samp_lp.gather(1, choice).squeeze(1), outside


DECODE_ATTENTION = "tritonforge_decode"
# Queries per row up to which the decode attention groups heads (a speculative step's);
# longer (a prefill) take transformers' own path.
MAX_GROUPED_QUERIES = 32


def register_decode_attention() -> bool:
    """Register the engine's attention with transformers (as `DECODE_ATTENTION`): SDPA,
    except that a decode step (one query per row) of grouped-query attention takes the
    query heads sharing a key/value head as that head's queries, so the keys and values
    are read once, in place. transformers' SDPA path copies them once per query head
    (`repeat_kv`) whenever a mask is given, and the engine always gives one: at 128 rows
    of 3,000 positions that copying, not the attention, was most of a decode step. A
    speculative step (a few queries per row) is grouped too; prefill and models without
    grouped heads take transformers' own SDPA path. On CUDA a decode step in half
    precision takes the Triton kernel of `decode_kernel` instead: at batch 256 cuDNN's
    masked SDPA was half of an H100's decode step."""
    try:
        import torch.nn.functional as F
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        from . import decode_kernel
    except ImportError:
        return False
    kernel = decode_kernel.enabled()

    def attend(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
               scaling: Optional[float] = None, dropout: float = 0.0, **kw: Any) -> Tuple[Any, None]:
        b, h, t, d = query.shape
        kv = key.shape[1]
        if t == 1 and not dropout and kernel and decode_kernel.usable(query, key, value, attention_mask, **kw):
            return decode_kernel.attend(query, key, value, attention_mask, scaling), None
        four = attention_mask is not None and attention_mask.dim() == 4
        few = 1 < t <= MAX_GROUPED_QUERIES and four and attention_mask.shape[1] == 1
        if h == kv or h % kv or dropout or not ((t == 1 and (four or attention_mask is None)) or few):
            out, _ = sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                            dropout=dropout, **kw)
            return out, None
        # Head i uses key/value head i // (h // kv): the groups are consecutive heads.
        g = h // kv
        if t == 1:
            return decode_kernel.sdpa_grouped(query, key, value, attention_mask, scaling), None
        # A few queries per row (a speculative step's drafts) stack the same way, each
        # query head's rows keeping their own line of the mask.
        q = query.reshape(b, kv, g * t, d)
        out = F.scaled_dot_product_attention(q, key, value, attn_mask=attention_mask.repeat(1, 1, g, 1),
                                             scale=scaling)
        # reshape, not view: a CUDA kernel may hand back a non-contiguous output.
        return out.reshape(b, h, t, d).transpose(1, 2), None

    AttentionInterface.register(DECODE_ATTENTION, attend)
    AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)
    return True


def decode_attention() -> str:
    """The attention implementation a generation model is best loaded with."""
    return DECODE_ATTENTION if register_decode_attention() else "sdpa"


class SlotCache:
    """The KV cache the model's attention writes into (see the module's docstring)."""

    def __init__(self, cfg: Any, slots: int, capacity: int, dtype: Any, device: str) -> None:
        heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
        self.layers = int(cfg.num_hidden_layers)
        self.slots, self.dtype, self.device = slots, dtype, device
        self.capacity = 0
        self.k: List[Any] = []
        self.v: List[Any] = []
        self.grow(capacity)
        # Set before each forward: the rows written and read, where, and how many keys.
        self.rows: Any = None
        self.cols: Any = None
        self.keys = 0
        self.view: Optional[int] = None
        self.gather: Any = None

    def grow(self, capacity: int) -> None:
        """Make room for `capacity` positions per slot (plus the scratch column)."""
        import torch

        if capacity <= self.capacity:
            return
        shape = (self.slots, self.kv_heads, capacity + 1, self.head_dim)
        new_k = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.layers)]
        new_v = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(self.layers)]
        for old, new in zip(self.k + self.v, new_k + new_v, strict=False):  # none the first time
            new[:, :, : self.capacity].copy_(old[:, :, : self.capacity])
        self.k, self.v, self.capacity = new_k, new_v, capacity

    @property
    def scratch(self) -> int:
        return self.capacity

    def update(self, key: Any, value: Any, layer_idx: int, *args: Any, **kwargs: Any) -> Tuple[Any, Any]:
        k, v = self.k[layer_idx], self.v[layer_idx]
        # key: [rows, heads, queries, dim] -> written at (slot, column) per query.
        k[self.rows, :, self.cols] = key.transpose(1, 2).to(k.dtype)
        v[self.rows, :, self.cols] = value.transpose(1, 2).to(v.dtype)
        if self.view is not None:
            return k[: self.view, :, : self.keys], v[: self.view, :, : self.keys]
        return (k[:, :, : self.keys].index_select(0, self.gather),
                v[:, :, : self.keys].index_select(0, self.gather))

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        for t in self.k + self.v:
            t[dst, :, :length].copy_(t[src, :, :length])

    # What transformers may ask of a cache object that is not one of its own.
    is_compileable = False

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys


@dataclass
class Request:
    """One completion to generate, as token ids."""

    key: Any
    prompt: List[int]
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: Optional[int] = None
    stop: List[int] = field(default_factory=list)
    submitted: float = field(default_factory=time.perf_counter)


@dataclass
class Finished:
    key: Any
    prompt: List[int]
    tokens: List[int]
    logprobs: List[float]
    sampling_logprobs: List[float]
    finish_reason: str
    elapsed_ms: float


@dataclass
class _Slot:
    request: Optional[Request] = None
    tokens: List[int] = field(default_factory=list)  # what the slot's KV holds
    version: int = -1
    used: int = 0  # when last taken (LRU among free slots)
    steps: int = 0  # tokens generated, as far as the host knows (an upper bound)
    drafts: Optional["Drafts"] = None  # a running row's history, when the engine speculates
    span: int = 0  # the row's next draft length


# Prompt lookup: the n-gram lengths tried, longest first; the longest draft (the default of
# `Engine(speculate=...)`), and the length a row starts with. A row's draft length doubles
# after a draft kept whole and halves after one mostly refused: on 2 CPU cores a drafted
# token costs about 3 ms of a step's 110 (ten rows of 1,000-2,000 tokens), so a first turn
# (a third of drafts kept) wants short drafts and a turn repeating the last one long ones.
NGRAMS = (4, 3, 2)
SPECULATE = 16
SPAN_START = 4


class Drafts:
    """Prompt-lookup drafts for one row: the tokens that followed the latest earlier
    occurrence of the row's last n tokens (n in `NGRAMS`, longest first), in its prompt or
    its own completion. A code model copies a great deal (the task's module, the worked
    example, its own previous turn, which a multi-turn prompt holds), and on the quick
    set's real episodes such drafts cut the forwards a completion needs 3.7 times (2.4 in
    first turns)."""

    def __init__(self, tokens: List[int]) -> None:
        self.hist: List[int] = []
        self.index: Dict[int, Dict[Tuple[int, ...], int]] = {n: {} for n in NGRAMS}
        self.extend(tokens)

    def extend(self, tokens: List[int]) -> None:
        for t in tokens:
            self.hist.append(t)
            p = len(self.hist) - 1  # the n-grams ending just before p are followed by hist[p]
            for n, index in self.index.items():
                if p >= n:
                    index[tuple(self.hist[p - n:p])] = p

    def draft(self, room: int) -> List[int]:
        for n, index in self.index.items():
            if len(self.hist) >= n:
                p = index.get(tuple(self.hist[-n:]))
                if p is not None:
                    return self.hist[p:p + room]
        return []


def _common(a: List[int], b: List[int]) -> int:
    n = min(len(a), len(b))
    if n == 0 or a[0] != b[0]:
        return 0
    import numpy as np

    same = np.asarray(a[:n]) == np.asarray(b[:n])
    return n if bool(same.all()) else int(np.argmin(same))


def _span(n: int) -> int:
    """The bucket of a prefill forward's new tokens or keys: a power of two up to 64,
    then steps of 1.5x and 1.33x (96, 128, 192, 256, ...), so padding stays under half and
    a run meets a few dozen shapes."""
    b = 1
    while b < n:
        b = b * 3 // 2 if b >= 64 and b & (b - 1) == 0 else (b * 4 // 3 if b > 64 else b * 2)
    return b


def _buckets(limit: int) -> List[int]:
    out, b = [], 1
    while b < limit:
        out.append(b)
        b *= 2
    return out + [limit]


class Engine:
    """Continuous batching over `max_slots` rows of at most `max_len` tokens each."""

    def __init__(self, net: Any, device: str, max_slots: int = 16, max_len: int = 4096,
                 sync_every: Optional[int] = None, graphs: Optional[bool] = None,
                 min_prefix: int = 16, prefill_tokens: Optional[int] = None, compile: Optional[bool] = None,
                 join: Optional[bool] = None, speculate: Optional[int] = None,
                 stats: Optional[Dict[str, float]] = None, compact: bool = True,
                 admit_wait: Optional[float] = None, prefill_graphs: Optional[bool] = None,
                 prefill_buckets: Optional[bool] = None) -> None:
        import torch

        from .joined import join_projections

        self.net, self.device = net, device
        self.max_slots, self.max_len = max_slots, max_len
        cuda = device.startswith("cuda")
        self.sync_every = sync_every if sync_every is not None else (8 if cuda else 1)
        self.use_graphs = cuda if graphs is None else graphs and cuda
        self.compiled = cuda if compile is None else compile
        # q/k/v and gate/up as one matmul each (joined.py): fewer launches a step. Frozen
        # models only; on the CPU off by default, so its tokens stay what they were.
        self.joined = join_projections(net) if (cuda if join is None else join) else 0
        self._forward = self._logits
        if self.compiled:
            import torch._dynamo

            # One compile for every batch and key-length bucket (sizes symbolic); the
            # limit only matters for the few shapes dynamo still specialises (batch 1).
            if getattr(torch._dynamo.config, "recompile_limit", 64) < 64:
                torch._dynamo.config.recompile_limit = 64
            import torch._inductor.config

            # Round where eager rounds (bf16 after each op), so the compiled step's
            # log-probs stay as close to an eager forward's as the eager step's are: fused
            # kernels otherwise keep the residual stream in float32, and over 30 layers
            # SmolLM2's worst log-prob moved 0.94 from a full forward's (0.16 eager, 0.34
            # with this; the 99th percentile is 0.1 in all three, on the CPU in bf16).
            opts = {k: True for k in ("emulate_precision_casts",) if hasattr(torch._inductor.config, k)}
            self._forward = torch.compile(self._logits, dynamic=True, options=opts)
        self.min_prefix = min_prefix
        self.compact = compact
        self.on_cuda = cuda
        # Padded tokens per prefill forward. On an H100, 256 prompts of 200 tokens took
        # 0.41 s in forwards of 8,192 and 0.15 s in forwards of 32,768: an eager forward
        # is launch-bound well past a few thousand tokens.
        if prefill_tokens is None:
            prefill_tokens = PREFILL_TOKENS_CUDA if cuda else PREFILL_TOKENS
        self.prefill_tokens = max(prefill_tokens, 1)
        # The prefill hold (`_hold`); none on the CPU, where a forward's cost follows its
        # tokens rather than its launches.
        self.admit_wait = max(ADMIT_WAIT_CUDA if admit_wait is None and cuda else admit_wait or 0.0, 0.0)
        # Prefill forwards at bucketed shapes (`_prefill_shape`), replayed from a CUDA graph
        # per shape where decode steps are graphed. Off by default: beside a colocated
        # evaluator's candidate contexts a graphed forward cost what an eager one does (RL
        # run 15, docs/rl.md), and capturing its shapes slowed the first step; on a GPU of
        # its own it is 2-5x faster. On the CPU, True pads to the same shapes and runs
        # them eagerly (what the tests check).
        # `prefill_buckets` alone: the same bucketed shapes run eagerly. Why: an eager
        # forward at a shape seen before cost 37 ms on an H200 where a new shape's averaged
        # 65-70 over two (bench_contention.py --prefix-tokens), and a run's shapes are
        # almost all new; buckets make them repeat. Off by default until a run measures it.
        self.prefill_graphed = bool(prefill_graphs)
        self.prefill_buckets = self.prefill_graphed or bool(prefill_buckets)
        self.prefill_graphs: Dict[Tuple[int, int, int], Tuple[Any, ...]] = {}
        # Prompt-lookup speculation (`_speculate`): up to this many drafted tokens per row
        # and step, checked in one forward. Only where steps run eagerly (a CUDA graph
        # replays fixed shapes and reads nothing back), so by default on the CPU alone.
        eager = not self.use_graphs and not self.compiled
        self.speculate = max(SPECULATE if speculate is None else speculate, 0) if eager else 0
        self._pending: set = set()  # slots claimed by the wave being prefilled (KV not written yet)
        cfg = net.config
        dtype = next(net.parameters()).dtype
        self.cache = SlotCache(cfg, max_slots, max_len if cuda else min(max_len, 256), dtype, device)
        self.vocab = int(net.get_output_embeddings().weight.shape[0])
        S, L = max_slots, max_len

        def z(*shape: int, dt: Any = torch.long) -> Any:
            return torch.zeros(shape, dtype=dt, device=device)

        self.last_tok, self.pos, self.gen, self.max_new = z(S), z(S), z(S), z(S)
        self.seed, self.top_k = z(S), z(S)
        self.temp, self.top_p = z(S, dt=torch.float32), z(S, dt=torch.float32)
        self.live, self.done = z(S, dt=torch.bool), z(S, dt=torch.bool)
        self.stops = torch.full((S, MAX_STOPS), -1, dtype=torch.long, device=device)
        self.out_tok, self.out_lp, self.out_slp = z(S, L), z(S, L, dt=torch.float32), z(S, L, dt=torch.float32)
        self.arange = torch.arange(S, device=device)
        self.slots = [_Slot() for _ in range(S)]
        self.waiting: Deque[Request] = deque()
        self.version = 0
        self.clock = 0
        self.since_sync = 0
        self.graphs: Dict[Tuple[int, int, bool, bool], Any] = {}
        self.pool: Any = None
        # A compiled step specialises batch 1 (a second compile, a minute or more, that
        # could fall in the middle of a run when one row is left): with more than one
        # slot it never runs a batch of 1 (an idle row rides along instead).
        self.batch_buckets = [b for b in _buckets(S) if b > 1 or S == 1 or not self.compiled]
        # Counts, into `stats` when given: the worker's, kept across the engines it makes.
        self.stats = stats if stats is not None else {}
        for k in STAT_KEYS:
            self.stats.setdefault(k, 0)
        # Device-time brackets (stat key, start, end) not yet read: CUDA events, read at the
        # next `_sync` (its device read has waited for them), so timing adds no sync.
        self._brackets: List[Tuple[str, Any, Any]] = []

    # -- requests ------------------------------------------------------------------------

    def check(self, req: Request, n: int = 1) -> None:
        """Raise EngineError when `req` (n samples of it) can never run here."""
        if not req.prompt:
            raise EngineError("an empty prompt: there is nothing to continue")
        need = len(req.prompt) + max(req.max_tokens, 0)
        if need > self.max_len:
            raise EngineError(f"prompt ({len(req.prompt)} tokens) + max_tokens ({req.max_tokens}) = {need} exceeds "
                              f"the engine's max_len ({self.max_len}); shorten the prompt or lower max_tokens")
        if n > self.max_slots:
            raise EngineError(f"{n} samples at once exceed the engine's {self.max_slots} slots")
        if len(req.stop) > MAX_STOPS:
            raise EngineError(f"{len(req.stop)} stop tokens; at most {MAX_STOPS}")

    def submit(self, req: Request) -> None:
        self.check(req)
        self.waiting.append(req)

    def busy(self) -> bool:
        return bool(self.waiting) or any(s.request is not None for s in self.slots)

    def weights_changed(self) -> None:
        """The parameters changed (an optimizer step): remembered prefixes are stale.
        Captured graphs (and the compiled step, which takes the parameters as inputs, not
        constants) read them in place and stay valid."""
        self.forget_prefixes()

    def forget_prefixes(self) -> None:
        """Never reuse what the free slots hold (the next prompts prefill in full)."""
        self.version += 1
        for s in self.slots:
            if s.request is None:
                s.tokens, s.version = [], -1

    def abort(self) -> List[Any]:
        """Drop every request (after a failed step); the keys of those dropped."""
        keys = [r.key for r in self.waiting] + [s.request.key for s in self.slots if s.request is not None]
        self.waiting.clear()
        for s in self.slots:
            s.request, s.tokens, s.version = None, [], -1
        self._pending.clear()
        self.live.zero_()
        return keys

    # -- one step ------------------------------------------------------------------------

    def step(self) -> List[Finished]:
        """Admit what fits, run one decode step, return the rows that finished."""
        import torch

        with torch.no_grad():
            finished = self._admit()
            running = [i for i, s in enumerate(self.slots) if s.request is not None]
            if not running:
                return finished
            if self._at_budget(running):
                return finished + self._sync()
            if self.compact:
                running = self._compact(running)
            self._decode(max(running) + 1)
            self.since_sync += 1
            if self.since_sync >= self.sync_every or self._at_budget(running):
                finished += self._sync()
        return finished

    def run(self, reqs: List[Request]) -> List[Finished]:
        """Generate for every request (keys distinct) to the end; results in the order given."""
        for r in reqs:
            self.submit(r)
        done: Dict[Any, Finished] = {}
        while self.busy():
            for f in self.step():
                done[f.key] = f
        return [done[r.key] for r in reqs]

    def _at_budget(self, running: List[int]) -> bool:
        return any(self.slots[i].steps >= self.slots[i].request.max_tokens for i in running)  # type: ignore[union-attr]

    def _admit(self) -> List[Finished]:
        """Prefill waiting requests into free slots, in waves: each wave's prompts run in
        batched forwards. A request sharing a long prefix with a prompt of the same wave
        waits for the next wave, so that it copies that prefix instead of computing it
        again (the n samples of one prompt prefill it once)."""
        finished: List[Finished] = []
        if self._hold():
            self.stats["held_steps"] += 1
            return finished
        while self.waiting:
            wave: List[Tuple[int, Request, int]] = []
            later: List[Request] = []
            while self.waiting:
                req = self.waiting[0]
                if req.max_tokens <= 0:
                    self.waiting.popleft()
                    finished.append(Finished(req.key, req.prompt, [], [], [], "length",
                                             (time.perf_counter() - req.submitted) * 1000.0))
                    continue
                if wave and self._better_later(req, wave):
                    later.append(self.waiting.popleft())
                    continue
                slot = self._choose(req.prompt)
                if slot is None:
                    break
                self.waiting.popleft()
                wave.append((slot, req, self._claim(slot, req)))
            self.waiting.extendleft(reversed(later))
            if not wave:
                break
            self._prefill(wave)
            self._pending.clear()
        return finished

    def _hold(self) -> bool:
        """Whether the waiting requests wait one more decode step for company: only while
        rows are decoding (an idle engine admits at once), fewer than `HOLD_ROWS` wait and
        none has waited `admit_wait`."""
        if not self.waiting or self.admit_wait <= 0 or len(self.waiting) >= HOLD_ROWS:
            return False
        if not any(s.request is not None for s in self.slots):
            return False
        oldest = min(r.submitted for r in self.waiting)
        return time.perf_counter() - oldest < self.admit_wait

    def _better_later(self, req: Request, wave: List[Tuple[int, Request, int]]) -> bool:
        """Whether `req` shares with a prompt of this wave a prefix longer (by
        `min_prefix`) than any filled slot offers it now."""
        shared = max(_common(req.prompt, w.prompt) for _, w, _ in wave)
        if shared < self.min_prefix:
            return False
        have = max((_common(req.prompt, s.tokens) for i, s in enumerate(self.slots)
                    if i not in self._pending and s.version == self.version and s.tokens), default=0)
        return shared >= have + self.min_prefix

    def _choose(self, prompt: List[int]) -> Optional[int]:
        """A free slot for `prompt`: the one whose remembered tokens share the longest
        prefix with it, else the lowest cold one, else the least recently used."""
        free = [i for i, s in enumerate(self.slots) if s.request is None]
        if not free:
            return None
        best, best_len = None, 0
        for i in free:
            s = self.slots[i]
            if s.version == self.version and s.tokens:
                n = _common(prompt, s.tokens)
                if n > best_len:
                    best, best_len = i, n
        if best is not None and best_len >= self.min_prefix:
            return best
        cold = [i for i in free if self.slots[i].version != self.version or not self.slots[i].tokens]
        if cold:
            return cold[0]
        return min(free, key=lambda i: self.slots[i].used)

    def _reuse(self, slot: int, prompt: List[int]) -> int:
        """How much of `prompt` the slot's KV already holds, after copying a longer shared
        prefix from another slot when one has it."""
        limit = len(prompt) - 1  # the last prompt token is always run: its logits are needed
        s = self.slots[slot]
        have = min(_common(prompt, s.tokens), limit) if s.version == self.version else 0
        src, src_len = None, have
        for i, o in enumerate(self.slots):
            if i != slot and i not in self._pending and o.version == self.version and o.tokens:
                n = min(_common(prompt, o.tokens), limit)
                if n > src_len:
                    src, src_len = i, n
        if src is not None and src_len >= max(self.min_prefix, have + 1):
            self.cache.copy_prefix(src, slot, src_len)
            return src_len
        return have if have >= 1 else 0

    def _claim(self, slot: int, req: Request) -> int:
        """Give `slot` to `req` (copying a shared prefix into it); how many prompt tokens
        its KV already holds."""
        self._ensure(len(req.prompt) + req.max_tokens)
        start = self._reuse(slot, req.prompt)
        s = self.slots[slot]
        self.clock += 1
        s.request, s.tokens, s.version, s.used, s.steps = req, list(req.prompt), self.version, self.clock, 1
        s.drafts = Drafts(req.prompt) if self.speculate else None
        s.span = min(SPAN_START, self.speculate)
        self._pending.add(slot)
        self.stats["prefill_tokens"] += len(req.prompt) - start
        self.stats["reused_tokens"] += start
        return start

    def _prefill(self, wave: List[Tuple[int, Request, int]]) -> None:
        """Run the new prompt tokens of a wave, in batched forwards of rows of similar
        length (left-padded, so each row's last token is the last position), and sample
        each row's first token."""
        order = sorted(wave, key=lambda w: len(w[1].prompt) - w[2])
        chunk: List[Tuple[int, Request, int]] = []
        for item in order:
            n = len(item[1].prompt) - item[2]
            if chunk:
                first = len(chunk[0][1].prompt) - chunk[0][2]
                if (len(chunk) + 1) * n > self.prefill_tokens or n > 2 * first + LEN_BUCKET:
                    self._prefill_rows(chunk)
                    chunk = []
            chunk.append(item)
        if chunk:
            self._prefill_rows(chunk)

    def _prefill_rows(self, rows: List[Tuple[int, Request, int]]) -> None:
        began = self._clock()
        self._prefill_forward(rows)
        self._clocked("prefill_ms", began)

    def _prefill_forward(self, rows: List[Tuple[int, Request, int]]) -> None:
        import torch

        dev = self.device
        width = max(len(r.prompt) - start for _, r, start in rows)
        keys = max(len(r.prompt) for _, r, _ in rows)
        shape = self._prefill_shape(len(rows), width, keys)
        R, W, K = shape or (len(rows), width, keys)
        scratch = self.cache.scratch
        ids, cols, slots = [], [], [slot for slot, _, _ in rows]
        for _, r, start in rows:
            pad = W - (len(r.prompt) - start)
            ids.append([0] * pad + r.prompt[start:])
            cols.append([scratch] * pad + list(range(start, len(r.prompt))))
        # Rows beyond the wave (a bucket's padding) write the first row's scratch column only.
        ids += [[0] * W for _ in range(R - len(rows))]
        cols += [[scratch] * W for _ in range(R - len(rows))]
        slots += [slots[0]] * (R - len(rows))
        ids_t = torch.tensor(ids, dtype=torch.long, device=dev)
        cols_t = torch.tensor(cols, dtype=torch.long, device=dev)
        slots_t = torch.tensor(slots, device=dev)
        self.stats["prefill_padded"] += R * W
        if shape is not None and self.on_cuda and self.use_graphs and self.prefill_graphed:
            logits = self._prefill_graphed(shape, ids_t, cols_t, slots_t)[: len(rows)]
        else:
            logits = self._columns(ids_t, cols_t, slots_t.unsqueeze(1), K, None, slots_t, 1)[: len(rows), -1]
        idx = slots_t[: len(rows)]
        self._set_rows([slot for slot, _, _ in rows], [r for _, r, _ in rows])
        self.stats["prefill_forwards"] += 1
        reqs = [r for _, r, _ in rows]
        filtered = any(r.top_k > 0 or 0 < r.top_p < 1 for r in reqs)
        drawn = any(r.temperature > 0 for r in reqs)
        tok, lp, slp = sample(logits, self.temp[idx], self.top_p[idx], self.top_k[idx], self.seed[idx],
                              self.gen[idx], filtered, drawn, CANDIDATES)
        self._record(idx, tok, lp, slp, torch.ones(len(rows), dtype=torch.bool, device=dev))

    def _prefill_shape(self, n: int, width: int, keys: int) -> Optional[Tuple[int, int, int]]:
        """The bucketed (rows, new tokens, keys) a prefill forward of `n` rows runs at, or
        None (exact shapes, eagerly) when buckets are off or the bucket is over
        `PREFILL_GRAPH_TOKENS` (a forward that large is not bound by its launches, and its
        graph would hold that much memory for good). Rows pad to a power of two; padding
        tokens write the scratch column and padded keys are masked, so each real row gets
        what it gets at its exact shape."""
        if not self.prefill_buckets:
            return None
        R = 1 << max(n - 1, 0).bit_length()
        K = min(_span(keys), self.cache.capacity)
        W = min(_span(width), K)
        return (R, W, K) if R * W <= PREFILL_GRAPH_TOKENS else None

    def _prefill_graphed(self, shape: Tuple[int, int, int], ids: Any, cols: Any, slots: Any) -> Any:
        """The last position's logits of a prefill forward at a bucketed `shape`, replayed
        from the CUDA graph captured on its first use. A shape that fails to capture turns
        prefill graphs off for good (the shapes stay bucketed) and runs eagerly, never
        failing the request."""
        import sys

        entry = self.prefill_graphs.get(shape)
        if entry is None:
            try:
                entry = self._capture_prefill(shape, ids, cols, slots)
            except Exception as exc:  # noqa: BLE001 - fall back, never fail the request
                sys.stderr.write(f"engine: CUDA graph of a prefill forward {shape} failed "
                                 f"({type(exc).__name__}: {exc}); prefilling eagerly\n")
                self.prefill_graphed = False
                return self._columns(ids, cols, slots.unsqueeze(1), shape[2], None, slots, 1)[:, -1]
            self.prefill_graphs[shape] = entry
            self.stats["prefill_graphs"] += 1
        graph, ids_s, cols_s, slots_s, out = entry
        ids_s.copy_(ids)
        cols_s.copy_(cols)
        slots_s.copy_(slots)
        graph.replay()
        return out

    def _capture_prefill(self, shape: Tuple[int, int, int], ids: Any, cols: Any, slots: Any) -> Tuple[Any, ...]:
        """Capture a prefill forward at `shape` on static copies of this wave's inputs,
        after one eager warm-up (it writes this wave's KV, as the replay that follows will
        again)."""
        keys = shape[2]
        ids_s, cols_s, slots_s = ids.clone(), cols.clone(), slots.clone()
        graph, out = self._capture_graph(
            lambda: self._columns(ids_s, cols_s, slots_s.unsqueeze(1), keys, None, slots_s, 1)[:, -1], 1)
        return graph, ids_s, cols_s, slots_s, out

    def _columns(self, ids: Any, cols: Any, rows: Any, keys: int, view: Optional[int], gather: Any,
                 keep: int) -> Any:
        """The logits of the last `keep` positions of a forward of `ids`, each written at
        its column of `cols` in its slot of `rows` (the cache's `update` reads its keys as a
        view of the first `view` slots, or gathers `gather`). Each query sees the keys up to
        its own column. Padding writes to the scratch column, sees every key (finite, never
        used) and sits at position 0."""
        import torch

        c = self.cache
        c.rows, c.cols, c.keys, c.view, c.gather = rows, cols, keys, view, gather
        mask = (torch.arange(keys, device=self.device).view(1, 1, keys) <= cols.unsqueeze(2)).unsqueeze(1)
        positions = torch.where(cols == c.scratch, torch.zeros_like(cols), cols)
        return self.net(input_ids=ids, position_ids=positions, attention_mask=mask, past_key_values=c,
                        use_cache=True, logits_to_keep=keep).logits

    def _set_rows(self, slots: List[int], reqs: List[Request]) -> None:
        """Each row's sampling settings and budget, written in one copy per tensor."""
        import torch

        dev = self.device
        idx = torch.tensor(slots, device=dev)
        seeds = [_signed(int(r.seed if r.seed is not None else random.getrandbits(62))) for r in reqs]
        self.temp[idx] = torch.tensor([float(r.temperature) for r in reqs], device=dev)
        self.top_p[idx] = torch.tensor([float(r.top_p) if 0 < r.top_p < 1 else 1.0 for r in reqs], device=dev)
        self.top_k[idx] = torch.tensor([max(int(r.top_k), 0) for r in reqs], device=dev)
        self.seed[idx] = torch.tensor(seeds, dtype=torch.long, device=dev)
        self.max_new[idx] = torch.tensor([int(r.max_tokens) for r in reqs], device=dev)
        self.pos[idx] = torch.tensor([len(r.prompt) - 1 for r in reqs], device=dev)
        self.stops[idx] = torch.tensor([r.stop + [-1] * (MAX_STOPS - len(r.stop)) for r in reqs], device=dev)
        self.gen[idx] = 0
        self.done[idx] = False
        self.live[idx] = True

    def _ensure(self, length: int) -> None:
        if length > self.cache.capacity:
            cap = self.cache.capacity
            while cap < length:
                cap *= 2
            self.cache.grow(min(cap, self.max_len))
            self.graphs.clear()
            self.prefill_graphs.clear()

    def _record(self, idx: Any, tok: Any, lp: Any, slp: Any, active: Any) -> None:
        """Store one sampled token per row of `idx` (only where `active`) and advance."""
        import torch

        g = self.gen[idx]
        col = g.clamp(max=self.max_len - 1)
        self.out_tok[idx, col] = torch.where(active, tok, self.out_tok[idx, col])
        self.out_lp[idx, col] = torch.where(active, lp, self.out_lp[idx, col])
        self.out_slp[idx, col] = torch.where(active, slp, self.out_slp[idx, col])
        hit = (tok.unsqueeze(1) == self.stops[idx]).any(dim=1)
        step = active.long()
        self.gen[idx] = g + step
        self.pos[idx] = self.pos[idx] + step
        self.done[idx] = self.done[idx] | (active & (hit | (g + step >= self.max_new[idx])))
        self.last_tok[idx] = torch.where(active, tok, self.last_tok[idx])

    def _width(self, needed: int) -> int:
        """The rows a decode step computes for `needed` slots (a bucket, except eagerly)."""
        if not self.use_graphs and not self.compiled:
            return needed
        return next(b for b in self.batch_buckets if b >= needed)

    def _compact(self, running: List[int]) -> List[int]:
        """Trade the running rows above the bucket their number needs for free slots below
        it, so the step computes that bucket. Why: an episode's next turn returns to the
        slot holding its last turn's KV (prefix reuse), wherever it is, and in run 11
        (docs/rl.md) a step computed 2-6 rows for each running one. Both slots' KV (up to
        the longest length either holds) and per-row state change places, so the free slot's
        remembered prefix stays usable where it lands. A row's tokens do not depend on its
        slot. The running slots after the move."""
        target = self._width(len(running))
        high = [i for i in running if i >= target]
        if not high:
            return running
        holes = [i for i in range(target) if self.slots[i].request is None][: len(high)]
        import torch

        a, b = holes + high, high + holes
        length = 0
        for i in a:
            s = self.slots[i]
            held = len(s.tokens) if s.request is None else len(s.request.prompt) + s.steps
            length = max(length, held if s.request is not None or s.version == self.version else 0)
        length = min(length + 1, self.cache.capacity)
        to = torch.tensor(a, device=self.device)
        frm = torch.tensor(b, device=self.device)
        for t in self.cache.k + self.cache.v:
            t[to, :, :length] = t[frm, :, :length]
        for t in (self.last_tok, self.pos, self.gen, self.max_new, self.seed, self.top_k, self.temp, self.top_p,
                  self.live, self.done, self.stops, self.out_tok, self.out_lp, self.out_slp):
            t[to] = t[frm]
        for i, j in zip(holes, high, strict=True):
            self.slots[i], self.slots[j] = self.slots[j], self.slots[i]
        self.stats["moved_rows"] += len(high)
        return sorted(i for i, s in enumerate(self.slots) if s.request is not None)

    def _decode(self, needed: int) -> None:
        """One token (or, speculating, several) for every running row among the first B
        slots. Buckets of rows and keys serve graphs and the compiled step; an eager step
        takes exactly the rows and keys it needs."""
        eager = not self.use_graphs and not self.compiled
        B = self._width(needed)
        longest = max(len(s.request.prompt) + s.steps for s in self.slots[:B] if s.request is not None)
        keys = longest if eager else min(-(-longest // LEN_BUCKET) * LEN_BUCKET, self.cache.capacity)
        reqs = [s.request for s in self.slots[:B] if s.request is not None]
        mode = (any(r.top_k > 0 or 0 < r.top_p < 1 for r in reqs), any(r.temperature > 0 for r in reqs))
        self.stats["decode_steps"] += 1
        self.stats["decode_rows"] += len(reqs)
        self.stats["decode_width"] += B
        began = self._clock()
        if self.speculate and self._speculate(B, mode):
            self._clocked("decode_ms", began)
            return
        if self.use_graphs:
            self._graphed(B, keys, mode)
        else:
            self._decode_device(B, keys, mode)
        self._clocked("decode_ms", began)
        for s in self.slots[:B]:
            if s.request is not None:
                s.steps += 1

    def _clock(self) -> Any:
        """The start of a bracket of device time: a recorded CUDA event, or on the CPU (where
        the work runs as it is called) the host clock. Why: the worker's generation time
        per decode step holds prefill, host work and the learner's slices besides the
        decode itself (run 12 in docs/rl.md); these brackets say how much is each."""
        if not self.on_cuda:
            return time.perf_counter()
        import torch

        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def _clocked(self, key: str, began: Any) -> None:
        """Close the bracket opened by `_clock` into `stats[key]` (milliseconds)."""
        if isinstance(began, float):
            self.stats[key] += (time.perf_counter() - began) * 1000.0
            return
        import torch

        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self._brackets.append((key, began, end))

    def _read_brackets(self) -> None:
        """Add the closed brackets to `stats`; called after a device read that waited for
        them. One whose end the device has not reached (recorded on another stream) waits
        for a later read rather than block or fail here."""
        left = []
        for key, began, end in self._brackets:
            if end.query():
                self.stats[key] += began.elapsed_time(end)
            else:
                left.append((key, began, end))
        self._brackets = left

    def _speculate(self, B: int, mode: Tuple[bool, bool]) -> bool:
        """A decode step that also checks each row's prompt-lookup draft (`Drafts`); False
        (nothing done) when no row has one. Row i feeds its last token and its draft d in
        one forward; the token drawn after the last token is kept, and so is each token
        drawn after d[j] while d[j] equals the token drawn before it. Each draw uses the
        noise of its own position in the completion (`sample`), which depends on nothing
        else, so a row gets the tokens it would one step at a time (up to the rounding of
        a wider forward), from the model's own distribution. Drafted positions that are
        not kept leave keys past the row's length, which the mask hides until they are
        written again."""
        import torch

        gen = self.gen[:B].tolist()
        active = (self.live[:B] & ~self.done[:B]).tolist()
        drafts: List[List[int]] = []
        for i in range(B):
            s, d = self.slots[i], []
            if active[i] and s.request is not None and s.drafts is not None:
                known = len(s.drafts.hist) - len(s.request.prompt)
                if gen[i] > known:  # tokens drawn by plain steps since the last look
                    s.drafts.extend(self.out_tok[i, known:gen[i]].tolist())
                d = s.drafts.draft(min(s.span, s.request.max_tokens - gen[i] - 1))
            drafts.append(d)
        width = max(len(d) for d in drafts)
        if width == 0:
            return False
        dev, scratch, W = self.device, self.cache.scratch, width + 1
        pos = self.pos[:B].tolist()
        ids = [[0] * W for _ in range(B)]
        cols = [[scratch] * W for _ in range(B)]
        for i, d in enumerate(drafts):
            if active[i]:
                ids[i][: len(d) + 1] = [0] + d
                cols[i][: len(d) + 1] = range(pos[i], pos[i] + len(d) + 1)
        ids_t = torch.tensor(ids, dtype=torch.long, device=dev)
        ids_t[:, 0] = self.last_tok[:B]
        cols_t = torch.tensor(cols, dtype=torch.long, device=dev)
        keys = max(p + len(d) + 1 for p, d, a in zip(pos, drafts, active, strict=True) if a)
        logits = self._columns(ids_t, cols_t, self.arange[:B].unsqueeze(1), keys, B, None, W)
        # Draw at the real positions only (padding's logits are noise, and would only
        # widen the sampling).
        rows = [i for i in range(B) if active[i]]
        flat = [i * W + q for i in rows for q in range(len(drafts[i]) + 1)]
        where = torch.tensor(flat, dtype=torch.long, device=dev)
        row_of = where // W
        tok, lp, slp = sample(logits.reshape(B * W, -1)[where], self.temp[row_of], self.top_p[row_of],
                              self.top_k[row_of], self.seed[row_of], self.gen[row_of] + where % W, *mode,
                              candidates=CANDIDATES)
        toks, lps, slps = tok.tolist(), lp.tolist(), slp.tolist()
        at = 0
        for i in rows:
            s, d = self.slots[i], drafts[i]
            first, at = at, at + len(d) + 1
            if s.request is None:
                continue
            req, g = s.request, gen[i]
            n = 1
            while n <= len(d) and toks[first + n - 1] == d[n - 1] and d[n - 1] not in req.stop \
                    and g + n < req.max_tokens:
                n += 1
            kept = toks[first:first + n]
            self.out_tok[i, g:g + n] = torch.tensor(kept, device=dev)
            self.out_lp[i, g:g + n] = torch.tensor(lps[first:first + n], device=dev)
            self.out_slp[i, g:g + n] = torch.tensor(slps[first:first + n], device=dev)
            self.gen[i] = g + n
            self.pos[i] = pos[i] + n
            self.last_tok[i] = kept[-1]
            self.done[i] = kept[-1] in req.stop or g + n >= req.max_tokens
            if s.drafts is not None:
                s.drafts.extend(kept)
            if d and n - 1 == len(d):
                s.span = min(2 * s.span, self.speculate)
            elif d and 2 * (n - 1) < len(d):
                s.span = max(s.span // 2, 1)
            s.steps += n
            self.stats["drafted"] += len(d)
            self.stats["accepted"] += n - 1
        return True

    def _decode_device(self, B: int, keys: int, mode: Tuple[bool, bool]) -> None:
        """The decode step's device work (what a CUDA graph captures and, on a GPU,
        torch.compile fuses): forward, sampling and recording, with no host reads."""
        tok, lp, slp = self._forward_sample(B, keys, mode)
        self._record(self.arange[:B], tok, lp, slp, self.live[:B] & ~self.done[:B])

    def _forward_sample(self, B: int, keys: int, mode: Tuple[bool, bool]) -> Tuple[Any, Any, Any]:
        logits = self._forward(B, keys)
        # Inside a CUDA graph nothing may be read back, so the whole vocabulary is sorted.
        return sample(logits, self.temp[:B], self.top_p[:B], self.top_k[:B], self.seed[:B], self.gen[:B], *mode,
                      candidates=0 if self.use_graphs else CANDIDATES)

    def _logits(self, B: int, keys: int) -> Any:
        """The model's next-token logits for the first B slots (what torch.compile fuses
        on a GPU: sizes symbolic, so one compile serves every bucket)."""
        import torch

        active = self.live[:B] & ~self.done[:B]
        pos = self.pos[:B]
        cols = torch.where(active, pos, torch.full_like(pos, self.cache.scratch)).unsqueeze(1)
        c = self.cache
        c.rows, c.cols, c.keys, c.view, c.gather = self.arange[:B].unsqueeze(1), cols, keys, B, None
        # An idle row (a free slot below the highest busy one, or a row finished but not yet
        # collected) writes to the scratch column and sees key 0 alone (zeros or a real key:
        # finite). The decode attention loads only the keys a row's mask lets it see, so an
        # idle row costs one key instead of the step's longest row.
        seen = torch.where(active, pos, torch.zeros_like(pos)).unsqueeze(1)
        mask = (torch.arange(keys, device=self.device).unsqueeze(0) <= seen).view(B, 1, 1, keys)
        return self.net(input_ids=self.last_tok[:B].unsqueeze(1), position_ids=cols, attention_mask=mask,
                        past_key_values=c, use_cache=True, logits_to_keep=1).logits[:, -1]

    def _graphed(self, B: int, keys: int, mode: Tuple[bool, bool]) -> None:
        """The decode step replayed from a CUDA graph captured on first use of its shape.
        A compiled step that fails to compile or capture falls back to the eager step; an
        eager step that cannot be captured runs eagerly, for good."""
        import sys

        key = (B, keys, *mode)
        graph = self.graphs.get(key)
        while graph is None:
            try:
                graph = self._capture(B, keys, mode)
                self.graphs[key] = graph
                self.stats["graphs"] += 1
            except Exception as exc:  # noqa: BLE001 - fall back, never fail the request
                compiled = self._forward != self._logits
                sys.stderr.write(f"engine: CUDA graph of the {'compiled' if compiled else 'eager'} decode step "
                                 f"failed ({type(exc).__name__}: {exc}); falling back\n")
                if compiled:
                    self._forward, self.compiled = self._logits, False
                    self.graphs.clear()
                    continue
                self.use_graphs = False
                self._decode_device(B, keys, mode)
                return
        graph.replay()

    def _capture(self, B: int, keys: int, mode: Tuple[bool, bool]) -> Any:

        # The warm-ups write what the real step writes and record nothing: `live` is
        # cleared around them, so every row writes its KV to the scratch column and its
        # token is not kept. (The capture runs nothing: the graph reads `live` when replayed.)
        live = self.live.clone()
        self.live.zero_()
        try:
            graph, _ = self._capture_graph(lambda: self._decode_device(B, keys, mode), 2)
        finally:
            self.live.copy_(live)
        return graph

    def _capture_graph(self, work: Any, warmups: int) -> Tuple[Any, Any]:
        """`work` run `warmups` times on a side stream (compiles, autotunes, allocates),
        then captured into a CUDA graph; the graph and what the capture returned. Decode
        and prefill graphs share one memory pool: they replay one at a time, and each
        output is read before the next replay."""
        import torch

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmups):
                work()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self.pool):
            out = work()
        return graph, out

    def _sync(self) -> List[Finished]:
        """Read which rows are done (one device read) and collect them."""
        self.since_sync = 0
        running = [i for i, s in enumerate(self.slots) if s.request is not None]
        done = self.done[: max(running) + 1].tolist()
        self._read_brackets()
        over = [i for i in running if done[i]]
        if not over:
            return []
        import torch

        idx = torch.tensor(over, device=self.device)
        counts = self.gen[idx].tolist()
        width = max(counts)
        toks = self.out_tok[idx, :width].tolist()
        lps = self.out_lp[idx, :width].tolist()
        slps = self.out_slp[idx, :width].tolist()
        self.live[idx] = False
        out = []
        now = time.perf_counter()
        for j, i in enumerate(over):
            s = self.slots[i]
            req = s.request
            assert req is not None
            n = counts[j]
            tokens = toks[j][:n]
            reason = "stop" if tokens and tokens[-1] in req.stop else "length"
            out.append(Finished(req.key, req.prompt, tokens, lps[j][:n], slps[j][:n], reason,
                                (now - req.submitted) * 1000.0))
            # The KV holds the prompt and every completion token but the last (never fed).
            s.request, s.tokens, s.steps, s.drafts = None, req.prompt + tokens[:-1], 0, None
        return out

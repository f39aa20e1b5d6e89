"""The embedded policy's generation: a Hugging Face transformers model answering chats.

The policy worker generates through `engine` (continuous batching); `to_request` and
`to_generated` translate between the protocol's chats and the engine's token ids.
`generate_batch` is the earlier path (one batch at a time, a Python decode loop, a
dynamic cache), kept for comparison (`scripts/bench_rollouts.py`) and reachable in the
worker with `TRITONFORGE_POLICY_ENGINE=0`: it answers several chats in one batch with the
text, the exact prompt and completion token ids, and each completion token's
log-probability. The process around both (reading requests, training) is
`policy_worker`; loading the model is `models`.
"""

from __future__ import annotations

from typing import Any, List, Tuple

from .protocol import Generated


def _row_generator(seed: int | None, device: str) -> Any:
    import torch

    if seed is None:
        return None
    g = torch.Generator(device=device)
    g.manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)
    return g


def _sample(logits: Any, temperature: float, top_p: float, gen: Any) -> Tuple[int, float]:
    """One token from one row's logits (float32, 1-D), and its log-probability under the
    distribution it was drawn from (temperature and top-p applied; 0 when greedy), as the
    engine reports it: reinforcement learning below temperature 1 trains on it."""
    import math

    import torch

    if temperature <= 0:
        return int(torch.argmax(logits)), 0.0
    probs = torch.softmax(logits / temperature, dim=-1)
    if 0 < top_p < 1:
        sorted_p, order = torch.sort(probs, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop = (torch.cumsum(sorted_p, dim=-1) - sorted_p) >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        pick = int(torch.multinomial(sorted_p, 1, generator=gen))
        return int(order[pick]), math.log(float(sorted_p[pick]) / float(sorted_p.sum()))
    t = int(torch.multinomial(probs, 1, generator=gen))
    return t, math.log(float(probs[t]))


def _stop_ids(tok: Any, net: Any) -> set:
    stops = set()
    for value in (tok.eos_token_id, getattr(getattr(net, "generation_config", None), "eos_token_id", None)):
        if isinstance(value, int):
            stops.add(value)
        elif isinstance(value, (list, tuple)):
            stops.update(v for v in value if isinstance(v, int))
    return stops


# KV caches of prompt prefixes shared by a batch (the system prompt and worked example
# every task starts with), computed once per worker and reused by later batches.
_PREFIXES: "dict[tuple, Any]" = {}
_PREFIX_MIN = 32
_PREFIX_SLOTS = 4


def _prefix_cache(net: Any, prefix: List[int], n: int, device: str) -> Any:
    """A KV cache holding `prefix`, repeated for a batch of `n` rows."""
    import copy

    import torch
    from transformers import DynamicCache

    key = tuple(prefix)
    base = _PREFIXES.get(key)
    if base is None:
        base = DynamicCache(config=net.config)
        with torch.no_grad():
            net(input_ids=torch.tensor([prefix], device=device), past_key_values=base, use_cache=True, logits_to_keep=1)
        if len(_PREFIXES) >= _PREFIX_SLOTS:
            _PREFIXES.pop(next(iter(_PREFIXES)))
        _PREFIXES[key] = base
    past = copy.deepcopy(base)
    if n > 1:
        past.batch_repeat_interleave(n)
    return past


def _common_prefix(prompts: List[List[int]]) -> int:
    first = prompts[0]
    n = min(len(p) for p in prompts)
    for i in range(n):
        if any(p[i] != first[i] for p in prompts[1:]):
            return i
    return n


def generate_batch(tok: Any, net: Any, jobs: List[Any], device: str, prompts: "List[List[int]] | None" = None,
                   stops: "set | None" = None) -> List[Generated]:
    """Answer several chats in one batch.

    The prompts' common prefix (at least one token short of the shortest prompt) comes
    from a cached KV cache; the rest of each prompt is prefilled in one forward with its
    padding between the prefix and the row's own tokens; then one forward per step, rows
    leaving the batch as they finish. Each row keeps its own sampling parameters, length
    cap and seeded generator, so its sampling does not depend on which other requests
    shared its batch. Log-probs are those of the model's own (untempered, unfiltered)
    distribution: what a trainer recomputes. `prompts` (token ids, in place of the jobs'
    chats) and `stops` (in place of the model's end-of-sequence ids) serve benchmarks.
    """
    import torch

    if prompts is None:
        prompts = [prompt_ids(tok, job) for job in jobs]
    n = len(jobs)
    shared = min(_common_prefix(prompts), min(len(p) for p in prompts) - 1)
    past = None
    # Only a prefix shared by several rows is worth keeping: a lone row's "prefix" is its
    # whole prompt, and caching it would push the system prompt out of the cache.
    if n > 1 and shared >= _PREFIX_MIN:
        past = _prefix_cache(net, prompts[0][:shared], n, device)
    else:
        shared = 0
    rests = [p[shared:] for p in prompts]
    width = max(len(r) for r in rests)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    ids = torch.full((n, width), pad, dtype=torch.long, device=device)
    own = torch.zeros((n, width), dtype=torch.long, device=device)
    for r, rest in enumerate(rests):
        ids[r, width - len(rest):] = torch.tensor(rest, device=device)
        own[r, width - len(rest):] = 1
    mask = torch.cat([torch.ones((n, shared), dtype=torch.long, device=device), own], dim=1)
    step_pos = shared + (own.cumsum(-1) - 1).clamp(min=0)
    gens = [_row_generator(job.seed, device) for job in jobs]
    if stops is None:
        stops = _stop_ids(tok, net)
    out_ids: List[List[int]] = [[] for _ in jobs]
    out_lp: List[List[float]] = [[] for _ in jobs]
    out_slp: List[List[float]] = [[] for _ in jobs]
    done = [job.max_tokens <= 0 for job in jobs]
    finish = ["length"] * n
    rows = [r for r in range(n) if not done[r]]  # batch position -> request
    if not rows:
        return [Generated(text="", prompt_ids=prompts[r], token_ids=[], logprobs=[], finish_reason="length",
                          sampling_logprobs=[]) for r in range(n)]
    if len(rows) < n:
        keep = torch.tensor(rows, dtype=torch.long, device=device)
        ids, mask, step_pos = ids[keep], mask[keep], step_pos[keep]
        if past is not None:
            past.batch_select_indices(keep)
    step_ids = ids
    with torch.no_grad():
        while rows:
            out = net(input_ids=step_ids, attention_mask=mask, position_ids=step_pos, past_key_values=past,
                      use_cache=True, logits_to_keep=1)
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            logp = torch.log_softmax(logits, dim=-1)
            nxt = []
            for i, r in enumerate(rows):
                job = jobs[r]
                t, slp = _sample(logits[i], job.temperature, job.top_p, gens[r])
                lp = float(logp[i, t])
                out_ids[r].append(t)
                out_lp[r].append(lp if lp == lp and lp > -1e30 else -1e30)
                out_slp[r].append(slp if slp == slp and slp > -1e30 else -1e30)
                if t in stops:
                    done[r], finish[r] = True, "stop"
                elif len(out_ids[r]) >= job.max_tokens:
                    done[r] = True
                nxt.append(t)
            keep_at = [i for i, r in enumerate(rows) if not done[r]]
            if not keep_at:
                break
            step_ids = torch.tensor(nxt, device=device).unsqueeze(1)
            step_pos = step_pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=device)], dim=1)
            if len(keep_at) < len(rows):
                # Finished rows leave the batch: the rest no longer pay for them.
                keep = torch.tensor(keep_at, dtype=torch.long, device=device)
                past.batch_select_indices(keep)
                step_ids, step_pos, mask = step_ids[keep], step_pos[keep], mask[keep]
                rows = [rows[i] for i in keep_at]
    return [Generated(text=tok.decode(out_ids[r], skip_special_tokens=True), prompt_ids=prompts[r],
                      token_ids=out_ids[r], logprobs=out_lp[r], finish_reason=finish[r],
                      sampling_logprobs=out_slp[r]) for r in range(n)]


def prompt_ids(tok: Any, job: Any) -> List[int]:
    """The job's chat rendered by the model's template, as token ids."""
    messages = [{"role": m.role, "content": m.content} for m in job.messages]
    return list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def to_request(tok: Any, net: Any, job: Any, key: Any) -> Any:
    """A protocol `GenerateJob` as an engine request (the model's end-of-sequence tokens
    and the job's own stop tokens end it)."""
    from .engine import Request

    stops = sorted(_stop_ids(tok, net) | set(job.stop_token_ids or []))
    return Request(key=key, prompt=prompt_ids(tok, job), max_tokens=job.max_tokens, temperature=job.temperature,
                   top_p=job.top_p, top_k=job.top_k or 0, seed=job.seed, stop=stops)


def to_generated(tok: Any, fin: Any) -> Generated:
    def finite(xs: List[float]) -> List[float]:
        return [x if x == x and x > -1e30 else -1e30 for x in xs]

    return Generated(text=tok.decode(fin.tokens, skip_special_tokens=True), prompt_ids=fin.prompt,
                     token_ids=fin.tokens, logprobs=finite(fin.logprobs), finish_reason=fin.finish_reason,
                     sampling_logprobs=finite(fin.sampling_logprobs))


def generate(tok: Any, net: Any, job: Any, device: str) -> Generated:
    return generate_batch(tok, net, [job], device)[0]

#!/usr/bin/env python3
"""Rollout throughput: the policy worker's engine against the earlier path and transformers.

For each model and batch size B, B prompts of PROMPT random token ids each get TOKENS new
tokens (end-of-sequence ignored, so every row runs to its budget), greedy, by each arm:

- `engine`: `tritonforge_worker.engine` (continuous batching, slot KV cache, batched
  prefill, sampling on the device; on a GPU the decode step compiled and replayed from
  CUDA graphs);
- `engine_eager`: the same engine with the decode step not compiled (CUDA graphs of the
  eager step on a GPU), to show what compiling adds;
- `engine_separate`: the compiled engine with q/k/v and gate/up as separate matmuls, as
  transformers has them (the engine arms above join each group into one matmul:
  `tritonforge_worker/joined.py`), to show what joining adds. Engine arms run on a copy
  of the model, so the other arms keep transformers' own forward;
- `old`: `policy.generate_batch` (a Python decode loop, a dynamic cache, one device read
  per token);
- `hf`: transformers' `generate` with its default (dynamic) cache;
- `hf_static`: `generate` with `cache_implementation="static"` (transformers compiles the
  forward for a static cache on a GPU). Models load with the engine's attention
  function (grouped decode attention; on CUDA its Triton decode kernel), so this arm
  and `hf` use it too;
- `hf_static_sdpa`: the same on a copy with transformers' own SDPA attention, as a user
  of transformers runs it.

Each arm runs once untimed (warm-up: kernels, graphs, compilation; its time is reported
as `warmup_s`), then once timed; tokens/s = all rows' new tokens / wall time. The engine
arms also time a run of one new token per row (`prefill_s`: the prompts' prefill), so
that `decode_ms_per_step` = (seconds - prefill_s) / (TOKENS - 1) is the decode step alone;
beside it `floor_ms_per_step`: the bytes one decode step must read (weights, and the KV
cache at the run's mean length) over the device's copy bandwidth, measured here. An arm that
fails is reported with its error and the others go on. Then, for the first model, the
colocated weight refresh: one optimizer step of the trainer on the engine's own
parameters, the engine told (`weights_changed`), and the first generation after it;
beside it the disk round trip an external engine would need (save the weights, load
them back).

Models: `smollm2` (SmolLM2-135M-Instruct), or a directory (one holding only a config is
randomly initialised: configs/models/qwen3-0.6b).

usage: PYTHONPATH=python python3 scripts/bench_rollouts.py [--device cuda]
       [--models smollm2,configs/models/qwen3-0.6b] [--batches 1,16,64,256]
       [--prompt-tokens 200] [--tokens 512] [--arms engine,engine_eager,engine_separate,old,hf,hf_static,hf_static_sdpa]
       [--profile B] [--engine-repeats N] [--quick]
--engine-repeats N: time the engine arms and the `hf_static` arms N times and report the median
(the slow arms are timed once). The engine arms also report their log-probs against a full forward
(`logprob_max_err`, `greedy_agree`), in the model's dtype.
--profile B: also the engine's decode step at batch B under torch.profiler (the kernels
one step launches, and the 25 that take the most device time), and the prefill of B fresh
prompts (its wall time, the host's Python functions by own time, the device's kernels);
--profile-arms picks the decode steps (eager, compiled, compiled_separate). The prefill of
256 prompts took 0.46 s of the engine's 1.99 s at batch 256 on the H100 (2026-11-25),
about ten times a 135M model's compute for 51,200 tokens: the next GPU session's first
question for issue 22's ratio at batch 256 (not yet run on a GPU).
--quick: the tiny test model on the CPU, batches 1 and 4, 32 + 16 tokens (checks the
script itself). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402

from tritonforge_worker.engine import Engine, Request  # noqa: E402
from tritonforge_worker.models import load  # noqa: E402
from tritonforge_worker.policy import generate_batch  # noqa: E402
from tritonforge_worker.protocol import ChatTurn, GenerateJob, MicroBatch, TrainBatch, TrainSetupJob  # noqa: E402

ARMS = ("engine", "engine_eager", "engine_separate", "old", "hf", "hf_static", "hf_static_sdpa")


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def load_model(name: str, device: str, dtype: str) -> Any:
    if (Path(name) / "config.json").is_file() and not any(Path(name).glob("*.safetensors")):
        from transformers import AutoConfig, AutoModelForCausalLM

        from tritonforge_worker.engine import decode_attention

        torch.manual_seed(0)
        with torch.device(device):
            net = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(name), dtype=getattr(torch, dtype),
                                                   attn_implementation=decode_attention())
        return net.eval()
    return load(name, device, dtype)[1]


def prompts(net: Any, batch: int, length: int) -> List[List[int]]:
    g = torch.Generator().manual_seed(batch)
    vocab = min(int(net.config.vocab_size), 32000)
    return torch.randint(100, vocab, (batch, length), generator=g).tolist()


_ENGINES: Dict[Any, Engine] = {}
_COPIES: Dict[Any, Any] = {}


def _copy(net: Any, tag: Any) -> Any:
    """A deep copy of `net` made once per tag (at most two kept: a model's copies are
    dropped when the next model's are made), frozen and in eval mode."""
    key = (id(net), tag)
    if key not in _COPIES:
        import copy

        if len(_COPIES) >= 2:
            _COPIES.clear()
        _COPIES[key] = copy.deepcopy(net).requires_grad_(False).eval()
        if tag == "sdpa":
            _COPIES[key].set_attn_implementation("sdpa")
    return _COPIES[key]


def engine_net(net: Any, join: bool) -> Any:
    """The model an engine arm runs: a frozen copy of `net`, whose projections the engine
    joins when `join` (in place), so the other arms keep transformers' own forward."""
    return _copy(net, join)


def engine_for(net: Any, device: str, ps: List[List[int]], tokens: int, compiled: bool, join: bool = True) -> Engine:
    # One engine per model, batch size and arm, so the timed run replays the graphs the
    # warm-up captured.
    key = (id(net), len(ps), compiled, join)
    if key not in _ENGINES:
        _ENGINES.clear()
        _ENGINES[key] = Engine(engine_net(net, join), device, max_slots=len(ps), max_len=len(ps[0]) + tokens,
                               compile=compiled and device.startswith("cuda"), join=join)
    return _ENGINES[key]


def run_engine(net: Any, device: str, ps: List[List[int]], tokens: int, compiled: bool = True,
               join: bool = True) -> int:
    eng = engine_for(net, device, ps, tokens, compiled, join)
    eng.forget_prefixes()  # so the timed run prefills in full
    out = eng.run([Request(key=i, prompt=p, max_tokens=tokens) for i, p in enumerate(ps)])
    LAST[:] = out
    return sum(len(f.tokens) for f in out)


LAST: List[Any] = []
ENGINE_REPEATS = [1]


FP32_REFERENCE = [False]


def logprob_check(net: Any, device: str, rows: List[Any]) -> Dict[str, Any]:
    """The engine's log-probs against one full forward of prompt + completion (up to 4
    rows), in the model's own dtype: the largest difference, and how often the greedy
    token is the full forward's argmax. With `--fp32-reference`, also against a float32
    copy's full forward, and that forward against the model's own (the floor its dtype
    sets): which of two decode paths is nearer the exact answer."""
    import copy

    errs, agree, total = [], 0, 0
    errs32, full32 = [], []
    net32 = copy.deepcopy(net).float() if FP32_REFERENCE[0] and rows else None

    def token_logprobs(model: Any, f: Any) -> Any:
        ids = torch.tensor([f.prompt + f.tokens], device=device)
        logits = model(input_ids=ids).logits[0, len(f.prompt) - 1: len(f.prompt) - 1 + len(f.tokens)].float()
        return torch.log_softmax(logits, dim=-1), logits

    with torch.no_grad():
        for f in rows[:4]:
            lp, logits = token_logprobs(net, f)
            toks = torch.tensor(f.tokens, device=device)
            ref = lp.gather(1, toks.unsqueeze(1)).squeeze(1)
            got = torch.tensor(f.logprobs, device=device)
            errs.append((ref - got).abs())
            agree += int((logits.argmax(-1) == toks).sum())
            total += len(f.tokens)
            if net32 is not None:
                ref32 = token_logprobs(net32, f)[0].gather(1, toks.unsqueeze(1)).squeeze(1)
                errs32.append((ref32 - got).abs())
                full32.append((ref32 - ref).abs())
    if net32 is not None:  # not kept while later arms are timed
        del net32
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    if not errs:
        return {}

    def stats(prefix: str, parts: List[Any]) -> Dict[str, Any]:
        e = torch.cat(parts).float()
        return {f"{prefix}_max_err": round(float(e.max()), 5), f"{prefix}_p99_err": round(float(e.quantile(0.99)), 5),
                f"{prefix}_median_err": round(float(e.median()), 5)}

    out = {**stats("logprob", errs), "logprob_err_over_0_1": int((torch.cat(errs) > 0.1).sum()),
           "greedy_agree": round(agree / max(total, 1), 4)}
    if errs32:
        out.update(stats("logprob_vs_fp32", errs32))
        out.update(stats("full_forward_vs_fp32", full32))
    return out


def run_old(net: Any, device: str, ps: List[List[int]], tokens: int) -> int:
    job = GenerateJob(messages=[ChatTurn(role="user", content="")], temperature=0.0, top_p=1.0,
                      max_tokens=tokens, seed=0)
    from types import SimpleNamespace

    # The prompts are token ids already: the tokenizer only pads (never, one length) and decodes.
    tok = SimpleNamespace(pad_token_id=0, eos_token_id=None, decode=lambda ids, skip_special_tokens=True: "")
    out = generate_batch(tok, net, [job] * len(ps), device, prompts=ps, stops=set())
    return sum(len(g.token_ids) for g in out)


def stock(net: Any) -> Any:
    """A copy of `net` on transformers' own SDPA attention (the models here load with the
    engine's, which the plain `hf` arms therefore use too)."""
    return _copy(net, "sdpa")


def run_hf(net: Any, device: str, ps: List[List[int]], tokens: int, static: bool) -> int:
    ids = torch.tensor(ps, device=device)
    kw: Dict[str, Any] = {"cache_implementation": "static"} if static else {}
    with torch.no_grad():
        out = net.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                           min_new_tokens=tokens, do_sample=False, pad_token_id=0, **kw)
    return int(out.shape[0] * (out.shape[1] - ids.shape[1]))


def arm_fn(arm: str) -> Callable[[Any, str, List[List[int]], int], int]:
    return {"engine": run_engine, "engine_eager": lambda n, d, p, t: run_engine(n, d, p, t, False),
            "engine_separate": lambda n, d, p, t: run_engine(n, d, p, t, True, False),
            "old": run_old,
            "hf": lambda n, d, p, t: run_hf(n, d, p, t, False),
            "hf_static": lambda n, d, p, t: run_hf(n, d, p, t, True),
            "hf_static_sdpa": lambda n, d, p, t: run_hf(stock(n), d, p, t, True)}[arm]


def measure(arm: str, net: Any, device: str, batch: int, prompt_len: int, tokens: int) -> Dict[str, Any]:
    fn = arm_fn(arm)
    ps = prompts(net, batch, prompt_len)
    try:
        t = time.perf_counter()
        fn(net, device, ps, tokens)  # warm-up: the same shapes as the timed run
        sync(device)
        warm = time.perf_counter() - t
        times = []
        for _ in range(ENGINE_REPEATS[0] if arm.startswith(("engine", "hf_static")) else 1):
            t = time.perf_counter()
            n = fn(net, device, ps, tokens)
            sync(device)
            times.append(time.perf_counter() - t)
        dt = sorted(times)[len(times) // 2]
        row = {"arm": arm, "batch": batch, "tokens": n, "seconds": round(dt, 3),
               "tokens_per_s": round(n / dt, 1), "warmup_s": round(warm, 2)}
        if len(times) > 1:
            row["all_seconds"] = [round(x, 3) for x in times]
        if arm.startswith("engine") and tokens > 1:
            row.update(logprob_check(net, device, LAST))
            eng = next(iter(_ENGINES.values()), None)
            if eng is not None:
                row["engine_stats"] = dict(eng.stats)
                row["joined_modules"] = eng.joined
            t = time.perf_counter()
            fn(net, device, ps, 1)
            sync(device)
            pre = time.perf_counter() - t
            row["prefill_s"] = round(pre, 4)
            row["decode_ms_per_step"] = round((dt - pre) / (tokens - 1) * 1000.0, 3)
            row["floor_ms_per_step"] = round(step_bytes(net, batch, prompt_len + tokens / 2) / BANDWIDTH[0] * 1000.0, 4)
        return row
    except Exception as exc:  # noqa: BLE001 - one arm failing must not end the run
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        return {"arm": arm, "batch": batch, "error": f"{type(exc).__name__}: {exc}",
                "trace": traceback.format_exc(limit=3)[-800:]}


BANDWIDTH = [1.0]


def copy_bandwidth(device: str) -> float:
    """Bytes per second a device-to-device copy of 1 GiB moves (read plus write)."""
    if not device.startswith("cuda"):
        return 1e10
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync(device)
    t = time.perf_counter()
    for _ in range(10):
        dst.copy_(src)
    sync(device)
    bw = 2 * 10 * src.numel() / (time.perf_counter() - t)
    del src, dst
    return bw


def step_bytes(net: Any, batch: int, mean_len: float) -> float:
    """What one decode step must read: every weight once (a tied embedding once, as the
    output layer; the input embedding reads only B rows) and the KV cache of B rows."""
    cfg = net.config
    weights = sum(p.numel() * p.element_size() for p in {id(p): p for p in net.parameters()}.values())
    heads = int(cfg.num_attention_heads)
    kv = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    elem = next(net.parameters()).element_size()
    cache = 2 * int(cfg.num_hidden_layers) * batch * kv * head_dim * mean_len * elem
    return weights + cache


def kernel_table(prof: Any, device: str, steps: int, top: int = 25) -> Dict[str, Any]:
    """Kernels launched per step, device time per step, and the `top` kernels by device time."""
    events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"] if device.startswith("cuda") else []
    best = sorted(events, key=lambda e: -e.self_device_time_total)[:top]
    return {"kernels_per_step": round(sum(e.count for e in events) / steps, 1),
            "device_us_per_step": round(sum(e.self_device_time_total for e in events) / steps, 1),
            "top": [{"name": e.key[:90], "per_step": round(e.count / steps, 1),
                     "us_per_step": round(e.self_device_time_total / steps, 1)} for e in best]}


def profile_prefill(net: Any, device: str, batch: int, prompt_len: int,
                    sweep: Optional[List[int]] = None) -> Dict[str, Any]:
    """Where the prefill of `batch` fresh prompts goes: its wall time, the host's Python
    functions by own time (cProfile), and the device's kernels (torch.profiler); with
    `sweep`, the wall time (median of 3) at each of those padded tokens per forward."""
    import cProfile
    import io
    import pstats

    from torch.profiler import ProfilerActivity, profile

    ps = prompts(net, batch, prompt_len)
    eng = Engine(engine_net(net, True), device, max_slots=batch, max_len=prompt_len + 64, compile=False)

    def once() -> float:
        eng.forget_prefixes()
        t = time.perf_counter()
        eng.run([Request(key=i, prompt=p, max_tokens=1) for i, p in enumerate(ps)])
        sync(device)
        return time.perf_counter() - t

    once()
    before = eng.stats["prefill_forwards"]
    walls = [once() for _ in range(3)]
    forwards = (eng.stats["prefill_forwards"] - before) // 3
    host = cProfile.Profile()
    host.enable()
    once()
    host.disable()
    text = io.StringIO()
    pstats.Stats(host, stream=text).sort_stats("tottime").print_stats(20)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        once()
    out = {"batch": batch, "wall_s": [round(w, 4) for w in walls],
           "forwards_per_prefill": forwards, "prefill_tokens_per_forward": eng.prefill_tokens,
           "host_top": text.getvalue().splitlines()[:40], **kernel_table(prof, device, 1)}
    if sweep:
        default = eng.prefill_tokens
        rows = []
        for n in sweep:
            eng.prefill_tokens = n
            once()
            before = eng.stats["prefill_forwards"]
            walls = sorted(once() for _ in range(3))
            rows.append({"prefill_tokens": n, "wall_s": round(walls[1], 4),
                         "forwards": (eng.stats["prefill_forwards"] - before) // 3})
        eng.prefill_tokens = default
        out["sweep"] = rows
    return out


def profile_engine(net: Any, device: str, batch: int, prompt_len: int,
                   arms: str = "eager,compiled,compiled_separate",
                   sweep: Optional[List[int]] = None) -> Dict[str, Any]:
    """The kernels of the engine's decode step at `batch` (graphs off, so each kernel is
    seen), and the 25 with the most device time over 16 steps; and the prefill of `batch`
    prompts (`profile_prefill`)."""
    from torch.profiler import ProfilerActivity, profile

    ps = prompts(net, batch, prompt_len)
    out: Dict[str, Any] = {"batch": batch, "prefill": profile_prefill(net, device, batch, prompt_len, sweep)}
    wanted = arms.split(",")
    for arm, compiled, join in (("eager", False, True), ("compiled", True, True), ("compiled_separate", True, False)):
        if arm not in wanted:
            continue
        eng = Engine(engine_net(net, join), device, max_slots=batch, max_len=prompt_len + 64, graphs=False,
                     compile=compiled and device.startswith("cuda"), join=join)
        for i, p in enumerate(ps):
            eng.submit(Request(key=i, prompt=p, max_tokens=40))
        for _ in range(8):
            eng.step()  # prefill, compile, warm-up
        sync(device)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
        with profile(activities=acts) as prof:
            for _ in range(16):
                eng.step()
            sync(device)
        out[arm] = {"joined_modules": eng.joined, **kernel_table(prof, device, 16)}
        del eng
    return out


def refresh(model: str, device: str, dtype: str, prompt_len: int) -> Dict[str, Any]:
    """One colocated optimizer step and the generation right after it, against the disk
    round trip an external engine needs."""
    try:
        setup = TrainSetupJob(model=model, resume=None, lora=None, lr=1e-5, min_lr=1e-5, warmup_steps=0,
                              total_steps=10, weight_decay=0.0, grad_clip=1.0, gradient_checkpointing=False,
                              dtype="bf16" if dtype == "bfloat16" else "fp32", seed=0, attention="sdpa",
                              compile="off")
        from tritonforge_worker.trainer import Trainer

        trainer = Trainer(setup, device)
        ps = prompts(trainer.net, 4, prompt_len)
        eng = Engine(trainer.net, device, max_slots=4, max_len=prompt_len + 64)
        row = ps[0] + ps[1][:32]
        batch = TrainBatch(micro=[MicroBatch(input_ids=[row], loss_mask=[[0] * prompt_len + [1] * 32],
                                             position_ids=[list(range(len(row)))], lengths=[len(row)])])

        def gen() -> float:
            trainer.net.eval()
            t = time.perf_counter()
            eng.run([Request(key=i, prompt=p, max_tokens=16) for i, p in enumerate(ps)])
            sync(device)
            trainer.net.train()
            return time.perf_counter() - t

        gen()
        before = gen()
        t = time.perf_counter()
        trainer.train_step(batch)
        sync(device)
        step_s = time.perf_counter() - t
        t = time.perf_counter()
        eng.weights_changed()
        refresh_s = time.perf_counter() - t
        after = gen()
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            trainer.net.save_pretrained(d, safe_serialization=True)
            save_s = time.perf_counter() - t
            t = time.perf_counter()
            from transformers import AutoModelForCausalLM

            AutoModelForCausalLM.from_pretrained(d, dtype=getattr(torch, dtype)).to(device)
            sync(device)
            load_s = time.perf_counter() - t
        return {"model": model, "step_s": round(step_s, 3), "refresh_s": round(refresh_s, 6),
                "generate_before_s": round(before, 3), "generate_after_s": round(after, 3),
                "disk_save_s": round(save_s, 3), "disk_load_s": round(load_s, 3)}
    except Exception as exc:  # noqa: BLE001
        return {"model": model, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=3)[-800:]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", default="smollm2,configs/models/qwen3-0.6b")
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--prompt-tokens", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--dtype", default=None, help="float32 or bfloat16 (default: bfloat16 on a GPU)")
    ap.add_argument("--no-refresh", action="store_true")
    ap.add_argument("--profile", type=int, default=0, help="profile the prefill and decode step at this batch")
    ap.add_argument("--profile-arms", default="eager,compiled,compiled_separate",
                    help="which decode steps --profile looks at")
    ap.add_argument("--prefill-sweep", default="",
                    help="with --profile: prefill wall time at each of these padded tokens per forward")
    ap.add_argument("--engine-repeats", type=int, default=1, help="timed runs of the engine arms (median)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fp32-reference", action="store_true",
                    help="also compare the engine's log-probs with a float32 copy's full forward")
    args = ap.parse_args()
    FP32_REFERENCE[0] = args.fp32_reference
    if args.quick:
        args.device, args.models, args.batches = "cpu", str(REPO / "configs/models/tiny-llama"), "1,4"
        args.prompt_tokens, args.tokens = 32, 16
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    arms = [a for a in args.arms.split(",") if a]
    unknown = set(arms) - set(ARMS)
    if unknown:
        ap.error(f"unknown arms {sorted(unknown)}; choose from {list(ARMS)}")
    batches = [int(b) for b in args.batches.split(",") if b]
    summary: Dict[str, Any] = {"device": args.device, "dtype": dtype, "prompt_tokens": args.prompt_tokens,
                               "completion_tokens": args.tokens, "torch": torch.__version__,
                               "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None,
                               "models": []}
    ENGINE_REPEATS[0] = max(args.engine_repeats, 1)
    BANDWIDTH[0] = copy_bandwidth(args.device)
    summary["copy_bandwidth_gb_s"] = round(BANDWIDTH[0] / 1e9, 1)
    for name in [m for m in args.models.split(",") if m]:
        entry: Dict[str, Any] = {"model": name, "results": []}
        try:
            t = time.perf_counter()
            net = load_model(name if name == "smollm2" else str(REPO / name) if not Path(name).is_absolute()
                             else name, args.device, dtype)
            entry["load_s"] = round(time.perf_counter() - t, 2)
        except Exception as exc:  # noqa: BLE001
            entry["error"] = f"{type(exc).__name__}: {exc}"
            summary["models"].append(entry)
            continue
        if args.profile:
            try:
                entry["profile"] = profile_engine(net, args.device, args.profile, args.prompt_tokens,
                                                  args.profile_arms,
                                                  [int(n) for n in args.prefill_sweep.split(",") if n])
            except Exception as exc:  # noqa: BLE001
                entry["profile"] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=3)[-800:]}
            sys.stderr.write(json.dumps({"model": name, "profile": entry["profile"]}) + "\n")
        for b in batches:
            for arm in arms:
                r = measure(arm, net, args.device, b, args.prompt_tokens, args.tokens)
                entry["results"].append(r)
                sys.stderr.write(json.dumps({"model": name, **r}) + "\n")
        summary["models"].append(entry)
        _ENGINES.clear()
        _COPIES.clear()  # keyed by id(net): the next model may get this one's id
        del net
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    if not args.no_refresh:
        first = args.models.split(",")[0]
        model = first if first == "smollm2" or Path(first).is_absolute() else str(REPO / first)
        summary["weight_refresh"] = refresh(model, args.device, dtype, args.prompt_tokens)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

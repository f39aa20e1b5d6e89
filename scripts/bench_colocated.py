#!/usr/bin/env python3
"""The colocated RL policy's two halves, measured side by side on one device.

Generation: B prompts of about PROMPT tokens (random ids) each get TOKENS new tokens,
sampled at temperature 1 (end-of-sequence ignored, so every row runs to its budget), by
the worker's engine
- `trained`: decoding through the trainer's own model (LoRA unmerged, the trainer's
  dtype): what `train rl` did before the generation copy;
- `copy`: decoding through the generation copy (`gencopy`: the effective weights merged
  into a plain model in the generation dtype, the engine's decode attention), as `train
  rl` does now;
- `copy_sdpa`: the same copy with transformers' SDPA attention (keys and values copied
  per query head at every decode step).
`--profile`: the busiest CUDA kernels of 16 decode steps of the `copy` arm, eager (no CUDA
graph), from torch's profiler.
Each arm runs once untimed (warm-up: CUDA graphs) and once timed. Then the copy's
refresh after one optimizer step (the in-place weight write), timed.

Training: one `score` (proximal log-probs) and one `rl_step` over ROWS rows of 600 to
1,400 tokens (a third of each a completion, the rest prompt), in micro-batches of 8
rows (`--micro-rows`), for each attention kernel asked for (`sdpa`; `auto` picks the packed-rows kernel on
a GPU) and each of `--train-compile` (`off`, as `train rl` runs its learner; `on`: the
decoder layers compiled). `--train-rounds N` plays N such batches, each with new lengths
(an RL step's shapes are new every step): the first round includes the compiles; the
later rounds' mean, and the graphs dynamo built in them (recompiles), say what a step
would cost once warm.

usage: PYTHONPATH=python python3 scripts/bench_colocated.py --model MODEL [--device cuda]
       [--batch 64] [--prompt-tokens 800] [--tokens 384] [--rows 64] [--attention sdpa,auto]
       [--lora-rank 16] [--dtype bf16] [--arms trained,copy_sdpa,copy] [--profile]
       [--train-compile off,on] [--train-rounds 4] [--train-only] [--train-profile] [--micro-rows 8]
--train-profile: one warm learner round under torch's profiler (compile off): device busy
against the wall, kernel launches, the busiest kernels and host operators.
--quick: the tiny test model on the CPU, small sizes (checks the script itself).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402

from tritonforge_worker.engine import Engine, Request  # noqa: E402
from tritonforge_worker.gencopy import GenerationCopy  # noqa: E402
from tritonforge_worker.protocol import (  # noqa: E402
    LoraSetup,
    MicroBatch,
    RlBatch,
    RlLoss,
    RlMicroBatch,
    ScoreJob,
    TrainBatch,
    TrainSetupJob,
)
from tritonforge_worker.trainer import Trainer  # noqa: E402


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def setup(model: str, attention: str, rank: int, dtype: str, compile: Any = "off") -> TrainSetupJob:
    lora = LoraSetup(rank=rank, alpha=2.0 * rank, dropout=0.0,
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    return TrainSetupJob(model=model, resume=None, lora=lora if rank > 0 else None, lr=1e-4, min_lr=1e-4,
                         warmup_steps=0, total_steps=100, weight_decay=0.0, grad_clip=1.0,
                         gradient_checkpointing=False, dtype=dtype, seed=0, attention=attention, compile=compile)


def generate(net: Any, device: str, prompts: List[List[int]], tokens: int) -> Dict[str, Any]:
    eng = Engine(net, device, max_slots=len(prompts), max_len=max(len(p) for p in prompts) + tokens + 8)

    def once() -> float:
        reqs = [Request(key=i, prompt=p, max_tokens=tokens, temperature=1.0, seed=i) for i, p in enumerate(prompts)]
        sync(device)
        t = time.perf_counter()
        eng.run(reqs)
        sync(device)
        eng.weights_changed()  # no prefix reuse between the two passes
        return time.perf_counter() - t

    was_training = net.training
    net.eval()
    try:
        warm = once()
        timed = once()
    finally:
        if was_training:
            net.train()
    new = len(prompts) * tokens
    return {"warmup_s": round(warm, 3), "seconds": round(timed, 3), "tokens": new,
            "tokens_per_s": round(new / timed, 1), "graphs": eng.stats["graphs"]}


def profile(net: Any, device: str, prompts: List[List[int]]) -> List[Dict[str, Any]]:
    """The busiest kernels over 16 eager decode steps with every row running."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    eng = Engine(net, device, max_slots=len(prompts), max_len=max(len(p) for p in prompts) + 64, graphs=False)
    for i, p in enumerate(prompts):
        eng.submit(Request(key=i, prompt=p, max_tokens=48, temperature=1.0, seed=i))
    with torch.no_grad():
        for _ in range(4):
            eng.step()
        sync(device)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
        with torch_profile(activities=acts) as prof:
            for _ in range(16):
                eng.step()
            sync(device)
    attr = "device_time_total" if device.startswith("cuda") else "cpu_time_total"
    rows_ = sorted(prof.key_averages(), key=lambda e: getattr(e, attr, 0.0), reverse=True)[:15]
    return [{"name": e.key[:90], "ms_per_step": round(getattr(e, attr, 0.0) / 1000.0 / 16, 3), "calls": e.count}
            for e in rows_]


def rows(n: int, vocab: int, seed: int, per: int = 8) -> List[MicroBatch]:
    """`n` rows in micro-batches of `per` (RL packs micro-batches to `optim.micro_tokens`
    padded tokens: 16,384 by default, about 12 of these rows)."""
    rng = random.Random(seed)
    out = []
    for start in range(0, n, per):
        lengths = [rng.randint(600, 1400) for _ in range(min(per, n - start))]
        width = max(lengths)
        ids, mask, pos = [], [], []
        for length in lengths:
            prompt = (2 * length) // 3
            ids.append([rng.randrange(3, vocab) for _ in range(length)] + [0] * (width - length))
            mask.append([0] * prompt + [1] * (length - prompt) + [0] * (width - length))
            pos.append(list(range(width)))
        out.append(MicroBatch(input_ids=ids, loss_mask=mask, position_ids=pos, lengths=lengths))
    return out


def graphs_built() -> int:
    """Graphs dynamo has compiled in this process so far (recompiles included)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return int(counters["stats"].get("unique_graphs", 0))


def rl_batch(micro: List[MicroBatch], scores: List[List[List[float]]]) -> RlBatch:
    """An update over `micro` with alternating advantages, its policies all `scores`."""
    targets = sum(len(r) for mb in scores for r in mb)
    return RlBatch(micro=[RlMicroBatch(rows=mb, advantages=[[1.0 if i % 2 else -1.0] * len(r)
                                                            for i, r in enumerate(scores[k])],
                                       behaviour=scores[k], proximal=scores[k], reference=None)
                          for k, mb in enumerate(micro)],
                   loss=RlLoss(clip_low=0.2, clip_high=0.28, kl_coef=0.0, entropy_coef=0.0, tis_cap=2.0,
                               loss_tokens=targets))


def train_round(trainer: Any, device: str, micro: List[MicroBatch]) -> Dict[str, Any]:
    """One score and one rl_step over `micro`, timed."""
    job = ScoreJob(batch=TrainBatch(micro=micro), reference=False)
    sync(device)
    t = time.perf_counter()
    scores = trainer.score(job).logprobs
    sync(device)
    score_s = time.perf_counter() - t
    batch = rl_batch(micro, scores)
    targets = batch.loss.loss_tokens
    t = time.perf_counter()
    trainer.rl_step(batch)
    sync(device)
    return {"score_s": score_s, "rl_step_s": time.perf_counter() - t, "targets": targets,
            "tokens": sum(sum(mb.lengths) for mb in micro)}


def train_profile(model: str, device: str, attention: str, rank: int, dtype: str, n_rows: int,
                  per: int) -> Dict[str, Any]:
    """Where one warm learner round's time goes (compile off): for `score` and `rl_step`
    apart, the wall, the device's busy time (kernels' own time summed), kernel launches,
    and the busiest kernels and host operators. Busy far below the wall: the host (launches,
    Python) bounds the learner, not the GPU."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    trainer = Trainer(setup(model, attention, rank, dtype, "off"), device)
    vocab = int(trainer._base().get_input_embeddings().weight.shape[0])
    micro = rows(n_rows, vocab, 1, per)
    train_round(trainer, device, micro)  # warm-up: kernels picked, allocator grown
    cuda = device.startswith("cuda")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    out: Dict[str, Any] = {"rows": n_rows, "tokens": sum(sum(mb.lengths) for mb in micro)}
    parts: Dict[str, Any] = {}

    def run(part: str, prof: Any) -> None:
        # The profiler's own overhead inflates the wall: compare busy with the wall here.
        dev = "self_device_time_total" if cuda else "self_cpu_time_total"
        events = prof.key_averages()
        on_device = [cuda and str(getattr(e, "device_type", "")).endswith("CUDA") for e in events]
        kernels = [e for e, d in zip(events, on_device, strict=True) if d]
        host = [e for e, d in zip(events, on_device, strict=True) if not d]
        busy_ms = sum(getattr(e, dev, 0.0) for e in kernels) / 1000.0
        parts[part]["device_busy_ms"] = round(busy_ms, 1)
        # Everything the device ran (copies and fills included), and the kernels alone.
        parts[part]["device_events"] = sum(e.count for e in kernels)
        parts[part]["kernel_launches"] = sum(e.count for e in kernels if not e.key.startswith(("Memcpy", "Memset")))
        parts[part]["top_kernels"] = [{"name": e.key[:100], "ms": round(getattr(e, dev, 0.0) / 1000.0, 2),
                                       "calls": e.count}
                                      for e in sorted(kernels, key=lambda e: -getattr(e, dev, 0.0))[:25]]
        parts[part]["top_host_ops"] = [{"name": e.key[:100], "self_ms": round(e.self_cpu_time_total / 1000.0, 2),
                                        "calls": e.count}
                                       for e in sorted(host, key=lambda e: -e.self_cpu_time_total)[:20]]

    batch = rl_batch(micro, trainer.score(ScoreJob(batch=TrainBatch(micro=micro), reference=False)).logprobs)
    for part in ("score", "rl_step"):
        sync(device)
        with torch_profile(activities=acts) as prof:
            t = time.perf_counter()
            if part == "score":
                trainer.score(ScoreJob(batch=TrainBatch(micro=micro), reference=False))
            else:
                trainer.rl_step(batch)
            sync(device)
            wall = time.perf_counter() - t
        parts[part] = {"wall_ms": round(wall * 1000.0, 1)}
        run(part, prof)
    out["parts"] = parts
    return out


def train_arm(model: str, device: str, attention: str, rank: int, dtype: str, n_rows: int, per: int,
              compile: str = "off", rounds: int = 2) -> Dict[str, Any]:
    """Round 0 at the same shapes as round 1 before the compile modes existed (a warm-up
    at those shapes, then timed); with compiling, rounds at new shapes show the cost of
    recompiling as an RL step would meet it."""
    trainer = Trainer(setup(model, attention, rank, dtype, compile), device)
    vocab = int(trainer._base().get_input_embeddings().weight.shape[0])
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    played = []
    for r in range(max(rounds, 2)):
        # Rounds 0 and 1 share shapes (warm-up, then timed); later rounds draw new lengths.
        micro = rows(n_rows, vocab, 1 if r < 2 else r, per)
        graphs = graphs_built()
        one = train_round(trainer, device, micro)
        one["graphs_built"] = graphs_built() - graphs
        played.append(one)
    timed = played[1:]
    mean = {k: sum(x[k] for x in timed) / len(timed) for k in ("score_s", "rl_step_s", "tokens")}
    return {"attention": trainer.attention_note, "compile": compile, "rows": n_rows, "tokens": played[1]["tokens"],
            "targets": played[1]["targets"],
            "score_s": round(played[1]["score_s"], 3), "rl_step_s": round(played[1]["rl_step_s"], 3),
            "score_tokens_per_s": round(played[1]["tokens"] / played[1]["score_s"], 1),
            "step_tokens_per_s": round(played[1]["tokens"] / played[1]["rl_step_s"], 1),
            "warm_up_s": round(played[0]["score_s"] + played[0]["rl_step_s"], 3),
            "rounds": [{k: round(v, 3) if isinstance(v, float) else v for k, v in x.items()} for x in played],
            "mean_after_warm_up": {"score_s": round(mean["score_s"], 3), "rl_step_s": round(mean["rl_step_s"], 3),
                                   "tokens_per_s": round(mean["tokens"] / (mean["score_s"] + mean["rl_step_s"]), 1)},
            "graphs_built_after_warm_up": sum(x["graphs_built"] for x in timed),
            # What a micro-batch of this size needs beside the model: the memory to plan for.
            "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.startswith("cuda") else None}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=800)
    ap.add_argument("--tokens", type=int, default=384)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--attention", default="sdpa,auto", help="trainer attention kernels; '' skips training")
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--train-compile", default="off", help="the learner's compile modes, e.g. off,on ('none': no arm)")
    ap.add_argument("--train-rounds", type=int, default=2,
                    help="training rounds per arm: a warm-up, one timed at its shapes, then new shapes")
    ap.add_argument("--train-only", action="store_true", help="skip generation (the learner's arms alone)")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--arms", default="trained,copy_sdpa,copy")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--micro-rows", type=int, default=8, help="rows per learner micro-batch")
    ap.add_argument("--train-profile", action="store_true",
                    help="profile one warm learner round (compile off) per attention kernel")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.model, a.device, a.batch, a.prompt_tokens, a.tokens, a.rows = (
            str(REPO / "configs/models/tiny-llama"), "cpu", 4, 40, 8, 8)
        a.attention, a.dtype, a.lora_rank, a.profile = "sdpa", "fp32", 4, True
    if a.micro_rows < 1:
        ap.error("--micro-rows must be at least 1")
    result: Dict[str, Any] = {"model": a.model, "device": a.device, "batch": a.batch, "micro_rows": a.micro_rows,
                              "prompt_tokens": a.prompt_tokens, "tokens": a.tokens, "lora_rank": a.lora_rank,
                              "dtype": a.dtype}
    if a.device.startswith("cuda"):
        result["gpu"] = torch.cuda.get_device_name(0)
    gen_dtype = torch.bfloat16 if a.device.startswith("cuda") else torch.float32
    trainer = Trainer(setup(a.model, "sdpa", a.lora_rank, a.dtype), a.device)
    vocab = int(trainer._base().get_input_embeddings().weight.shape[0])
    rng = random.Random(0)
    prompts = [[rng.randrange(3, vocab) for _ in range(a.prompt_tokens + rng.randint(-100, 100) * (a.prompt_tokens > 200))]
               for _ in range(a.batch)]
    arms: Dict[str, Any] = {}
    wanted = [] if a.train_only else a.arms.split(",")
    copy = GenerationCopy(trainer.net, a.device, gen_dtype)
    for arm in wanted:
        try:
            if arm == "trained":
                arms[arm] = generate(trainer.net, a.device, prompts, a.tokens)
            elif arm == "copy":
                arms[arm] = generate(copy.net, a.device, prompts, a.tokens)
            elif arm == "copy_sdpa":
                plain = GenerationCopy(trainer.net, a.device, gen_dtype, attention="sdpa")
                arms[arm] = generate(plain.net, a.device, prompts, a.tokens)
                del plain
        except Exception as exc:  # noqa: BLE001 - reported, the other arms go on
            arms[arm] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-1500:]}
    result["generation"] = arms
    for arm in ("trained", "copy_sdpa"):
        if "tokens_per_s" in arms.get(arm, {}) and "tokens_per_s" in arms.get("copy", {}):
            result[f"copy_speedup_over_{arm}"] = round(arms["copy"]["tokens_per_s"] / arms[arm]["tokens_per_s"], 2)
    if a.profile and not a.train_only:
        result["profile"] = profile(copy.net, a.device, prompts)
    # The refresh after an update (the weights moved: its time, and the copy matching).
    with torch.no_grad():
        for p in trainer.params:
            p.add_(torch.randn_like(p) * 1e-3)
    sync(a.device)
    t = time.perf_counter()
    copy.refresh(trainer.net)
    sync(a.device)
    result["refresh_s"] = round(time.perf_counter() - t, 4)
    del copy, trainer
    if a.device.startswith("cuda"):
        torch.cuda.empty_cache()
    result["training"] = []
    for attention in filter(None, a.attention.split(",")):
        for mode in [m for m in a.train_compile.split(",") if m and m != "none"]:
            try:
                result["training"].append(train_arm(a.model, a.device, attention, a.lora_rank, a.dtype, a.rows,
                                                    a.micro_rows, mode, a.train_rounds))
            except Exception as exc:  # noqa: BLE001 - reported, the other arms go on
                result["training"].append({"attention": attention, "compile": mode,
                                           "error": f"{type(exc).__name__}: {exc}",
                                           "trace": traceback.format_exc()[-1500:]})
    if a.train_profile:
        result["training_profile"] = []
        for attention in filter(None, a.attention.split(",")):
            try:
                found = train_profile(a.model, a.device, attention, a.lora_rank, a.dtype, a.rows, a.micro_rows)
                result["training_profile"].append({"attention": attention, **found})
            except Exception as exc:  # noqa: BLE001 - reported, the rest stands
                result["training_profile"].append({"attention": attention, "error": f"{type(exc).__name__}: {exc}",
                                                   "trace": traceback.format_exc()[-1500:]})
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

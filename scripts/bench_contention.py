#!/usr/bin/env python3
"""The policy engine's decode speed beside the evaluator's kinds of neighbours.

In run 6 (docs/rl.md) the colocated worker made 1.4k-5k tokens/s of its own generating
time, where the same engine alone makes 30k-40k at batch 64. This measures which
neighbour costs what, one arm at a time, in one process on one device:

- `alone`: the engine with nothing else on the machine;
- `gpu:K`: K processes, each with its own CUDA context, running small kernels in a loop
  (a candidate's correctness trials): the GPU time-slices between contexts;
- `cpu:K`: K processes burning a core each in Python (Triton compiling candidates);
- `cpu_nice:K`: the same at nice 10 (what the pool could do to its candidates);
- `ctx:K`: K processes creating and destroying CUDA contexts in a loop (the pool
  starting candidate processes, about 3.2 a second on one GPU);
- `gpu_nice:K`: `gpu:K` at nice 10;
- `busy:K`: K processes keeping the GPU busy with back-to-back kernels, as a candidate
  being timed does;
- a `_1conn` suffix on a kind starts its processes with CUDA_DEVICE_MAX_CONNECTIONS=1
  (fewer hardware queues per context: does a context then come up faster?).

Groups join with `+` (`ctx:4+busy:1`: contexts created while the GPU is kept busy). An
arm ending in `@idle` does not run the engine: its neighbours are measured for
--idle-seconds alone (`ctx:4@idle`: the rate contexts are created on an idle GPU, to
set beside `ctx:4` with the engine decoding).

Each arm: B prompts of P random tokens, N new tokens each sampled at temperature 1
(end of sequence ignored), through the engine as `train rl` runs it (CUDA graphs; not
compiled unless --compile). With `--prefill-rows 1,4,16` an arm instead times prefill
forwards (run 13 in docs/rl.md: a third of a step's generation): for each R, rounds of R
fresh prompts of P tokens admitted together with one new token each, so each round is
one prefill forward; per R, the device's ms per forward (`Engine._clock`) and the wall,
for the eager forward, the eager forward at the bucketed shapes (`Engine(prefill_buckets=True)`)
and the forward replayed from a CUDA graph at those shapes (`Engine._prefill_shape`), side by
side in each arm. With `--vary` every round's prompts have
another length (P down to P/2: other buckets, so the graphed side pays its captures inside
the measurement, as a run does). Before the arms, both engines answer the same requests
once and the result says how far their first tokens' log-probs are apart.
The neighbours start --settle seconds before the timed run
and are killed after it. Per arm: tokens/s, seconds, and each group's progress (loops
a second: for `ctx`, contexts created and destroyed).

usage: PYTHONPATH=python python3 scripts/bench_contention.py [--model configs/models/smollm2-135m-shape]
       [--batch 96] [--prompt-tokens 1200] [--tokens 384] [--arms alone,gpu:16,cpu:16,...]
       [--prefill-rows 1,4,16 [--rounds 20] [--vary] [--prefix-tokens N]] [--out F]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

DEFAULT_ARMS = ("alone,gpu:16,cpu:16,cpu_nice:16,ctx:4,gpu_nice:16,alone,"
                "ctx:4@idle,ctx_1conn:4@idle,ctx:4+busy:1@idle,ctx:4+gpu:16@idle")


def neighbour(kind: str, counter: str) -> int:
    """One neighbour process's loop; it writes its loop count to `counter` every second."""
    n, last = 0, time.perf_counter()

    def tick() -> None:
        nonlocal last
        if time.perf_counter() - last > 1.0:
            Path(counter).write_text(str(n))
            last = time.perf_counter()

    if kind in ("gpu", "busy"):
        import torch

        # `gpu`: short bursts with a pause (a candidate's trials); `busy`: back to back
        # (a candidate being timed).
        ops, pause = (8, 0.001) if kind == "gpu" else (64, 0.0)
        x = torch.randn(1 << 22, device="cuda")
        while True:
            for _ in range(ops):
                x = x * 0.5 + 1.0
            torch.cuda.synchronize()
            if pause:
                time.sleep(pause)
            n += 1
            tick()
    if kind == "cpu":
        while True:
            s = 0
            for i in range(100_000):
                s += i * i
            n += 1
            tick()
    if kind == "ctx":
        cuda = ctypes.CDLL("libcuda.so.1")
        if cuda.cuInit(0) != 0:
            raise SystemExit("cuInit failed")
        dev = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(dev), 0)
        while True:
            ctx = ctypes.c_void_p()
            if cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) != 0:
                raise SystemExit("cuCtxCreate failed")
            cuda.cuCtxDestroy_v2(ctx)
            n += 1
            tick()
    raise SystemExit(f"unknown neighbour kind {kind!r}")


def start_neighbours(kind: str, k: int, tmp: Path) -> List[Any]:
    """K processes of `kind` (`_nice`, `_1conn` suffixes as in the module's doc), each
    counting into a file under `tmp`."""
    nice, one_conn = "_nice" in kind, "_1conn" in kind
    base = kind.replace("_nice", "").replace("_1conn", "")
    env = dict(os.environ, CUDA_DEVICE_MAX_CONNECTIONS="1") if one_conn else None
    procs = []
    for i in range(k):
        cmd = [sys.executable, __file__, "--neighbour", base, "--counter", str(tmp / f"n{i}")]
        if nice:
            cmd = ["nice", "-n", "10"] + cmd
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True, env=env))
    return procs


def stop_neighbours(procs: List[Any]) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in procs:
        p.wait()


def loops(tmp: Path, k: int) -> int:
    """The neighbours' loops so far (each writes its running count once a second)."""
    total = 0
    for i in range(k):
        f = tmp / f"n{i}"
        try:
            total += int(f.read_text() or 0)
        except (OSError, ValueError):
            pass
    return total


def gpu_name() -> Any:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--neighbour")
    ap.add_argument("--counter")
    ap.add_argument("--model", default=str(REPO / "configs/models/smollm2-135m-shape"))
    ap.add_argument("--batch", type=int, default=96)
    ap.add_argument("--prompt-tokens", type=int, default=1200)
    ap.add_argument("--tokens", type=int, default=384)
    ap.add_argument("--arms", default=DEFAULT_ARMS)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--idle-seconds", type=float, default=5.0)
    ap.add_argument("--prefill-rows", help="time prefill forwards of these many rows instead of decoding")
    ap.add_argument("--rounds", type=int, default=20, help="prefill forwards per row count and arm")
    ap.add_argument("--vary", action="store_true", help="prefill rounds of varying prompt lengths")
    ap.add_argument("--prefix-tokens", type=int, default=0,
                    help="prefill rounds as next turns: each row's first N prompt tokens are cached")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.neighbour:
        return neighbour(a.neighbour, a.counter)

    arms = a.arms.split(",")
    if all(arm.endswith("@idle") for arm in arms):
        return report(a, arms, None, {})  # no engine: neighbours alone (also a CPU check)

    import torch

    sys.path.insert(0, str(REPO / "scripts"))
    from bench_rollouts import load_model, prompts
    from tritonforge_worker.engine import Engine, Request

    net = load_model(a.model, "cuda", "bfloat16")
    ps = prompts(net, a.batch, a.prompt_tokens)
    eng = Engine(net, "cuda", max_slots=a.batch, max_len=a.prompt_tokens + a.tokens + 8, compile=a.compile)

    def once() -> Dict[str, Any]:
        eng.forget_prefixes()
        reqs = [Request(key=i, prompt=p, max_tokens=a.tokens, temperature=1.0, seed=i) for i, p in enumerate(ps)]
        torch.cuda.synchronize()
        t = time.perf_counter()
        cpu0 = time.process_time()
        out = eng.run(reqs)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        n = sum(len(f.tokens) for f in out)
        return {"tokens": n, "seconds": round(dt, 3), "tokens_per_s": round(n / dt, 1),
                "engine_cpu_s": round(time.process_time() - cpu0, 3)}

    if a.prefill_rows:
        counts = [int(r) for r in a.prefill_rows.split(",")]
        if max(counts) > a.batch:
            sys.exit(f"--prefill-rows {a.prefill_rows}: more rows than --batch {a.batch} slots")
        def engine(**prefill_mode: bool) -> Any:
            return Engine(net, "cuda", max_slots=a.batch, max_len=a.prompt_tokens + a.tokens + 8,
                          compile=a.compile, **prefill_mode)

        graphed, eager, buckets = engine(prefill_graphs=True), engine(), engine(prefill_buckets=True)

        def both(rounds: int) -> Dict[str, Any]:
            out = {"eager": prefill(eager, ps, counts, rounds, a.vary, a.prefix_tokens),
                   "buckets": prefill(buckets, ps, counts, rounds, a.vary, a.prefix_tokens),
                   "graphs": prefill(graphed, ps, counts, rounds, a.vary, a.prefix_tokens)}
            return {**out, "seconds": round(sum(v["seconds"] for v in out.values()), 3)}

        warm = both(2)
        warm["agreement"] = agreement(eager, graphed, ps, max(counts))
        return report(a, arms, lambda: both(a.rounds), warm)
    return report(a, arms, once, once())


def agreement(eager: Any, graphed: Any, ps: List[List[int]], rows: int) -> Dict[str, Any]:
    """The same greedy requests through both engines (rows of several lengths in one wave):
    how many first tokens agree and the largest gap in their log-probs (bf16: shapes that
    differ round differently)."""
    from tritonforge_worker.engine import Request

    outs = []
    for eng in (eager, graphed):
        eng.forget_prefixes()
        outs.append(eng.run([Request(key=i, prompt=ps[i][: len(ps[i]) - 37 * i % (len(ps[i]) // 2)], max_tokens=4,
                                     temperature=0.0) for i in range(rows)]))
    same = sum(x.tokens == y.tokens for x, y in zip(*outs, strict=True))
    gap = max(abs(x.logprobs[0] - y.logprobs[0]) for x, y in zip(*outs, strict=True))
    return {"rows": rows, "same_tokens": same, "max_first_logprob_gap": round(gap, 4),
            "prefill_graphs": graphed.stats["prefill_graphs"]}


def prefill(eng: Any, ps: List[List[int]], counts: List[int], rounds: int, vary: bool = False,
            prefix: int = 0) -> Dict[str, Any]:
    """Rounds of R prompts admitted together (one prefill forward each, one token
    generated), for each R: device ms per forward and wall ms per round (and for a graphed
    engine the shapes it captured meanwhile). With `prefix` > 0 every round is a next turn,
    as in a multi-turn rollout: row i's prompt starts with the same `prefix` tokens, cached
    before the rounds, and goes on with other tokens each round (new keys over a long
    cached prefix, what run 16's 113 ms forwards were)."""
    import torch
    from tritonforge_worker.engine import Request

    sync = torch.cuda.synchronize if eng.on_cuda else (lambda: None)  # the CPU: a check of this code
    out: Dict[str, Any] = {}
    started = time.perf_counter()
    for r in counts:
        eng.forget_prefixes()  # nothing reused: every round prefills its prompts whole
        if prefix:
            eng.run([Request(key=("prefix", i), prompt=ps[i][:prefix], max_tokens=1, temperature=1.0, seed=i)
                     for i in range(r)])
        before = (eng.stats["prefill_ms"], eng.stats["prefill_forwards"], eng.stats["prefill_graphs"],
                  eng.stats["reused_tokens"])
        sync()
        t = time.perf_counter()
        for k in range(rounds):
            cut = (k * 53) % (len(ps[0]) // 2) if vary else 0
            if prefix:
                # Row i: its cached prefix, then another prompt's tokens (a new turn each round).
                tail = len(ps[0]) - prefix - cut
                reqs = [Request(key=(k, i), prompt=ps[i][:prefix] + ps[(k * r + i + 1) % len(ps)][:tail],
                                max_tokens=1, temperature=1.0, seed=i) for i in range(r)]
            else:
                eng.forget_prefixes()
                reqs = [Request(key=(k, i), prompt=ps[(k * r + i) % len(ps)][: len(ps[0]) - cut], max_tokens=1,
                                temperature=1.0, seed=i) for i in range(r)]
            eng.run(reqs)
        sync()
        wall = time.perf_counter() - t
        eng._read_brackets()
        ms, fw = eng.stats["prefill_ms"] - before[0], eng.stats["prefill_forwards"] - before[1]
        out[str(r)] = {"forwards": fw, "device_ms_per_forward": round(ms / max(fw, 1), 2),
                       "wall_ms_per_round": round(1000.0 * wall / rounds, 2),
                       "captured": eng.stats["prefill_graphs"] - before[2],
                       "reused_tokens_per_round": round((eng.stats["reused_tokens"] - before[3]) / rounds)}
    return {"prefill": out, "seconds": round(time.perf_counter() - started, 3)}


def report(a: Any, arms: List[str], once: Any, warm: Dict[str, Any]) -> int:
    """Run every arm (`once` runs the engine; None: only idle arms), print and write the result."""
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"contention-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    rows: List[Dict[str, Any]] = []
    for j, arm in enumerate(arms):
        spec, idle = arm.removesuffix("@idle"), arm.endswith("@idle")
        groups = [] if spec == "alone" else [(g.partition(":")[0], int(g.partition(":")[2] or 0))
                                              for g in spec.split("+")]
        procs: List[Any] = []
        dirs = []
        for g, (kind, k) in enumerate(groups):
            d = tmp / f"{j}-{g}"
            d.mkdir()
            dirs.append(d)
            procs += start_neighbours(kind, k, d)
        try:
            time.sleep(a.settle if procs else 0.0)
            before = [loops(d, k) for d, (_, k) in zip(dirs, groups, strict=True)]
            row: Dict[str, Any] = {"arm": arm}
            if idle:
                time.sleep(a.idle_seconds)
                row["seconds"] = a.idle_seconds
            else:
                row.update(once())
            time.sleep(1.1)  # every counter written once more
            row["neighbour_loops_per_s"] = {
                f"{kind}:{k}": round((loops(d, k) - b) / (row["seconds"] + 1.1), 1)
                for d, (kind, k), b in zip(dirs, groups, before, strict=True)}
            row["neighbours_alive"] = sum(p.poll() is None for p in procs)
        finally:
            stop_neighbours(procs)
        rows.append(row)
        print(json.dumps(row), flush=True)
    nvidia_mps = subprocess.run(["sh", "-c", "command -v nvidia-cuda-mps-control"], capture_output=True, text=True)
    result = {"model": a.model, "batch": a.batch, "prompt_tokens": a.prompt_tokens, "tokens": a.tokens,
              "compiled": a.compile, "warmup": warm, "arms": rows, "cpus": os.cpu_count(),
              "mps_control": nvidia_mps.stdout.strip() or None, "gpu": gpu_name()}
    text = json.dumps(result, indent=1)
    if a.out:
        Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

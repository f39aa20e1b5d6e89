#!/usr/bin/env python3
"""Where a timed run's host time goes, on a GPU (issue 20: the timing lane bounds a batch).

For a few suite solutions at their default size, the executor runs in this process as a
worker runs it (`Executor.run`, timing on, the given budget), with `timed_run` under
cProfile. Per solution it prints the timed run's repetitions, samples, wall time and wall
time a repetition; then the functions that took the most of the timed runs' time in all,
by own time and by cumulative time. With `--load N`, N processes spin on other cores
while it runs (the pool's sixteen places compile and check beside a timing hold).

  python3 scripts/profile_timing.py [--budget-ms 400] [--load 0] [--top 30] [solution ...]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import multiprocessing as mp
import os
import pstats
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, List

REPO = Path(__file__).resolve().parent.parent
# `--worker DIR` profiles another copy of the worker package (an A/B in one run).
WORKER = sys.argv[sys.argv.index("--worker") + 1] if "--worker" in sys.argv else str(REPO / "python")
sys.path.insert(0, WORKER)

DEFAULT = ["level1/relu", "level1/elu", "level1/softmax", "level1/layer_norm", "level1/matmul",
           "level1/cumsum_rows", "level1/conv2d", "level2/linear_bias_gelu"]


def spin() -> None:
    while True:
        pass


# One process start as the pool's places make them, reduced to its GPU side: a CUDA
# context, one small kernel, an exit (the context torn down).
START = "import torch; torch.zeros(1, device='cuda').add_(1); torch.cuda.synchronize()"


def starts() -> None:
    import subprocess

    while True:
        subprocess.run([sys.executable, "-c", START], check=False)


# The same start, kept alive: `creates` starts one every 0.7 s and keeps them (contexts
# made, none torn down); `exits` makes 60 first and then ends one every 0.5 s (torn
# down, none made).
KEEP = START + "; import time; time.sleep(600)"
EXITS_READY_S = 25.0
# `inits`: as `creates`, with the driver initialised only (`torch.cuda.init()`), nothing
# allocated and no kernel.
INIT = "import torch, time; torch.cuda.init(); time.sleep(600)"


def creates() -> None:
    import subprocess
    import time

    while True:
        subprocess.Popen([sys.executable, "-c", KEEP])
        time.sleep(0.7)


def inits() -> None:
    import subprocess
    import time

    while True:
        subprocess.Popen([sys.executable, "-c", INIT])
        time.sleep(0.7)


# `loads`: one process with a context compiles and loads a new Triton kernel every 0.3 s
# and launches it once; `launches`: the same kernel, compiled once, launched every 0.3 s.
KERNEL = """
import itertools, sys, time
import torch, triton, triton.language as tl

@triton.jit
def bump(x_ptr, C: tl.constexpr):
    tl.store(x_ptr, tl.load(x_ptr) + C)

x = torch.zeros(1, device="cuda")
new = sys.argv[1] == "loads"
for c in itertools.count():
    bump[(1,)](x, C=c if new else 1)
    torch.cuda.synchronize()
    time.sleep(0.3)
"""


def kernels(kind: str) -> None:
    import subprocess

    path = Path(tempfile.mkdtemp()) / "tf_disturb_kernel.py"
    path.write_text(KERNEL)
    subprocess.run([sys.executable, str(path), kind], check=False)


def loads() -> None:
    kernels("loads")


def launches() -> None:
    kernels("launches")


def exits() -> None:
    import subprocess
    import time

    kept = [subprocess.Popen([sys.executable, "-c", KEEP]) for _ in range(60)]
    time.sleep(EXITS_READY_S)
    for p in kept:
        p.kill()
        p.wait()
        time.sleep(0.5)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-ms", type=int, default=400)
    ap.add_argument("--load", type=int, default=0, help="processes beside the run (see --disturb)")
    ap.add_argument("--disturb", default="spin",
                    choices=["spin", "starts", "creates", "inits", "exits", "loads", "launches"],
                    help="what they do: spin on a core, start CUDA processes over and over, only "
                         "create them, only initialise the driver, only end them, load a new Triton "
                         "kernel every 0.3 s, or launch the same one")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--plain", action="store_true", help="no profiler: the timings alone")
    ap.add_argument("--worker", default=WORKER, help="the directory holding tritonforge_worker")
    ap.add_argument("solutions", nargs="*", default=DEFAULT, help="suite names, e.g. level1/relu")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("profile_timing.py needs a CUDA device", file=sys.stderr)
        return 2
    target = {"spin": spin, "starts": starts, "creates": creates, "inits": inits, "exits": exits, "loads": loads,
              "launches": launches}[args.disturb]
    spinners = [mp.Process(target=in_own_group, args=(target,), daemon=True) for _ in range(args.load)]
    for p in spinners:
        p.start()
    if args.disturb == "exits" and spinners:
        time.sleep(EXITS_READY_S + 1.0)
    import tritonforge_worker.executor as ex

    prof = cProfile.Profile()
    timed = ex.timed_run
    runs: List[float] = []

    def profiled(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        if not args.plain:
            prof.enable()
        try:
            return timed(*a, **kw)
        finally:
            prof.disable()
            runs.append((time.perf_counter() - t) * 1000.0)

    ex.timed_run = profiled
    print(f"budget {args.budget_ms} ms, {args.load} processes beside ({args.disturb}), torch {torch.__version__}, "
          f"worker {ex.__file__}")
    print("| solution | status | runs | run wall ms | samples | timed ms | ms a repetition | ref ms | cand ms | "
          "cand IQR ms | cand max ms | CI % | window |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    try:
        for name in args.solutions:
            print(row(ex, name, args.budget_ms, runs), flush=True)
    finally:
        for p in spinners:  # each with the processes it started (its own process group)
            if p.pid is not None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    for key in () if args.plain else ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(args.top)
        print(f"\n## timed runs, by {key}\n")
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip()))
    return 0


def in_own_group(target: Callable[[], None]) -> None:
    """Run `target` as the leader of a process group of its own, so that the processes it
    starts end with it (and nothing else on the machine does)."""
    os.setpgrp()
    target()


def row(ex: Any, name: str, budget_ms: int, runs: List[float]) -> str:
    from allow_list import default_allow  # this directory
    from tritonforge_worker.protocol import EvalJob, RuntimePolicy, SourceFile

    file = name.split("/")[1] + ".py"
    job = EvalJob(
        problem=SourceFile(name=file, source=(REPO / "bench" / f"{name}.py").read_text()),
        candidate=SourceFile(name=file, source=(REPO / "bench/solutions" / f"{name}.py").read_text()),
        trials=5, seed=42, tolerance=None, overrides={}, device="cuda", timing=True,
        timing_budget_ms=budget_ms, speedup_cap=10.0, profile=False, compile_baseline=False,
        runtime=RuntimePolicy(allow_aten=default_allow(), allow_torch_compute=False, min_kernel_share=0.1),
        shape_check=None)
    before = len(runs)
    v = ex.Executor(job, tempfile.mkdtemp()).run()
    t = v.timing
    if t is None:
        return f"| {name} | {v.status} ({v.message[:60]}) | {len(runs) - before} | | | | | | | | | | |"
    timed_ms = v.phases.timed_ms if v.phases else float("nan")
    # Repetitions: samples, plus the audited and spot-checked calls kept out of them
    # (3 + 2 to 5 + 3, by the window: `checks_for`; 5 + 3 in workers before it).
    checks_for = getattr(ex, "checks_for", lambda window: (5, 3))
    reps = t.candidate.samples + sum(checks_for(min(t.candidate.samples + 8, 48)))
    ci = (t.speedup_high - t.speedup_low) / 2.0 / t.speedup * 100.0
    wall = sum(runs[before:])
    return (f"| {name} | {v.status} | {len(runs) - before} | {wall:.0f} | {t.candidate.samples} | {timed_ms:.0f} | "
            f"{timed_ms / reps:.2f} | {t.reference.median_ms:.3f} | {t.candidate.median_ms:.3f} | "
            f"{t.candidate.iqr_ms:.3f} | {t.candidate.max_ms:.3f} | {ci:.2f} | "
            f"{t.window.how} |")



if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())

#!/usr/bin/env python3
"""What the evaluator's runtime layers cost per watched forward, in CPU mode.

For a few suite solutions (at their `small` variant, under Triton's interpreter, one
thread) the executor builds the candidate as a worker does (launch hooks, dispatch
recorder, audit hook, thread and mode wrappers, integrity snapshot), then times, in
rotating order within each repetition so that drift and load hit all three alike:

  plain     `model(*inputs)` under `torch.no_grad()`: what a timed call runs
  recorded  the same inside the dispatch recorder and the audit watch (the layers alone)
  watched   the executor's whole watched call (`call_candidate`: the layers, launch and
            integrity checks, thread count, the outputs' copy at return and comparison)

The recorder's cost is the median of the per-repetition differences recorded - plain. It
also times the whole evaluation (`Executor.run`, 5 trials) with and without the re-call
check (median of 3, after one run that pays first-use costs). Run it with the worker's
interpreter:

  .tritonforge/venv/bin/python scripts/runtime_cost.py [--reps 40] [solution ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, List

import tomllib

os.environ.setdefault("TRITON_INTERPRET", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

DEFAULT = ["level1/relu", "level1/softmax", "level1/layer_norm", "level1/matmul", "level2/linear_bias_gelu",
           "level2/conv2d_gelu"]


def paired(fns: List[Callable[[], Any]], reps: int) -> List[List[float]]:
    """Milliseconds of each of `fns` per repetition, called in rotating order."""
    for fn in fns:
        fn()
        fn()
    out: List[List[float]] = [[] for _ in fns]
    for r in range(reps):
        for k in range(len(fns)):
            i = (r + k) % len(fns)
            t = time.perf_counter()
            fns[i]()
            out[i].append((time.perf_counter() - t) * 1000.0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("solutions", nargs="*", default=DEFAULT, help="suite names, e.g. level1/relu")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    print("| solution | ATen ops per call | plain ms | recorded ms | watched ms | recorder cost ms | "
          "evaluation ms | of it, re-call check ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.solutions:
        print(measure(torch, name, args.reps), flush=True)
    return 0


def measure(torch: Any, name: str, reps: int) -> str:
    """One table row for the suite solution `name`."""
    from allow_list import default_allow  # this directory
    from tritonforge_worker.executor import Executor, build, call_candidate, new_context, to_device
    from tritonforge_worker.protocol import EvalJob, RuntimePolicy, SourceFile

    manifest = tomllib.loads((REPO / "bench/manifest.toml").read_text())["problems"]
    overrides = manifest.get(name, {}).get("variants", {}).get("small", {})
    file = name.split("/")[1] + ".py"
    job = EvalJob(
        problem=SourceFile(name=file, source=(REPO / "bench" / f"{name}.py").read_text()),
        candidate=SourceFile(name=file, source=(REPO / "bench/solutions" / f"{name}.py").read_text()),
        trials=5, seed=42, tolerance=None, overrides=overrides, device="cpu", timing=False,
        timing_budget_ms=400, speedup_cap=10.0, profile=False, compile_baseline=False,
        runtime=RuntimePolicy(allow_aten=default_allow(), allow_torch_compute=False, min_kernel_share=0.1),
        shape_check=None)
    import tritonforge_worker.executor as ex

    def evaluation() -> float:
        t = time.perf_counter()
        v = Executor(job, tempfile.mkdtemp()).run()
        assert v.status == "correct", v.message
        return (time.perf_counter() - t) * 1000.0

    evaluation()
    whole = statistics.median(evaluation() for _ in range(3))
    recall = ex.recall_check
    ex.recall_check = lambda *a: None  # type: ignore[assignment]
    try:
        without = statistics.median(evaluation() for _ in range(3))
    finally:
        ex.recall_check = recall
    cx = new_context(job, tempfile.mkdtemp())
    built = build(cx)
    torch.manual_seed(1)
    inputs = to_device(cx, list(built.problem.get_inputs()))
    model = built.model

    def plain() -> None:
        with torch.no_grad():
            model(*inputs)

    def recorded() -> None:
        with torch.no_grad(), cx.aten, cx.audit.watching("forward"):
            model(*inputs)

    def watched() -> None:
        call_candidate(cx, model, inputs, "cost", [])

    counter = _Counter(torch)
    with torch.no_grad(), counter:
        model(*inputs)
    ps, rs, ws = paired([plain, recorded, watched], reps)
    cost = statistics.median(r - p for p, r in zip(ps, rs, strict=True))
    p, r, w = (statistics.median(x) for x in (ps, rs, ws))
    return (f"| {name} | {counter.n} | {p:.2f} | {r:.2f} | {w:.2f} | {cost:+.2f} | {whole:.0f} | "
            f"{whole - without:.0f} |")


class _Counter:
    """Counts the ATen operators one forward dispatches (launches included)."""

    def __init__(self, torch: Any) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self
        self.n = 0

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                outer.n += 1
                return func(*args, **(kwargs or {}))

        self.mode = Mode()

    def __enter__(self) -> "_Counter":
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mode.__exit__(*exc)



if __name__ == "__main__":
    sys.exit(main())

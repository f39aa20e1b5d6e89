#!/usr/bin/env python3
"""Measure evaluation latency in CPU mode and the pool's per-candidate overhead.

What it runs (all on a trivial, correct ReLU candidate over a 4x1000 input, 5 trials):
  cold CLI      `tritonforge eval` once per process: pool start (torch import) + one evaluation
  pool          a batch of N distinct candidates through `tritonforge eval --problems/--candidates`;
                per candidate: host wall time from job sent to verdict (`wall_ms`) and the
                executor's own time (`executor_ms`); with processes forked from the CPU
                fork server (the default) and with `--no-fork` (each process started)
  direct        the executor called in-process, no isolation: the floor
  naive spawn   `tritonforge eval --naive`: a fresh process started on demand per candidate
Prints a markdown table; docs/evaluator-cpu.md records what it printed.

  cold env      with --cold: the very first `tritonforge eval` on a machine, creating the
                managed venv from PyPI into a fresh directory with pip's cache disabled

usage: python3 scripts/bench_eval_overhead.py [--binary target/release/tritonforge]
           [--venv .tritonforge/venv] [--n 20] [--reps 5] [--cold]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBLEM = REPO / "crates/cli/tests/fixtures/problems/relu_small.py"
CANDIDATE = REPO / "bench/solutions/level1/relu.py"
# The executor protocol's version, read from the worker so the naive row speaks it.
PROTOCOL = int(next(line.split("=")[1] for line in (REPO / "python/tritonforge_worker/protocol.py").read_text().splitlines()
                    if line.startswith("PROTOCOL_VERSION =")))

DIRECT = r"""
import json, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
import os
os.environ["TRITON_INTERPRET"] = "1"
import torch
torch.set_num_threads(1)
import triton
from tritonforge_worker.executor import Executor
from tritonforge_worker.protocol import EvalJob, RuntimePolicy, SourceFile
problem, cands = sys.argv[2], sys.argv[3:]
times = []
for c in cands:
    job = EvalJob(problem=SourceFile(name="p.py", source=open(problem).read()),
                  candidate=SourceFile(name="c.py", source=open(c).read()),
                  trials=5, seed=42, tolerance=None, overrides={}, device="cpu", timing=True,
                  timing_budget_ms=400, speedup_cap=10.0, profile=False, compile_baseline=False,
                  runtime=RuntimePolicy(allow_aten=["empty_like", "empty", "view"], allow_torch_compute=False,
                                        min_kernel_share=0.1), shape_check=None)
    d = tempfile.mkdtemp()
    t = time.perf_counter()
    v = Executor(job, d).run()
    times.append((time.perf_counter() - t) * 1000)
    assert v.status == "correct", v.message
print(json.dumps(times))
"""


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(REPO / "target/release/tritonforge"))
    ap.add_argument("--venv", default=str(REPO / ".tritonforge/venv"))
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cold", action="store_true", help="also time a first run that creates the venv")
    args = ap.parse_args()
    binary = args.binary
    py = str(Path(args.venv).resolve() / "bin/python")
    work = Path(tempfile.mkdtemp(prefix="tf-bench-"))
    state = work / "state"
    base = [binary, "--state-dir", str(state), "--venv", args.venv]

    # Distinct candidates (a comment differs) so nothing is a cache hit.
    probs, cands = work / "problems", work / "candidates"
    probs.mkdir()
    cands.mkdir()
    src = CANDIDATE.read_text()
    for i in range(args.n):
        shutil.copy(PROBLEM, probs / f"c{i:03d}.py")
        (cands / f"c{i:03d}.py").write_text(f"# variant {i}\n" + src)

    cold_env = None
    if args.cold:
        fresh = work / "fresh-venv"
        t = time.perf_counter()
        r = subprocess.run([binary, "--state-dir", str(work / "cold-state"), "--venv", str(fresh), "eval", "--no-store",
                            "--problem", str(PROBLEM), "--candidate", str(CANDIDATE)],
                           capture_output=True, text=True, env=dict(os.environ, PIP_NO_CACHE_DIR="1"))
        cold_env = (time.perf_counter() - t) * 1000
        assert r.returncode == 0, r.stderr[-3000:]
        shutil.rmtree(fresh, ignore_errors=True)

    subprocess.run(base + ["setup"], check=True, capture_output=True)

    cold = []
    for _ in range(args.reps):
        t = time.perf_counter()
        r = subprocess.run(base + ["eval", "--no-store", "--jobs", "1", "--spares", "0", "--problem", str(PROBLEM),
                                   "--candidate", str(CANDIDATE)], capture_output=True, text=True)
        cold.append((time.perf_counter() - t) * 1000)
        assert r.returncode == 0, r.stderr

    pool = {}
    for fork, jobs in ((True, 1), (True, 2), (False, 1), (False, 2)):
        t = time.perf_counter()
        r = subprocess.run(base + ["eval", "--no-store", "--json", "--jobs", str(jobs), "--problems", str(probs),
                                   "--candidates", str(cands)] + ([] if fork else ["--no-fork"]),
                           capture_output=True, text=True)
        total = (time.perf_counter() - t) * 1000
        assert r.returncode == 0, r.stderr
        recs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
        assert len(recs) == args.n and all(x["status"] == "correct" for x in recs)
        pool[(fork, jobs)] = {
            "wall": med([x["wall_ms"] for x in recs]),
            "exec": med([x["executor_ms"] for x in recs]),
            "overhead": med([x["wall_ms"] - x["executor_ms"] for x in recs]),
            "total": total,
            "per_cand": total / args.n,
        }

    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    r = subprocess.run([py, "-c", DIRECT, str(REPO / "python"), str(PROBLEM)] + [str(p) for p in sorted(cands.iterdir())],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    direct = json.loads(r.stdout)

    # Naive: the CLI's --naive mode, a process started on demand per candidate.
    nprobs, ncands = work / "naive-problems", work / "naive-candidates"
    nprobs.mkdir()
    ncands.mkdir()
    for c in sorted(cands.iterdir())[: args.reps * 2]:
        shutil.copy(probs / c.name, nprobs / c.name)
        shutil.copy(c, ncands / c.name)
    r = subprocess.run(base + ["eval", "--no-store", "--json", "--naive", "--problems", str(nprobs),
                               "--candidates", str(ncands)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    recs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert all(x["status"] == "correct" for x in recs)
    naive = [x["wall_ms"] for x in recs]

    print(f"CPU mode, {os.cpu_count()} cores; trivial correct candidate (ReLU 4x1000, 5 trials); N={args.n}\n")
    print("| measurement | median ms |")
    print("| --- | ---: |")
    if cold_env is not None:
        print(f"| first run on a fresh machine: venv created from PyPI (no pip cache) + 1 evaluation | {cold_env:.0f} |")
    print(f"| cold CLI: one `tritonforge eval` process (pool start + 1 evaluation), {args.reps} runs | {med(cold):.0f} |")
    print(f"| direct: executor in-process, no isolation (floor) | {med(direct):.1f} |")
    print(f"| naive: fresh worker started per candidate, {len(naive)} runs | {med(naive):.0f} |")
    for (fork, jobs), s in pool.items():
        name = f"pool --jobs {jobs}" + ("" if fork else " --no-fork")
        print(f"| {name}: per-candidate wall (job sent to verdict) | {s['wall']:.1f} |")
        print(f"| {name}: executor time inside it | {s['exec']:.1f} |")
        print(f"| {name}: overhead (wall - executor) | {s['overhead']:.1f} |")
        print(f"| {name}: whole batch / N (incl. process start, CLI start) | {s['per_cand']:.0f} |")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

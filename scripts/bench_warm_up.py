#!/usr/bin/env python3
"""Where a GPU candidate process's start goes, part by part, alone and under load.

A parent imports what the pool's GPU fork server imports (`gpu_fork_server_imports`), CUDA
untouched (`--without-dynamo`: all but torch._dynamo, as before 2026-11-29), then forks N
children at once. Each child, in a scratch directory of its own with
`CUDA_DEVICE_MAX_CONNECTIONS=1` (the pool's default), creates its CUDA context, runs the
worker's warm-up evaluation (`_warm_up_evaluation`: a trivial problem with a Triton kernel
through the executor, from a Triton cache warmed once, as the pool's cache template gives
each process) and then the math libraries' first calls (`_warm_up_libraries`: cuBLAS and
cuDNN), timing each. `--load K` keeps K processes spinning on the CPU meanwhile, as a
pool's candidates compiling and checking do.

    PYTHONPATH=python python3 scripts/bench_warm_up.py --out OUT/warm-up.json \\
        [--arms 1:0,16:0,16:16,32:16]      # children:load pairs
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict

os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gpu_start import fork_children  # noqa: E402

PARTS = ("context", "evaluation", "libraries")


def child(work: str, write_fd: int) -> None:
    from tritonforge_worker.__main__ import _warm_up_evaluation, _warm_up_libraries

    os.chdir(tempfile.mkdtemp(dir=work))
    marks: Dict[str, float] = {}
    t = time.perf_counter()
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    marks["context"] = time.perf_counter() - t
    t = time.perf_counter()
    _warm_up_evaluation("cuda")
    marks["evaluation"] = time.perf_counter() - t
    t = time.perf_counter()
    _warm_up_libraries()
    marks["libraries"] = time.perf_counter() - t
    os.write(write_fd, (json.dumps(marks) + "\n").encode())


def spin(stop: Any) -> None:
    x = 0
    while not stop.is_set():
        for i in range(100_000):
            x ^= i


def run(count: int, load: int, work: str) -> Dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")  # burners never touch CUDA; spawned, not forked
    stop = ctx.Event()
    burners = [ctx.Process(target=spin, args=(stop,)) for _ in range(load)]
    for b in burners:
        b.start()
    time.sleep(0.5 if load else 0.0)
    done, wall = fork_children(count, lambda fd: child(work, fd))
    stop.set()
    for b in burners:
        b.join()
    med = {p: round(statistics.median(m[p] for m in done), 3) for p in PARTS} if done else {}
    worst = {p: round(max(m[p] for m in done), 3) for p in PARTS} if done else {}
    return {"children": count, "load": load, "ok": len(done), "wall_s": round(wall, 3),
            "starts_per_s": round(len(done) / wall, 2), "median_s": med, "max_s": worst}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--arms", default="1:0,16:0,16:16,32:16")
    ap.add_argument("--without-dynamo", action="store_true",
                    help="the parent does not import torch._dynamo (the fork server before 2026-11-29)")
    a = ap.parse_args()
    import torch
    import triton
    from tritonforge_worker.__main__ import gpu_fork_server_imports

    gpu_fork_server_imports(dynamo=not a.without_dynamo)

    work = tempfile.mkdtemp(prefix="tf-warm-")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(work, "cache")
    report: Dict[str, Any] = {"torch": torch.__version__, "triton": triton.__version__, "cpus": os.cpu_count(),
                              "parent_imports_dynamo": not a.without_dynamo}
    report["cache_fill"] = run(1, 0, work)  # compiles the warm-up kernel into the shared cache
    report["arms"] = [run(int(c), int(k), work) for c, k in (arm.split(":") for arm in a.arms.split(","))]
    Path(a.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

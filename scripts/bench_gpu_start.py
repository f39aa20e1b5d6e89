"""What a GPU evaluation process costs to start, phase by phase, and how well starts run
in parallel: the numbers behind the pool's spares and its GPU fork server.

A parent imports torch and triton with CUDA untouched (as the pool's GPU fork server
does), then forks N children at once; each initialises CUDA, launches a small Triton
kernel (from a warmed cache), and makes its first cuBLAS and cuDNN calls, timing each
step. Optionally the parent first loads the CUDA math libraries into its own memory
(`--preload`), which a fork server can do without creating a CUDA context.

    python3 scripts/bench_gpu_start.py --out OUT/start.json [--counts 1,8,16,32]
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def twice(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)
'''


def child(kernel_path: str, write_fd: int) -> None:
    t0 = time.perf_counter()
    marks: Dict[str, float] = {}
    import importlib.util

    import torch

    torch.cuda.init()
    torch.cuda.synchronize()
    marks["cuda_init"] = time.perf_counter() - t0
    spec = importlib.util.spec_from_file_location("bench_kernel", kernel_path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    mod.twice[(4,)](x, y, x.numel(), BLOCK=256)
    torch.cuda.synchronize()
    marks["triton"] = time.perf_counter() - t0
    a = torch.randn(64, 64, device="cuda")
    float((a @ a).sum())
    marks["cublas"] = time.perf_counter() - t0
    xi = torch.randn(1, 3, 16, 16, device="cuda")
    w = torch.randn(4, 3, 3, 3, device="cuda")
    float(torch.nn.functional.conv2d(xi, w).sum())
    marks["cudnn"] = time.perf_counter() - t0
    os.write(write_fd, (json.dumps(marks) + "\n").encode())
    os._exit(0)


def fork_children(count: int, child: Callable[[int], None]) -> Tuple[List[Dict[str, float]], float]:
    """Fork `count` children at once, each running `child(write_fd)` (which writes one JSON
    line of its marks); their marks and the wall time until all had exited."""
    r, w = os.pipe()
    started = time.perf_counter()
    pids: List[int] = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 1
            try:
                child(w)
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    os.close(w)
    done: List[Dict[str, float]] = []
    with os.fdopen(r) as lines:
        for line in lines:
            done.append(json.loads(line))
    for pid in pids:
        os.waitpid(pid, 0)
    return done, time.perf_counter() - started


def run(count: int, kernel_path: str) -> Dict[str, object]:
    done, wall = fork_children(count, lambda fd: child(kernel_path, fd))
    phases = {k: statistics.median(m[k] for m in done) for k in ("cuda_init", "triton", "cublas", "cudnn")}
    return {"children": count, "ok": len(done), "wall_s": wall, "starts_per_s": len(done) / wall,
            "median_cumulative_s": phases, "max_total_s": max((m["cudnn"] for m in done), default=None)}


def preload() -> List[str]:
    import torch

    loaded = []
    roots = [os.path.dirname(torch.__file__)] + [p for p in sys.path if p.endswith("site-packages")]
    patterns = ["libcublas.so*", "libcublasLt.so*", "libcudnn*.so*"]
    seen = set()
    for root in roots:
        for pat in patterns:
            for path in glob.glob(os.path.join(root, "**", pat), recursive=True):
                name = os.path.basename(path)
                if name in seen:
                    continue
                try:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                    seen.add(name)
                    loaded.append(path)
                except OSError:
                    pass
    return loaded


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--counts", default="1,8,16,32")
    args = ap.parse_args()
    import torch  # noqa: F401 - the fork server's imports, CUDA untouched
    import triton  # noqa: F401

    work = tempfile.mkdtemp(prefix="tf-start-")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(work, "cache")
    kernel_path = os.path.join(work, "bench_kernel.py")
    with open(kernel_path, "w") as f:
        f.write(KERNEL)
    results: Dict[str, object] = {"torch": torch.__version__, "triton": triton.__version__,
                                  "cpus": os.cpu_count()}
    results["warm_cache"] = run(1, kernel_path)  # compiles the kernel into the shared cache
    counts = [int(c) for c in args.counts.split(",")]
    results["plain"] = [run(n, kernel_path) for n in counts]
    t = time.perf_counter()
    results["preloaded_libraries"] = preload()
    results["preload_s"] = time.perf_counter() - t
    results["preloaded"] = [run(n, kernel_path) for n in counts]
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    for arm in ("plain", "preloaded"):
        for row in results[arm]:  # type: ignore[union-attr]
            print(arm, json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())

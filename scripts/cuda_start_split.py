#!/usr/bin/env python3
"""How a CUDA process's start splits, in a fresh process (issue 20: a context made beside
a timing hold slows long kernels in it): the torch import, `torch.cuda.init()` (the
driver's initialisation), the first allocation on the device (the context made), and
the first kernel. With `--parallel N`, N such processes at once (the pool's places start
together); prints each one's split in milliseconds as JSON lines.

  python3 scripts/cuda_start_split.py [--parallel 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.cuda.init()
t2 = time.perf_counter()
x = torch.empty(1, device="cuda")
torch.cuda.synchronize()
t3 = time.perf_counter()
x.add_(1)
torch.cuda.synchronize()
t4 = time.perf_counter()
ms = lambda a, b: round((b - a) * 1000.0, 1)
print(json.dumps({"import_ms": ms(t0, t1), "init_ms": ms(t1, t2), "context_ms": ms(t2, t3), "kernel_ms": ms(t3, t4)}))
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parallel", type=int, default=1)
    args = ap.parse_args()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
             for _ in range(args.parallel)]
    for p in procs:
        out, _ = p.communicate()
        row = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"failed": p.returncode}
        print(json.dumps({"parallel": args.parallel, **row}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

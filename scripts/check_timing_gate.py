"""The timing gate against the spin it replaces, on a GPU (docs/evaluator.md, "Timing
protocol"). One small Triton kernel (a ReLU over 1M floats, ~10 µs) is timed in windows
opened three ways, under three host behaviours:

- opened by: nothing (start event right after the launch is queued), the spin (2.5 times
  the host's enqueue time in a probe call, 0.2 to 2 ms, as `executor.cushion_ms`), the gate;
- the host: `prompt` (launches at once), `late` (2.5 ms of host work before every launch:
  longer than the spin's 2 ms cap), `jitter` (3 ms before one launch in eight, none in the
  probe: a descheduled launcher).

A window should hold the kernel alone whatever the host does. Prints one JSON object:
per arm the median, p90 and max window (µs) and the wall per window (ms), and whether the
gate works here.

    PYTHONPATH=python python3 scripts/check_timing_gate.py --reps 200 > OUT.json
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable, Dict, List

import numpy as np
import torch
import triton
import triton.language as tl
from tritonforge_worker import executor, gate


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--n", type=int, default=1 << 20)
    args = ap.parse_args()
    x = torch.randn(args.n, device="cuda")
    y = torch.empty_like(x)

    def launch() -> None:
        relu_kernel[(triton.cdiv(args.n, 1024),)](x, y, args.n, BLOCK=1024)

    def host(kind: str, i: int) -> None:
        if kind == "late" or (kind == "jitter" and i % 8 == 7):
            t = time.perf_counter() + (0.0025 if kind == "late" else 0.003)
            while time.perf_counter() < t:  # busy: a sleep's own wake-up would add noise
                pass

    launch()
    torch.cuda.synchronize()
    props = torch.cuda.get_device_properties(0)
    rate = executor.cushion_cycles(torch.cuda._sleep, lambda: torch.cuda.Event(enable_timing=True), 1.0,
                                   int(getattr(props, "clock_rate", 0) or 0))
    works = gate.works(torch, "cuda")
    report: Dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "gate_works": works, "arms": {}}
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")

    for kind in ("prompt", "late", "jitter"):
        # The probe call: the host's enqueue time, as the executor measures it (the jitter
        # arm's probe is a prompt call).
        h = time.perf_counter()
        host(kind if kind == "late" else "prompt", 0)
        launch()
        enqueue_ms = (time.perf_counter() - h) * 1000.0
        cover = executor.cushion_ms([enqueue_ms])
        torch.cuda.synchronize()

        def spin(c: float = cover) -> None:
            torch.cuda._sleep(int(rate * c))

        openers: Dict[str, Callable[[], Any]] = {"none": lambda: None, "spin": spin}
        for name in ("none", "spin", "gate"):
            if name == "gate" and not works:
                continue
            g = gate.Gate(torch, "cuda") if name == "gate" else None
            windows: List[Any] = []
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(args.reps):
                flush.zero_()
                if g is not None:
                    g.hold()
                else:
                    openers[name]()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                host(kind, i)
                launch()
                b.record()
                if g is not None:
                    g.release()
                windows.append((a, b))
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) * 1000.0 / args.reps
            us = np.asarray([a.elapsed_time(b) * 1000.0 for a, b in windows])
            report["arms"][f"{kind}/{name}"] = {
                "median_us": round(float(np.median(us)), 2), "p90_us": round(float(np.percentile(us, 90)), 2),
                "max_us": round(float(us.max()), 2), "wall_ms_per_window": round(wall, 3),
                "spin_ms": round(cover, 3) if name == "spin" else None,
                "gates_given_up": g.given_up() if g is not None else None,
            }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A burst shaped like one RL turn, arriving at a pool that had time to start its spares:
how long its candidates wait for a started process, per pool setting, side by side.

In `train rl` a turn's candidates reach the evaluator together, after the policy spent
seconds generating. Each needs a fresh process, and on a GPU the driver creates CUDA
contexts at about 3.2 a second (scripts/bench_gpu_start.py), so the burst waits for
processes unless enough were started while the policy generated. This measures that,
per arm (pool flags), each on a fresh `tritonforge serve` with its own state directory:

1. prime: one honest evaluation per problem, so that problem checks and memory needs are
   cached, as they are after a run's first steps;
2. bank: wait `--bank` seconds (the pool tops up its spares meanwhile);
3. burst: `--burst` candidates at once (the problems' solutions, each made unique by a
   comment so that none is answered from the store, and every fourth one wrong), streamed
   back; the wall time, the verdicts, and the mean / p90 wait for a started process, wait
   for a place to run, process start time and time a process sat ready before use.

The server runs with `--no-guard`: the wrong variants add 0.5 in PyTorch, which the guard
would reject without a process, and a process is what is measured.

usage: python3 scripts/bench_burst.py --binary B [--python PY] --out OUT.json
       [--problems 12] [--burst 48] [--bank 20] [--arm "NAME:FLAGS" ...]
(default arms: the pool's defaults; `--spares 48`; `--spares 48 --jobs 32`)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import http, pairs, start_server

WRONG = "\n\n_TFRight = ModelNew\n\n\nclass ModelNew(_TFRight):\n    def forward(self, *args):\n" \
        "        return super().forward(*args) + 0.5\n"


def submit_all(url: str, items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    """One batch, waited for; the records and the wall time."""
    t0 = time.perf_counter()
    sub = http("POST", f"{url}/v1/evaluations/batch", {"evaluations": items})
    records = []
    for j in sub["jobs"]:
        job = http("GET", f"{url}/v1/evaluations/{j['id']}?wait=600")
        records.append(job.get("record") or {"status": job["state"]})
    return records, time.perf_counter() - t0


def arm(args: argparse.Namespace, name: str, flags: list[str]) -> dict[str, Any]:
    ps = pairs(args.problems)
    state = Path(tempfile.mkdtemp(prefix=f"tf-burst-{name}-"))
    # No guard: the wrong variants compute in PyTorch, which it would reject unrun.
    p, url = start_server(args.binary, args.python, state, None, ("--no-guard", *flags))
    try:
        prime = [{"problem": {"name": n, "source": pr}, "candidate": {"name": n, "source": so}} for n, pr, so in ps]
        primed, prime_s = submit_all(url, prime)
        time.sleep(args.bank)
        burst = []
        for i in range(args.burst):
            n, pr, so = ps[i % len(ps)]
            source = so + (WRONG if i % 4 == 3 else "") + f"\n# burst {i}\n"
            burst.append({"problem": {"name": n, "source": pr}, "candidate": {"name": f"{n}_{i}", "source": source}})
        records, wall = submit_all(url, burst)
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(state, ignore_errors=True)
    def spread(field: str) -> dict[str, float]:
        v = sorted(float(r.get(field) or 0.0) for r in records)
        return {"mean": round(statistics.fmean(v), 1), "p90": round(v[int(0.9 * (len(v) - 1))], 1)}

    counts: dict[str, int] = {}
    for r in records:
        counts[r.get("status", "?")] = counts.get(r.get("status", "?"), 0) + 1
    return {"arm": name, "flags": flags, "prime_s": round(prime_s, 1),
            "primed": sum(r.get("status") == "correct" for r in primed), "burst": len(records),
            "wall_s": round(wall, 1), "per_minute": round(60 * len(records) / wall, 1), "counts": counts,
            # Waiting for a started process; for a place to run (before the record's wall);
            # how long the process took to start, and how long it had sat ready.
            **{f: spread(f) for f in ("start_wait_ms", "queue_wait_ms", "process_start_ms", "process_banked_ms")},
            "lease_wait_ms_mean": round(statistics.fmean(float(r.get("lease_wait_ms") or 0.0) for r in records), 1),
            "exclusive_s": round(sum(float(r.get("exclusive_ms") or 0.0) for r in records) / 1000.0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--python")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--problems", type=int, default=12)
    ap.add_argument("--burst", type=int, default=48)
    ap.add_argument("--bank", type=float, default=20.0, help="seconds between priming and the burst")
    ap.add_argument("--arm", action="append", default=[], help="NAME:FLAGS (space-separated pool flags)")
    args = ap.parse_args()
    arms = args.arm or ["default:", "spares48:--spares 48", "spares48-jobs32:--spares 48 --jobs 32"]
    results = []
    for spec in arms:
        name, _, flags = spec.partition(":")
        results.append(arm(args, name, flags.split()))
        args.out.write_text(json.dumps(results, indent=1))  # each arm kept as soon as it ends
        print(json.dumps(results[-1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

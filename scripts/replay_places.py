#!/usr/bin/env python3
"""Replay one batch of `tritonforge eval` records through a model of the pool's places.

Each candidate that used a place holds one for its wall time (`wall_ms` less its
preflight); each problem's memory plan holds one for PLAN seconds before its candidates
may start. Prints the batch's end (after the pool's start) with places granted in arrival
order, by each candidate's true time (the ideal), and by its source length (what the pool
estimates an unseen problem's candidate by: `crates/eval/src/cost.rs`), the lengths taken
from `bench_vs_kernelbench.py`'s set (the records name candidates, not their sizes).

usage: python3 scripts/replay_places.py RECORDS.jsonl [--places 16] [--plan 0,4]
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from pathlib import Path
from typing import Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_kernelbench import plan as bench_set  # noqa: E402

Job = Tuple[str, float, int]  # (problem, seconds in a place, source bytes)


def jobs(path: str) -> List[Job]:
    size = {name: len(source) for _, name, source in bench_set()}
    out: List[Job] = []
    for line in open(path, encoding="utf-8"):
        r = json.loads(line)
        if r["executor_ms"] is None and r["status"] == "rejected":
            continue  # the guard's: no place
        preflight = (r.get("preflight") or {}).get("wall_ms", 0.0)
        out.append((r["problem"]["name"], (r["wall_ms"] - preflight) / 1000.0,
                    size.get(r["candidate"]["name"], 0)))
    return out


def replay(order: List[Job], places: int, plan: float) -> float:
    free = [0.0] * places
    ready: Dict[str, float] = {}
    for problem in sorted({j[0] for j in order}):
        t = heapq.heappop(free)
        ready[problem] = t + plan
        heapq.heappush(free, t + plan)
    end = 0.0
    for problem, secs, _ in order:
        t = max(heapq.heappop(free), ready[problem])
        end = max(end, t + secs)
        heapq.heappush(free, t + secs)
    return end


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("records")
    ap.add_argument("--places", type=int, default=16)
    ap.add_argument("--plan", default="0,4", help="seconds a memory plan holds a place")
    args = ap.parse_args()
    js = jobs(args.records)
    have_bytes = all(j[2] > 0 for j in js)
    for plan in (float(p) for p in args.plan.split(",")):
        row = {
            "plan_s": plan,
            "arrival": round(replay(js, args.places, plan), 1),
            "by_true_time": round(replay(sorted(js, key=lambda j: -j[1]), args.places, plan), 1),
        }
        if have_bytes:
            row["by_length"] = round(replay(sorted(js, key=lambda j: -j[2]), args.places, plan), 1)
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

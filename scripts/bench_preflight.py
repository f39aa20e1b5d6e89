#!/usr/bin/env python3
"""The preflight's effect on a burst shaped like a reinforcement-learning turn: most
candidates of a weak model fail to import (a completion cut at its token limit, a class
under the wrong name, an undefined name), a few are correct, a few fail later.

One set, evaluated twice in one call from fresh state directories, all candidates at once
(`tritonforge eval --json`, default pool): `--preflight off`, then `--preflight auto`
(the default, on a GPU). Per arm: wall time, evaluations per minute, verdicts, the mean
wait for a started process, and how many preflights decided. Verdicts must agree.

usage: python3 scripts/bench_preflight.py --binary B --python python3 --out OUT [--count 96]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from bench_gpu_pool import Work, broken, level1_keys, solution  # noqa: E402


def import_failure(i: int, source: str) -> str:
    """Three ways a weak model's completion fails at import, in turn."""
    kind = i % 3
    if kind == 0:  # cut at the token limit, mid-statement
        lines = source.splitlines()
        cut = [ln for ln in lines[: max(len(lines) * 2 // 3, 1)]]
        return "\n".join(cut) + "\n    y = torch.empty_like(x\n"
    if kind == 1:  # the class under another name
        return source.replace("class ModelNew", "class ModelTriton")
    return "from triton_helpers import fused_relu\n" + source  # a module that does not exist


def plan(count: int) -> List[Tuple[str, str, str]]:
    keys = level1_keys()
    out: List[Tuple[str, str, str]] = []
    for i in range(count):
        key = keys[i % len(keys)]
        name = key.split("/")[1]
        src = solution(key)
        slot = i % 8
        if slot < 6:
            out.append((key, f"imp{i}_{name}", f"# {i}\n" + import_failure(i, src)))
        elif slot == 6:
            out.append((key, f"ok{i}_{name}", f"# {i}\n" + src))
        else:
            out.append((key, f"cmp{i}_{name}", f"# {i}\n" + broken("compile", src)))
    return out


def run_arm(args: argparse.Namespace, work: Work, arm: str) -> Dict[str, object]:
    state = Path(tempfile.mkdtemp(prefix=f"tf-pf-{arm}-"))
    cmd = [args.binary, "--python", args.python, "--state-dir", str(state), "eval", "--json",
           "--problems", str(work.problems), "--candidates", str(work.candidates), "--preflight", arm]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    out = Path(args.out)
    (out / f"{arm}.jsonl").write_text(proc.stdout)
    (out / f"{arm}.err").write_text(proc.stderr[-20000:])
    shutil.rmtree(state, ignore_errors=True)
    recs = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    status: Dict[str, int] = {}
    for r in recs:
        status[r["status"]] = status.get(r["status"], 0) + 1
    pre: Dict[str, int] = {}
    for r in recs:
        found = (r.get("preflight") or {}).get("found", "none")
        pre[found] = pre.get(found, 0) + 1
    waits = [r.get("start_wait_ms", 0.0) for r in recs]
    walls = [r.get("wall_ms", 0.0) for r in recs]
    return {"arm": arm, "rc": proc.returncode, "records": len(recs), "wall_s": wall,
            "per_minute": len(recs) / wall * 60 if wall > 0 else None, "status": status, "preflight": pre,
            "mean_start_wait_ms": statistics.mean(waits) if waits else None,
            "mean_wall_ms": statistics.mean(walls) if walls else None,
            "p90_wall_ms": sorted(walls)[int(len(walls) * 0.9)] if walls else None}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--python", default="python3")
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=96)
    ap.add_argument("--arms", default="off,auto")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="tf-pf-work-"))
    work = Work(root, "set")
    for key, name, source in plan(args.count):
        work.add(key, name, source)
    work = work.finish()
    arms = [run_arm(args, work, arm) for arm in args.arms.split(",")]
    verdicts = []
    for a in arms:
        rows = [json.loads(ln) for ln in (out / f"{a['arm']}.jsonl").read_text().splitlines() if ln.startswith("{")]
        verdicts.append({r["candidate"]["name"]: (r["status"], r["stage"]) for r in rows})
    disagree = sorted(n for n in verdicts[0] if any(v.get(n) != verdicts[0][n] for v in verdicts[1:]))
    summary = {"count": args.count, "arms": arms, "verdicts_disagree": disagree}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    for a in arms:
        print(json.dumps(a))
    print("verdicts that differ between arms:", disagree)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Figures of the guard: catch rate on the red-team corpus, false rejections on the
honest corpus and every reference solution, and the guard's cost per candidate.

Static figures come from `tritonforge guard --json` (its `micros` field times the
check in-process, parse included); the end-to-end catch rate runs the corpus through
`tritonforge eval` (guard, then the executor) in whatever mode the machine gives.

usage: python3 scripts/guard_figures.py --binary target/release/tritonforge [--no-eval]
           [--runtime-only] [--no-guard]

`--no-guard` runs the corpus with no guard at all (`tritonforge eval --no-guard`): only the
evaluator's runtime layers, which are on for every evaluation, stand between a cheat and
`correct`; it reports how many hostile files (static-only ones included) they keep from
`correct` and whether every honest file passes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from bench_gpu_pool import Work  # noqa: E402 - the same problem-copy layout the GPU script uses


def guard(binary: str, files: List[Path]) -> List[dict]:
    out = subprocess.run([binary, "guard", "--json", *map(str, files)], capture_output=True, text=True, cwd=REPO)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def header(path: Path, key: str) -> str | None:
    for line in path.read_text().splitlines():
        if line.startswith(f"# {key}: "):
            return line.split(": ", 1)[1]
    return None


def end_to_end(binary: str, files: List[Path], policy: str | None = None, no_guard: bool = False) -> Dict[str, dict]:
    root = Path(tempfile.mkdtemp())
    work = Work(root, "corpus")
    for f in files:
        if not header(f, "gpu-only"):
            work.add(header(f, "problem") or "", f.stem, f.read_text())
    work.finish()
    extra = ["--guard-rules", policy] if policy else []
    if no_guard:
        extra = ["--no-guard"]
    out = subprocess.run([binary, "--state-dir", str(root / "state"), "eval", "--json", "--no-store", *extra,
                          "--problems", str(work.problems), "--candidates", str(work.candidates)],
                         capture_output=True, text=True, cwd=REPO)
    recs = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    shutil.rmtree(root, ignore_errors=True)
    return {r["problem"]["name"]: r for r in recs}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--runtime-only", action="store_true",
                    help="also run the corpus with every static rule off (tests/redteam/runtime-only.toml)")
    ap.add_argument("--no-guard", action="store_true",
                    help="also run the corpus with no guard at all: the evaluator's runtime layers alone")
    args = ap.parse_args()
    hostile = sorted((REPO / "tests" / "redteam" / "hostile").glob("*.py"))
    honest = sorted((REPO / "tests" / "redteam" / "honest").glob("*.py"))
    solutions = sorted((REPO / "bench" / "solutions").glob("level*/*.py"))
    h = guard(args.binary, hostile)
    o = guard(args.binary, honest + solutions)
    static_caught = sum(r["rejected"] for r in h)
    runtime_labelled = sum(1 for f in hostile if header(f, "runtime"))
    false_rej = [r["file"] for r in o if r["rejected"]]
    micros = [r["micros"] for r in h + o]
    figures: dict = {
        "hostile": len(hostile),
        "hostile_rejected_by_guard": static_caught,
        "hostile_left_to_the_run": runtime_labelled,
        "honest_corpus": len(honest),
        "reference_solutions": len(solutions),
        "false_rejections": false_rej,
        "false_rejection_rate": len(false_rej) / max(len(o), 1),
        "guard_ms_median": round(statistics.median(micros) / 1000, 3),
        "guard_ms_p99": round(sorted(micros)[int(0.99 * (len(micros) - 1))] / 1000, 3),
        "guard_ms_max": round(max(micros) / 1000, 3),
        "files_checked": len(micros),
    }
    if not args.no_eval:
        recs = end_to_end(args.binary, hostile + honest)
        hostile_correct = [f.stem for f in hostile if recs.get(f.stem, {}).get("status") == "correct"]
        honest_bad = [f.stem for f in honest if not header(f, "gpu-only")
                      and recs.get(f.stem, {}).get("status") != "correct"]
        figures["end_to_end"] = {
            "evaluated": len(recs),
            "hostile_judged_correct": hostile_correct,
            "catch_rate": 1 - len(hostile_correct) / len(hostile),
            "honest_not_correct": honest_bad,
            "hostile_outcomes": {f.stem: f"{recs[f.stem]['status']} at {recs[f.stem]['stage']}"
                                 for f in hostile if f.stem in recs},
        }
    if args.runtime_only:
        recs = end_to_end(args.binary, hostile + honest, str(REPO / "tests" / "redteam" / "runtime-only.toml"))
        figures["runtime_only"] = {
            "evaluated": len(recs),
            "hostile_judged_correct": [f.stem for f in hostile if recs.get(f.stem, {}).get("status") == "correct"],
            "honest_not_correct": [f.stem for f in honest if not header(f, "gpu-only")
                                   and recs.get(f.stem, {}).get("status") != "correct"],
            "hostile_outcomes": {f.stem: f"{recs[f.stem]['status']} at {recs[f.stem]['stage']}: "
                                 f"{recs[f.stem]['message'][:90]}" for f in hostile if f.stem in recs},
        }
    if args.no_guard:
        recs = end_to_end(args.binary, hostile + honest, no_guard=True)
        runnable = [f for f in hostile if not header(f, "gpu-only")]
        passed = [f.stem for f in runnable if recs.get(f.stem, {}).get("status") == "correct"]
        figures["no_guard"] = {
            "evaluated": len(recs),
            "hostile_runnable": len(runnable),
            "hostile_kept_from_correct": len(runnable) - len(passed),
            "catch_rate": round(1 - len(passed) / max(len(runnable), 1), 4),
            "hostile_judged_correct": passed,
            "honest_not_correct": [f.stem for f in honest if not header(f, "gpu-only")
                                   and recs.get(f.stem, {}).get("status") != "correct"],
            "hostile_outcomes": {f.stem: f"{recs[f.stem]['status']} at {recs[f.stem]['stage']}: "
                                 f"{recs[f.stem]['message'][:110]}" for f in runnable if f.stem in recs},
        }
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

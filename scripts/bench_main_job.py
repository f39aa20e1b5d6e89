#!/usr/bin/env python3
"""The README's main job (`tritonforge run`: the bundled model on the quick set, 3 turns,
CPU mode without a GPU), timed arm by arm, one after the other, each from a fresh state
directory with the same Python environment:

- `default`: the defaults (the engine, prompt-lookup speculation on the CPU, the GGUF
  model read from its converted copy);
- `before`: what the default was before speculation (2026-11-28): the batch-at-a-time
  path (`TRITONFORGE_POLICY_ENGINE=0`) and the GGUF file parsed at every load
  (`TRITONFORGE_MODEL_CACHE=off`);
- `nospec`: the engine without speculation (`TRITONFORGE_POLICY_SPECULATE=0`).

Per run: wall time, pass@1, turns played, completion tokens (from the store), tokens per
wall second, and when the first episode was stored (start-up and the first wave). The
arms' draws differ (other sampling code, other rounding), so each arm plays its own
answers: compare tokens per wall second beside the wall time. Prints one JSON line per
run, then a markdown table.

usage: python3 scripts/bench_main_job.py [--binary target/release/tritonforge]
       [--venv .tritonforge/venv] [--out DIR] [--keep] ARM [ARM ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

ARMS: Dict[str, Dict[str, str]] = {
    "default": {},
    "before": {"TRITONFORGE_POLICY_ENGINE": "0", "TRITONFORGE_MODEL_CACHE": "off"},
    "nospec": {"TRITONFORGE_POLICY_SPECULATE": "0"},
}


def store_figures(state: Path) -> Dict[str, Any]:
    db = sqlite3.connect(state / "tritonforge.sqlite")
    started = db.execute("SELECT started_at FROM runs").fetchone()[0]
    turns = tokens = 0
    first_done = None
    for (raw,) in db.execute("SELECT episode FROM episodes"):
        ep = json.loads(raw)
        for t in ep["turns"]:
            turns += 1
            tokens += len(t["completion"]["token_ids"])
    for (created,) in db.execute("SELECT MIN(created_at) FROM episodes"):
        first_done = created - started if created is not None else None
    return {"turns": turns, "completion_tokens": tokens, "first_episode_done_s": first_done}


def run_arm(arm: str, binary: str, venv: str, report: Path, keep: bool) -> Dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix=f"mainjob-{arm}-"))
    env = {**os.environ, **ARMS[arm]}
    t = time.perf_counter()
    proc = subprocess.run([binary, "--venv", venv, "--state-dir", str(state), "run", "--out", str(report)],
                          env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    row: Dict[str, Any] = {"arm": arm, "env": ARMS[arm], "exit": proc.returncode, "wall_s": round(wall, 1)}
    try:
        summary = json.loads((report / "report.json").read_text())["summary"]
        row["pass_at_1"] = summary["overall"]["pass_at"]["1"]
    except (OSError, ValueError, KeyError, TypeError):
        row["stdout_tail"] = proc.stdout[-400:]
        row["stderr_tail"] = proc.stderr[-800:]
    try:
        row.update(store_figures(state))
        row["tokens_per_wall_s"] = round(row["completion_tokens"] / wall, 1)
    except (sqlite3.Error, OSError, TypeError) as exc:
        row["store_error"] = str(exc)
    if keep:
        row["state"] = str(state)
    else:
        shutil.rmtree(state, ignore_errors=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="target/release/tritonforge")
    ap.add_argument("--venv", default=".tritonforge/venv")
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", action="store_true", help="keep each run's state directory (its store)")
    ap.add_argument("arms", nargs="+", choices=sorted(ARMS))
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="mainjob-"))
    out.mkdir(parents=True, exist_ok=True)
    rows: List[Dict[str, Any]] = []
    for i, arm in enumerate(args.arms):
        row = run_arm(arm, args.binary, args.venv, out / f"report-{i}-{arm}", args.keep)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| arm | wall | pass@1 | turns | completion tokens | tokens per wall second | first episode done |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        keys = ("pass_at_1", "turns", "completion_tokens", "tokens_per_wall_s")
        cells = [r["arm"], f"{r['wall_s']} s", *(str(r.get(k, "-")) for k in keys),
                 f"{r.get('first_episode_done_s', '-')} s"]
        print("| " + " | ".join(cells) + " |")
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

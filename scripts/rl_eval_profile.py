#!/usr/bin/env python3
"""Where an RL run's evaluations spent their time, from the store it wrote.

Reads every `*.sqlite` under STATE_DIR, takes the evaluation records the episodes of runs
whose name starts with `rl-` point at (each turn's `record` key), and prints per status
(the rollouts at the top level, heldout passes, `rl-*/heldout`, under `heldout`):
how many, and the mean / median / 90th percentile of the host's wall time, the executor's
time, the wait for a started process, the wait for a GPU lease, exclusive (timing) time,
the wait for memory admission, the waits before the record's wall began (for a place to run,
for the problem's memory measurement), how long its process took to start and had been banked,
then the executor's own phases (building, correctness trials,
trials at unseen shapes, timing with its lease wait), in milliseconds; `generation`, the
worker's own time per generated token of each rollout completion; under `heldout`, `passes`:
each pass's correct first turns by set and problem, and its turns answered by an earlier
pass's record; also the whole sum of wall
time against the rollouts' span. `unaccounted_ms`: each evaluated turn's `evaluate_s` (as the
episode waited) less the record's wall, queue wait and prepare time: time no field names
(turns answered from the store, which waited less than the record's wall, left out).

Records are looked up in every store under STATE_DIR, so a directory holding both the
run's state and an evaluation server's finds them where they ran.

usage: python3 scripts/rl_eval_profile.py STATE_DIR  (prints one JSON object)
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import statistics
import sys
from pathlib import Path
from typing import Any

# The executor's phases (the verdict's `phases`): where its own time went.
PHASES = ("build_ms", "trials_ms", "shape_check_ms", "timing_ms")
# The process's own account of its start (`process_startup`), prefixed `process_`.
STARTUP = ("process_context_ms", "process_warm_up_ms", "process_total_ms")
FIELDS = ("wall_ms", "executor_ms", "start_wait_ms", "lease_wait_ms", "exclusive_ms", "admission_wait_ms",
          "queue_wait_ms", "prepare_ms", "process_start_ms", "process_banked_ms") + PHASES + STARTUP + ("unaccounted_ms",)


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {"mean": round(statistics.fmean(ordered), 1), "p50": round(ordered[len(ordered) // 2], 1),
            "p90": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))], 1), "sum": round(sum(ordered), 1)}


BATCH = re.compile(r"/(?:step|heldout)-(\d+)/")  # a rollout batch, or the step a heldout pass was at


def ran_a_process(record: dict[str, Any]) -> bool:
    """Whether the evaluation took a process of its own (on a GPU, a CUDA context): not a
    guard rejection (no memory account) nor a failed import decided by the preflight."""
    decided = (record.get("preflight") or {}).get("found") == "failed"
    return record.get("memory") is not None and not decided


def profile(conns: list[sqlite3.Connection], episodes: list[str], by_status: dict[str, dict[str, list[float]]],
            stages: dict[str, int], created: list[int], batches: dict[int, dict[str, float]]) -> None:
    """Adds the evaluations `episodes` (stored JSON) point at to the tallies."""
    keys = []
    for text in episodes:
        episode = json.loads(text)
        found = BATCH.search(episode.get("id", ""))
        for turn in episode.get("turns", []):
            if turn.get("record"):
                evaluate_s = (turn.get("times") or {}).get("evaluate_s")
                keys.append((int(found.group(1)) if found else -1, turn["record"], evaluate_s))
            stage = turn.get("stage") or "-"
            stages[stage] = stages.get(stage, 0) + 1
    # A candidate seen again is answered from the store in no time: the turn that waited
    # for its evaluation is the one that waited longest (the first in time, whatever the
    # order the episodes are read in).
    waited: dict[str, float] = {}
    for _, key, evaluate_s in keys:
        if isinstance(evaluate_s, (int, float)):
            waited[key] = max(waited.get(key, 0.0), float(evaluate_s))
    seen: set[str] = set()
    for batch, key, evaluate_s in keys:
        evaluate_s = waited.get(key, evaluate_s)
        row = lookup(conns, key)
        if row is None:
            continue
        record: dict[str, Any] = json.loads(row[1])
        created.append(int(record.get("created_at", 0)))
        tally = batches.setdefault(batch, {"evaluations": 0, "gpu_processes": 0, "exclusive_s": 0.0,
                                           "retried_alone": 0})
        tally["evaluations"] += 1
        # Out of memory beside others, evaluated again holding the device alone.
        tally["retried_alone"] += bool((record.get("memory") or {}).get("retried_alone"))
        slot = by_status.setdefault(row[0], {f: [] for f in FIELDS})
        if key not in seen:  # a repeated candidate is answered from the store: no process
            seen.add(key)
            tally["gpu_processes"] += ran_a_process(record)
            tally["exclusive_s"] += float(record.get("exclusive_ms") or 0.0) / 1000.0
            # The turn's evaluation as the episode waited for it, less what the record
            # explains (its wall, and the waits before that began): time nothing names.
            # A turn that waited less than the record's wall was answered from the store
            # (e.g. a resumed run replaying a batch an earlier slice had evaluated): it
            # says nothing about where the evaluation's time went.
            wall = float(record.get("wall_ms") or 0.0)
            if isinstance(evaluate_s, (int, float)) and evaluate_s * 1000.0 + 1.0 >= wall:
                named = sum(float(record.get(f) or 0.0) for f in ("wall_ms", "queue_wait_ms", "prepare_ms"))
                slot["unaccounted_ms"].append(evaluate_s * 1000.0 - named)
        for f in FIELDS:
            if f == "unaccounted_ms":
                continue
            v = record.get(f)
            if v is None and isinstance(record.get("memory"), dict):
                v = record["memory"].get(f)  # the memory admission's wait
            if f in PHASES:
                v = (record.get("phases") or {}).get(f)
            if f in STARTUP:
                v = (record.get("process_startup") or {}).get(f.removeprefix("process_"))
            if isinstance(v, (int, float)):
                slot[f].append(float(v))


def lookup(conns: list[sqlite3.Connection], key: str) -> Any:
    """(status, record JSON) of evaluation `key` from the first store holding it: the run's
    own, or an evaluation server's (`--eval-server`: records are kept where they ran)."""
    for conn in conns:
        try:
            row = conn.execute("SELECT status, record FROM evaluations WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error:
            continue
        if row is not None:
            return row
    return None


def generation(episodes: list[str], min_tokens: int = 64) -> dict[str, Any]:
    """The worker's own time per generated token, per completion (`engine_ms` over its
    tokens; completions of `min_tokens` or more), by turn and in all: a row gets one token
    per decode step, so this is about the time between two of its decode steps, the
    colocated learner's slices included."""
    by_turn: dict[str, list[float]] = {}
    for text in episodes:
        for turn in json.loads(text).get("turns", []):
            c = turn.get("completion") or {}
            n = len(c.get("token_ids") or [])
            if c.get("engine_ms") and n >= min_tokens:
                by_turn.setdefault(str(turn.get("turn")), []).append(c["engine_ms"] / n)
    every = [v for vs in by_turn.values() for v in vs]
    return {"ms_per_token": summary(every), "completions": len(every),
            "by_turn": {t: summary(v) for t, v in sorted(by_turn.items())}}


def heldout_passes(episodes: list[str]) -> dict[str, Any]:
    """Per heldout pass (`heldout-N`) and set: correct first turns by problem, and how many
    evaluated turns had a record an earlier pass had already made (answered from the store)."""
    passes: dict[str, dict[str, Any]] = {}
    seen: dict[str, str] = {}
    for text in sorted(episodes, key=lambda t: json.loads(t).get("id", "")):
        ep = json.loads(text)
        parts = ep.get("id", "").split("/")
        if len(parts) < 4:
            continue
        step, sset, problem = parts[-4], parts[-3], parts[-2]
        p = passes.setdefault(step, {"repeated_records": 0, "evaluated_turns": 0, "sets": {}})
        turns = ep.get("turns") or []
        solved = bool(turns) and turns[0].get("outcome") == "correct"
        tally = p["sets"].setdefault(sset, {}).setdefault(problem, [0, 0])
        tally[0] += int(solved)
        tally[1] += 1
        for t in turns:
            if t.get("record"):
                p["evaluated_turns"] += 1
                first = seen.setdefault(t["record"], step)
                p["repeated_records"] += int(first != step)
    return passes


def report(by_status: dict[str, dict[str, list[float]]], stages: dict[str, int], created: list[int],
           batches: dict[int, dict[str, float]], rate: float) -> dict[str, Any]:
    out: dict[str, Any] = {"statuses": {s: {"count": len(v["wall_ms"]), **{f: summary(v[f]) for f in FIELDS}}
                                        for s, v in sorted(by_status.items())},
                           "turn_stages": stages}
    if created:
        out["records"] = len(created)
        out["span_s"] = max(created) - min(created)
    out["per_batch"] = [{"batch": b, "evaluations": t["evaluations"], "gpu_processes": t["gpu_processes"],
                         "context_floor_s": round(t["gpu_processes"] / rate, 1),
                         "exclusive_s": round(t["exclusive_s"], 1), "retried_alone": t["retried_alone"]}
                        for b, t in sorted(batches.items())]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description="Where an RL run's evaluations spent their time.")
    ap.add_argument("state_dir")
    ap.add_argument("--context-rate", type=float, default=3.2, help="CUDA contexts created per second on one GPU")
    args = ap.parse_args()
    # Rollouts (runs `rl-*`) and heldout passes (`rl-*/heldout`), apart.
    Tally = tuple[dict[str, dict[str, list[float]]], dict[str, int], list[int], dict[int, dict[str, float]]]
    parts: dict[str, Tally] = {"rollouts": ({}, {}, [], {}), "heldout": ({}, {}, [], {})}
    conns = [sqlite3.connect(str(db)) for db in sorted(Path(args.state_dir).rglob("*.sqlite"))]
    rollout_texts: list[str] = []
    heldout_texts: list[str] = []
    for conn in conns:
        try:
            rows = conn.execute("SELECT episode, run FROM episodes WHERE run LIKE 'rl-%'").fetchall()
        except sqlite3.Error:
            continue
        for name, keep in (("rollouts", lambda r: not r.endswith("/heldout")), ("heldout", lambda r: r.endswith("/heldout"))):
            profile(conns, [text for text, run in rows if keep(run)], *parts[name])
        rollout_texts += [text for text, run in rows if not run.endswith("/heldout")]
        heldout_texts += [text for text, run in rows if run.endswith("/heldout")]
    out = report(*parts["rollouts"], args.context_rate)
    out["generation"] = generation(rollout_texts)
    out["heldout"] = report(*parts["heldout"], args.context_rate)
    out["heldout"]["passes"] = heldout_passes(heldout_texts)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Throughput and noise of our evaluator beside KernelBench's harness, same candidates.

Builds one candidate set from the suite (deterministic; nothing fetched):

  correct   level-1 solutions
  noise     4 solutions (kernels of a few to tens of µs) copied 5 times each, every copy
            a distinct file (a comment differs), so nothing is shared or cached
  wrong     solutions that add 0.5 to their answer
  compile   solutions with a Triton compile error (an unknown `tl.` function)

and evaluates it

  ours      `tritonforge eval --json` with default flags from a fresh state directory
            (so fresh Triton caches); wall time from the command's start, pool start-up
            included
  kb        KernelBench's `eval_kernel_against_ref` (backend triton, 5 correctness
            trials, 100 timed ones) in a fresh process per candidate
            (`scripts/kb_eval_one.py`), one after another, with a fresh Triton cache;
            resumable: `--kb-deadline S` stops after S seconds and a later call goes on
            (results in WORK/kb.jsonl)
  summary   evaluations per GPU-minute of each, the ratio, verdict agreement, the
            timing lane's share of our wall time, and the speedup CV of each noise group

The work directory (`--work`, default /tmp/tf-vs-kb) keeps every result between calls;
`summary` writes summary.json and copies the raw files to `--out`.

usage: python3 scripts/bench_vs_kernelbench.py --binary B --python python3 --kb KB \
           [--kb-wheels DIR] [--ours-flags FLAGS] --out OUT [--work DIR] [--kb-deadline 540] PHASE...
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

START = time.perf_counter()
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from bench_gpu_pool import Work, broken, level1_keys, solution  # noqa: E402

NOISE = ["level1/relu", "level1/sigmoid", "level1/softmax", "level1/layer_norm"]
COPIES = 5
N_CORRECT, N_WRONG, N_COMPILE = 56, 12, 12


def plan() -> List[Tuple[str, str, str]]:
    """(suite key, candidate name, candidate source) for the whole set, in a fixed order."""
    keys = [k for k in level1_keys() if k not in NOISE]
    out: List[Tuple[str, str, str]] = []
    for key in keys[:N_CORRECT]:
        out.append((key, f"ok_{key.split('/')[1]}", solution(key)))
    for key in NOISE:
        for i in range(COPIES):
            out.append((key, f"noise_{key.split('/')[1]}_{i}", f"# copy {i}\n" + solution(key)))
    for key in keys[N_CORRECT:N_CORRECT + N_WRONG]:
        out.append((key, f"wrong_{key.split('/')[1]}", broken("wrong", solution(key))))
    for key in keys[N_CORRECT + N_WRONG:N_CORRECT + N_WRONG + N_COMPILE]:
        out.append((key, f"compile_{key.split('/')[1]}", broken("compile", solution(key))))
    return out


def prepare(work_dir: Path) -> Work:
    if (work_dir / "set").exists():
        shutil.rmtree(work_dir / "set")
    work = Work(work_dir, "set")
    for key, name, source in plan():
        work.add(key, name, source)
    return work.finish()


def phase_ours(args: argparse.Namespace, work: Work) -> None:
    state = Path(tempfile.mkdtemp(prefix="tf-state-"))
    cmd = [args.binary, "--python", args.python, "--state-dir", str(state), "eval", "--json",
           "--problems", str(work.problems), "--candidates", str(work.candidates)] + args.ours_flags.split()
    wd = Path(args.work)
    start = time.perf_counter()
    with open(wd / "ours.jsonl", "w") as so, open(wd / "ours.err", "w") as se:
        rc = subprocess.call(cmd, stdout=so, stderr=se, cwd=REPO)
    wall = time.perf_counter() - start
    (wd / "ours.meta.json").write_text(json.dumps({"cmd": cmd, "rc": rc, "wall_s": wall}))
    shutil.rmtree(state, ignore_errors=True)
    print(f"ours: exit {rc} after {wall:.1f}s", flush=True)


def phase_kb(args: argparse.Namespace, work: Work) -> None:
    wd = Path(args.work)
    done_path = wd / "kb.jsonl"
    done = {json.loads(line)["name"] for line in done_path.read_text().splitlines()} if done_path.exists() else set()
    cache = wd / "kb-triton-cache"
    if not done and cache.exists():
        shutil.rmtree(cache)
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache))
    if args.kb_wheels:
        site = wd / "kb-site"
        install_missing(args.python, Path(args.kb_wheels), site)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(site)) if p)
    deadline = START + args.kb_deadline
    for _, name, _ in plan():
        if name in done:
            continue
        if time.perf_counter() > deadline:
            print("kb: deadline reached; run the kb phase again to go on", flush=True)
            return
        t0 = time.perf_counter()
        kb_root = str(Path(args.kb).resolve())
        proc = subprocess.run([args.python, str(REPO / "scripts" / "kb_eval_one.py"), "--kb", kb_root,
                               "--problem", str(work.problems / f"{name}.py"),
                               "--candidate", str(work.candidates / f"{name}.py")],
                              capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), timeout=600)
        wall = time.perf_counter() - t0
        rec: Dict[str, object] = {"name": name, "wall_s": wall, "rc": proc.returncode}
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if lines:
            rec.update(json.loads(lines[-1]))
            rec["wall_s"] = wall  # the process's whole life, start-up included
        else:
            rec.update(compiled=False, correct=False, error=proc.stderr[-1500:])
        with open(done_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
    print("kb: all candidates done", flush=True)


def install_missing(python: str, wheels: Path, site: Path) -> None:
    """Install, into `site`, the wheels whose module `python` cannot import already (so
    nothing the machine has is shadowed)."""
    missing = []
    for whl in sorted(wheels.glob("*.whl")):
        module = whl.name.split("-")[0].lower()
        probe = subprocess.run([python, "-c", f"import {module}"], capture_output=True)
        if probe.returncode != 0:
            missing.append(str(whl))
    if missing:
        subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                        *missing], check=True)
    print(f"kb: installed {len(missing)} missing wheel(s)", flush=True)


def cv(xs: List[float]) -> float:
    return statistics.pstdev(xs) / statistics.fmean(xs) if len(xs) > 1 and statistics.fmean(xs) else float("nan")


def phase_summary(args: argparse.Namespace, work: Work) -> None:
    wd = Path(args.work)
    names = [name for _, name, _ in plan()]
    summary: Dict[str, object] = {"candidates": len(names)}
    ours = {}
    if (wd / "ours.jsonl").exists():
        ours = {r["problem"]["name"]: r for r in map(json.loads, (wd / "ours.jsonl").read_text().splitlines())
                if r}
        meta = json.loads((wd / "ours.meta.json").read_text())
        wall = meta["wall_s"]
        # `eval` says how long its pool took to start before the batch (builds since
        # 2026-11-29): "pool started in 15.0s (fork server ready at 11.6s, first process at 15.0s)".
        err = (wd / "ours.err").read_text() if (wd / "ours.err").exists() else ""
        start = re.search(r"pool started in ([0-9.]+)s \((?:fork server ready at ([0-9.]+)s, )?"
                          r"first process at ([0-9.]+)s\)", err)
        pool_start = ({"whole_s": float(start.group(1)),
                       "fork_server_s": float(start.group(2)) if start.group(2) else None,
                       "first_process_s": float(start.group(3))} if start else None)
        # Where each device's time went (builds since 2026-11-30, evening; "timing holds" in
        # the first): "device 0: exclusive holds 28.5s (76 holds), draining for them 20.1s,
        # shared only 30.2s, idle 7.0s, of the batch's 72.0s[ (incomplete: ...)]".
        lanes = [{"device": int(m.group(1)), "exclusive_holds_s": float(m.group(2)), "holds": int(m.group(3)),
                  "draining_s": float(m.group(4)), "shared_only_s": float(m.group(5)),
                  "idle_s": float(m.group(6)), "batch_s": float(m.group(7)), "incomplete": bool(m.group(8))}
                 for m in re.finditer(r"device (\d+): (?:timing|exclusive) holds ([0-9.]+)s \((\d+) holds\), "
                                      r"draining for them ([0-9.]+)s, shared only ([0-9.]+)s, idle ([0-9.]+)s, "
                                      r"of the batch's ([0-9.]+)s( \(incomplete)?", err)]
        statuses: Dict[str, int] = {}
        for r in ours.values():
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        timed = sum(((r.get("phases") or {}).get("timed_ms") or 0.0) for r in ours.values()) / 1000.0
        exclusive = sum((r.get("exclusive_ms") or 0.0) for r in ours.values()) / 1000.0
        start_wait = [r.get("start_wait_ms") or 0.0 for r in ours.values()]
        # Each timed record's window (an empty one where it was not kept).
        windows = [(r["timing"].get("window") or {}) for r in ours.values() if r.get("timing")]
        summary["ours"] = {
            "evaluated": len(ours), "wall_s": round(wall, 1), "per_gpu_minute": round(len(ours) / wall * 60, 1),
            "pool_start": pool_start,
            "lanes": lanes,
            "statuses": statuses, "timed_run_s": round(timed, 1), "exclusive_hold_s": round(exclusive, 1),
            "timing_lane_share_of_wall": round(exclusive / wall, 3),
            "start_wait_s": {"sum": round(sum(start_wait) / 1000, 1),
                             "median": round(statistics.median(start_wait) / 1000, 2)},
            "executor_s": round(sum((r.get("executor_ms") or 0.0) for r in ours.values()) / 1000, 1),
            "slot_wall_s": round(sum((r.get("wall_ms") or 0.0) for r in ours.values()) / 1000, 1),
            "phases_s": {p: round(sum(((r.get("phases") or {}).get(p) or 0.0) for r in ours.values()) / 1000, 1)
                         for p in ("build_ms", "trials_ms", "shape_check_ms", "timing_ms", "timed_ms", "compile_ms",
                                   "shared_wait_ms")},
            "unconverged": sum(1 for r in ours.values() if "unconverged" in ((r.get("timing") or {}).get("flags")
                                                                             or [])),
            # How the timed windows were opened (the gate since 2026-11-30; absent before).
            "windows": dict(collections.Counter(w.get("how", "unrecorded") for w in windows)),
            "gates_given_up": sum(w.get("gates_given_up", 0) for w in windows),
            # Why a window fell to the spin (kept since 2026-11-30, night; "unrecorded" before).
            "spin_because": dict(collections.Counter(
                w.get("spin_because") or "unrecorded" for w in windows if w.get("how") == "cushion")),
        }
        groups = {}
        for key in NOISE:
            stem = key.split("/")[1]
            recs = [ours.get(f"noise_{stem}_{i}") for i in range(COPIES)]
            sp = [r["timing"]["speedup"] for r in recs if r and r.get("timing")]
            us = [r["timing"]["candidate"]["median_ms"] * 1000 for r in recs if r and r.get("timing")]
            groups[stem] = {"speedups": [round(x, 4) for x in sp], "cv": round(cv(sp), 4),
                            "kernel_us": round(statistics.median(us), 1) if us else None,
                            "samples": [r["timing"]["candidate"]["samples"] for r in recs if r and r.get("timing")]}
        summary["noise"] = {"groups": groups,
                            "median_cv": round(statistics.median([g["cv"] for g in groups.values()]), 4)}
    kb: Dict[str, dict] = {}
    if (wd / "kb.jsonl").exists():
        kb = {r["name"]: r for r in map(json.loads, (wd / "kb.jsonl").read_text().splitlines())}
        kwall = sum(r["wall_s"] for r in kb.values())
        summary["kb"] = {"evaluated": len(kb), "wall_s": round(kwall, 1),
                         "per_gpu_minute": round(len(kb) / kwall * 60, 2) if kwall else None,
                         "correct": sum(1 for r in kb.values() if r.get("correct")),
                         "compiled": sum(1 for r in kb.values() if r.get("compiled"))}
    if ours and kb and len(kb) == len(names):
        o, k = summary["ours"], summary["kb"]
        assert isinstance(o, dict) and isinstance(k, dict)
        summary["ratio"] = round(o["per_gpu_minute"] / k["per_gpu_minute"], 2)
        disagree = [n for n in names if (ours.get(n, {}).get("status") == "correct") != bool(kb[n].get("correct"))]
        summary["verdict_disagreements"] = {n: [ours.get(n, {}).get("status"), kb[n].get("correct")]
                                            for n in disagree}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    for f in ("ours.jsonl", "ours.err", "ours.meta.json", "kb.jsonl"):
        if (wd / f).exists():
            shutil.copy(wd / f, out / f)
    print(json.dumps(summary, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--python", default="python3")
    ap.add_argument("--kb", help="a KernelBench checkout (for the kb phase)")
    ap.add_argument("--kb-wheels", help="wheels for KernelBench's imports (pydantic, ...), installed if missing")
    ap.add_argument("--kb-deadline", type=float, default=540.0,
                    help="the kb phase starts no candidate after this many seconds from the script's start")
    ap.add_argument("--ours-flags", default="",
                    help="extra `eval` flags for the ours phase, e.g. '--cuda-connections 0' (an A/B arm; give it its own --work)")
    ap.add_argument("--work", default="/tmp/tf-vs-kb")
    ap.add_argument("--out", required=True)
    ap.add_argument("phases", nargs="+", choices=["ours", "kb", "summary"])
    args = ap.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    work = prepare(Path(args.work))
    for phase in args.phases:
        {"ours": phase_ours, "kb": phase_kb, "summary": phase_summary}[phase](args, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""GPU figures of the evaluator pool (issue: warm isolated workers, honest timing).

Runs the real `tritonforge` binary on a GPU machine and writes JSON lines, logs and a
summary under OUT. Phases (any subset, in order):

  smoke       doctor; a few evaluations with --profile and --compile-baseline
  redteam     tests/redteam/ and scripts/gpu_redteam/ with the guard on, with every
              static rule off (runtime layers alone), and with --no-guard
  faults      a batch mixing illegal memory access, device-side assert, out-of-memory,
              GPU hang, CPU hang and segfault with honest candidates; the honest ones'
              verdicts and speedups are compared with a clean batch of the same
  pool        every level-1 solution plus broken variants (compile error, wrong result,
  exclusive   crash), in pool mode, in exclusive mode, and (naive) a subset in the naive
  naive       mode: evaluations per GPU-minute, warm-pool overhead, pool-vs-exclusive
              fidelity
  noise       10 solutions evaluated 5 times each (one batch of copies), pool mode and
  noise_exclusive   exclusive mode: median CV of the speedup
  summarize   only recompute figures.json

figures.json is recomputed from every run present under OUT, so phases may run in
separate device calls writing into the same OUT (copied back in between).

usage: python3 scripts/bench_gpu_pool.py --binary B --out OUT [--python python3]
       [--jobs 8] PHASE...
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
import tomllib
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"

WRONG = """

_TFBase = ModelNew


class ModelNew(_TFBase):
    # Broken variant: a right kernel, then a wrong answer.
    def forward(self, *args):
        out = super().forward(*args)
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            return out + 0.5
        if isinstance(out, torch.Tensor):
            return out + 1
        return out
"""

CRASH = """

_TFBase = ModelNew


class ModelNew(_TFBase):
    # Broken variant: a segfault in the forward.
    def forward(self, *args):
        import ctypes

        ctypes.string_at(0)
        return super().forward(*args)
"""


def broken(kind: str, source: str) -> str:
    if kind == "compile":
        # An unknown language function inside the first kernel: a Triton compile error.
        return source.replace("tl.arange(", "tl.arange_typo(", 1)
    if kind == "wrong":
        return source + WRONG
    if kind == "crash":
        return source + CRASH
    raise ValueError(kind)


class Work:
    """A problem directory with its own manifest, and a candidate directory paired by name."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = root / name
        self.problems = self.root / "bench" / "level"
        self.candidates = self.root / "cands"
        self.problems.mkdir(parents=True)
        self.candidates.mkdir(parents=True)
        self.manifest: List[str] = []
        self.meta = tomllib.loads((BENCH / "manifest.toml").read_text())["problems"]

    def add(self, key: str, name: str, candidate_source: str) -> None:
        """Problem `key` (e.g. level1/relu) under file name `name`, with its tolerance and variants."""
        shutil.copy(BENCH / f"{key}.py", self.problems / f"{name}.py")
        (self.candidates / f"{name}.py").write_text(candidate_source)
        m = self.meta.get(key, {})
        lines = [f'[problems."level/{name}"]']
        for k in ("level", "atol", "rtol"):  # the level picks the guard and runtime policy
            if k in m:
                lines.append(f"{k} = {m[k]!r}")
        for vname, over in m.get("variants", {}).items():
            body = ", ".join(f"{k} = {v!r}" for k, v in over.items())
            lines.append(f"variants.{vname} = {{ {body} }}")
        self.manifest.append("\n".join(lines))

    def finish(self) -> "Work":
        (self.root / "bench" / "manifest.toml").write_text("\n\n".join(self.manifest) + "\n")
        return self


def solution(key: str) -> str:
    lvl, name = key.split("/")
    return (BENCH / "solutions" / lvl / f"{name}.py").read_text()


def level1_keys() -> List[str]:
    return sorted(f"level1/{p.stem}" for p in (BENCH / "level1").glob("*.py"))


def run_batch(args: argparse.Namespace, work: Work, label: str, extra: List[str]) -> Tuple[List[dict], float]:
    out = Path(args.out)
    state = Path(tempfile.mkdtemp(prefix=f"tf-{label}-"))
    cmd = [args.binary, "--python", args.python, "--state-dir", str(state), "eval", "--json", "--no-store",
           "--variant", "full", "--problems", str(work.problems), "--candidates", str(work.candidates), *extra,
           *args.flags.split()]
    start = time.perf_counter()
    with open(out / f"{label}.jsonl", "w") as so, open(out / f"{label}.err", "w") as se:
        se.write(" ".join(cmd) + "\n")
        se.flush()
        rc = subprocess.call(cmd, stdout=so, stderr=se, cwd=REPO)
    wall = time.perf_counter() - start
    with open(out / f"{label}.err", "a") as se:
        se.write(f"exit {rc} after {wall:.1f}s\n")
    records = [json.loads(line) for line in (out / f"{label}.jsonl").read_text().splitlines() if line.strip()]
    shutil.rmtree(state, ignore_errors=True)
    return records, wall


def by_name(records: List[dict]) -> Dict[str, dict]:
    return {r["problem"]["name"]: r for r in records}


def counts(records: List[dict]) -> Dict[str, int]:
    c: Dict[str, int] = {}
    for r in records:
        c[r["status"]] = c.get(r["status"], 0) + 1
    return dict(sorted(c.items()))


def overhead_ms(records: List[dict]) -> Optional[float]:
    """Host wall time beyond the executor's own (process hand-over, protocol, start-up when not pre-started)."""
    xs = [r["wall_ms"] - r["executor_ms"] for r in records if r.get("executor_ms") is not None]
    return round(statistics.median(xs), 1) if xs else None


def median_of(records: List[dict], field: str) -> Optional[float]:
    xs = [r[field] for r in records if r.get(field) is not None]
    return round(statistics.median(xs), 1) if xs else None


def rel_diff(a: float, b: float) -> float:
    return abs(a - b) / b


def phase_smoke(args: argparse.Namespace, summary: dict) -> None:
    out = Path(args.out)
    state = Path(tempfile.mkdtemp(prefix="tf-smoke-"))
    doc = subprocess.run([args.binary, "--python", args.python, "--state-dir", str(state), "doctor"],
                         capture_output=True, text=True, cwd=REPO)
    (out / "doctor.txt").write_text(doc.stdout + doc.stderr)
    w = Work(Path(tempfile.mkdtemp()), "smoke")
    for key in ("level1/relu", "level1/softmax", "level1/matmul", "level1/layer_norm"):
        w.add(key, key.split("/")[1], solution(key))
    # Cheats that only a GPU timing loop can expose.
    for f in sorted((REPO / "scripts" / "gpu_redteam").glob("*.py")):
        w.add("level1/relu", f"relu__{f.stem}", f.read_text())
    w.finish()
    # The guard would reject the red-team files before they run; these runs test the runtime layers.
    recs, wall = run_batch(args, w, "smoke", ["--jobs", "4", "--profile", "--compile-baseline", "--no-guard"])
    summary["smoke"] = {"wall_s": wall, "counts": counts(recs), "records": [
        {"problem": r["problem"]["name"], "status": r["status"], "message": r["message"][:300],
         "timing": r["timing"], "provenance": r["provenance"], "sandbox": r["sandbox"]} for r in recs]}


FAULTS = ["illegal_access", "device_assert", "oom", "over_memory_cap", "gpu_hang", "cpu_hang", "segfault"]
HONEST10 = ["level1/relu", "level1/softmax", "level1/matmul", "level1/layer_norm", "level1/gelu",
            "level1/sum_rows", "level1/rms_norm", "level1/conv2d", "level1/max_pool2d", "level1/sigmoid"]


def existing(keys: List[str]) -> List[str]:
    return [k for k in keys if (BENCH / f"{k}.py").exists() and
            (BENCH / "solutions" / k.split("/")[0] / f"{k.split('/')[1]}.py").exists()]


def phase_faults(args: argparse.Namespace, summary: dict) -> None:
    honest = existing(HONEST10)
    clean = Work(Path(tempfile.mkdtemp()), "clean")
    mixed = Work(Path(tempfile.mkdtemp()), "mixed")
    for key in honest:
        name = key.split("/")[1]
        clean.add(key, name, solution(key))
        mixed.add(key, name, solution(key))
    for f in FAULTS:
        mixed.add("level1/relu", f"relu__{f}", (REPO / "scripts" / "gpu_faults" / f"{f}.py").read_text())
    clean.finish()
    mixed.finish()
    jobs = ["--jobs", str(args.jobs), "--budget", "30", "--no-guard"]  # faults must reach the GPU
    clean_recs, clean_wall = run_batch(args, clean, "faults_clean", jobs)
    mixed_recs, mixed_wall = run_batch(args, mixed, "faults_mixed", jobs)
    c, m = by_name(clean_recs), by_name(mixed_recs)
    rows = []
    for key in honest:
        n = key.split("/")[1]
        a, b = c.get(n), m.get(n)
        sa = a and a["timing"] and a["timing"]["speedup"]
        sb = b and b["timing"] and b["timing"]["speedup"]
        rows.append({"problem": n, "clean": a and a["status"], "mixed": b and b["status"], "speedup_clean": sa,
                     "speedup_mixed": sb, "rel_diff": rel_diff(sb, sa) if sa and sb else None})
    faults = [{"candidate": f, "status": m.get(f"relu__{f}", {}).get("status"),
               "stage": m.get(f"relu__{f}", {}).get("stage"),
               "message": m.get(f"relu__{f}", {}).get("message", "")[:400]} for f in FAULTS]
    diffs = [r["rel_diff"] for r in rows if r["rel_diff"] is not None]
    summary["faults"] = {
        "clean_wall_s": clean_wall, "mixed_wall_s": mixed_wall, "honest": rows, "faults": faults,
        "all_honest_correct_in_both": all(r["clean"] == "correct" and r["mixed"] == "correct" for r in rows),
        "median_speedup_rel_diff": statistics.median(diffs) if diffs else None,
        "max_speedup_rel_diff": max(diffs) if diffs else None,
    }


def throughput_work(root: Path, name: str, keys: List[str], broken_every: int) -> Tuple[Work, int, int]:
    w = Work(root, name)
    n_honest = n_broken = 0
    kinds = ["compile", "wrong", "crash"]
    for i, key in enumerate(keys):
        src = solution(key)
        w.add(key, key.split("/")[1], src)
        n_honest += 1
        if i % broken_every == 0:
            kind = kinds[(i // broken_every) % 3]
            w.add(key, f"{key.split('/')[1]}__{kind}", broken(kind, src))
            n_broken += 1
    return w.finish(), n_honest, n_broken


def phase_runs(label: str, extra: List[str]):
    """A throughput run over every level-1 solution plus broken variants (naive: a subset)."""

    def phase(args: argparse.Namespace, summary: dict) -> None:
        keys = existing(level1_keys())
        if label == "naive":
            keys = keys[: args.naive_subset]
        elif label == "exclusive" and args.exclusive_subset:
            keys = keys[: args.exclusive_subset]
        work, n_h, n_b = throughput_work(Path(tempfile.mkdtemp()), label, keys, 3)
        # No guard: the figure is the pool's (the segfault variants would otherwise be
        # rejected statically, without running).
        flags = [x.replace("JOBS", str(args.jobs)) for x in extra] + ["--no-guard"]
        if args.spares and label != "naive":
            flags += ["--spares", str(args.spares)]
        _, wall = run_batch(args, work, f"throughput_{label}", flags)
        (Path(args.out) / f"throughput_{label}.meta.json").write_text(
            json.dumps({"wall_s": wall, "honest": n_h, "broken": n_b, "flags": flags}))

    return phase


def phase_noise_mode(label: str, extra: List[str]):
    """The same 10 solutions 5 times each, as one batch of copies."""

    def phase(args: argparse.Namespace, summary: dict) -> None:
        w = Work(Path(tempfile.mkdtemp()), label)
        for key in existing(HONEST10):
            for k in range(5):
                w.add(key, f"{key.split('/')[1]}__r{k}", solution(key))
        w.finish()
        run_batch(args, w, label, [x.replace("JOBS", str(args.jobs)) for x in extra] + ["--no-guard"])

    return phase


def _header(path: Path, key: str) -> Optional[str]:
    for line in path.read_text().splitlines():
        if line.startswith(f"# {key}: "):
            return line.split(": ", 1)[1]
    return None


def phase_redteam(args: argparse.Namespace, summary: dict) -> None:
    """The red-team corpus and the GPU-only cheats on a GPU: guard on, then runtime layers alone."""
    redteam = REPO / "tests" / "redteam"
    gpu = sorted((REPO / "scripts" / "gpu_redteam").glob("*.py"))
    gpu_honest = sorted((REPO / "scripts" / "gpu_redteam" / "honest").glob("*.py"))
    arms = (("redteam_guard", []),
            ("redteam_runtime_only", ["--guard-rules", str(redteam / "runtime-only.toml")]),
            ("redteam_no_guard", ["--no-guard"]))
    for label, extra in arms:
        if args.arms and label.removeprefix("redteam_") not in args.arms:
            continue
        w = Work(Path(tempfile.mkdtemp()), label)
        names: Dict[str, str] = {}
        # Every arm runs the whole corpus: with --no-guard the runtime layers (the ATen
        # record included) are all that stand between a hostile file and `correct`.
        for kind in ("hostile", "honest"):
            for f in sorted((redteam / kind).glob("*.py")):
                w.add(_header(f, "problem") or "", f"{kind}__{f.stem}", f.read_text())
                names[f"{kind}__{f.stem}"] = "static-only" if _header(f, "static-only") else kind
        for f in gpu:
            w.add("level1/relu", f"gpu__{f.stem}", f.read_text())
            names[f"gpu__{f.stem}"] = "hostile"
        for f in gpu_honest:
            # Honest work by means the static guard forbids (streams, state across calls):
            # it must pass the runtime layers; with the guard on it is rejected by design.
            w.add("level1/relu", f"gpu_honest__{f.stem}", f.read_text())
            names[f"gpu_honest__{f.stem}"] = "guard-forbidden" if label == "redteam_guard" else "honest"
        w.finish()
        recs, wall = run_batch(args, w, label, ["--jobs", str(args.jobs), *extra])
        got = by_name(recs)
        summary.setdefault("redteam", {})[label] = {
            "wall_s": round(wall, 1),
            "evaluated": len(recs),
            "counts": counts(recs),
            "hostile_correct": sorted(n for n, k in names.items() if k == "hostile"
                                      and got.get(n, {}).get("status") == "correct"),
            "static_only_correct": sorted(n for n, k in names.items() if k == "static-only"
                                          and got.get(n, {}).get("status") == "correct"),
            "honest_not_correct": sorted(n for n, k in names.items() if k == "honest"
                                         and got.get(n, {}).get("status") != "correct"),
            "outcomes": {n: f"{r['status']} at {r['stage']}: {r['message'][:160]}" for n, r in sorted(got.items())},
        }


PHASES = {
    "smoke": phase_smoke,
    "redteam": phase_redteam,
    "faults": phase_faults,
    "pool": phase_runs("pool", ["--jobs", "JOBS"]),
    "exclusive": phase_runs("exclusive", ["--jobs", "JOBS", "--exclusive"]),
    "naive": phase_runs("naive", ["--naive"]),
    "noise": phase_noise_mode("noise", ["--jobs", "JOBS"]),
    "noise_exclusive": phase_noise_mode("noise_exclusive", ["--jobs", "JOBS", "--exclusive"]),
}


def summarize(out: Path) -> dict:
    """Figures from whatever runs exist under `out`."""
    figures: dict = {}
    runs: Dict[str, Dict[str, dict]] = {}
    for label in ("pool", "exclusive", "naive"):
        f = out / f"throughput_{label}.jsonl"
        m = out / f"throughput_{label}.meta.json"
        if not (f.exists() and m.exists()):
            continue
        recs = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        meta = json.loads(m.read_text())
        runs[label] = by_name(recs)
        figures[label] = {
            "candidates": len(recs), "honest": meta["honest"], "broken": meta["broken"], "flags": meta["flags"],
            "wall_s": round(meta["wall_s"], 1), "per_gpu_minute": round(len(recs) / (meta["wall_s"] / 60.0), 1),
            "counts": counts(recs), "median_overhead_ms": overhead_ms(recs),
            "median_lease_wait_ms": median_of(recs, "lease_wait_ms"),
            "median_exclusive_ms": median_of(recs, "exclusive_ms"),
            "median_executor_ms": median_of(recs, "executor_ms"),
        }
    if "pool" in figures and "naive" in figures:
        figures["pool_vs_naive"] = round(figures["pool"]["per_gpu_minute"] / figures["naive"]["per_gpu_minute"], 2)
    if "pool" in runs and "exclusive" in runs:
        diffs = []
        for n, r in runs["pool"].items():
            o = runs["exclusive"].get(n)
            if r["status"] == "correct" and o and o["status"] == "correct" and r["timing"] and o["timing"]:
                diffs.append(rel_diff(r["timing"]["speedup"], o["timing"]["speedup"]))
        diffs.sort()
        figures["fidelity"] = {"pairs": len(diffs), "median_abs_rel_diff": statistics.median(diffs) if diffs else None,
                               "p90_abs_rel_diff": diffs[int(0.9 * (len(diffs) - 1))] if diffs else None}
    for label in ("noise", "noise_exclusive"):
        f = out / f"{label}.jsonl"
        if not f.exists():
            continue
        per: Dict[str, List[float]] = {}
        for r in (json.loads(x) for x in f.read_text().splitlines() if x.strip()):
            if r["status"] == "correct" and r["timing"]:
                per.setdefault(r["problem"]["name"].split("__")[0], []).append(r["timing"]["speedup"])
        cvs = {k: statistics.stdev(v) / statistics.mean(v) for k, v in per.items() if len(v) >= 2}
        figures[label] = {"runs": per, "cv": cvs, "median_cv": statistics.median(cvs.values()) if cvs else None}
    return figures


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--python", default="python3")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--spares", type=int, default=0, help="0: tritonforge's default (--jobs)")
    ap.add_argument("--naive-subset", type=int, default=12)
    ap.add_argument("--flags", default="", help="more `eval` flags for every batch, split on spaces "
                                                "(e.g. \"--cuda-connections 1\")")
    ap.add_argument("--arms", nargs="*", default=[], choices=["guard", "runtime_only", "no_guard"],
                    help="redteam: only these arms (default: all three)")
    ap.add_argument("--exclusive-subset", type=int, default=0, help="0: every level-1 problem")
    ap.add_argument("phases", nargs="+", choices=[*PHASES, "summarize"])
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {}
    for ph in args.phases:
        if ph == "summarize":
            continue
        t = time.perf_counter()
        PHASES[ph](args, summary)
        print(f"phase {ph}: {time.perf_counter() - t:.1f}s", flush=True)
        if ph in summary:
            (out / f"{ph}.summary.json").write_text(json.dumps(summary[ph], indent=1, default=str))
    figures = summarize(out)
    (out / "figures.json").write_text(json.dumps(figures, indent=1, default=str))
    print(json.dumps(figures, indent=1, default=str)[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())

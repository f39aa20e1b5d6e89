"""Every RL demonstration run at a glance, from the raw files under docs/results/rl
(`runN-config-*.toml`, `runN-metrics-*.jsonl`, `runN-heldout-*.jsonl`): docs/rl.md's
"The runs at a glance" table.

usage: python3 scripts/rl_runs.py [DIR]      (DIR: docs/results/rl)

Per run: the GPU (from the file names), the steps, the step's size (problems × samples ×
turns, token cap), the learning rates the steps ran at (from the metrics, so a run whose
rate changed between slices shows both), the settings that set runs apart
(`loss.mask_truncated`, `optim.micro_tokens`), the mean steady interval (before run 9,
whose metrics lack it, the mean `step_s`, starred) and GPU idle share (steady as
`rl_steps.py` counts them), and heldout pass@1 per set at the first and the
last step measured, with the samples per problem (1, greedy, in runs 2–4; 4 in runs 5–10;
16 from run 11; a step-0 figure reused from an earlier run counts as measured).
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rl_steps import steady  # noqa: E402

# Python 3.11's (the machines that run this); mypy checks the scripts as 3.10, which lacks it.
tomllib = importlib.import_module("tomllib")

SETS = (("l1-heldout", "L1"), ("l2-heldout", "L2"), ("synth-heldout", "synth"))


def runs(root: Path) -> Dict[int, Dict[str, Path]]:
    """The files of each run, by run number and kind (config, metrics, heldout)."""
    found: Dict[int, Dict[str, Path]] = {}
    for f in root.iterdir():
        m = re.fullmatch(r"run(\d+)-(config|metrics|heldout)-([a-z0-9]+)\.(toml|jsonl)", f.name)
        if m:
            found.setdefault(int(m.group(1)), {})[m.group(2)] = f
    return found


def jsonl(path: Optional[Path]) -> List[Dict[str, Any]]:
    if path is None:
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def heldout(lines: List[Dict[str, Any]], name: str) -> str:
    """`first → last (step N)` of one set's pass@1, with the samples per problem."""
    got = sorted((h["step"], h["pass_at_1"], h.get("samples")) for h in lines if h.get("set") == name)
    if not got:
        return ""
    (s0, p0, n0), (s1, p1, _) = got[0], got[-1]
    if s0 == s1:
        return f"{100 * p0:.1f} (step {s0}, ×{n0})"
    return f"{100 * p0:.1f} → {100 * p1:.1f} (steps {s0}–{s1}, ×{n0})"


def summary(n: int, files: Dict[str, Path]) -> Dict[str, Any]:
    cfg: Dict[str, Any] = tomllib.loads(files["config"].read_text()) if "config" in files else {}
    metrics = jsonl(files.get("metrics"))
    held = jsonl(files.get("heldout"))
    gpu = next(iter(files.values())).stem.rsplit("-", 1)[-1]
    r, loss, optim = cfg.get("rollout", {}), cfg.get("loss", {}), cfg.get("optim", {})
    # The rates in the order the steps ran them (a schedule would show its first and last).
    seen = [m["lr"] for m in sorted(metrics, key=lambda m: m["step"]) if m.get("lr")]
    rates = [x for i, x in enumerate(seen) if i == 0 or x != seen[i - 1]]
    if len(rates) > 3:
        rates = [rates[0], rates[-1]]
    steady_lines = [m for m in metrics if steady(m)]
    intervals = [m["interval_s"] for m in steady_lines if m.get("interval_s") is not None]
    # Before run 9 the metrics had no `interval_s`; their `step_s` is the step's own time.
    paced = bool(intervals)
    if not intervals:
        intervals = [m["step_s"] for m in steady_lines if m.get("step_s") is not None]
    idle = [m["worker"]["gpu_idle"] for m in steady_lines if (m.get("worker") or {}).get("gpu_idle") is not None]
    # Rollouts sampled below temperature 1 (run 21 on: the learner trains that distribution).
    extra = [f"sampled at {r['temperature']}"] if r.get("temperature", 1.0) != 1.0 else []
    extra += [k for k, on in (("masked cut turns", loss.get("mask_truncated")),
                             (f"micro {optim.get('micro_tokens')}", optim.get("micro_tokens")),
                             ("compiled learner", cfg.get("model", {}).get("compile") == "on")) if on]
    # Reward settings beyond the preset (run 20: no pay for compiling).
    extra += [f"reward {k} = {v}" for k, v in cfg.get("reward", {}).items() if k != "preset"]
    return {
        "run": n, "gpu": gpu, "steps": max((m["step"] for m in metrics), default=0),
        "size": f"{r.get('problems', '?')}×{r.get('samples', '?')}×{r.get('turns', '?')} @{r.get('max_tokens', '?')}",
        "lr": " then ".join(f"{x:.0e}" for x in rates) if rates else f"{optim.get('lr', '?')}",
        "settings": ", ".join(extra),
        "interval_s": round(sum(intervals) / len(intervals), 1) if intervals else None, "paced": paced,
        "gpu_idle": round(sum(idle) / len(idle), 2) if idle else None,
        **{label: heldout(held, name) for name, label in SETS},
    }


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "docs/results/rl"
    rows = [summary(n, f) for n, f in sorted(runs(root).items())]
    print("| run | GPU | steps | step (problems×samples×turns @cap) | lr | also | steady interval | GPU idle "
          "| L1 heldout pass@1 % | L2 | synthetic |")
    print("| ---: | --- | ---: | --- | --- | --- | ---: | ---: | --- | --- | --- |")
    for x in rows:
        interval = f"{x['interval_s']} s{'' if x['paced'] else '*'}" if x["interval_s"] is not None else ""
        idle = f"{100 * x['gpu_idle']:.0f}%" if x["gpu_idle"] is not None else ""
        print(f"| {x['run']} | {x['gpu']} | {x['steps']} | {x['size']} | {x['lr']} | {x['settings']} | {interval} "
              f"| {idle} | {x['L1']} | {x['L2']} | {x['synth']} |")
    print("\n\\* the mean `step_s` (metrics before run 9 have no `interval_s`).")
    return 0


if __name__ == "__main__":
    sys.exit(main())

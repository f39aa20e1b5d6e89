"""A run's steps as a table, from `train rl`'s metrics.jsonl (docs/rl.md's run tables).

usage: python3 scripts/rl_steps.py METRICS.jsonl [--json] [--means A-B] [--learning] [--worker]

Per step, in seconds: the pace (`interval`), the rollout, the slowest and the mean chain's
generation (of which waiting behind the learner) and evaluation (of which waiting for a
process and for a place), the policy worker's busy share, the GPU's idle share (NVML),
and, from workers that report them, the engine's decode steps (ms each, with in brackets
the device's time in the decode alone where the worker measures it; running rows each,
and in brackets the rows each computed: running rows over the share not idle) and the
device's seconds in prefill forwards (with, where the worker reports them, the prefill
shapes captured as CUDA graphs during the step).

Then the steady steps' range and mean. A step is not steady when it is the first of an
invocation (the worker compiled its decode step: `graphs_compiled` > 0) or the last (no
generation overlapped its learner, `learner_with_generation` == 0: its interval only says
that its rollout ran during the step before).

`--means A-B` adds one JSON line: the means over steps A to B (the steady ones among
them) of the pace, the slowest and mean chain's generation, the engine's time per decode
step (all, and the decode alone), its prefill seconds and new prompt tokens, the step's
time split (generation, evaluation, scoring and updates, which overlap), its target tokens
and the GPU's idle share: how two runs' same steps compare (docs/rl.md, runs 14 and 21).

`--worker` prints the policy worker's split over the steady steps instead (docs/rl.md,
run 17): generation and learner seconds a step, the worker's ms per decode step (weighted
by steps) with its device decode and prefill parts, the learner's tokens a second of its
own time, its passes over them a step (`learner_passes`: the score, the reference's when
the KL is measured, the updates, which split the tokens between them) and the tokens a
second over all passes (`learner_pass_tokens_per_s`), and the range of
`learner_with_generation`.

`--learning` prints what the policy learned instead: per step the lr, the reward's mean
and std, the pass rate by turn, the share of turns cut at their token cap, the groups kept
of those drawn, the clip fraction, the KL to the start (with `loss.measure_kl` or a
`kl_coef`), the entropy and the gradient norm.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Optional, Tuple


def steady(m: Dict[str, Any]) -> bool:
    w = m.get("worker") or {}
    return not (w.get("graphs_compiled") or 0) > 0 and m.get("learner_with_generation", 1.0) > 0


def row(m: Dict[str, Any]) -> Dict[str, Any]:
    s, c, w = m.get("slowest") or {}, m.get("mean_chain") or {}, m.get("worker") or {}
    busy = 1.0 - w["idle"] if "idle" in w else None  # the worker's idle share, from its own times
    e = w.get("engine") or {}
    return {
        "step": m["step"], "steady": steady(m), "interval_s": m.get("interval_s"), "rollout_s": m.get("rollout_s"),
        "slowest_gen_s": s.get("generate_s"), "slowest_gen_wait_s": s.get("generate_wait_s"),
        "slowest_eval_s": s.get("evaluate_s"), "slowest_start_wait_s": s.get("start_wait_s"),
        "slowest_queue_wait_s": s.get("queue_wait_s"), "slowest_outcomes": s.get("outcomes"),
        "mean_gen_s": c.get("generate_s"), "mean_gen_wait_s": c.get("generate_wait_s"),
        "mean_eval_s": c.get("evaluate_s"), "worker_busy": busy, "gpu_idle": w.get("gpu_idle"),
        "decode_steps": e.get("decode_steps"), "ms_per_step": e.get("ms_per_step"),
        "rows_per_step": e.get("rows_per_step"), "idle_rows": e.get("idle_rows"),
        "moved_rows": e.get("moved_rows"), "decode_ms_per_step": e.get("decode_ms_per_step"),
        "prefill_s": e.get("prefill_s"), "prefill_forwards": e.get("prefill_forwards"),
        "prefill_tokens": e.get("prefill_tokens"), "prefill_graphs": e.get("prefill_graphs"),
        # The step's time split (overlapping: generation and evaluation run together) and its size.
        "generate_s": m.get("generate_s"), "evaluate_s": m.get("evaluate_s"), "score_s": m.get("score_s"),
        "train_s": m.get("train_s"), "target_tokens": m.get("target_tokens"),
    }


MEANS = ("interval_s", "slowest_gen_s", "mean_gen_s", "ms_per_step", "decode_ms_per_step", "prefill_s",
         "prefill_tokens", "generate_s", "evaluate_s", "score_s", "train_s", "target_tokens", "gpu_idle")


def means(rows: List[Dict[str, Any]], span: str) -> Dict[str, Any]:
    """Means of MEANS over the steady steps numbered within `span` ("A-B")."""
    first, _, last = span.partition("-")
    lo, hi = int(first), int(last or first)
    picked = [r for r in rows if r["steady"] and lo <= r["step"] <= hi]
    out: Dict[str, Any] = {"steps": [r["step"] for r in picked]}
    for k in MEANS:
        xs = [float(r[k]) for r in picked if r[k] is not None]
        out[k] = round(sum(xs) / len(xs), 3) if xs else None
    return out


def fmt(x: Optional[float], digits: int = 0, pct: bool = False) -> str:
    if x is None:
        return ""
    return f"{100 * x:.0f}%" if pct else f"{x:.{digits}f}"


def computed(r: Dict[str, Any]) -> Optional[float]:
    """Rows a decode step computed: the running ones over the share of rows not idle."""
    rows, idle = r["rows_per_step"], r["idle_rows"]
    if rows is None or idle is None or idle >= 1.0:
        return None
    return float(rows) / (1.0 - float(idle))


def learning(lines: List[Dict[str, Any]]) -> List[str]:
    """The learning table (`--learning`)."""
    out = ["| step | lr | reward (std) | pass by turn | cut at the cap | groups kept | clip | KL to start | entropy "
           "| grad norm |",
           "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for m in lines:
        turns = " / ".join(f"{100 * p:.0f}%" for p in m.get("pass_by_turn") or [])
        kl = m.get("kl")
        # Turns that stopped at their source's max_tokens (each source's share, by episodes).
        src = m.get("by_source") or []
        eps = sum(s.get("episodes", 0) for s in src)
        cut = sum(s.get("truncated", 0.0) * s.get("episodes", 0) for s in src) / eps if eps else None
        out.append(
            f"| {m['step']} | {m.get('lr', 0):.0e} | {fmt(m.get('reward_mean'), 3)} ({fmt(m.get('reward_std'), 3)}) "
            f"| {turns} | {fmt(cut, pct=True)} | {m.get('groups_kept')}/{m.get('groups_drawn')} "
            f"| {fmt(m.get('clip_fraction'), 4)} "
            f"| {'' if kl is None else f'{kl:.2e}'} | {fmt(m.get('entropy'), 3)} | {fmt(m.get('grad_norm'), 3)} |")
    return out


def passes(m: Dict[str, Any]) -> Tuple[str, int]:
    """A step's learner passes over its tokens and their count, e.g. (`score+ref+2
    updates`, 3): the reference scores only when the KL is measured (the step's `kl`),
    and the updates split the step's sequences between them (`batch::plan`), so together
    they are one forward and backward pass over the step's tokens."""
    ref = m.get("kl") is not None
    updates = int(m.get("updates", 1))
    return f"score{'+ref' if ref else ''}+{updates} updates", 2 + int(ref)


def worker_split(lines: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The policy worker's time over the steady steps (`--worker`)."""
    picked = [m for m in lines if steady(m) and (m.get("worker") or {}).get("engine")]
    if not picked:
        return {"steady_steps": []}
    w = [m["worker"] for m in picked]
    steps = sum(x["engine"]["decode_steps"] for x in w)
    gen = sum(x["generate_s"] for x in w)
    train = sum(x["train_s"] for x in w)
    overlap = [float(m["learner_with_generation"]) for m in picked if m.get("learner_with_generation") is not None]
    return {
        "steady_steps": [m["step"] for m in picked],
        "generate_s_per_step": round(gen / len(w), 2), "learner_s_per_step": round(train / len(w), 2),
        "ms_per_decode_step": round(1000 * gen / steps, 2),
        "decode_device_ms": round(sum(x["engine"].get("decode_ms_per_step", 0) * x["engine"]["decode_steps"]
                                      for x in w) / steps, 2),
        "prefill_ms_per_decode_step": round(1000 * sum(x["engine"].get("prefill_s", 0) for x in w) / steps, 2),
        "learner_tokens_per_s": round(sum(m.get("trained_tokens", 0) for m in picked) / train) if train else None,
        # What the learner ran over those tokens each step (`passes`).
        "learner_passes": sorted({passes(m)[0] for m in picked}),
        "learner_pass_tokens_per_s": round(sum(m.get("trained_tokens", 0) * passes(m)[1] for m in picked) / train)
        if train else None,
        "learner_with_generation": [round(min(overlap), 3), round(max(overlap), 3)] if overlap else None,
    }


def main() -> None:
    argv = sys.argv[1:]
    span = None
    if "--means" in argv:
        i = argv.index("--means")
        if i + 1 >= len(argv):
            sys.exit("--means wants a range of steps, e.g. 2-6")
        span = argv.pop(i + 1)
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 1:
        sys.exit(__doc__)
    with open(args[0]) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if "--learning" in argv:
        print("\n".join(learning(lines)))
        return
    if "--worker" in argv:
        print(json.dumps(worker_split(lines)))
        return
    rows = [row(m) for m in lines]
    intervals = [r["interval_s"] for r in rows if r["steady"] and r["interval_s"] is not None]
    busy = [r["worker_busy"] for r in rows if r["steady"] and r["worker_busy"] is not None]
    idle = [r["gpu_idle"] for r in rows if r["steady"] and r["gpu_idle"] is not None]
    summary = {
        "steps": len(rows), "steady_steps": [r["step"] for r in rows if r["steady"]],
        "interval_s": [min(intervals), max(intervals), sum(intervals) / len(intervals)] if intervals else None,
        "worker_busy": [min(busy), max(busy)] if busy else None,
        "gpu_idle": [min(idle), max(idle)] if idle else None,
    }
    if "--json" in sys.argv:
        print(json.dumps({"steps": rows, "summary": summary}))
        return
    out: List[str] = [
        "| step | steady | interval | rollout | slowest: gen (wait) | eval (start, queue) | turns "
        "| mean chain: gen (wait) | eval | worker busy | GPU idle | decode steps | ms each (decode alone) "
        "| rows each (computed) | prefill (forwards) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        turns = " ".join(o[:4] for o in r["slowest_outcomes"] or [])
        # Workers before the device brackets report none (0): shown as nothing.
        alone = f" ({fmt(r['decode_ms_per_step'], 1)})" if r["decode_ms_per_step"] else ""
        forwards = f" ({r['prefill_forwards']})" if r["prefill_forwards"] else ""
        if r["prefill_graphs"]:  # shapes captured this step (reported since 2026-11-30)
            forwards = f" ({r['prefill_forwards']}; {r['prefill_graphs']} captured)"
        out.append(
            f"| {r['step']} | {'yes' if r['steady'] else 'no'} | {fmt(r['interval_s'])} | {fmt(r['rollout_s'])} "
            f"| {fmt(r['slowest_gen_s'])} ({fmt(r['slowest_gen_wait_s'], 1)}) "
            f"| {fmt(r['slowest_eval_s'])} ({fmt(r['slowest_start_wait_s'], 1)}, {fmt(r['slowest_queue_wait_s'], 1)}) "
            f"| {turns} | {fmt(r['mean_gen_s'])} ({fmt(r['mean_gen_wait_s'], 1)}) | {fmt(r['mean_eval_s'], 1)} "
            f"| {fmt(r['worker_busy'], pct=True)} | {fmt(r['gpu_idle'], pct=True)} | {fmt(r['decode_steps'])} "
            f"| {fmt(r['ms_per_step'], 1)}{alone} | {fmt(r['rows_per_step'])} ({fmt(computed(r))}) "
            f"| {fmt(r['prefill_s'] or None, 1)}{forwards} |")
    print("\n".join(out))
    print()
    print(json.dumps(summary))
    if span is not None:
        print(json.dumps({"means": means(rows, span)}))


if __name__ == "__main__":
    main()

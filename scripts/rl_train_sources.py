"""How the training rollouts of a `train rl` run went, by source: first-turn outcomes over
windows of steps, and every problem drawn more than once with its correct first turns at
each draw (whether the policy got better at problems it had seen).

usage: python3 scripts/rl_train_sources.py STORE.sqlite [--window N]

STORE is a `train rl` state store (gpu_rl.sh brings it back as store-state.sqlite.xz, or
in parts: `cat store-state.sqlite.xz.part* | xz -dc > store.sqlite`). Training episodes
have ids `<run>/step-<STEP>/<source>/<problem>/<sample>` (STEP counts from 0); heldout
ones (`heldout-<STEP>`) are left out.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sqlite3
import sys
from typing import Dict, List, Tuple


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("--window", type=int, default=7, help="steps a window")
    a = ap.parse_args()
    if not os.path.isfile(a.store):
        print(f"{a.store}: no such store (decompress store-state.sqlite.xz first)", file=sys.stderr)
        return 2
    db = sqlite3.connect(f"file:{a.store}?mode=ro", uri=True)
    outcomes: Dict[Tuple[str, int], collections.Counter] = collections.defaultdict(collections.Counter)
    draws: Dict[Tuple[str, str], Dict[int, List[int]]] = collections.defaultdict(dict)
    for id_, episode in db.execute("select id, episode from episodes"):
        parts = id_.split("/")
        if len(parts) < 5 or not parts[1].startswith("step-"):
            continue
        step, source, problem = int(parts[1][len("step-"):]), parts[2], parts[3]
        turns = json.loads(episode).get("turns") or []
        first = turns[0]["outcome"] if turns else "no_turn"
        outcomes[(source, step // a.window)][first] += 1
        got = draws[(source, problem)].setdefault(step, [0, 0])
        got[0] += first == "correct"
        got[1] += 1
    print("| source | steps (from 1) | episodes | correct | no ModelNew | compile error | incorrect |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for (source, w), c in sorted(outcomes.items()):
        n = sum(c.values())
        share = {k: f"{100 * c[k] / n:.1f}%" for k in ("correct", "no_model_new", "compile_error", "incorrect")}
        print(f"| {source} | {w * a.window + 1}–{(w + 1) * a.window} | {n} | {share['correct']} | "
              f"{share['no_model_new']} | {share['compile_error']} | {share['incorrect']} |")
    again = {k: v for k, v in draws.items() if len(v) > 1}
    print(f"\n{len(again)} of {len(draws)} problems drawn more than once "
          "(correct first turns / samples at each draw, by step from 1):")
    by_source: Dict[str, List[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])
    for (source, problem), at in sorted(again.items()):
        steps = sorted(at)
        print(f"- {source} {problem}: " + ", ".join(f"step {s + 1}: {at[s][0]}/{at[s][1]}" for s in steps))
        tally = by_source[source]
        tally[0] += at[steps[0]][0]
        tally[1] += at[steps[-1]][0]
        tally[2] += at[steps[0]][1]
        tally[3] += at[steps[-1]][1]
    for source, (first, last, n_first, n_last) in sorted(by_source.items()):
        print(f"{source}: {first} correct of {n_first} at the first draw, {last} of {n_last} at the last")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per problem, how a heldout pass went: solved samples, outcomes, and the commonest
first-turn messages (what SFT data for the never-solved problems should teach).

usage: python3 scripts/heldout_problems.py STORE.sqlite STEP SET [--messages N]

STORE is a `train rl` state store (gpu_rl.sh brings it back as store-state.sqlite.xz;
`xz -dk` it first), STEP the heldout pass's step (0 for a baseline played in the run),
SET the heldout set's name (e.g. l1-heldout). Episodes are read from the `episodes` table,
ids `.../heldout-<STEP>/<SET>/<problem>/<sample>`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sqlite3
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("step", type=int)
    ap.add_argument("set")
    ap.add_argument("--messages", type=int, default=2)
    a = ap.parse_args()
    if not os.path.isfile(a.store):
        print(f"{a.store}: no such store (decompress store-state.sqlite.xz first)", file=sys.stderr)
        return 2
    pattern = f"%/heldout-{a.step:06d}/{a.set}/%"
    db = sqlite3.connect(f"file:{a.store}?mode=ro", uri=True)
    solved: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    outcomes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    firsts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for eid, outcome, episode in db.execute("SELECT id, outcome, episode FROM episodes WHERE id LIKE ?", (pattern,)):
        problem = eid.split("/")[-2]
        solved[problem][0] += int(outcome == "correct")
        solved[problem][1] += 1
        outcomes[problem][outcome or "none"] += 1
        turns = json.loads(episode).get("turns") or []
        if turns:
            t = turns[0]
            message = " ".join((t.get("message") or "").split())[:140]
            firsts[problem][f"{t.get('outcome')}: {message}"] += 1
    if not solved:
        print(f"no episodes match {pattern}", file=sys.stderr)
        return 1
    print("| problem | solved | outcomes | commonest first-turn messages |")
    print("| --- | ---: | --- | --- |")
    for problem, (s, n) in sorted(solved.items(), key=lambda kv: (kv[1][0] / kv[1][1], kv[0])):
        outs = ", ".join(f"{k} {v}" for k, v in outcomes[problem].most_common())
        msgs = "; ".join(f"{v}× {k}".replace("|", "\\|") for k, v in firsts[problem].most_common(a.messages))
        print(f"| {problem} | {s}/{n} | {outs} | {msgs} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

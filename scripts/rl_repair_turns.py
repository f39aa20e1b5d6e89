"""What a run's repair turns did: per training source, each turn's share cut at the
completion cap, and the repair turns (2 and later) after a first turn that was not
correct, split by whether the repair was cut, with how many of them were correct.

usage: python3 scripts/rl_repair_turns.py STORE.sqlite

STORE is a `train rl` state store (`xz -dk` gpu_rl.sh's store-state.sqlite.xz first).
Training episodes only (ids `RUN/step-.../SOURCE/PROBLEM/SAMPLE`; heldout ones, under
`RUN/heldout-...`, are left out).
"""

from __future__ import annotations

import collections
import json
import sqlite3
import sys
from typing import Any


def correct(turn: dict[str, Any]) -> bool:
    """A turn whose evaluation said `correct` (outcomes are strings or one-key objects)."""
    outcome = turn.get("outcome")
    if isinstance(outcome, dict):
        return "correct" in outcome.values()
    return outcome == "correct"


def main() -> int:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
    turns: collections.Counter[tuple[str, int]] = collections.Counter()
    cut: collections.Counter[tuple[str, int]] = collections.Counter()
    repairs: collections.Counter[tuple[str, bool, bool]] = collections.Counter()
    for (text,) in db.execute("SELECT episode FROM episodes WHERE id NOT LIKE '%/heldout-%'"):
        episode = json.loads(text)
        source = episode["id"].split("/")[2]
        for i, turn in enumerate(episode["turns"]):
            was_cut = (turn.get("completion") or {}).get("finish_reason") == "length"
            turns[(source, i)] += 1
            cut[(source, i)] += was_cut
            if i > 0 and not correct(episode["turns"][0]):
                repairs[(source, was_cut, correct(turn))] += 1
    print("| source | turn | turns | cut at the cap |")
    print("| --- | ---: | ---: | ---: |")
    for source, i in sorted(turns):
        n = turns[(source, i)]
        print(f"| {source} | {i + 1} | {n} | {cut[(source, i)] / n:.0%} |")
    print()
    print("| source | repair turns ended whole | of them correct | cut at the cap | of them correct |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for source in sorted({s for s, _ in turns}):
        whole = repairs[(source, False, True)] + repairs[(source, False, False)]
        cuts = repairs[(source, True, True)] + repairs[(source, True, False)]
        print(
            f"| {source} | {whole} | {repairs[(source, False, True)]} | {cuts} | {repairs[(source, True, True)]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

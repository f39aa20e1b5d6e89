"""Training turns that stopped at their token cap, read from a run's store (docs/rl.md, run 17):
how many of the rollout turns ended with `finish_reason` "length", and whether they are
loops or answers cut off mid-code: how far the last 1,500 characters of each compress
(zlib; a loop compresses far below 0.2).

usage: python3 scripts/cut_turns.py STORE.sqlite [RUN]   (RUN: the run's name, default rl-out)
Prints one JSON object.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
import zlib
from typing import Any, Dict, List


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    run = sys.argv[2] if len(sys.argv) > 2 else "rl-out"
    db = sqlite3.connect(sys.argv[1])
    turns, cut = 0, 0
    ratios: List[float] = []
    for (text,) in db.execute("SELECT episode FROM episodes WHERE run = ?", (run,)):
        for t in json.loads(text).get("turns", []):
            c = t.get("completion") or {}
            turns += 1
            if c.get("finish_reason") == "length":
                cut += 1
                tail = (c.get("text") or "")[-1500:].encode()
                if tail:
                    ratios.append(len(zlib.compress(tail)) / len(tail))
    out: Dict[str, Any] = {"run": run, "turns": turns, "cut_at_cap": cut,
                           "share": round(cut / turns, 3) if turns else None}
    if ratios:
        out["tail_compression_median"] = round(statistics.median(ratios), 3)
        out["loops_share"] = round(sum(1 for r in ratios if r < 0.2) / len(ratios), 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

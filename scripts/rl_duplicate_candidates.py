"""How much of a run's evaluation was the same code evaluated again: per status, the
evaluations, the distinct (problem, source) pairs among them, and the exclusive GPU
(timing) seconds spent against what the first evaluation of each pair spent.

usage: python3 scripts/rl_duplicate_candidates.py STORE.sqlite [--training]

STORE is a `train rl` state store (`xz -dk` gpu_rl.sh's store-state.sqlite.xz first).
With --training, only evaluations up to the store's last training episode (by time: a
heldout pass after it is left out, one played between training steps is not; heldout
episodes, stored as they end since 2026-12-01, are named `RUN/heldout-STEP/...` and do
not set the cut). Candidates were named by sample and turn before 2026-12-01, so the
evaluator's key differed for the same code; they are now named by content, and the same
code for the same problem is one evaluation.
"""

from __future__ import annotations

import sqlite3
import sys


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        sys.exit(__doc__)
    db = sqlite3.connect(f"file:{args[0]}?mode=ro", uri=True)
    where = ""
    if "--training" in sys.argv:
        (cut,) = db.execute("SELECT MAX(created_at) FROM episodes WHERE id NOT LIKE '%/heldout-%'").fetchone()
        if cut is None:
            sys.exit(f"{args[0]}: no training episodes (a store of a heldout pass or a server's?)")
        where = f"WHERE created_at <= {int(cut)}"
    rows = db.execute(
        "SELECT status, problem, candidate_sha256, json_extract(record, '$.exclusive_ms'), created_at "
        f"FROM evaluations {where} ORDER BY created_at"
    ).fetchall()
    stats: dict[str, list[float]] = {}
    seen: set[tuple[str, str]] = set()
    for status, problem, sha, exclusive_ms, _ in rows:
        s = stats.setdefault(status, [0, 0, 0.0, 0.0])
        s[0] += 1
        s[2] += (exclusive_ms or 0.0) / 1000
        if (problem, sha) not in seen:
            seen.add((problem, sha))
            s[1] += 1
            s[3] += (exclusive_ms or 0.0) / 1000
    print("| status | evaluations | distinct code | exclusive GPU s | of which first of their code |")
    print("| --- | ---: | ---: | ---: | ---: |")
    total = [0, 0, 0.0, 0.0]
    for status, s in sorted(stats.items()):
        print(f"| {status} | {s[0]} | {s[1]} | {s[2]:.1f} | {s[3]:.1f} |")
        total = [a + b for a, b in zip(total, s)]
    print(f"| all | {total[0]} | {total[1]} | {total[2]:.1f} | {total[3]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

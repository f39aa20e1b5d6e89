"""A heldout pass's first-turn pass@1 read from the evaluator's records alone, for a pass
that was killed before it wrote `heldout.jsonl` or stored its episodes (run 22's final
pass, before heldout episodes were stored as they ended).

usage: python3 scripts/heldout_from_evaluations.py STORE.sqlite SAMPLES SET=MANIFEST ...

The pass's evaluations are those created after the store's last training episode. Each
SET is a manifest (`bench/manifest.toml` with `:LEVEL`, e.g. `l1=bench/manifest.toml:1`,
or a synthetic suite's `manifest.toml`) whose `split = "heldout"` problems form the set.
A sample without an evaluation either wrote no code or was still being evaluated when the
pass was killed; the two cannot be told apart, so each set's pass@1 is given as bounds:
missing samples all wrong, and all right. (Since candidates are named by their content,
2026-12-01, samples with the same code share one record: the counts here then undercount
samples, and this reading applies only to stores written before that.)
"""

from __future__ import annotations

import sqlite3
import sys
import tomllib


def heldout_names(spec: str) -> list[str]:
    path, _, level = spec.partition(":")
    with open(path, "rb") as f:
        problems = tomllib.load(f)["problems"]
    return sorted(
        key.split("/")[-1]
        for key, p in problems.items()
        if p.get("split") == "heldout" and (not level or p.get("level") == int(level))
    )


def main() -> int:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    store, samples, sets = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    (cut,) = db.execute("SELECT MAX(created_at) FROM episodes").fetchone()
    rows = {
        problem: (n, correct)
        for problem, n, correct in db.execute(
            "SELECT problem, COUNT(*), SUM(status = 'correct') FROM evaluations "
            "WHERE created_at > ? GROUP BY problem",
            (cut,),
        )
    }
    print("| set | problems | samples evaluated | correct | pass@1 (missing wrong) | pass@1 (missing right) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for item in sets:
        name, _, spec = item.partition("=")
        names = heldout_names(spec)
        total = len(names) * samples
        n = sum(min(rows.get(p, (0, 0))[0], samples) for p in names)
        c = sum(rows.get(p, (0, 0))[1] for p in names)
        print(f"| {name} | {len(names)} | {n} of {total} | {c} | {100 * c / total:.1f}% | {100 * (c + total - n) / total:.1f}% |")
    for item in sets:
        name, _, spec = item.partition("=")
        per = ", ".join(f"{p} {rows.get(p, (0, 0))[1]}/{rows.get(p, (0, 0))[0]}" for p in heldout_names(spec))
        print(f"\n{name} (correct/evaluated): {per}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

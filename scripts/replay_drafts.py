#!/usr/bin/env python3
"""How many forwards prompt-lookup drafts would save on real completions: replays every
turn stored in a state directory's store (its prompt and completion token ids) through the
engine's `Drafts`, as the engine drafts (a row's draft starts at SPAN_START tokens,
doubles after a draft kept whole, halves after one mostly refused, at most --longest), and
counts the forwards each completion needs (the prefill's, which draws the first token,
and each decode step's) against one per token. The model is not run:
a draft token counts as kept when it is the token the completion has there, which is what
the engine's check keeps when it draws what the stored run drew.

usage: PYTHONPATH=python python3 scripts/replay_drafts.py STATE_DIR [--longest 16] [--fixed]
--fixed: every draft --longest tokens (no doubling or halving).
Prints one JSON object: tokens, forwards, tokens per forward, drafted and kept tokens,
overall and for first turns.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
from tritonforge_worker.engine import SPAN_START, Drafts  # noqa: E402


def replay(prompt: List[int], completion: List[int], longest: int, fixed: bool) -> Dict[str, int]:
    # The first token comes from the prompt's prefill, undrafted (one forward, as in the engine).
    drafts = Drafts(prompt + completion[:1])
    span = longest if fixed else min(SPAN_START, longest)
    i, forwards, drafted, kept = min(len(completion), 1), min(len(completion), 1), 0, 0
    while i < len(completion):
        d = drafts.draft(min(span, len(completion) - i - 1))
        n = 1
        while n <= len(d) and d[n - 1] == completion[i + n - 1]:
            n += 1
        if d and not fixed:
            span = min(2 * span, longest) if n - 1 == len(d) else max(span // 2, 1) if 2 * (n - 1) < len(d) else span
        drafts.extend(completion[i:i + n])
        i, forwards, drafted, kept = i + n, forwards + 1, drafted + len(d), kept + n - 1
    return {"tokens": len(completion), "forwards": forwards, "drafted": drafted, "kept": kept}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("state")
    ap.add_argument("--longest", type=int, default=16)
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()
    db = sqlite3.connect(Path(args.state) / "tritonforge.sqlite")
    total: Dict[str, Dict[str, int]] = {"all": {}, "first_turns": {}}
    for (raw,) in db.execute("SELECT episode FROM episodes"):
        for turn in json.loads(raw)["turns"]:
            c = turn["completion"]
            r = replay(c["prompt_ids"], c["token_ids"], args.longest, args.fixed)
            for part in ("all",) + (("first_turns",) if turn["turn"] == 0 else ()):
                for k, v in r.items():
                    total[part][k] = total[part].get(k, 0) + v
    for part in total.values():
        part["tokens_per_forward"] = round(part["tokens"] / max(part["forwards"], 1), 2)
    print(json.dumps({"state": args.state, "longest": args.longest, "fixed": args.fixed, **total}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

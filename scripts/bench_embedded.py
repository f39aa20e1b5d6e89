#!/usr/bin/env python3
"""Generation throughput of the embedded policy (the same code `tritonforge run` uses).

Loads the model once (timed), then for each batch size B generates B completions at once
(one per level-1 problem, each asked to rewrite that problem with Triton), greedy, up to
TOKENS new tokens each, REPEATS times; prints load time and, per batch size, completion
tokens per second (all rows' completion tokens / wall time of the batch) as JSON.

usage: PYTHONPATH=python python3 scripts/bench_embedded.py [--model smollm2]
       [--device cpu] [--tokens 128] [--repeats 2] [--batch 1,4,10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

from tritonforge_worker.models import load  # noqa: E402
from tritonforge_worker.policy import generate_batch  # noqa: E402
from tritonforge_worker.protocol import ChatTurn, GenerateJob  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch", default="1,4,10")
    args = ap.parse_args()
    t0 = time.perf_counter()
    tok, net = load(args.model, args.device)
    load_s = time.perf_counter() - t0
    problems = sorted((REPO / "bench" / "level1").glob("*.py"))
    results = []
    for b in [int(x) for x in args.batch.split(",") if x.strip()]:
        jobs = [GenerateJob(messages=[ChatTurn(role="system", content="You write Triton kernels."),
                                      ChatTurn(role="user", content="Rewrite with Triton:\n```python\n"
                                               f"{problems[i % len(problems)].read_text()}```")],
                            temperature=0.0, top_p=1.0, max_tokens=args.tokens, seed=0) for i in range(b)]
        rates, runs = [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            out = generate_batch(tok, net, jobs, args.device)
            dt = time.perf_counter() - t
            n = sum(len(g.token_ids) for g in out)
            rates.append(n / dt)
            runs.append({"prompt_tokens": sum(len(g.prompt_ids) for g in out), "completion_tokens": n,
                         "seconds": round(dt, 3)})
        results.append({"batch": b, "tokens_per_s_median": round(statistics.median(rates), 2), "runs": runs})
    print(json.dumps({"model": args.model, "device": args.device, "load_s": round(load_s, 2),
                      "torch_threads": __import__("torch").get_num_threads(), "batches": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

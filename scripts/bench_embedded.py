#!/usr/bin/env python3
"""Generation throughput of the embedded policy (the same code `tritonforge run` uses).

Loads the model once (timed), then generates REPEATS completions of up to TOKENS new
tokens from the task prompt of one suite problem, greedy, and prints load time and
tokens per second (completion tokens / generation wall time) as JSON.

usage: PYTHONPATH=python python3 scripts/bench_embedded.py [--model smollm2]
       [--device cpu] [--tokens 128] [--repeats 3]
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

from tritonforge_worker.policy import generate, load  # noqa: E402
from tritonforge_worker.protocol import ChatTurn, GenerateJob  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    t0 = time.perf_counter()
    tok, net = load(args.model, args.device)
    load_s = time.perf_counter() - t0
    problem = (REPO / "bench" / "level1" / "relu.py").read_text()
    job = GenerateJob(messages=[ChatTurn(role="system", content="You write Triton kernels."),
                                ChatTurn(role="user", content=f"Rewrite with Triton:\n```python\n{problem}```")],
                      temperature=0.0, top_p=1.0, max_tokens=args.tokens, seed=0)
    rates = []
    runs = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        g = generate(tok, net, job, args.device)
        dt = time.perf_counter() - t
        rates.append(len(g.token_ids) / dt)
        runs.append({"prompt_tokens": len(g.prompt_ids), "completion_tokens": len(g.token_ids), "seconds": round(dt, 3)})
    print(json.dumps({"model": args.model, "device": args.device, "load_s": round(load_s, 2),
                      "tokens_per_s_median": round(statistics.median(rates), 2), "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

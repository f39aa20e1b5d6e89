#!/usr/bin/env python3
"""One candidate through KernelBench's own `eval_kernel_against_ref`, in this process.

The baseline arm of `scripts/bench_vs_kernelbench.py`: that script starts one fresh
process of this file per candidate, as KernelBench's harness does. KernelBench is not
part of this repository: `--kb` is a checkout of it (its `src/` is imported). Modules its
package imports at load time for LLM queries only (dotenv, openai, litellm) are stubbed
when missing; evaluation never calls them. Prints one JSON line.

usage: python3 scripts/kb_eval_one.py --kb KB_CHECKOUT --problem P.py --candidate C.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

STUBS = {
    "dotenv": {"load_dotenv": lambda *a, **k: False},
    "openai": {"OpenAI": type("OpenAI", (), {})},
    "litellm": {"completion": lambda *a, **k: None},
}


def main() -> int:
    t0 = time.perf_counter()
    ap = argparse.ArgumentParser()
    ap.add_argument("--kb", required=True)
    ap.add_argument("--problem", required=True)
    ap.add_argument("--candidate", required=True)
    ap.add_argument("--correct-trials", type=int, default=5)
    ap.add_argument("--perf-trials", type=int, default=100)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.kb) / "src"))
    for name, attrs in STUBS.items():
        if importlib.util.find_spec(name) is None:
            mod = types.ModuleType(name)
            mod.__dict__.update(attrs)
            sys.modules[name] = mod
    from kernelbench.eval import eval_kernel_against_ref

    res = eval_kernel_against_ref(
        Path(args.problem).read_text(),
        Path(args.candidate).read_text(),
        seed_num=42,
        num_correct_trials=args.correct_trials,
        num_perf_trials=args.perf_trials,
        measure_performance=True,
        timing_method="cuda_event",
        backend="triton",
        device=0,
    )
    out = {"wall_s": time.perf_counter() - t0}
    if res is None:
        out.update(compiled=False, correct=False, note="KernelBench asked for a retry (lock file)")
    else:
        meta = {k: str(v)[:300] for k, v in (res.metadata or {}).items()}
        out.update(compiled=bool(res.compiled), correct=bool(res.correctness), runtime_us=res.runtime,
                   ref_runtime_us=res.ref_runtime, metadata=meta)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

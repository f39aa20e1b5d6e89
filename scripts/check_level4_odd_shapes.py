#!/usr/bin/env python3
"""Level-4 solutions against their problems at odd shapes under the Triton interpreter: three
query blocks of attention, a sliding window shorter than the sequence (the block-skipping
path), vocabularies and widths that are not powers of two. CPU only, a minute or two in all;
from the repository root, with the managed environment's python:

    TRITON_INTERPRET=1 .tritonforge/venv/bin/python scripts/check_level4_odd_shapes.py [NAME...]
"""

import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
from tritonforge_worker.executor import load_module  # noqa: E402

COMMON = dict(BATCH=3, SEQ_LEN=131, VOCAB=251, HIDDEN=96, LAYERS=2, HEADS=6, FFN=160)
CASES = {
    "llama": dict(COMMON, KV_HEADS=2),
    "qwen3": dict(COMMON, KV_HEADS=3, HEAD_DIM=24),
    "mistral_sliding_window": dict(COMMON, KV_HEADS=3, WINDOW=40),
    "gpt2": {k: v for k, v in COMMON.items() if k != "FFN"},
    "bert": COMMON,
}


def main() -> int:
    bad = 0
    for name in sys.argv[1:] or list(CASES):
        problem = load_module(f"p_{name}", str(ROOT / "bench/level4" / f"{name}.py"), CASES[name])
        solution = load_module(f"c_{name}", str(ROOT / "bench/solutions/level4" / f"{name}.py"), {})
        init = problem.get_init_inputs()
        torch.manual_seed(0)
        reference = problem.Model(*init)
        torch.manual_seed(0)
        candidate = solution.ModelNew(*init)
        torch.manual_seed(1)
        inputs = problem.get_inputs()
        start = time.time()
        with torch.no_grad():
            want, got = reference(*inputs), candidate(*inputs)
        err = (want - got).abs().max().item()
        bad += err >= 1e-3
        verdict = "ok" if err < 1e-3 else "WRONG"
        print(f"{name}: {tuple(want.shape)} max abs err {err:.3g} {verdict} ({time.time() - start:.1f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a training step's time goes: the policy worker's trainer on a synthetic packed
batch (rows of `--seq-len` holding conversations of `--doc` tokens, 40% of tokens
targets), timed, then under the PyTorch profiler (top CUDA kernels).

usage: python scripts/profile_train_step.py --model configs/models/qwen3-0.6b
       [--attention auto] [--rows 4] [--seq-len 4096] [--doc 1365]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

sys.path.insert(0, "python")
from tritonforge_worker.protocol import MicroBatch, TrainBatch, TrainSetupJob  # noqa: E402
from tritonforge_worker.trainer import Trainer  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--attention", default="auto")
ap.add_argument("--rows", type=int, default=4)
ap.add_argument("--seq-len", type=int, default=4096)
ap.add_argument("--doc", type=int, default=1365)
ap.add_argument("--checkpointing", action="store_true")
args = ap.parse_args()

setup = TrainSetupJob(model=args.model, resume=None, lora=None, lr=1e-5, min_lr=1e-6, warmup_steps=2,
                      total_steps=100, weight_decay=0.0, grad_clip=1.0,
                      gradient_checkpointing=args.checkpointing, dtype="bf16", seed=0, attention=args.attention)
tr = Trainer(setup, "cuda")
g = torch.Generator().manual_seed(0)
ids, mask, pos = [], [], []
for _ in range(args.rows):
    row = torch.randint(0, 49152, (args.seq_len,), generator=g).tolist()
    p = [i % args.doc for i in range(args.seq_len)]
    m = [1 if (i % args.doc) > 0.6 * args.doc else 0 for i in range(args.seq_len)]
    ids.append(row), pos.append(p), mask.append(m)
batch = TrainBatch(micro=[MicroBatch(input_ids=ids, loss_mask=mask, position_ids=pos)])
for _ in range(4):
    tr.train_step(batch)
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(5):
    tr.train_step(batch)
torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / 5
info = tr.info()
tokens = args.rows * args.seq_len
flops = 6.0 * (info.parameters - info.head_parameters) * tokens + 6.0 * info.head_parameters * sum(map(sum, mask)) \
    + 6.0 * info.layers * info.attention_width * sum(args.doc ** 2 for _ in range(tokens // args.doc))
print(f"attention={tr.attention} step {dt * 1000:.1f} ms, {tokens / dt:.0f} tok/s, MFU {flops / dt / 989e12:.3f}, "
      f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                        torch.profiler.ProfilerActivity.CUDA]) as prof:
    for _ in range(2):
        tr.train_step(batch)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=22, max_name_column_width=60))

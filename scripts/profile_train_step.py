"""Where a training step's time goes: the policy worker's trainer on a synthetic packed
batch (rows of `--seq-len` holding conversations of `--doc` tokens, 40% of tokens
targets; with `--doc` equal to `--seq-len`, rows of one conversation each, as
`group_by_length` makes them), timed, then under the PyTorch profiler (top CUDA kernels).

usage: python scripts/profile_train_step.py --model configs/models/qwen3-0.6b
       [--attention auto] [--compile auto] [--dtype bf16] [--rows 4] [--micro 1]
       [--seq-len 4096] [--doc 1365] [--checkpointing] [--no-profile]
Prints one JSON line (`{"profile": ...}`) with the step time, tokens/s, MFU and peak memory.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

sys.path.insert(0, "python")
from tritonforge_worker.protocol import MicroBatch, TrainBatch, TrainSetupJob  # noqa: E402
from tritonforge_worker.trainer import Trainer  # noqa: E402
from bench_sft_trainer import train_flops  # noqa: E402  (this script's own directory)

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--attention", default="auto")
ap.add_argument("--rows", type=int, default=4)
ap.add_argument("--seq-len", type=int, default=4096)
ap.add_argument("--doc", type=int, default=1365)
ap.add_argument("--checkpointing", action="store_true")
ap.add_argument("--compile", default="auto")
ap.add_argument("--dtype", default="bf16")
ap.add_argument("--micro", type=int, default=1, help="micro-batches per step (accumulation)")
ap.add_argument("--no-profile", action="store_true")
args = ap.parse_args()

setup = TrainSetupJob(model=args.model, resume=None, lora=None, lr=1e-5, min_lr=1e-6, warmup_steps=2,
                      total_steps=100, weight_decay=0.0, grad_clip=1.0,
                      gradient_checkpointing=args.checkpointing, dtype=args.dtype, seed=0, attention=args.attention,
                      compile=args.compile, one_per_row=args.doc >= args.seq_len)
tr = Trainer(setup, "cuda")
g = torch.Generator().manual_seed(0)
ids, mask, pos = [], [], []
for _ in range(args.rows):
    row = torch.randint(0, 49152, (args.seq_len,), generator=g).tolist()
    p = [i % args.doc for i in range(args.seq_len)]
    m = [1 if (i % args.doc) > 0.6 * args.doc else 0 for i in range(args.seq_len)]
    ids.append(row), pos.append(p), mask.append(m)
batch = TrainBatch(micro=[MicroBatch(input_ids=ids, loss_mask=mask, position_ids=pos,
                                        lengths=[args.seq_len] * args.rows)] * args.micro)
t0 = time.perf_counter()
for _ in range(4):
    tr.train_step(batch)
warm = time.perf_counter() - t0
torch.cuda.synchronize()
t0 = time.perf_counter()
peak = 0
for _ in range(5):
    peak = max(peak, tr.train_step(batch).memory_bytes or 0)
torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / 5
info = tr.info()
tokens = args.rows * args.seq_len * args.micro
flops = train_flops(info.parameters - info.head_parameters, info.head_parameters, info.layers,
                    info.attention_width, tokens, args.micro * sum(map(sum, mask)),
                    [args.doc] * (args.micro * (args.rows * args.seq_len // args.doc)))
print(json.dumps({"profile": args.model, "attention": tr.attention, "compiled": tr.compiled, "dtype": args.dtype,
                  "rows": args.rows, "micro": args.micro, "checkpointing": args.checkpointing,
                  "step_ms": round(dt * 1000, 1), "tokens_per_s": round(tokens / dt),
                  "mfu": round(flops / dt / 989e12, 4), "warmup_s": round(warm, 1),
                  "peak_gib": round(peak / 2**30, 1)}), flush=True)
if args.no_profile:
    sys.exit(0)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                        torch.profiler.ProfilerActivity.CUDA]) as prof:
    for _ in range(2):
        tr.train_step(batch)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=22, max_name_column_width=60))
# The same two steps by each kernel's own time: what the device actually spent it on.
print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=40, max_name_column_width=90))

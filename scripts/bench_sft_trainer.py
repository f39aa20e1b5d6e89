"""Baseline for the SFT throughput figure: a plain transformers `Trainer` on the same SFT
set, model configuration, sequence length and optimizer settings as `tritonforge train
sft`. Prints one JSON object: median step time, tokens/s and MFU counted exactly as
`tritonforge-train` counts them (`batch_flops`).

usage: python scripts/bench_sft_trainer.py --model DIR --tokenizer DIR --data train.jsonl
       --mode packed|plain --seq-len 4096 --micro-batch 4 --grad-accum 1 --steps 16
  packed: the rows `tritonforge train sft` would build (conversations packed first-fit,
          positions restarting per conversation, labels only on assistant tokens);
  plain:  one conversation per row, padded per batch: what a Trainer user writes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any, Dict, List

import torch
from transformers import (AutoConfig, AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback,
                          TrainingArguments)


def train_flops(body: int, head: int, layers: int, width: int, tokens: int, loss_tokens: int,
                docs: List[int]) -> float:
    """Training FLOPs as `tritonforge-train` counts them (`batch_flops`): 6 × body
    parameters × tokens, the output projection at target tokens only, and causal attention
    per conversation."""
    return 6.0 * body * tokens + 6.0 * head * loss_tokens + 6.0 * layers * width * sum(n * n for n in docs)


def tokenize(tok: Any, messages: List[Dict[str, str]]) -> tuple[list[int], list[int]]:
    def ids(msgs: List[Dict[str, str]], gen: bool) -> list[int]:
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
        return tok(text, add_special_tokens=False)["input_ids"]

    full = ids(messages, False)
    mask = [0] * len(full)
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            a, b = len(ids(messages[:i], True)), len(ids(messages[: i + 1], False))
            mask[a:b] = [1] * (b - a)
    return full, mask


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--mode", choices=["packed", "plain"], default="packed")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--attention", default="sdpa")
    ap.add_argument("--compile", action="store_true", help="TrainingArguments(torch_compile=True)")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    args = ap.parse_args()

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    rows = [json.loads(line)["messages"] for line in open(args.data)]
    exs = [tokenize(tok, m) for m in rows]
    exs = [e for e in exs if len(e[0]) <= args.seq_len]
    random.Random(0).shuffle(exs)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0

    features: List[Dict[str, Any]] = []
    if args.mode == "packed":
        cur: List[tuple] = []
        used = 0
        for e in exs + [None]:  # type: ignore[list-item]
            if e is None or (used + len(e[0]) > args.seq_len and cur):
                ids = [t for x in cur for t in x[0]]
                mask = [m for x in cur for m in x[1]]
                pos = [p for x in cur for p in range(len(x[0]))]
                start = 0
                for x in cur:
                    mask[start] = 0
                    start += len(x[0])
                features.append({"input_ids": ids, "labels": [t if m else -100 for t, m in zip(ids, mask)],
                                 "position_ids": pos, "docs": [len(x[0]) for x in cur]})
                cur, used = [], 0
            if e is not None:
                cur.append(e)
                used += len(e[0])
    else:
        for ids, mask in exs:
            features.append({"input_ids": ids, "labels": [t if m else -100 for t, m in zip(ids, mask)],
                             "docs": [len(ids)]})

    seen: List[Dict[str, Any]] = []

    def collate(batch: List[Dict[str, Any]]) -> Dict[str, torch.Tensor]:
        width = max(len(f["input_ids"]) for f in batch)
        out: Dict[str, List[List[int]]] = {"input_ids": [], "labels": []}
        if args.mode == "packed":
            out["position_ids"] = []
        else:
            out["attention_mask"] = []
        for f in batch:
            n = len(f["input_ids"])
            out["input_ids"].append(f["input_ids"] + [pad] * (width - n))
            out["labels"].append(f["labels"] + [-100] * (width - n))
            if args.mode == "packed":
                last = f["position_ids"][-1] + 1
                out["position_ids"].append(f["position_ids"] + list(range(last, last + width - n)))
            else:
                out["attention_mask"].append([1] * n + [0] * (width - n))
        seen.append({"tokens": sum(len(f["input_ids"]) for f in batch),
                     "loss_tokens": sum(sum(1 for x in f["labels"][1:] if x != -100) for f in batch),
                     "docs": [d for f in batch for d in f["docs"]]})
        return {k: torch.tensor(v) for k, v in out.items()}

    config = AutoConfig.from_pretrained(args.model)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation=args.attention)

    times: List[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            torch.cuda.synchronize()
            self.t = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            torch.cuda.synchronize()
            times.append(time.perf_counter() - self.t)

    targs = TrainingArguments(
        output_dir="/tmp/trainer-bench", per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=args.grad_accum, max_steps=args.steps, learning_rate=1e-5,
        lr_scheduler_type="cosine", warmup_steps=2, weight_decay=0.0, adam_beta2=0.95, max_grad_norm=1.0,
        bf16=True, optim="adamw_torch_fused", logging_steps=1, save_strategy="no", report_to=[],
        remove_unused_columns=False, dataloader_num_workers=0, gradient_checkpointing=args.gradient_checkpointing,
        seed=0, torch_compile=args.compile,
    )
    trainer = Trainer(model=model, args=targs, train_dataset=features, data_collator=collate,
                      callbacks=[Clock()])
    torch.cuda.reset_peak_memory_stats()
    trainer.train()

    body_heads = config.num_attention_heads * getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    params = sum(p.numel() for p in model.parameters())
    head = model.get_output_embeddings().weight.numel()
    per_step = [seen[i * args.grad_accum:(i + 1) * args.grad_accum] for i in range(len(times))]
    rates, mfus = [], []
    for dt, mbs in list(zip(times, per_step))[3:]:
        real = sum(sum(m["docs"]) for m in mbs)
        loss_tokens = sum(m["loss_tokens"] for m in mbs)
        flops = train_flops(params - head, head, config.num_hidden_layers, body_heads, real, loss_tokens,
                            [n for m in mbs for n in m["docs"]])
        rates.append(real / dt)
        mfus.append(flops / dt / (args.peak_tflops * 1e12))
    print(json.dumps({
        "trainer": "transformers.Trainer", "mode": args.mode, "compile": args.compile, "model": args.model, "seq_len": args.seq_len,
        "micro_batch": args.micro_batch, "grad_accum": args.grad_accum, "steps": len(times),
        "median_step_s": statistics.median(times[3:]), "tokens_per_s": statistics.median(rates),
        "mfu": statistics.median(mfus), "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
        "parameters": params,
    }))


if __name__ == "__main__":
    main()

"""The generation engine against a full forward, the way `tritonforge run` drives it:
requests joining a running batch, sampling (temperature 0.7, top-p 0.95), and second
turns whose prompt extends a first turn (prefix reuse). For every completion, the engine's
per-token log-probs are compared with one full forward of prompt + completion in the
same model. A SmolLM2-shaped model with random weights (its output layer scaled so the
distribution is peaked like a trained model's): nothing is downloaded.

Prints one JSON line per attention implementation; exits 1 when one disagrees with the
forward by more than `--tol` (mean absolute log-prob error).
usage: PYTHONPATH=python python3 scripts/check_engine_logprobs.py [--device cuda]"""
from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any, Dict, List


def build(attn: str, device: str, dtype: Any, state: Dict[str, Any] | None) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                      rope_theta=100000.0, tie_word_embeddings=True)
    torch.manual_seed(0)
    with torch.device(device):
        net = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation=attn)
    if state is None:
        with torch.no_grad():
            net.get_output_embeddings().weight.mul_(40.0)
    else:
        net.load_state_dict(state)
    return net.eval()


def main() -> int:
    import torch

    from tritonforge_worker.engine import Engine, Request, decode_attention

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--tol", type=float, default=0.05)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    rng = random.Random(1)
    first = [[rng.randrange(100, 49000) for _ in range(rng.randrange(150, 1500))] for _ in range(12)]
    state = None
    worst = 0.0
    for attn in ("sdpa", decode_attention()):
        net = build(attn, args.device, dtype, state)
        state = state or {k: v.clone() for k, v in net.state_dict().items()}
        eng = Engine(net, args.device, max_slots=16, max_len=4096)
        done: Dict[Any, Any] = {}
        pending: List[Request] = [Request(key=("t1", i), prompt=p, max_tokens=args.tokens, temperature=0.7,
                                          top_p=0.95, seed=i) for i, p in enumerate(first)]
        steps = 0
        while pending or eng.busy():
            # Requests join a running batch a few at a time, as an agent's episodes do.
            for _ in range(min(len(pending), 3 if steps % 5 == 0 else 0)):
                eng.submit(pending.pop(0))
            for f in eng.step():
                done[f.key] = f
                if f.key[0] == "t1":  # a second turn: the conversation so far plus feedback
                    i = f.key[1]
                    more = [rng.randrange(100, 49000) for _ in range(60)]
                    pending.append(Request(key=("t2", i), prompt=f.prompt + f.tokens + more, max_tokens=args.tokens,
                                           temperature=0.7, top_p=0.95, seed=100 + i))
            steps += 1
        errs = []
        with torch.no_grad():
            for f in done.values():
                ids = torch.tensor([f.prompt + f.tokens], device=args.device)
                lp = torch.log_softmax(net(input_ids=ids).logits[0].float(), dim=-1)
                n = len(f.prompt)
                want = lp[n - 1: n - 1 + len(f.tokens)].gather(1, torch.tensor(f.tokens, device=args.device)[:, None])
                errs.append(float((want.squeeze(1) - torch.tensor(f.logprobs, device=args.device)).abs().mean()))
        mean_err, max_err = sum(errs) / len(errs), max(errs)
        worst = max(worst, mean_err)
        print(json.dumps({"attention": attn, "device": args.device, "dtype": args.dtype, "completions": len(done),
                          "mean_abs_logprob_err": mean_err, "worst_completion_err": max_err,
                          "reused_tokens": eng.stats["reused_tokens"], "graphs": eng.stats["graphs"]}), flush=True)
    return 1 if worst > args.tol else 0


if __name__ == "__main__":
    sys.exit(main())

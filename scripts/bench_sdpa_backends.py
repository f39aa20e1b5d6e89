"""Causal attention on equal-length documents (a padded batch, no packing), forward and
backward, through `scaled_dot_product_attention` on each backend torch has: flash,
cuDNN and memory-efficient. Asks whether a backend is enough faster than packed flash
attention (`bench_varlen_backends.py`) to be worth batching documents by length for.
Checks each backend's outputs and gradients against flash. One JSON line per row.

usage: python3 scripts/bench_sdpa_backends.py [--tokens 32768] [--docs 700,1365,2048,4096]
       [--heads 16] [--kv-heads 8] [--head-dim 128] [--iters 20]"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def run(q, k, v, grad, backend, gqa):  # type: ignore[no-untyped-def]
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    with sdpa_kernel([backend]):
        if gqa:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            rep = q.shape[1] // k.shape[1]
            out = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                                 is_causal=True)
    out.backward(grad)
    return out.detach(), q.grad, k.grad, v.grad


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--docs", default="700,1365,2048,4096")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    dev = "cuda"
    for doc in (int(x) for x in a.docs.split(",")):
        torch.manual_seed(0)
        b = a.tokens // doc
        shape = (b, a.heads, doc, a.head_dim)
        q = torch.randn(*shape, device=dev, dtype=torch.bfloat16)
        k = torch.randn(b, a.kv_heads, doc, a.head_dim, device=dev, dtype=torch.bfloat16)
        v = torch.randn(b, a.kv_heads, doc, a.head_dim, device=dev, dtype=torch.bfloat16)
        grad = torch.randn(*shape, device=dev, dtype=torch.bfloat16)
        flops = b * doc * doc * a.heads * a.head_dim * 2 * 3  # the same count as bench_varlen_backends.py
        ref = None
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            for gqa in (True, False):
                label = f"{name}{'' if gqa else '-expanded-kv'}"
                try:
                    got = run(q, k, v, grad, backend, gqa)
                    for _ in range(3):
                        run(q, k, v, grad, backend, gqa)
                except Exception as exc:  # noqa: BLE001 - reported
                    print(json.dumps({"backend": label, "doc": doc, "error": f"{type(exc).__name__}: {exc}"[:300]}),
                          flush=True)
                    continue
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(a.iters):
                    run(q, k, v, grad, backend, gqa)
                end.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(end) / a.iters
                row = {"backend": label, "doc": doc, "batch": b, "fwd_bwd_ms": round(ms, 3),
                       "tflops": round(flops / ms / 1e9, 1)}
                if ref is None:
                    ref = got
                else:
                    row["max_rel_diff"] = {
                        part: float((x.float() - y.float()).abs().max() / y.float().abs().max())
                        for part, x, y in zip(("out", "dq", "dk", "dv"), got, ref)}
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

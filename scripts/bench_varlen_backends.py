"""Packed-sequence (varlen) causal attention, forward and backward, through PyTorch's
`varlen_attn` on each backend it has: flash attention (its default) and cuDNN (present in
torch 2.11 but switched off there). Times each on the shapes the trainer meets and checks
that both give the same outputs and gradients. One JSON line per backend.

usage: python3 scripts/bench_varlen_backends.py [--tokens 32768] [--doc 1365]
       [--heads 16] [--kv-heads 8] [--head-dim 128] [--iters 20]"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.attention.varlen as varlen


class CudnnVarlen(torch.autograd.Function):
    """cuDNN's packed causal attention through its ATen ops (torch 2.11's own cuDNN path
    in `varlen` passes the backward the wrong arguments)."""

    @staticmethod
    def forward(ctx, q, k, v, cu, longest):  # type: ignore[no-untyped-def]
        res = torch.ops.aten._cudnn_attention_forward(q, k, v, None, cu, cu, longest, longest, True, 0.0, True, False)
        out, lse, seed, offset = res[0], res[1], res[6], res[7]
        ctx.save_for_backward(q, k, v, out, lse, seed, offset, cu)
        ctx.longest = longest
        return out

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        q, k, v, out, lse, seed, offset, cu = ctx.saved_tensors
        dq, dk, dv = torch.ops.aten._cudnn_attention_backward(
            grad.contiguous(), q, k, v, out, lse, seed, offset, None, cu, cu, ctx.longest, ctx.longest, 0.0, True)
        return dq, dk, dv, None, None


def run(q, k, v, cu, longest, grad, direct=False):  # type: ignore[no-untyped-def]
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    if direct:
        out = CudnnVarlen.apply(q, k, v, cu, longest)
        out.backward(grad)
        return out.detach(), q.grad, k.grad, v.grad
    # The private op takes `is_causal` itself; the public function says causal as the window
    # (-1, 0), which the cuDNN path refuses.
    out, _, _ = torch.ops.torch_attn._varlen_attn(q, k, v, cu, cu, longest, longest, True, None, [-1, -1])
    out.backward(grad)
    return out.detach(), q.grad, k.grad, v.grad


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--doc", type=int, default=1365)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    starts = list(range(0, a.tokens, a.doc)) + [a.tokens]
    cu = torch.tensor(starts, dtype=torch.int32, device=dev)
    longest = max(y - x for x, y in zip(starts, starts[1:]))
    q = torch.randn(a.tokens, a.heads, a.head_dim, device=dev, dtype=torch.bfloat16)
    k = torch.randn(a.tokens, a.kv_heads, a.head_dim, device=dev, dtype=torch.bfloat16)
    v = torch.randn(a.tokens, a.kv_heads, a.head_dim, device=dev, dtype=torch.bfloat16)
    grad = torch.randn(a.tokens, a.heads, a.head_dim, device=dev, dtype=torch.bfloat16)
    docs = [y - x for x, y in zip(starts, starts[1:])]
    flops = sum(n * n for n in docs) * a.heads * a.head_dim * 2 * 3  # causal: fwd 2, bwd 4 (halved twice)
    results = {}
    for name in ("flash", "cudnn", "cudnn-direct"):
        varlen._should_use_cudnn = lambda _i, use=(name == "cudnn"): use  # noqa: E731
        direct = name == "cudnn-direct"
        try:
            ref = run(q, k, v, cu, longest, grad, direct)
        except Exception as exc:  # noqa: BLE001 - reported
            print(json.dumps({"backend": name, "error": f"{type(exc).__name__}: {exc}"[:400]}))
            continue
        for _ in range(3):
            run(q, k, v, cu, longest, grad, direct)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(a.iters):
            run(q, k, v, cu, longest, grad, direct)
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end) / a.iters
        results[name] = ref
        if name == "flash":
            # The private call against the public one (window (-1, 0)): the same attention.
            qq, kk, vv = (x.detach().requires_grad_(True) for x in (q, k, v))
            public = varlen.varlen_attn(qq, kk, vv, cu, cu, longest, longest, window_size=(-1, 0))
            public_diff = float((public.detach().float() - ref[0].float()).abs().max())
        row = {"backend": name, "fwd_bwd_ms": round(ms, 3), "tflops": round(flops / ms / 1e9, 1),
               "tokens": a.tokens, "doc": a.doc, "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim}
        if name == "flash":
            row["public_call_max_diff"] = public_diff
        if name != "flash" and "flash" in results:
            row["max_rel_diff"] = {
                part: float((x.float() - y.float()).abs().max() / y.float().abs().max())
                for part, x, y in zip(("out", "dq", "dk", "dv"), ref, results["flash"])}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

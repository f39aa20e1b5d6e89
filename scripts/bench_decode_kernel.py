"""Time (device time, in CUDA graphs) the engine's decode attention kernel (`decode_kernel.attend`; split launches
with the last program combining the shares, the default, and with a second kernel) against cuDNN/SDPA
with the engine's mask (the path it replaces: query heads grouped over their key/value
head) on CUDA, at SmolLM2-135M's shapes (9 query heads, 3 key/value heads, head size 64),
and the bandwidth floor (keys and values each row's mask lets in, read once).

usage: PYTHONPATH=python python3 scripts/bench_decode_kernel.py [--batches 1,16,64,256] [--keys 256,712]
Prints one JSON object."""

import argparse
import json
import sys

import torch
import torch.nn.functional as F
from tritonforge_worker import decode_kernel


def timed(fn, reps: int = 200) -> float:
    """Device microseconds per call: `fn` captured in a CUDA graph (as the engine's decode
    step is) and replayed, so host launch costs are not counted."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / reps


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--keys", default="256,712")
    args = ap.parse_args()
    h, kv, d, dt = 9, 3, 64, torch.bfloat16
    assert decode_kernel.enabled(), "needs CUDA and triton"
    compiled = torch.compile(decode_kernel.attend, dynamic=True)
    rows = []
    for b in [int(x) for x in args.batches.split(",")]:
        for keys in [int(x) for x in args.keys.split(",")]:
            q = torch.randn(b, h, 1, d, device="cuda", dtype=dt)
            k = torch.randn(b, kv, keys + 64, d, device="cuda", dtype=dt)[:, :, :keys]
            v = torch.randn(b, kv, keys + 64, d, device="cuda", dtype=dt)[:, :, :keys]
            # Rows of mixed lengths, as in a running batch: 60-100% of the keys.
            lens = torch.randint(int(keys * 0.6), keys + 1, (b,), device="cuda")
            mask = (torch.arange(keys, device="cuda").unsqueeze(0) < lens.unsqueeze(1)).view(b, 1, 1, keys)
            g = h // kv
            decode_kernel.LAST_COMBINES = False
            second = timed(lambda q=q, k=k, v=v, mask=mask: decode_kernel.attend(q, k, v, mask, None))
            decode_kernel.LAST_COMBINES = True
            ours = timed(lambda q=q, k=k, v=v, mask=mask: decode_kernel.attend(q, k, v, mask, None))
            fused = timed(lambda q=q, k=k, v=v, mask=mask: compiled(q, k, v, mask, None))
            sdpa = timed(lambda q=q, k=k, v=v, mask=mask, g=g, b=b: F.scaled_dot_product_attention(
                q.reshape(b, kv, g, d), k, v, attn_mask=mask))
            ref = F.scaled_dot_product_attention(q.reshape(b, kv, g, d), k, v, attn_mask=mask).reshape(b, 1, h, d)
            err = float((decode_kernel.attend(q, k, v, mask, None).float() - ref.float()).abs().max())
            err_compiled = float((compiled(q, k, v, mask, None).float() - ref.float()).abs().max())
            read = float(lens.sum()) * kv * d * 2 * 2
            rows.append({"batch": b, "keys": keys, "shares": decode_kernel.shares(b * kv, keys, q.device)[0],
                         "kernel_us": round(ours, 1), "kernel_second_combine_us": round(second, 1),
                         "kernel_compiled_us": round(fused, 1), "sdpa_us": round(sdpa, 1),
                         "floor_us_at_3_35_tb_s": round(read / 3.35e12 * 1e6, 1), "max_err": round(err, 5),
                         "compiled_max_err": round(err_compiled, 5)})
            sys.stderr.write(json.dumps(rows[-1]) + "\n")
    print(json.dumps({"gpu": torch.cuda.get_device_name(0), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

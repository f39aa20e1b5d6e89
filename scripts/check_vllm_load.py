"""Load a `tritonforge train sft` checkpoint with vLLM's own loader, on the CPU, and
check that every tensor vLLM's model holds came from the checkpoint unchanged.

What it runs: vLLM's `get_model` (the default loader: it finds the checkpoint's
safetensors files, builds vLLM's class for the architecture named in `config.json`
and calls its `load_weights`) with a one-process gloo group, then compares each of
vLLM's parameters with the checkpoint's tensors, undoing vLLM's fusions (q/k/v into
`qkv_proj`, gate/up into `gate_up_proj`). It needs a Python with vLLM installed; the
GPU machine here has none and no network, so this is the CPU half of "loadable by
vLLM": it does not run vLLM's attention kernels.

usage: python check_vllm_load.py CHECKPOINT   (prints one JSON line; exit 0 when equal)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Dict


def _checkpoint_tensors(ckpt: Path) -> Dict[str, "object"]:
    from safetensors.torch import load_file

    out: Dict[str, object] = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _expected(name: str, ours: Dict[str, "object"], heads: Dict[str, int]) -> "object":
    """The checkpoint tensor(s) vLLM's parameter `name` must hold."""
    import torch

    if name.endswith("qkv_proj.weight"):
        base = name[: -len("qkv_proj.weight")]
        return torch.cat([ours[f"{base}{p}_proj.weight"] for p in ("q", "k", "v")], 0)
    if name.endswith("gate_up_proj.weight"):
        base = name[: -len("gate_up_proj.weight")]
        return torch.cat([ours[f"{base}{p}_proj.weight"] for p in ("gate", "up")], 0)
    if name == "lm_head.weight" and name not in ours:
        return ours["model.embed_tokens.weight"]  # tied
    return ours[name]


def main() -> int:
    ckpt = Path(sys.argv[1]).resolve()
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import torch
    import vllm
    from vllm.config import DeviceConfig, LoadConfig, ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.model_loader import get_model

    model_config = ModelConfig(model=str(ckpt), dtype="float32", seed=0)
    vllm_config = VllmConfig(model_config=model_config, device_config=DeviceConfig(device="cpu"),
                             load_config=LoadConfig())
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                     distributed_init_method="tcp://127.0.0.1:29531", backend="gloo")
        initialize_model_parallel(1, 1)
        model = get_model(vllm_config=vllm_config)
    ours = _checkpoint_tensors(ckpt)
    params = dict(model.named_parameters())
    mismatched, missing = [], []
    for name, p in params.items():
        try:
            want = _expected(name, ours, {})
        except KeyError:
            missing.append(name)
            continue
        if tuple(want.shape) != tuple(p.shape) or not torch.equal(want.to(p.dtype), p.detach().cpu()):
            mismatched.append(name)
    ok = not mismatched and not missing and len(params) > 0
    print(json.dumps({"vllm": vllm.__version__, "torch": torch.__version__, "architecture": type(model).__name__,
                      "parameters": len(params), "checkpoint_tensors": len(ours), "mismatched": mismatched,
                      "without_source": missing, "equal": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

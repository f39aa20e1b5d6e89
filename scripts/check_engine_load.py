"""Load a `tritonforge train sft` checkpoint with vLLM's or SGLang's own loader, on
the CPU, and check that every tensor the engine's model holds came from the checkpoint
unchanged.

What it runs: the engine's `get_model` (its default loader: it finds the checkpoint's
safetensors files, builds the engine's class for the architecture named in
`config.json` and calls its `load_weights`) with a one-process gloo group, then
compares each of the engine's parameters with the checkpoint's tensors, undoing the
engines' fusions (q/k/v into `qkv_proj`, gate/up into `gate_up_proj`, the tied head).
It needs a Python with the engine installed. The GPU machine here has neither engine
and no network, so this is the CPU half of "loadable by vLLM and SGLang": it runs none
of their kernels. SGLang's CUDA build imports a rotary kernel from vLLM when it finds
no GPU; loading never calls it, so a stub stands in for it (and says so if called).

usage: python check_engine_load.py {vllm|sglang} CHECKPOINT
       (prints one JSON line; exit 0 when every parameter is equal)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, Tuple


def _checkpoint_tensors(ckpt: Path) -> Dict[str, Any]:
    from safetensors.torch import load_file

    out: Dict[str, Any] = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _expected(name: str, ours: Dict[str, Any]) -> Any:
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


def _vllm(ckpt: Path) -> Tuple[str, Any]:
    import os

    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # picks an attention backend without a GPU
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
        return vllm.__version__, get_model(vllm_config=vllm_config)


def _sglang(ckpt: Path) -> Tuple[str, Any]:
    import types

    def no_rotary(*_a: Any, **_k: Any) -> None:
        raise RuntimeError("rotary kernel stub: only weight loading is checked")

    ops = types.ModuleType("vllm._custom_ops")
    ops.rotary_embedding = no_rotary  # type: ignore[attr-defined]
    pkg = types.ModuleType("vllm")
    pkg._custom_ops = ops  # type: ignore[attr-defined]
    sys.modules.setdefault("vllm", pkg)
    sys.modules.setdefault("vllm._custom_ops", ops)
    import sglang
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
    from sglang.srt.model_loader import get_model
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    args = ServerArgs(model_path=str(ckpt), device="cpu")
    set_global_server_args_for_scheduler(args)
    publish(args, role="scheduler", ranks=SpawnRanks(world_rank=0))
    init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                 distributed_init_method="tcp://127.0.0.1:29533", backend="gloo")
    initialize_model_parallel(backend="gloo")
    model = get_model(model_config=ModelConfig(str(ckpt), dtype="float32"), load_config=LoadConfig(),
                      device_config=DeviceConfig(device="cpu"))
    return sglang.__version__, model


def main() -> int:
    engine, ckpt = sys.argv[1], Path(sys.argv[2]).resolve()
    loaders = {"vllm": _vllm, "sglang": _sglang}
    if engine not in loaders:
        print(f"engine {engine!r}: expected vllm or sglang", file=sys.stderr)
        return 2
    import torch

    version, model = loaders[engine](ckpt)
    ours = _checkpoint_tensors(ckpt)
    params = dict(model.named_parameters())
    mismatched, missing = [], []
    for name, p in params.items():
        try:
            want = _expected(name, ours)
        except KeyError:
            missing.append(name)
            continue
        if tuple(want.shape) != tuple(p.shape) or not torch.equal(want.to(p.dtype), p.detach().cpu()):
            mismatched.append(name)
    ok = not mismatched and not missing and len(params) > 0
    print(json.dumps({"engine": engine, "version": version, "torch": torch.__version__,
                      "architecture": type(model).__name__, "parameters": len(params),
                      "checkpoint_tensors": len(ours), "mismatched": mismatched, "without_source": missing,
                      "equal": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

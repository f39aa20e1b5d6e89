"""What this interpreter can do: versions, device, GPUs."""

from __future__ import annotations

import os
import platform
import sys
from typing import List, Optional

from .protocol import EnvInfo, GpuInfo


def _cuda_available_in_child() -> bool:
    """torch's answer to "is there a GPU?", asked in a forked child. A would-be fork
    server must not ask it itself: even the NVML-based check starts a driver thread
    (NVIDIA driver 580), and a process with a second thread is not forked (the GPU fork
    server silently never formed because of it)."""
    import torch

    pid = os.fork()
    if pid == 0:
        try:
            code = 0 if torch.cuda.is_available() else 1
        except BaseException:  # noqa: BLE001 - any failure means no usable GPU
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def choose_device_mode() -> str:
    """Decide CPU or CUDA before triton is imported, since the interpreter flag is read early.

    `TRITONFORGE_DEVICE` (auto|cpu|cuda) is the host's wish; `auto` means CUDA when a GPU is visible.
    """
    import torch

    wish = os.environ.get("TRITONFORGE_DEVICE", "auto")
    if wish == "cpu":
        available = False
    elif os.environ.get("TRITONFORGE_FORK_SERVER") == "1":
        available = _cuda_available_in_child()
    else:
        available = torch.cuda.is_available()
    if wish == "cuda" and not available:
        raise RuntimeError("TRITONFORGE_DEVICE=cuda but torch sees no CUDA device")
    mode = "cuda" if available else "cpu"
    if mode == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        torch.set_num_threads(max(1, int(os.environ.get("TRITONFORGE_THREADS", "1"))))
    # Reference and candidate share this process; pin precision flags so neither
    # side silently gets TF32 (torch's cuDNN default) while the other does not.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return mode


def _driver() -> Optional[str]:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001 - optional dependency
        return None


def collect(mode: str, gpus: bool = True) -> EnvInfo:
    """The environment's fingerprint; `gpus=False` leaves the GPU list out, since reading
    it creates a CUDA context, nor the driver version, read through NVML (a preflight
    process must not reach the GPU)."""
    import numpy
    import torch
    import triton

    found: List[GpuInfo] = []
    if mode == "cuda" and gpus:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            found.append(GpuInfo(index=i, name=p.name, memory_bytes=int(p.total_memory),
                                capability=f"{p.major}.{p.minor}"))
    return EnvInfo(
        python=sys.version.split()[0],
        platform=platform.platform(),
        torch=str(torch.__version__),
        triton=str(triton.__version__),
        numpy=str(numpy.__version__),
        device="cuda" if mode == "cuda" else "cpu",
        interpret=os.environ.get("TRITON_INTERPRET") == "1",
        cuda=torch.version.cuda if mode == "cuda" else None,
        driver=_driver() if mode == "cuda" and gpus else None,
        gpus=found,
    )

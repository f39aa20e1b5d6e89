"""How the policy worker spends its time, for reinforcement learning's step metrics.

Two views, both cumulative since the worker started (the host takes differences):
- the worker's own: seconds inside engine steps (generation) and inside training
  messages; the rest of its wall time it waited for work. Its idle share is an upper
  bound on the device's, since a busy worker may still leave the device waiting on Python;
- the device's, on a GPU: NVML's utilisation (the share of each sample period in which
  a kernel ran, as `nvidia-smi` reports it), read every `period` seconds by a thread and
  integrated over time. NVML comes from the driver's `libnvidia-ml.so.1` through ctypes;
  without it the device view is absent, never guessed.
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import fields
from typing import Any, Dict, Optional, Tuple

from .protocol import DeviceUse, EngineUse


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class GpuSampler:
    """NVML utilisation of one GPU, integrated: `busy_s` of `sampled_s` seconds."""

    def __init__(self, uuid: str, period: float = 0.1) -> None:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        if lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit failed")
        self.handle = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(self.handle)) != 0:
            raise OSError(f"no NVML device {uuid}")
        self.lib, self.period = lib, period
        self.busy_s = 0.0
        self.sampled_s = 0.0
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def read(self) -> Optional[float]:
        u = _Utilization()
        if self.lib.nvmlDeviceGetUtilizationRates(self.handle, ctypes.byref(u)) != 0:
            return None
        return float(u.gpu) / 100.0

    def _run(self) -> None:
        last = time.perf_counter()
        while True:
            time.sleep(self.period)
            now = time.perf_counter()
            share = self.read()
            with self.lock:
                if share is not None:
                    self.busy_s += share * (now - last)
                    self.sampled_s += now - last
            last = now

    def totals(self) -> tuple:
        with self.lock:
            return self.busy_s, self.sampled_s


def gpu_sampler(device: str) -> Optional[GpuSampler]:
    """The sampler for `device`, or None (a CPU, or no NVML)."""
    if not device.startswith("cuda"):
        return None
    try:
        import torch

        index = torch.device(device).index
        props = torch.cuda.get_device_properties(index if index is not None else torch.cuda.current_device())
        uuid = str(props.uuid)
        return GpuSampler(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:  # noqa: BLE001 - no NVML: the device view is absent
        return None


class Usage:
    """The worker's cumulative time: generating, training, and (on a GPU) the device."""

    def __init__(self, device: str) -> None:
        self.started = time.perf_counter()
        self.generate_s = 0.0
        self.train_s = 0.0
        self.refresh_s = 0.0
        self.gpu: Any = gpu_sampler(device)
        # Every engine the worker makes counts into this (`Engine(stats=...)`).
        self.engine: Dict[str, float] = {}

    def snapshot(self) -> DeviceUse:
        gpu_busy, gpu_sampled = self.gpu.totals() if self.gpu is not None else (None, None)
        graphs, retries = _compile_and_allocator_counts()
        # Counts as ints, times as floats, every field the protocol has.
        counts: Dict[str, Any] = {f.name: (float if f.type == "float" else int)(self.engine.get(f.name, 0))
                                  for f in fields(EngineUse)}
        engine = EngineUse(**counts)
        return DeviceUse(wall_s=time.perf_counter() - self.started, generate_s=self.generate_s,
                         train_s=self.train_s, refresh_s=self.refresh_s, gpu_busy_s=gpu_busy,
                         gpu_sampled_s=gpu_sampled, graphs_compiled=graphs, alloc_retries=retries,
                         engine=engine)


def _compile_and_allocator_counts() -> Tuple[Optional[int], Optional[int]]:
    """Graphs dynamo has built so far, and the CUDA allocator's retries (None where absent).

    Both explain uneven step times: a graph count that rises each step means recompiles
    for new shapes; allocator retries mean the cache was freed and the device synchronised
    to find memory (the colocated worker shares its GPU with the evaluator's processes).
    """
    graphs: Optional[int] = None
    retries: Optional[int] = None
    try:
        import sys

        if "torch._dynamo" in sys.modules:  # never import the compiler just to count
            from torch._dynamo.utils import counters

            graphs = int(counters["stats"]["unique_graphs"])
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            retries = int(torch.cuda.memory_stats().get("num_alloc_retries", 0))
    except Exception:  # noqa: BLE001 - a diagnostic: absent rather than fatal
        pass
    return graphs, retries

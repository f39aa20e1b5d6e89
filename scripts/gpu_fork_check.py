"""Why a process does or does not become the pool's GPU fork server: the threads it has
after each step of the worker's start-up, under the environment the pool gives it.

    cd python && OPENBLAS_NUM_THREADS=1 TRITONFORGE_FORK_SERVER=1 python3 ../scripts/gpu_fork_check.py
"""

from __future__ import annotations

import faulthandler
import os


def threads() -> list[str]:
    names = []
    for t in sorted(os.listdir("/proc/self/task")):
        with open(f"/proc/self/task/{t}/comm") as f:
            names.append(f.read().strip())
    return names


def main() -> None:
    faulthandler.enable()
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    print("start", threads())
    from tritonforge_worker.envinfo import choose_device_mode

    mode = choose_device_mode()
    import torch

    print("mode", mode, "cuda initialised", torch.cuda.is_initialized(), threads())
    import triton
    import triton.language  # noqa: F401

    print("triton", triton.__version__, threads())
    from tritonforge_worker import executor, lease, provenance, runtime_guard, sandbox  # noqa: F401

    print("worker modules", threads())
    from tritonforge_worker.fork_server import single_threaded

    print("single_threaded", single_threaded())


if __name__ == "__main__":
    main()

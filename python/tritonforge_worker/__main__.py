"""Entry point: `python -m tritonforge_worker {serve|probe|roundtrip|policy MODEL DEVICE|tokenizer MODEL DIR}`.

`serve` is one candidate's whole life: say hello once torch and triton are
imported (so the host can start us ahead of need), take exactly one `evaluate`,
answer it, exit. A process never sees a second candidate.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import time
from contextlib import contextmanager
from typing import IO, Iterator

from . import __version__
from .protocol import (
    CheckProblem,
    Error,
    EvalResult,
    Evaluate,
    Hello,
    MeasureMemory,
    MemoryReportMessage,
    Preflight,
    PreflightResult,
    ProblemReportMessage,
    ProtocolError,
    Shutdown,
    StartupTimes,
    decode,
    encode,
)


class _Start:
    """A candidate process's start, timed for its hello (`StartupTimes`)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.context_ms = 0.0
        self.warm_up_ms = 0.0

    def warm_up(self, mode: str, proto_out: IO[str]) -> None:
        """Create the CUDA context (on a GPU), then run the warm-up, each timed."""
        if mode == "cuda":
            import torch

            t = time.perf_counter()
            torch.cuda.init()  # the driver alone: it disturbs no timing on the device
            with _start_lease(proto_out):
                torch.zeros(1, device="cuda")
                torch.cuda.synchronize()
            self.context_ms = (time.perf_counter() - t) * 1000.0
        t = time.perf_counter()
        _warm_up(mode)
        self.warm_up_ms = (time.perf_counter() - t) * 1000.0

    def times(self) -> StartupTimes:
        return StartupTimes(context_ms=self.context_ms, warm_up_ms=self.warm_up_ms,
                            total_ms=(time.perf_counter() - self.t0) * 1000.0)


@contextmanager
def _start_lease(proto_out: IO[str]) -> Iterator[None]:
    """A shared hold on the GPU while this process makes its CUDA context, when the pool
    asks for it (`TRITONFORGE_START_LEASE`): a context made while another process is
    timed slows the kernels in its windows (the host's `START_LEASE`)."""
    if os.environ.get("TRITONFORGE_START_LEASE") != "1":
        yield
        return
    from .lease import Lease

    lease = Lease(proto_out, sys.stdin, "start")
    lease.hold("shared")
    try:
        yield
    finally:
        lease.hold(None)


def _send(out: IO[str], message: object) -> None:
    out.write(encode(message) + "\n")
    out.flush()


def _private_stdout() -> IO[str]:
    """The protocol gets a private copy of stdout; fd 1 then points at stderr so a
    candidate's print() can never corrupt (or forge) a protocol line by accident."""
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto_out


def _pin_cpus() -> None:
    reserved = os.environ.get("TRITONFORGE_RESERVED_CPUS")
    if reserved:
        # Cores kept for processes being timed: nothing else of ours (threads, compilers) runs there.
        keep = os.sched_getaffinity(0) - {int(c) for c in reserved.split(",") if c.strip()}
        if keep:
            os.sched_setaffinity(0, keep)


def serve() -> int:
    start = _Start()
    # Whatever the host's own parent left open without close-on-exec (a shell's pipe,
    # a terminal, a log file) is no business of a candidate's.
    os.closerange(3, max(os.sysconf("SC_OPEN_MAX"), 1 << 20))
    proto_out = _private_stdout()
    faulthandler.enable()
    _pin_cpus()

    from .envinfo import choose_device_mode

    fork = os.environ.get("TRITONFORGE_FORK_SERVER") == "1"
    if fork and os.environ.get("TRITONFORGE_DEVICE", "auto") != "cpu":
        # NVML's answer to "is there a GPU?" leaves CUDA uninitialised, so that this
        # process can still become a GPU fork server (a CUDA context cannot be forked).
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    mode = choose_device_mode()
    import torch  # noqa: F401  - warm imports, off the critical path
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from .fork_server import serve_forks, single_threaded

    if fork and mode == "cuda" and not torch.cuda.is_initialized() and single_threaded():
        # GPU: a fork server with torch, triton and this package imported (most of a
        # start-up's CPU time) and CUDA untouched; each child initialises CUDA and
        # warms up itself, in parallel with the others.
        gpu_fork_server_imports()
        return serve_forks(proto_out, _forked_gpu_worker)
    if os.environ.get("TRITONFORGE_WARMUP", "1") != "0":
        start.warm_up(mode, proto_out)
    if fork and mode == "cpu" and single_threaded():
        # CPU mode: stay as a fork server; each candidate gets a child forked from this
        # warmed-up state. (A process with other threads cannot be forked safely: it
        # simply serves one candidate like any other.)
        return serve_forks(proto_out, _forked_worker)
    return _serve_one(proto_out, mode, start)


def gpu_fork_server_imports(dynamo: bool = True) -> None:
    """What the GPU fork server imports before forking, CUDA untouched, so that its
    children do not each import it. torch._dynamo (with sympy and more) is imported lazily
    by the first torch call under the runtime guard: 3 CPU-seconds a child, which on a GPU
    machine under RL load took a child's warm-up from 4 s alone to 10 s and more
    (docs/evaluator.md, "Where a process's start goes"). `dynamo=False` only for that
    bench's comparison."""
    from . import executor, lease, provenance, runtime_guard, sandbox  # noqa: F401

    if dynamo:
        import torch._dynamo  # noqa: F401


def _forked_worker() -> int:
    """A child of the fork server, its fds and environment already its own."""
    start = _Start()
    proto_out = _private_stdout()
    _pin_cpus()
    if os.environ.pop("TRITONFORGE_PREFLIGHT", None) == "1":
        return _serve_preflight(proto_out, "cpu")
    return _serve_one(proto_out, "cpu", start)


def _forked_gpu_worker() -> int:
    """A child of the GPU fork server: CUDA and the warm-up are its own to do (a
    preflight child does neither)."""
    start = _Start()
    proto_out = _private_stdout()
    _pin_cpus()
    if os.environ.pop("TRITONFORGE_PREFLIGHT", None) == "1":
        return _serve_preflight(proto_out, "cuda")
    if os.environ.get("TRITONFORGE_WARMUP", "1") != "0":
        start.warm_up("cuda", proto_out)
    return _serve_one(proto_out, "cuda", start)


def _serve_preflight(proto_out: IO[str], mode: str) -> int:
    """A process that imports one candidate and nothing more, its GPU untouched: it says
    hello (with no GPU details, which would create a CUDA context), takes one `preflight`
    and answers what the import found. Sandboxed as any candidate's process; without the
    memory cap, which would create a context too."""
    from .envinfo import collect
    from .sandbox import apply

    os.environ.pop("TRITONFORGE_GPU_MEM_FRACTION", None)
    sandbox = apply(os.getcwd(), mode)
    _send(proto_out, Hello(type="hello", worker_version=__version__, pid=os.getpid(),
                           env=collect(mode, gpus=False), sandbox=sandbox))
    line = sys.stdin.readline()
    if not line:
        return 0
    try:
        msg = decode(line)
    except ProtocolError as exc:
        _send(proto_out, Error(type="error", id=None, message=str(exc)))
        return 2
    if isinstance(msg, Shutdown):
        return 0
    if not isinstance(msg, Preflight):
        _send(proto_out, Error(type="error", id=None,
                               message=f"a preflight process accepts preflight or shutdown, not {msg.type}"))
        return 2
    from .executor import preflight

    start = time.perf_counter()
    outcome = preflight(msg.job, os.getcwd(), mode)
    elapsed = (time.perf_counter() - start) * 1000.0
    _send(proto_out, PreflightResult(type="preflight_result", id=msg.id, outcome=outcome, elapsed_ms=elapsed))
    return 0


def _serve_one(proto_out: IO[str], mode: str, begun: _Start) -> int:
    from .envinfo import collect
    from .sandbox import apply

    sandbox = apply(os.getcwd(), mode)
    if mode == "cpu":
        # No context to make; the hold is still asked for and given back when the pool
        # says so (`TRITONFORGE_START_LEASE=1`), so that CPU tests see the host's side.
        with _start_lease(proto_out):
            pass
    _send(proto_out, Hello(type="hello", worker_version=__version__, pid=os.getpid(),
                           env=collect(mode), sandbox=sandbox, startup=begun.times()))
    line = sys.stdin.readline()
    if not line:
        return 0
    try:
        msg = decode(line)
    except ProtocolError as exc:
        _send(proto_out, Error(type="error", id=None, message=str(exc)))
        return 2
    if isinstance(msg, Shutdown):
        return 0
    if isinstance(msg, CheckProblem):
        from .lease import Lease
        from .problem_check import check_problem

        Lease(proto_out, sys.stdin, msg.id).hold("shared")
        sys.stdin.close()

        start = time.perf_counter()
        report = check_problem(msg.job, os.getcwd())
        elapsed = (time.perf_counter() - start) * 1000.0
        _send(proto_out, ProblemReportMessage(type="problem_report", id=msg.id,
                                              report=report, elapsed_ms=elapsed))
        return 0
    if isinstance(msg, MeasureMemory):
        from .lease import Lease
        from .memory import measure

        Lease(proto_out, sys.stdin, msg.id).hold("shared")
        sys.stdin.close()
        start = time.perf_counter()
        measured = measure(msg.job, os.getcwd())
        elapsed = (time.perf_counter() - start) * 1000.0
        _send(proto_out, MemoryReportMessage(type="memory_report", id=msg.id, report=measured,
                                             elapsed_ms=elapsed))
        return 0
    if not isinstance(msg, Evaluate):
        _send(proto_out, Error(type="error", id=None,
                               message=f"a worker accepts evaluate, check_problem, measure_memory or shutdown, "
                                       f"not {msg.type}"))
        return 2
    from .executor import Executor
    from .lease import Lease

    start = time.perf_counter()
    # stdin stays open: lease grants arrive on it.
    outcome = Executor(msg.job, os.getcwd(), Lease(proto_out, sys.stdin, msg.id)).run()
    elapsed = (time.perf_counter() - start) * 1000.0
    _send(proto_out, EvalResult(type="result", id=msg.id, outcome=outcome,
                                elapsed_ms=elapsed))
    return 0


_WARMUP_PROBLEM = """
import torch
import torch.nn as nn

N = 1000


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
"""

_WARMUP_CANDIDATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tf_warmup_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        tf_warmup_kernel[(4,)](x, y, x.numel(), BLOCK=256)
        return y
"""


def _warm_up(mode: str) -> None:
    """Run a built-in trivial evaluation before saying hello, so first-use costs (torch
    op dispatch, Triton's launcher or interpreter, every executor code path) are paid
    off the critical path, then (on a GPU) the math libraries' first calls. A wrong
    answer here means the installation is broken."""
    _warm_up_evaluation(mode)
    if mode == "cuda":
        _warm_up_libraries()
        _warm_up_gate()


def _warm_up_evaluation(mode: str) -> None:
    from .executor import Executor
    from .protocol import EvalJob, RuntimePolicy, SourceFile

    warm_dir = os.path.join(os.getcwd(), "_warmup")
    os.makedirs(warm_dir, exist_ok=True)
    job = EvalJob(
        problem=SourceFile(name="warmup_problem.py", source=_WARMUP_PROBLEM),
        candidate=SourceFile(name="warmup_candidate.py", source=_WARMUP_CANDIDATE),
        trials=1, seed=0, tolerance=None, overrides={},
        device="cuda" if mode == "cuda" else "cpu", timing=False, timing_budget_ms=0, speedup_cap=10.0,
        profile=False, compile_baseline=False,
        runtime=RuntimePolicy(allow_aten=["empty_like", "empty", "view"], allow_torch_compute=False,
                              min_kernel_share=0.0),
        shape_check=None,
    )
    executor = Executor(job, warm_dir)
    verdict = executor.run()
    if executor.recorder is not None:
        executor.recorder.uninstall()
    if getattr(verdict, "status", None) != "correct":
        raise RuntimeError(f"warm-up evaluation failed, this torch/triton installation is broken: {verdict}")
    for name in ("tf_problem", "tf_candidate"):
        sys.modules.pop(name, None)


def _warm_up_gate() -> None:
    """Compile and try the timing gate (`gate.py`) here, off the critical path: the pool
    copies the first process's Triton cache to every later one, so they load it instead
    of compiling it in a candidate's timing phase (about 2 s each under load, measured
    on 2026-11-30 before this moved here)."""
    import torch

    from .gate import works

    works(torch, "cuda")


def _warm_up_libraries() -> None:
    """First use of cuBLAS and cuDNN costs a fraction of a second each (alone): pay it here."""
    import torch

    a = torch.randn(64, 64, device="cuda")
    x = torch.randn(1, 3, 16, 16, device="cuda")
    w = torch.randn(4, 3, 3, 3, device="cuda")
    float((a @ a).sum() + torch.nn.functional.conv2d(x, w).sum())


def probe() -> int:
    from .envinfo import choose_device_mode, collect

    mode = choose_device_mode()
    print(encode(collect(mode)))
    return 0


def roundtrip() -> int:
    """Protocol test hook: decode each stdin line strictly, print it re-encoded (or `!error`)."""
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            print(encode(decode(line)))
        except ProtocolError as exc:
            print(f"!{exc}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[1] == "policy":
        from .policy_worker import serve_policy

        code = serve_policy(argv[2:])
        sys.stderr.flush()
        os._exit(code)
    if len(argv) >= 2 and argv[1] == "tokenizer":
        from .policy_worker import export_tokenizer

        return export_tokenizer(argv[2:])
    commands = {"serve": serve, "probe": probe, "roundtrip": roundtrip}
    if len(argv) != 2 or argv[1] not in commands:
        print(f"usage: python -m tritonforge_worker {{{'|'.join(commands)}}}", file=sys.stderr)
        return 2
    code = commands[argv[1]]()
    sys.stderr.flush()
    # os._exit: a candidate's threads or atexit hooks must not keep the process alive.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

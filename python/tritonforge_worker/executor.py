"""Run one candidate against one problem: import, build, correctness trials, timing.

The executor never decides anything the host could decide better: it returns
numbers and text (a `Verdict`, or a `ProblemError` when the problem itself is
broken), and the Rust side owns budgets, crashes and caching.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import os
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .gate import Gate
from .gate import probe as probe_gate
from .gate import why_not as gate_why_not
from .gate import works as gate_works
from .lease import NoLease
from .protocol import (
    DeviceRequest,
    ErrorInfo,
    EvalJob,
    Frame,
    Mismatch,
    PhaseTimes,
    PreflightFailed,
    PreflightInconclusive,
    PreflightOutcome,
    PreflightPassed,
    ProblemError,
    Provenance,
    SpinBecause,
    Stage,
    Status,
    Timing,
    TimingStats,
    Tolerance,
    TrialStat,
    Verdict,
    WindowOpen,
    finite_or_none,
)
from .runtime_guard import thread_count

# Elements compared at a time (`compare`, `_same_bits`): their float64 working copies
# stay near 256 MiB whatever the size of the tensors (`memory.py` counts them).
COMPARE_CHUNK = 1 << 22

# Default tolerances by dtype; a problem's manifest may override both.
_DEFAULT_TOL = {
    "float32": (1e-4, 1e-4),
    "float64": (1e-7, 1e-7),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
}


class _Fail(Exception):
    """Internal: carries a finished outcome (a verdict, or a `ProblemError`) out of nested code."""

    def __init__(self, verdict: Verdict | ProblemError) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict


def _frames(tb: Any, keep: str) -> List[Frame]:
    frames = []
    for fs in traceback.extract_tb(tb):
        if fs.filename == keep:
            frames.append(
                Frame(file=Path(keep).name, line=fs.lineno or 0, function=fs.name, code=(fs.line or "").strip())
            )
    return frames


def error_info(exc: BaseException, keep: str) -> ErrorInfo:
    """Exception type, message and the traceback trimmed to `keep`'s own frames."""
    frames = _frames(exc.__traceback__, keep)
    if isinstance(exc, SyntaxError) and exc.filename == keep:
        frames.append(
            Frame(file=Path(keep).name, line=exc.lineno or 0, function="<module>", code=(exc.text or "").strip())
        )
    message = str(exc)
    # Triton reports kernel-side errors chained under a launcher exception (or holding
    # it, in the interpreter); the kernel line the model must fix is in the root cause.
    cause = exc.__cause__ or exc.__context__ or getattr(exc, "error", None)
    if isinstance(cause, BaseException):
        for f in _frames(cause.__traceback__, keep):
            if f not in frames:
                frames.append(f)
    else:
        cause = None
    if cause is not None and str(cause) and str(cause) not in message:
        message = f"{message} (caused by {type(cause).__name__}: {cause})"
    return ErrorInfo(exc_type=type(exc).__name__, message=message[:4000], frames=frames[-12:],
                     out_of_memory=is_out_of_memory(exc))


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether memory running out raised `exc`, anywhere in its chain of causes: PyTorch's
    `OutOfMemoryError`, a CUDA or cuBLAS allocation failure reported as a plain error
    ("CUDA error: out of memory", "CUBLAS_STATUS_ALLOC_FAILED"), or the host's
    `MemoryError`. Triton's `OutOfResources` (shared memory, registers) is a kernel's own
    limit, not the device's memory, and is not. The host trusts this flag, not messages:
    a candidate that raises it falsely buys one more evaluation, alone, with every check."""
    seen = set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if type(e).__name__ == "OutOfMemoryError" or isinstance(e, MemoryError):
            return True
        text = str(e).lower()
        if isinstance(e, RuntimeError) and ("out of memory" in text or "alloc_failed" in text):
            return True
        nxt = e.__cause__ or e.__context__ or getattr(e, "error", None)
        e = nxt if isinstance(nxt, BaseException) else None
    return False


def _describe(info: ErrorInfo) -> str:
    where = ""
    if info.frames:
        f = info.frames[-1]
        where = f" at {f.file}:{f.line} in {f.function}: {f.code}"
    return f"{info.exc_type}: {info.message}{where}"


def _apply_overrides(tree: ast.Module, overrides: Dict[str, Any], filename: str) -> None:
    """Replace module-level `NAME = ...` assignments; a named constant that is absent is an error."""
    seen = set()
    for node in tree.body:
        targets: List[ast.expr]
        value: ast.expr
        if isinstance(node, ast.Assign):
            targets, value = list(node.targets), node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for t in targets:
            if isinstance(t, ast.Name) and t.id in overrides:
                node.value = ast.copy_location(ast.Constant(overrides[t.id]), value)
                seen.add(t.id)
    missing = sorted(set(overrides) - seen)
    if missing:
        raise LookupError(f"{filename}: shape override names unknown module constant(s) {missing}")


def load_module(name: str, path: str, overrides: Dict[str, Any]) -> types.ModuleType:
    """Import a file as its own module, with module-level constants overridden.

    The file stays on disk under its own name so that tracebacks and Triton's
    `inspect.getsource` see the real source and line numbers.
    """
    source = Path(path).read_text(encoding="utf-8")
    tree = ast.parse(source, filename=path)
    if overrides:
        _apply_overrides(tree, overrides, Path(path).name)
        ast.fix_missing_locations(tree)
    code = compile(tree, path, "exec")
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module


def _problem_file(workdir: Path, name: str) -> str:
    """Where a problem file goes: its own directory, so a candidate of the same name keeps its name too."""
    (workdir / "problem").mkdir(exist_ok=True)
    return str(workdir / "problem" / _safe_name(name, "problem.py"))


def load_problem(path: str, overrides: Dict[str, Any]) -> types.ModuleType:
    """Import a problem file and check it defines what the format requires."""
    problem = load_module("tf_problem", path, overrides)
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(problem, attr):
            raise AttributeError(f"problem file defines no `{attr}`")
    return problem


def _flatten(out: Any) -> List[Any]:
    if isinstance(out, (tuple, list)):
        items: List[Any] = []
        for o in out:
            items.extend(_flatten(o))
        return items
    return [out]


def _tolerance_for(dtype_name: str, override: Optional[Tolerance]) -> Tuple[float, float]:
    if override is not None:
        return override.atol, override.rtol
    return _DEFAULT_TOL.get(dtype_name, (0.0, 0.0))


# -- the evaluation's state, shared by every phase ----------------------------


@dataclass
class Context:
    """One evaluation: the job, where its files are, the device, and the watchers
    `build` installs (launch recorder, ATen recorder, integrity snapshot).
    `tolerance_used` is the last tolerance a comparison applied (verdicts report it)."""

    job: EvalJob
    torch: Any
    device: Any
    lease: Any
    problem_path: str
    candidate_path: str
    recorder: Any = None
    aten: Any = None
    audit: Any = None
    integrity: Any = None
    # Wall time of the timed run under the exclusive lease (reported in `PhaseTimes`).
    timed_ms: float = 0.0
    # Inputs are drawn on the device until the problem's `get_inputs` fails there.
    inputs_on_device: bool = True
    # Models are built under `torch.device` on a GPU until one cannot be (see `construct`).
    build_on_device: bool = True
    # Host milliseconds of the last watched forward (sizes the GPU share's cushion), and
    # the candidate kernels' share of each share-measured call's GPU window.
    watched_host_ms: float = 0.0
    shares: List[float] = field(default_factory=list)
    # Mixed levels: the modelled share of each trial's work done by the candidate's kernels
    # (`runtime_guard.op_cost`), and the meter pricing the reference's forward.
    model_shares: List[float] = field(default_factory=list)
    meter: Any = None
    spin_per_ms: float = 0.0
    tolerance_used: Tolerance = field(default_factory=lambda: Tolerance(atol=1e-4, rtol=1e-4))
    # Whether this process has fewer hardware queues than the driver's (`few_hardware_queues`),
    # read before any candidate code runs: a candidate could rewrite the variable.
    few_queues: bool = False


def new_context(job: EvalJob, workdir: str, lease: Any = None) -> Context:
    """The context for `job` run in `workdir` (choosing the device; nothing runs yet)."""
    import torch

    work = Path(workdir)
    problem_path = _problem_file(work, job.problem.name)
    candidate_path = str(work / _safe_name(job.candidate.name, "candidate.py"))
    if job.device == "cuda" or (job.device == "auto" and torch.cuda.is_available()):
        device = torch.device("cuda")
    else:
        device = torch.device("cpu")
    apply_memory_fraction(torch, device, job.gpu_memory_fraction)
    return Context(
        job=job,
        torch=torch,
        device=device,
        lease=lease if lease is not None else NoLease(),
        problem_path=problem_path,
        candidate_path=candidate_path,
        few_queues=device.type == "cuda" and few_hardware_queues(),
    )


def apply_memory_fraction(torch: Any, device: Any, fraction: Optional[float]) -> None:
    """Make `fraction` of the GPU this process's cap for the job, in place of the cap it
    was started with: the pool's grant (the problem's need with room to spare), or 90%
    when the job holds the device alone. `TRITONFORGE_GPU_MEM_FRACTION` is updated to
    match, in CPU mode too, so that the process's code can read its cap there (the CPU
    tests' stand-in for a problem that needs more than a shared process may take)."""
    if fraction is None:
        return
    os.environ["TRITONFORGE_GPU_MEM_FRACTION"] = f"{fraction:.4f}"
    if device.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(fraction)


def verdict(
    cx: Context,
    status: Status,
    stage: Stage,
    message: str,
    trials: List[TrialStat],
    error: Optional[ErrorInfo] = None,
    mismatch: Optional[Mismatch] = None,
    timing: Optional[Timing] = None,
    timing_note: Optional[str] = None,
    gpu_share: Optional[float] = None,
    needs_hardware_queues: bool = False,
) -> Verdict:
    """A verdict carrying the tolerance used and the provenance recorded so far."""
    return Verdict(
        kind="verdict",
        status=status,
        stage=stage,
        message=message,
        error=error,
        mismatch=mismatch,
        trials=trials,
        timing=timing,
        timing_note=timing_note,
        tolerance=cx.tolerance_used,
        provenance=provenance_of(cx, gpu_share),
        needs_hardware_queues=needs_hardware_queues,
    )


def to_device(cx: Context, values: Sequence[Any]) -> List[Any]:
    torch = cx.torch
    return [v.to(cx.device) if isinstance(v, torch.Tensor) else v for v in values]


def clone(cx: Context, values: Sequence[Any]) -> List[Any]:
    torch = cx.torch
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


# -- phase 1: build (watchers, the problem, the candidate, both models) -------


@dataclass
class Built:
    """What `build` made: the imported problem and candidate modules, and the models."""

    problem: types.ModuleType
    candidate: types.ModuleType
    reference: Any
    model: Any


def import_both(cx: Context) -> Tuple[types.ModuleType, List[Any], types.ModuleType]:
    """Write both files, install the watchers, import the problem (and draw its init
    inputs) and the candidate: everything of `build` before the device is used. A
    preflight runs exactly this."""
    torch = cx.torch
    job = cx.job
    Path(cx.problem_path).write_text(job.problem.source, encoding="utf-8")
    Path(cx.candidate_path).write_text(job.candidate.source, encoding="utf-8")
    from .provenance import LaunchRecorder

    cx.recorder = LaunchRecorder(cx.candidate_path, cx.lease)
    cx.recorder.install()
    from . import audit
    from .runtime_guard import AtenRecorder, Integrity

    # The runtime layers belong to the evaluator: on for every evaluation, guard or not.
    lines = job.candidate.source.splitlines()
    policy = job.runtime
    cx.aten = AtenRecorder(torch, policy.allow_aten, policy.allow_torch_compute, cx.candidate_path, lines,
                           cx.recorder.in_launch, cx.device.type)
    cx.audit = audit.Watch(cx.candidate_path, lines, cx.problem_path, cx.recorder.in_launch)
    audit.install(cx.audit)
    if policy.allow_torch_compute and policy.min_kernel_share > 0.0:
        from .runtime_guard import CostMeter

        cx.meter = CostMeter(policy.allow_aten)
    if job.compile_baseline and cx.device.type == "cuda":
        # Importing torch.compile's machinery rewraps some PyTorch functions: it happens
        # before the snapshot, so that the baseline later changes nothing the snapshot holds.
        import importlib

        importlib.import_module("torch._dynamo")
    # Taken before the candidate's code runs at all, after everything the worker installs.
    cx.integrity = Integrity(torch)

    # The problem: any failure here is the problem's fault, not the candidate's.
    try:
        problem = load_problem(cx.problem_path, job.overrides)
        seed_all(torch, job.seed)
        init_inputs = list(problem.get_init_inputs())
    except BaseException as exc:  # noqa: BLE001 - reported, never swallowed
        info = error_info(exc, cx.problem_path)
        raise _Fail(ProblemError(kind="problem_error", message=f"{job.problem.name}: {_describe(info)}",
                                 error=info)) from exc

    # The candidate's import: syntax errors, missing names, bad imports.
    try:
        with cx.audit.watching("load"):
            candidate = load_module("tf_candidate", cx.candidate_path, {})
        if not isinstance(getattr(candidate, "ModelNew", None), type):
            raise AttributeError("candidate defines no class `ModelNew`")
    except BaseException as exc:  # noqa: BLE001
        info = error_info(exc, cx.candidate_path)
        raise _Fail(verdict(cx, "compile_error", "import", _describe(info), [], error=info)) from exc
    return problem, init_inputs, candidate


def build(cx: Context) -> Built:
    """Write both files, install the watchers, import the problem and the candidate,
    and construct `Model` and `ModelNew` on the device. Raises `_Fail` (a
    `ProblemError` when the problem is at fault, else the candidate's verdict)."""
    problem, init_inputs, candidate = import_both(cx)
    check_integrity(cx, "importing the candidate", [])
    check_audit(cx, "importing the candidate", [])

    # The GPU is held only around work that uses it, so that a timing lease waits for
    # one trial of each other candidate at most, not for its whole correctness phase.
    cx.lease.hold("shared")
    reference, model = construct_pair(cx, problem, candidate, init_inputs, "")
    check_integrity(cx, "building ModelNew", [])
    check_audit(cx, "building ModelNew", [])
    return Built(problem=problem, candidate=candidate, reference=reference, model=model)


def construct(cx: Context, make: Callable[[], Any], on_device: bool) -> Any:
    """`make()` seeded with the job's seed, on the device. With `on_device` (a GPU) it runs
    under `torch.device`, so parameters are initialised there: a whole model's random
    initialisation on the host costs tens of seconds of CPU (a 0.6B model: about 14 s),
    all of it while the GPU is held."""
    torch = cx.torch
    seed_all(torch, cx.job.seed)
    if on_device:
        with torch.device(cx.device):
            built = make()
    else:
        built = make()
    if isinstance(built, torch.nn.Module):
        built = built.to(cx.device)
    return built


def construct_pair(cx: Context, problem: Any, candidate: Any, init_inputs: List[Any], shape: str,
                   done: Optional[List[TrialStat]] = None) -> Tuple[Any, Any]:
    """`Model` and `ModelNew`, built the same way so that the same seed gives both the same
    weights: on the device when both can be, else (one of them fails there for a reason
    other than memory, e.g. NumPy in `__init__`) both again on the host, for the rest of
    the job. A failure on the host, or of memory, or an exit, is the verdict."""

    def reference(on_device: bool) -> Any:
        return construct(cx, lambda: problem.Model(*to_device(cx, clone(cx, init_inputs))), on_device)

    def model(on_device: bool) -> Any:
        with cx.audit.watching("load"):
            return construct(cx, lambda: candidate.ModelNew(*to_device(cx, clone(cx, init_inputs))), on_device)

    def failed(whose: str, exc: BaseException) -> _Fail:
        if whose == "reference":  # the problem's own fault: report, do not blame
            info = error_info(exc, cx.problem_path)
            where = f" at {shape}" if shape else ""
            return _Fail(ProblemError(kind="problem_error", message=f"{cx.job.problem.name}{where}: {_describe(info)}",
                                      error=info))
        info = error_info(exc, cx.candidate_path)
        at = f" at unseen shapes ({shape})" if shape else ""
        return _Fail(verdict(cx, "runtime_error", "init", f"building ModelNew{at} failed: {_describe(info)}",
                             done or [], error=info))

    whose = "reference"
    if cx.device.type == "cuda" and cx.build_on_device:
        try:
            ref = reference(True)
            whose = "candidate"
            return ref, model(True)
        except BaseException as exc:  # noqa: BLE001
            if is_out_of_memory(exc) or not isinstance(exc, Exception):
                raise failed(whose, exc) from exc
            cx.build_on_device = False
            whose = "reference"
    try:
        ref = reference(False)
        whose = "candidate"
        return ref, model(False)
    except BaseException as exc:  # noqa: BLE001
        raise failed(whose, exc) from exc


# -- phase 2: trials (correctness), at the benchmark's shapes and unseen ones --


def run_trials(cx: Context, built: Built) -> List[TrialStat]:
    """`job.trials` correctness trials; the first failure raises `_Fail`."""
    cx.lease.hold(None)
    trials: List[TrialStat] = []
    for t in range(cx.job.trials):
        trials.append(trial(cx, t, built.problem, built.reference, built.model, trials))
    check_model_share(cx, trials)
    return trials


def check_model_share(cx: Context, done: List[TrialStat]) -> None:
    """Mixed levels, where no GPU window is measured (CPU mode, or a GPU job without timing):
    the candidate's kernels must have done the policy's least share of the modelled work of
    every trial (`runtime_guard.op_cost`). On a GPU with timing the measured share decides."""
    least = cx.job.runtime.min_kernel_share
    if not cx.model_shares or least <= 0.0:
        return
    if cx.device.type == "cuda" and cx.job.timing:
        return
    worst = min(cx.model_shares)
    if worst < least:
        raise _Fail(verdict(cx,
            "rejected", "provenance",
            f"[runtime-share-model] the candidate's own Triton kernels did about {worst:.0%} of the work of a "
            f"trial: the PyTorch operators its forward ran cost {1.0 - worst:.0%} of what the reference's forward "
            f"costs, priced by a roofline model of a GPU (FLOPs and bytes moved); the policy asks its kernels to do "
            f"at least {least:.0%}. Move the heavy operators (matmuls, convolutions, attention) into Triton "
            "kernels", done))


def check_shapes(cx: Context, built: Built, trials: List[TrialStat]) -> str:
    """One more trial at each unseen shape (`job.shape_check`, and one more BATCH row),
    appended to `trials`; returns the note the verdict's message ends with ("" when the
    job asks for none)."""
    job = cx.job
    shapes = unseen_shapes(job.overrides, job.shape_check, built.problem)
    if not shapes:
        return ""
    for shape in shapes:
        shape_check(cx, built.candidate, shape, trials)
    return " ({} of them at unseen shapes: {})".format(
        len(shapes), "; ".join(", ".join(f"{k}={v}" for k, v in sorted(o.items())) for o in shapes))


def unseen_shapes(
    overrides: Dict[str, Any], shape_check: Optional[Dict[str, Any]], problem: Any
) -> List[Dict[str, Any]]:
    """The overrides `check_shapes` runs one more trial at (the memory measurement runs the
    same): `shape_check`, and one more BATCH row than the benchmark where the problem has
    a `BATCH`; none without a shape check."""
    if shape_check is None:
        return []
    shapes = [dict(shape_check)]
    batch = getattr(problem, "BATCH", None)
    if isinstance(batch, int) and not isinstance(batch, bool):
        # One more row than the benchmark: a kernel whose element count or grid is
        # baked in at the benchmark's size leaves it unwritten (smaller unseen
        # shapes only make it read and write out of bounds, which may not fault).
        shapes.append({**overrides, "BATCH": batch + 1})
    return shapes


def shape_check(cx: Context, candidate: Any, overrides: Dict[str, Any], done: List[TrialStat]) -> None:
    """One more trial at shapes the candidate was not evaluated at (the heldout variant on a GPU).

    Both models are built again from the problem imported with those shapes; a
    kernel that hard-codes sizes, grids or strides of the benchmark fails here.
    A failure raises `_Fail` naming the shapes.
    """
    torch = cx.torch
    job = cx.job
    shape = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))
    try:
        problem = load_module("tf_problem_shape", cx.problem_path, overrides)
        seed_all(torch, job.seed)
        init_inputs = list(problem.get_init_inputs())
        cx.lease.hold("shared")
    except BaseException as exc:  # noqa: BLE001 - the problem's own fault: report, do not blame
        info = error_info(exc, cx.problem_path)
        raise _Fail(ProblemError(kind="problem_error", message=f"{job.problem.name} at {shape}: {_describe(info)}",
                                 error=info)) from exc
    reference, model = construct_pair(cx, problem, candidate, init_inputs, shape, done)
    check_audit(cx, f"building ModelNew at unseen shapes ({shape})", done)
    cx.lease.hold(None)
    try:
        done.append(trial(cx, len(done), problem, reference, model, done))
    except _Fail as fail:
        v = fail.verdict
        if isinstance(v, Verdict):
            v.message = (f"at unseen shapes ({shape}), which a kernel must handle as well as the "
                         f"benchmark's: {v.message}")
        raise


def trial(cx: Context, t: int, problem: Any, reference: Any, model: Any, done: List[TrialStat]) -> TrialStat:
    torch = cx.torch
    seed = cx.job.seed + 1 + t * 7919
    try:
        cx.lease.hold("shared")
        inputs = draw_inputs(cx, problem, seed)
    except BaseException as exc:  # noqa: BLE001
        info = error_info(exc, cx.problem_path)
        raise _Fail(verdict(cx, "runtime_error", "correctness", f"problem get_inputs failed: {_describe(info)}",
                            done, error=info)) from exc
    try:
        cand_inputs = clone(cx, inputs)
        before = clone(cx, cand_inputs)
    except BaseException as exc:  # noqa: BLE001 - only memory running out is reported here
        if not is_out_of_memory(exc):
            raise
        raise _own_memory_failure(cx, t, "copying the inputs", exc, done) from exc
    # The candidate runs first, so its output buffers can never be memory the
    # reference just freed with the right answer in it.
    try:
        got = call_candidate(cx, model, cand_inputs, f"trial {t}", done)
    except _Fail:
        raise
    except BaseException as exc:  # noqa: BLE001
        info = error_info(exc, cx.candidate_path)
        status: Status = "compile_error" if _is_compile_error(exc) else "runtime_error"
        raise _Fail(verdict(cx, status, "correctness", f"trial {t}: {_describe(info)}", done, error=info)) from exc
    left_to_torch = cx.aten.torch_cost
    try:
        with torch.no_grad():
            seed_all(torch, seed)
            if cx.meter is not None:
                with cx.meter:
                    expected = reference(*inputs)
                if cx.meter.cost > 0.0:
                    cx.model_shares.append(max(0.0, 1.0 - left_to_torch / cx.meter.cost))
            else:
                expected = reference(*inputs)
    except BaseException as exc:  # noqa: BLE001
        # Not a problem error: the problem was checked alone (`suite validate`), and
        # the candidate ran first in this process, so it may have broken what the
        # reference depends on. Out of memory under a shared GPU is retried alone.
        info = error_info(exc, cx.problem_path)
        raise _Fail(verdict(
            cx, "runtime_error", "correctness",
            f"trial {t}: the reference failed after the candidate ran (the candidate may have changed "
            f"something it depends on, or memory ran out): {_describe(info)}", done, error=info)) from exc

    try:
        for i, (b, a) in enumerate(zip(before, cand_inputs, strict=True)):
            if isinstance(b, torch.Tensor) and not _same_bits(torch, b, a):
                raise _Fail(
                    verdict(cx,
                        "incorrect",
                        "correctness",
                        f"trial {t}: the candidate wrote into input {i}; inputs must be left unchanged",
                        done,
                        mismatch=Mismatch(
                            trial=t, output=i, kind="input_mutated", expected="unchanged input", got="modified input",
                            max_abs_err=None, max_rel_err=None, worst_index=[], mismatched=0, total=int(b.numel()),
                        ),
                    )
                )
        exp = _flatten(expected)
        worst_abs, worst_rel = check_outputs(cx, t, exp, _flatten(got), done)
    except _Fail:
        raise
    except BaseException as exc:  # noqa: BLE001 - only memory running out is reported here
        if not is_out_of_memory(exc):
            raise
        raise _own_memory_failure(cx, t, "comparing inputs and outputs", exc, done) from exc
    cx.lease.hold(None)
    return TrialStat(trial=t, seed=seed, outputs=len(exp), max_abs_err=finite_or_none(worst_abs),
                     max_rel_err=finite_or_none(worst_rel), passed=True)


def seed_all(torch: Any, seed: int) -> None:
    """`torch.manual_seed` for the generators an evaluation draws from: the host's, and
    every GPU's once CUDA is up (the same states, so the same inputs). It skips the lazy
    seeding of XPU and MTIA devices, which formats a stack trace on every call: 0.3-0.7 ms
    of each timed repetition's host time on an H200, where inputs are drawn every time."""
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
        torch.random.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def draw_inputs(cx: Context, problem: Any, seed: int) -> List[Any]:
    """The problem's inputs for `seed`, on the device. On a GPU they are drawn there
    (under `torch.device`): a large tensor drawn on the host and copied over costs
    seconds of CPU. A problem that insists on host tensors is drawn on the host."""
    torch = cx.torch
    if cx.device.type == "cuda" and cx.inputs_on_device:
        seed_all(torch, seed)
        try:
            with torch.device(cx.device):
                return to_device(cx, list(problem.get_inputs()))
        except Exception as exc:  # noqa: BLE001 - e.g. NumPy or host-only calls in get_inputs
            if is_out_of_memory(exc):
                raise
            cx.inputs_on_device = False
    seed_all(torch, seed)
    return to_device(cx, list(problem.get_inputs()))


def _own_memory_failure(cx: Context, t: int, what: str, exc: BaseException, done: List[TrialStat]) -> _Fail:
    """Memory ran out in the evaluator's own work in a trial (its copies of the inputs, the
    comparison): a verdict the host recognises, and evaluates again alone when the device
    was shared. (Any other failure there is the evaluator's bug: the process dies and the
    host reports a crash, as before.)"""
    info = error_info(exc, cx.candidate_path)
    return _Fail(verdict(cx, "runtime_error", "correctness",
                         f"trial {t}: memory ran out while the evaluator was {what}: {_describe(info)}", done,
                         error=info))


def call_candidate(
    cx: Context, model: Any, inputs: List[Any], where: str, done: List[TrialStat], share: bool = False
) -> Any:
    """One watched forward of the candidate (trials, re-calls, warm-up, spot checks during timing).

    Provenance (one of its own kernels must launch), the runtime layers (the ATen operators
    it dispatches on any thread, foreign modes, audit events), its threads, and its
    outputs: copied on the launching stream the moment forward returns and compared after
    a device-wide synchronisation, so work still running elsewhere (another stream, a
    thread) when it returned is caught. With `share` (GPU), the candidate kernels' share of
    the call's GPU window is measured too (`cx.shares`).
    """
    import time

    torch = cx.torch
    on_gpu = cx.device.type == "cuda"
    if on_gpu:
        poison(cx)
    window = _open_window(cx) if share and on_gpu else None
    before = cx.recorder.own_launches()
    held = cx.recorder.held
    threads = thread_count()
    with torch.no_grad():
        h0 = time.perf_counter()
        # Launches on other streams wait first (not in a measured window, where the wait
        # would count against the candidate's share): unjoined work is late every time.
        if on_gpu and window is None:
            cx.recorder.hold = (torch.cuda.current_stream().cuda_stream, set())
        try:
            with cx.aten, cx.audit.watching("forward"):
                out = model(*inputs)
        except BaseException as exc:
            # What the runtime layers saw before it failed says more than the failure.
            _runtime_findings(cx, where, done, exc)
            raise
        finally:
            cx.recorder.hold = None
        cx.watched_host_ms = (time.perf_counter() - h0) * 1000.0
        end = _close_window(cx) if window is not None else None
        at_return = [o.detach().clone() if type(o) is torch.Tensor and o.layout == torch.strided
                     and o.device.type != "meta" else None for o in _flatten(out)]
    if on_gpu:
        torch.cuda.synchronize()
    if window is not None:
        _measure_window(cx, window, end)
    launched = _observe(cx, before, where, done)
    check_integrity(cx, where, done, threads)
    found = _runtime_found(cx)
    if not launched:
        _no_launch(cx, where, done, found)
    if found:
        _runtime_findings(cx, where, done, found=found)
    late_hint = ("; its first launch on another stream was held back, so work joined to the caller's "
                 "stream would have been waited for") if cx.recorder.held > held else ""
    for i, (snap, o) in enumerate(zip(at_return, _flatten(out), strict=False)):
        if snap is not None and not _same_bits(torch, snap, o):
            raise _Fail(verdict(cx,
                "rejected", "provenance",
                f"{where}: [runtime-late-write] output {i} changed after forward returned (work left running "
                f"on another stream or thread{late_hint}); every write must be ordered before forward returns "
                "on the current stream", done))
    # No change seen, but with shared hardware queues none could be (a change seen is a late write anyway).
    if on_gpu and cx.recorder.held > held:
        unchecked_streams(cx, where, done)
    return out


def unchecked_streams(cx: Context, where: str, done: List[TrialStat]) -> None:
    """In a process with few hardware queues, a candidate that launched on another stream
    cannot be checked for work left running at return: answer so (the host evaluates it
    again in a process with the driver's queues) instead of a verdict."""
    if cx.few_queues:
        raise _Fail(verdict(cx,
            "runtime_error", "provenance",
            f"{where}: ModelNew.forward launched work on another stream, which this process cannot check for "
            "work left running at return (its streams share fewer hardware queues than the driver's "
            f"{DRIVER_QUEUES}, so an unfinished output looks finished); evaluate it with the driver's queues "
            "(`--cuda-connections 8`)", done, needs_hardware_queues=True))


# The driver's own number of hardware queues per context, and the variable that sets it.
DRIVER_QUEUES = 8
QUEUES_VAR = "CUDA_DEVICE_MAX_CONNECTIONS"


def few_hardware_queues() -> bool:
    """Whether this process's CUDA context has fewer hardware queues than the driver's
    default. The late-write check holds back a launch on another stream and copies the
    outputs at return on the caller's stream; with the two streams on one queue the copy
    waits behind the held work, and a candidate that returns with its kernels still
    running looks finished (an H200 judged such a candidate `correct` three times out of
    three with one queue). Such a process cannot check a candidate that uses streams."""
    raw = os.environ.get(QUEUES_VAR, "").strip()
    try:
        return 0 < int(raw) < DRIVER_QUEUES
    except ValueError:
        return False


def _runtime_found(cx: Context) -> List[str]:
    """What the dispatch recorder, the mode checks and the audit hook saw during the last
    watched forward, as tagged phrases."""
    found = [f"[{tag}] ModelNew.forward {text}" for tag, text in cx.aten.findings()]
    return found + [f"[runtime-audit] ModelNew.forward {text}" for text in cx.audit.take()]


def _runtime_findings(cx: Context, where: str, done: List[TrialStat], raised: Optional[BaseException] = None,
                      found: Optional[List[str]] = None) -> None:
    """Raise `rejected` at stage provenance for what the runtime layers saw during the last
    watched forward (which then `raised`, if given)."""
    if found is None:
        found = _runtime_found(cx)
    if found:
        then = ""
        if raised is not None:
            then = f" (forward then raised {_describe(error_info(raised, cx.candidate_path))[:300]})"
        raise _Fail(verdict(cx,
            "rejected", "provenance",
            f"{where}: {'; '.join(found)}; forward may only allocate, view and copy tensors and launch the "
            f"candidate's own Triton kernels (runtime policy){then}", done))


# -- the GPU window of a watched timed call ------------------------------------


def _open_window(cx: Context) -> Any:
    """Before a share-measured call: keep the GPU busy long enough to cover the host side
    of the call (twice the last watched call's host time, so that everything it enqueues
    is queued before the window opens), record the window's start and mark every launch.
    Host work between the call's own kernels that waits on the device (NumPy on a copy,
    a Python loop, a thread) shows as time outside the candidate's kernels."""
    torch = cx.torch
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(int(spin_per_ms(cx) * min(2.0 * cx.watched_host_ms + 0.2, 200.0)))
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    cx.recorder.marks = []
    return start


def _close_window(cx: Context) -> Any:
    end = cx.torch.cuda.Event(enable_timing=True)
    end.record()
    return end


def _measure_window(cx: Context, start: Any, end: Any) -> None:
    """After the device synchronised: the candidate kernels' GPU time over the window."""
    marks = cx.recorder.marks or []
    cx.recorder.marks = None
    own, n = cx.recorder.own_gpu_ms(marks)
    total = float(start.elapsed_time(end))
    if n and total > 0.0:
        cx.shares.append(min(own / total, 1.0))


def check_share(cx: Context, done: List[TrialStat]) -> None:
    """The candidate's kernels must fill the policy's least share of the watched timed calls'
    GPU windows (the best call counts: a hiccup of the host is not the candidate's fault)."""
    least = cx.job.runtime.min_kernel_share
    if not cx.shares or least <= 0.0:
        return
    best = max(cx.shares)
    if best < least:
        raise _Fail(verdict(cx,
            "rejected", "provenance",
            f"[runtime-share] the candidate's own Triton kernels ran for {best:.0%} of the GPU window of its "
            f"watched timed calls (best of {len(cx.shares)}; the policy asks for at least {least:.0%}): the rest "
            "was other GPU work or the device waiting on the host (NumPy, a Python loop, a thread); the work "
            "must be done by the candidate's kernels", done))


def poison(cx: Context) -> None:
    from .runtime_guard import poison_free_blocks

    poison_free_blocks(cx.torch, cx.device)


def check_integrity(cx: Context, where: str, done: List[TrialStat], threads: Optional[int] = None) -> None:
    changed = cx.integrity.changed() if cx.integrity is not None else []
    if changed:
        names = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
        raise _Fail(verdict(cx,
            "rejected", "provenance",
            f"{where}: [runtime-patched] the candidate replaced functions or changed settings the evaluator or the "
            f"reference relies on ({names}); clocks, synchronisation, comparisons, the evaluator's own code, the "
            "PyTorch functions and modules the reference runs through and global PyTorch settings (precision, "
            "backends) must be left alone: speedups count against the unmodified reference", done))
    if threads is not None and thread_count() > threads:
        raise _Fail(verdict(cx,
            "rejected", "provenance",
            f"{where}: [runtime-threads] ModelNew.forward left {thread_count() - threads} thread(s) running "
            "after it returned; all work must be done by the candidate's kernels before forward returns", done))


def check_audit(cx: Context, where: str, done: List[TrialStat]) -> None:
    """What the audit hook recorded while the candidate's module or `ModelNew` was built."""
    found = cx.audit.take() if cx.audit is not None else []
    if found:
        raise _Fail(verdict(cx,
            "rejected", "provenance",
            f"{where}: [runtime-audit] the candidate {'; '.join(found)}; a candidate may not start processes "
            "or read the problem file", done))


def _observe(cx: Context, before: int, where: str, done: List[TrialStat]) -> bool:
    from .provenance import Tampered

    try:
        launched: bool = cx.recorder.observe(before)
    except Tampered as exc:
        raise _Fail(verdict(cx, "rejected", "provenance",
                            f"{where}: the candidate tampered with the launch hooks ({exc})", done)) from exc
    return launched


def _no_launch(cx: Context, where: str, done: List[TrialStat], also: Optional[List[str]] = None) -> None:
    names = sorted(cx.recorder.kernel_names())
    defined = f"it defines {', '.join(names)}" if names else "it defines no @triton.jit kernel"
    seen = f"; {'; '.join(also)}" if also else ""
    raise _Fail(verdict(cx,
        "rejected", "provenance",
        f"{where}: ModelNew.forward launched none of the candidate's own Triton kernels ({defined}){seen}; "
        "the work must be done by the candidate's Triton kernels, not by PyTorch", done))


def require_launch(cx: Context, before: int, where: str, done: List[TrialStat], threads: Optional[int] = None) -> None:
    launched = _observe(cx, before, where, done)
    check_integrity(cx, where, done, threads)
    if not launched:
        _no_launch(cx, where, done)


# -- stateful cheats: the same objects again, and a call after an unknown number ----


def recall_check(cx: Context, built: Built, done: List[TrialStat]) -> None:
    """After the trials: forward on one set of inputs, a random number (1 to 4, from
    `os.urandom`) of further watched calls on them, then their values are overwritten in
    place with a fresh draw and forward is called again on the very same objects; that
    output must match the reference on the new values. An answer cached by `id`,
    `data_ptr` or `lru_cache` (keyed on the objects) is stale there, and a candidate right
    only for its first calls does not know which call is checked."""
    torch = cx.torch
    job = cx.job
    problem = built.problem
    seed = job.seed + 70_000
    extra = 1 + os.urandom(1)[0] % 4
    try:
        seed_all(torch, seed)
        host = list(problem.get_inputs())
        seed_all(torch, seed + 1)
        fresh = list(problem.get_inputs())
        cx.lease.hold("shared")
        objects = to_device(cx, host)
        fresh = to_device(cx, fresh)
    except BaseException as exc:  # noqa: BLE001
        info = error_info(exc, cx.problem_path)
        raise _Fail(verdict(cx, "runtime_error", "correctness", f"problem get_inputs failed: {_describe(info)}",
                            done, error=info)) from exc
    calls = len(done)
    for k in range(1 + extra):
        try:
            call_candidate(cx, built.model, objects, f"re-call {k + 1}", done)
        except _Fail:
            raise
        except BaseException as exc:  # noqa: BLE001
            info = error_info(exc, cx.candidate_path)
            raise _Fail(verdict(cx, "runtime_error", "correctness", f"re-call {k + 1}: {_describe(info)}", done,
                                error=info)) from exc
    with torch.no_grad():
        for o, f in zip(objects, fresh, strict=False):
            if isinstance(o, torch.Tensor) and isinstance(f, torch.Tensor) and o.shape == f.shape \
                    and o.dtype == f.dtype and o.device == f.device:
                o.copy_(f)
        clean = clone(cx, objects)
    where = (f"call {calls + extra + 2} (after {extra + 1} more on the same input objects, whose values were then "
             "overwritten in place)")
    try:
        got = call_candidate(cx, built.model, objects, where, done)
        with torch.no_grad():
            seed_all(torch, seed + 2)
            expected = built.reference(*clean)
    except _Fail:
        raise
    except BaseException as exc:  # noqa: BLE001
        info = error_info(exc, cx.candidate_path)
        raise _Fail(verdict(cx, "runtime_error", "correctness", f"{where}: {_describe(info)}", done,
                            error=info)) from exc
    try:
        check_outputs(cx, len(done), _flatten(expected), _flatten(got), done)
    except _Fail as fail:
        v = fail.verdict
        if isinstance(v, Verdict):
            detail = v.message.split(", ", 1)[1] if v.message.startswith("trial ") else v.message
            v.message = (f"[runtime-recall] {where}: {detail}; an output must follow its inputs' values on "
                         "every call (no cache keyed on the input objects, no behaviour that changes with calls)")
        raise
    cx.lease.hold(None)


def check_outputs(cx: Context, t: int, exp: List[Any], out: List[Any], done: List[TrialStat]) -> Tuple[float, float]:
    if len(exp) != len(out):
        raise mismatch(cx, t, 0, "count", f"{len(exp)} outputs", f"{len(out)} outputs", done)
    worst_abs = 0.0
    worst_rel = 0.0
    for i, (e, o) in enumerate(zip(exp, out, strict=True)):
        a, r = compare(cx, t, i, e, o, done)
        worst_abs = max(worst_abs, a)
        worst_rel = max(worst_rel, r)
    return worst_abs, worst_rel


def mismatch(
    cx: Context, t: int, i: int, kind: Any, expected: str, got: str, done: List[TrialStat], **kw: Any
) -> _Fail:
    m = Mismatch(
        trial=t, output=i, kind=kind, expected=expected, got=got,
        max_abs_err=kw.get("max_abs_err"), max_rel_err=kw.get("max_rel_err"),
        worst_index=kw.get("worst_index", []), mismatched=kw.get("mismatched", 0), total=kw.get("total", 0),
    )
    detail = kw.get("detail") or f"expected {expected}, got {got}"
    return _Fail(verdict(cx, "incorrect", "correctness", f"trial {t}, output {i}: {detail}", done, mismatch=m))


def compare(cx: Context, t: int, i: int, e: Any, o: Any, done: List[TrialStat]) -> Tuple[float, float]:
    torch = cx.torch
    if not isinstance(e, torch.Tensor):
        if e != o:
            raise mismatch(cx, t, i, "value", repr(e)[:80], repr(o)[:80], done)
        return 0.0, 0.0
    # Exactly a Tensor: a subclass could lie about its values when compared.
    if type(o) is not torch.Tensor:
        raise mismatch(cx, t, i, "type", "torch.Tensor", type(o).__name__, done)
    if o.device.type != e.device.type:
        raise mismatch(cx, t, i, "device", str(e.device), str(o.device), done)
    if tuple(o.shape) != tuple(e.shape):
        raise mismatch(cx, t, i, "shape", str(tuple(e.shape)), str(tuple(o.shape)), done)
    if o.dtype != e.dtype:
        raise mismatch(cx, t, i, "dtype", str(e.dtype), str(o.dtype), done)
    atol, rtol = _tolerance_for(str(e.dtype).replace("torch.", ""), cx.job.tolerance)
    cx.tolerance_used = Tolerance(atol=atol, rtol=rtol)
    total = int(e.numel())
    if total == 0:
        return 0.0, 0.0
    if not (e.is_floating_point() or e.is_complex()):
        diff = o != e
        n = int(diff.sum())
        if n:
            idx = _unravel(int(diff.flatten().nonzero()[0]), e.shape)
            raise mismatch(cx, t, i, "value", str(e[tuple(idx)].item()), str(o[tuple(idx)].item()), done,
                                 worst_index=idx, mismatched=n, total=total,
                                 detail=f"{n}/{total} elements differ, first at {idx}")
        return 0.0, 0.0
    # In float64, a chunk at a time: the comparison's working memory stays bounded (a
    # whole 6 GiB output compared at once took ten times its size), and what it finds is
    # the same as comparing the whole: first NaN, counts, maxima, the first worst element.
    o_flat = o.detach().reshape(-1)
    e_flat = e.detach().reshape(-1)
    n = 0
    first = -1
    for start in range(0, total, COMPARE_CHUNK):
        nonfinite = ~torch.isfinite(o_flat[start:start + COMPARE_CHUNK].double())
        k = int(nonfinite.sum())
        if k and first < 0:
            first = start + int(nonfinite.nonzero()[0])
        n += k
    if n:
        idx = _unravel(first, e.shape)
        raise mismatch(cx, t, i, "nonfinite", f"{_at(e_flat, first):.6g}", str(_at(o_flat, first)), done,
                             worst_index=idx, mismatched=n, total=total,
                             detail=f"{n}/{total} elements are NaN or Inf (first at {idx}); NaN/Inf never pass")
    max_abs = max_rel = worst_err = -math.inf
    flat = 0
    for start in range(0, total, COMPARE_CHUNK):
        of = o_flat[start:start + COMPARE_CHUNK].double()
        ef = e_flat[start:start + COMPARE_CHUNK].double()
        abs_err = (of - ef).abs()
        rel_err = abs_err / ef.abs().clamp_min(1e-12)
        bad = abs_err > (atol + rtol * ef.abs())
        bad |= ~torch.isfinite(ef)
        max_abs = _nan_max(max_abs, float(abs_err.max()))
        max_rel = _nan_max(max_rel, float(rel_err.max()))
        k = int(bad.sum())
        if k:
            masked = torch.where(bad, abs_err, torch.zeros_like(abs_err))
            j = int(torch.argmax(masked))
            # torch.argmax: NaN counts as the largest, ties go to the first.
            v = float(masked[j])
            if not math.isnan(worst_err) and (math.isnan(v) or v > worst_err):
                worst_err, flat = v, start + j
        n += k
    if n:
        idx = _unravel(flat, e.shape)
        want, have = _at(e_flat, flat), _at(o_flat, flat)
        raise mismatch(cx,
            t, i, "value", f"{want:.6g}", f"{have:.6g}", done,
            max_abs_err=finite_or_none(max_abs), max_rel_err=finite_or_none(max_rel), worst_index=idx,
            mismatched=n, total=total,
            detail=(f"{n}/{total} elements outside atol={atol:g} rtol={rtol:g}; max abs err {max_abs:.4g}, "
                    f"max rel err {max_rel:.4g}; worst at {idx}: expected {want:.6g}, got {have:.6g}"),
        )
    return max_abs, max_rel


def _at(flat: Any, j: int) -> float:
    """Element `j` as the comparison saw it (in float64; a complex value's real part)."""
    return float(flat[j:j + 1].double()[0])


def _nan_max(a: float, b: float) -> float:
    """`max` that propagates NaN, as `Tensor.max` does."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


# -- phase 3: provenance (the candidate kernels' share of GPU time; the summary) --


def provenance_of(cx: Context, gpu_share: Optional[float]) -> Optional[Provenance]:
    """The launch recorder's summary, once the candidate launched anything."""
    if cx.recorder is not None and cx.recorder.calls:
        summary: Provenance = cx.recorder.summary(gpu_share)
        summary.window_share = max(cx.shares) if cx.shares else None
        summary.model_share = min(cx.model_shares) if cx.model_shares else None
        return summary
    return None


def profile_share(cx: Context, built: Built) -> Optional[float]:
    """The GPU share when the job asks for a profile on a GPU, else None. A guard
    failure during the profiled calls raises `_Fail`; any other failure gives None."""
    if not (cx.job.profile and cx.device.type == "cuda"):
        return None
    try:
        cx.lease.hold("shared")
        return measure_gpu_share(cx, built.problem, built.model)
    except _Fail:
        raise
    except BaseException:  # noqa: BLE001 - the share is a measurement, not a verdict
        return None


def measure_gpu_share(cx: Context, problem: Any, model: Any) -> Optional[float]:
    """The candidate kernels' share of GPU time over a few forwards, from the profiler."""
    torch = cx.torch
    from torch.profiler import ProfilerActivity, profile

    seed_all(torch, cx.job.seed + 50_000)
    inputs = to_device(cx, list(problem.get_inputs()))
    model(*inputs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            call_candidate(cx, model, inputs, "profiled call", [])
    own = cx.recorder.kernel_names()
    total = 0.0
    mine = 0.0
    for evt in prof.events():
        if getattr(getattr(evt, "device_type", None), "name", "") != "CUDA":
            continue
        us = float(evt.time_range.elapsed_us())
        total += us
        if evt.name in own:
            mine += us
    return mine / total if total > 0 else None


# -- phase 4: timing ----------------------------------------------------------


def timing_phase(
    cx: Context, built: Built, trials: List[TrialStat], gpu_share: Optional[float]
) -> Tuple[Optional[Timing], Optional[str]]:
    """(timing, note): the leases, the compiled baseline and the timed run when the job
    asks for timing on a GPU; a note saying why not otherwise. Raises `_Fail`."""
    job = cx.job
    on_gpu = cx.device.type == "cuda"
    if not job.timing:
        return None, "timing not requested"
    compiled = None
    if job.compile_baseline and on_gpu:
        # Shared, but not on the candidate's hold clock: compiling a whole model's
        # reference takes tens of seconds that are not the candidate's.
        cx.lease.hold("baseline")
        compiled = compiled_baseline(cx, built.problem, built.reference)
    if on_gpu:
        gate_works(cx.torch, cx.device)  # once per process, before the exclusive hold
    # The timing lease: nothing else runs on this GPU until the result is sent. In CPU
    # mode nothing is timed, so it is taken only when the pool asks (its tests do).
    if on_gpu or os.environ.get("TRITONFORGE_CPU_TIMING_LEASE") == "1":
        cx.lease.hold("exclusive")
    timing_cpu = os.environ.get("TRITONFORGE_TIMING_CPU")
    if on_gpu and timing_cpu:
        # This (launching) thread moves to the core kept free for timing.
        os.sched_setaffinity(0, {int(timing_cpu)})
    if not on_gpu:
        return None, "timing unavailable in CPU mode (Triton interpreter)"
    try:
        return time_candidate(cx, built.problem, built.reference, built.model, compiled, trials), None
    except _Fail:
        raise
    except BaseException as exc:  # noqa: BLE001
        info = error_info(exc, cx.candidate_path)
        raise _Fail(verdict(cx, "runtime_error", "timing", f"during timing: {_describe(info)}", trials,
                            error=info, gpu_share=gpu_share)) from exc


def compiled_baseline(cx: Context, problem: Any, reference: Any) -> Any:
    """`torch.compile(Model)`, compiled (CPU work, shared lease) before the timing lease."""
    torch = cx.torch
    compiled = torch.compile(reference)
    seed_all(torch, cx.job.seed + 60_000)
    inputs = to_device(cx, list(problem.get_inputs()))
    with torch.no_grad():
        compiled(*inputs)
    torch.cuda.synchronize()
    return compiled


def time_candidate(
    cx: Context, problem: Any, reference: Any, model: Any, compiled: Any, done: List[TrialStat]
) -> Timing:
    """Reference and candidate timed in this process, interleaved, under the timing lease.

    Every repetition gets inputs never seen before (drawn on the device, outside the
    timed windows), so neither side can answer from a cache keyed on its inputs.
    Each call is bracketed by CUDA events and preceded by a rewrite of a buffer
    larger than L2; the flush also covers the host's launch latency, so a window
    holds the call's GPU work (the do_bench convention). A device-wide
    synchronisation precedes the final timestamp. A few audited repetitions are
    also timed on the host clock with a device-wide synchronisation after each
    call: a candidate whose host time exceeds its window by much more than the
    reference's does is flagged. A candidate that launches its kernels on another
    stream is timed again with a device-wide synchronisation inside every window,
    so work it leaves running elsewhere is counted. The candidate's outputs on the
    audited calls are checked against the reference on a clean copy of the same
    inputs, so a candidate cannot be right only while it is being checked.
    """
    import numpy as np

    torch = cx.torch
    job = cx.job
    stream = torch.cuda.current_stream().cuda_stream
    run = timed_run(cx, problem, reference, model, compiled, done, sync_each=False)
    side = cx.recorder.foreign_streams(stream)
    if side:
        # Streams first used in timed calls (whose windows hold nothing back): with few
        # queues their late writes could not have been seen there either.
        unchecked_streams(cx, "timing", done)
        run = timed_run(cx, problem, reference, model, compiled, done, sync_each=True)
    dev, audit, checked, opened = run
    # The GPU is not needed alone any more: statistics run shared.
    cx.lease.hold("shared")
    check_share(cx, done)

    def med(xs: List[float]) -> float:
        return float(np.median(np.asarray(xs))) if xs else float("nan")

    def stats(name: str) -> TimingStats:
        xs = np.asarray(dev[name])
        q1, m, q3 = np.percentile(xs, [25, 50, 75])
        return TimingStats(median_ms=float(m), iqr_ms=float(q3 - q1), samples=len(xs),
                           host_median_ms=med(audit[name]), mean_ms=float(xs.mean()),
                           std_ms=float(xs.std()), min_ms=float(xs.min()), max_ms=float(xs.max()))

    r = stats("reference")
    c = stats("candidate")
    harness = med(dev["empty"])
    low, high = _speedup_interval(dev, resamples=200)
    speedup = max(r.median_ms - harness, 1e-6) / max(c.median_ms - harness, 1e-6)
    flags: List[Any] = []
    if speedup > job.speedup_cap:
        flags.append("implausible_speedup")
    # Host time beyond the device window: launch latency and synchronisation for an
    # honest call (about the same for both sides), hidden work for a dishonest one.
    excess_c = c.host_median_ms - c.median_ms
    excess_r = r.host_median_ms - r.median_ms
    if excess_c - excess_r > 0.05 + 0.5 * c.median_ms:
        flags.append("clock_disagreement")
    if side:
        flags.append("side_streams")
    if (high - low) / 2.0 > TIMING_CI * speedup:
        flags.append("unconverged")
    return Timing(
        reference=r,
        candidate=c,
        speedup=speedup,
        speedup_low=float(low),
        speedup_high=float(high),
        flags=flags,
        checked_outputs=checked,
        harness_ms=harness,
        compiled=stats("compiled") if compiled is not None else None,
        window=opened,
    )


def timed_run(
    cx: Context, problem: Any, reference: Any, model: Any, compiled: Any, done: List[TrialStat], sync_each: bool
) -> Tuple[Dict[str, List[float]], Dict[str, List[float]], int, WindowOpen]:
    """One timed run: per-arm window times, audited host times, how many outputs were
    checked, and how its windows were opened."""
    import random
    import time as _time

    torch = cx.torch
    job = cx.job

    def fresh(seed: int) -> List[Any]:
        return draw_inputs(cx, problem, seed)

    flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device=cx.device)  # 256 MiB > any L2

    def empty(*_: Any) -> None:
        return None

    # `empty` measures the harness itself (two event records), subtracted from both sides.
    arms: List[Tuple[str, Any]] = [("candidate", model), ("reference", reference), ("empty", empty)]
    if compiled is not None:
        arms.append(("compiled", compiled))
    seed = job.seed + 100_000
    new_event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    windows: List[Tuple[str, Any, Any]] = []
    audit: Dict[str, List[float]] = {name: [] for name, _ in arms}
    checked = 0
    # What trials and shape checks left cached goes back first: the warm-up caches what the
    # repetitions use, and `poison` before an audited call fills (block by block) only that,
    # not the hundred free blocks of earlier sizes (about 1.7 ms of host time a call).
    torch.cuda.empty_cache()
    with torch.no_grad():
        for _ in range(2):  # warm-up, autotuning included, outside the numbers
            seed += 1
            inputs = fresh(seed)
            for name, fn in arms:
                if name == "candidate":
                    call_candidate(cx, model, inputs, "timing warm-up", done)
                else:
                    fn(*inputs)
        sleep = getattr(torch.cuda, "_sleep", None)
        rate = spin_per_ms(cx) if sleep is not None else 0.0
        cover = [CUSHION_MS]

        def cushion() -> None:
            if sleep is not None:
                sleep(int(rate * cover[0]))

        gate: Optional[Gate] = None
        gated_ok = not sync_each and gate_works(torch, cx.device)

        torch.cuda.synchronize()
        probe_start = _time.perf_counter()
        seed += 1
        inputs = fresh(seed)
        enqueue: List[float] = []
        for _, fn in arms:
            flush.zero_()
            cushion()
            h = _time.perf_counter()
            fn(*inputs)
            enqueue.append((_time.perf_counter() - h) * 1000.0)
        torch.cuda.synchronize()
        per_round = max(_time.perf_counter() - probe_start, 1e-6)
        # From here the spin covers the slowest side's launch with room to spare (and a
        # round takes that much longer).
        cover[0] = cushion_ms(enqueue)
        per_round += len(arms) * (cover[0] - CUSHION_MS) / 1000.0
        if gated_ok:
            # One gated call of each arm: a call the gate cannot wait for (it fills the
            # launch queue, or waits for the device) is timed under the spin instead.
            gated: List[float] = []

            def gated_round(g: Any) -> None:
                nonlocal seed
                seed += 1
                inputs = fresh(seed)
                gated.append(_time.perf_counter())
                for _, fn in arms:
                    flush.zero_()
                    g.hold()
                    try:
                        fn(*inputs)
                    finally:
                        g.release()

            gate = probe_gate(lambda: Gate(torch, cx.device), gated_round, torch.cuda.synchronize)
            if gate is not None:  # a round as the repetitions will run it: no spin in it
                per_round = max(_time.perf_counter() - gated[-1], 1e-6)
        # The budget caps the repetitions; timing stops earlier once the speedup's
        # interval is within ±TIMING_CI (checked every few repetitions past the window
        # in which the pre-picked audited and spot-checked calls fall).
        reps = int(min(MAX_REPS, max(MIN_REPS, (job.timing_budget_ms / 1000.0) / per_round)))
        rng = random.Random(int.from_bytes(os.urandom(8), "little"))
        window = min(reps, AUDIT_WINDOW)
        n_audit, n_spot = checks_for(window)
        picked = rng.sample(range(window), k=n_audit + n_spot)
        audited = set(picked[:n_audit])
        # Spot checks: a full watched call (ATen, threads, late writes), out of the stats.
        spots = set(picked[n_audit:])
        timed_start = _time.perf_counter()
        dev: Dict[str, List[float]] = {}
        for i in range(reps):
            seed += 1
            inputs = fresh(seed)
            # Past the window every repetition may be audited, unknowably (`os.urandom`):
            # a candidate cannot behave only during the calls it expects to be checked.
            check = i in audited or (i >= window and rng.random() < LATE_AUDIT_P)
            spot = i in spots
            clean = clone(cx, inputs) if check or spot else None
            order = arms if i % 2 == 0 else list(reversed(arms))  # A/B then B/A: no order bias
            for name, fn in order:
                start, end = new_event(), new_event()
                if spot:
                    out = call_candidate(cx, model, inputs, f"timed call {i}", done, share=True) \
                        if name == "candidate" else fn(*inputs)
                    if name == "candidate":
                        assert clean is not None  # a spot check always keeps a clean copy
                        check_timed_output(cx, reference, i, clean, out, done)
                        checked += 1
                    del out
                    continue
                before = cx.recorder.own_launches() if name == "candidate" else 0
                threads = thread_count() if name == "candidate" else None
                flush.zero_()
                if check and name == "candidate":
                    # Memory the reference just freed holds the right answer: never hand it over.
                    poison(cx)
                if check or sync_each:
                    # Audited, or work on other streams: the device is idle when the window
                    # opens, so nothing the call launches can run before it (under a cushion).
                    torch.cuda.synchronize()
                    h0 = _time.perf_counter()
                elif gate is not None:
                    # The stream waits for the host to enqueue the whole call and its
                    # end event (`gate.py`): the window holds the call's work alone.
                    gate.hold()
                else:
                    # The GPU stays busy while the host launches the call, so the
                    # window starts with the call's own work, not launch latency.
                    cushion()
                start.record()
                try:
                    out = fn(*inputs)
                    if sync_each:
                        torch.cuda.synchronize()
                    end.record()
                finally:
                    if gate is not None:
                        gate.release()
                if check:
                    torch.cuda.synchronize()
                    audit[name].append((_time.perf_counter() - h0) * 1000.0)
                if name == "candidate":
                    require_launch(cx, before, f"timed call {i}", done, threads)
                    if clean is not None:
                        check_timed_output(cx, reference, i, clean, out, done)
                        checked += 1
                if not check:  # audited windows include launch latency: kept out of the stats
                    windows.append((name, start, end))
                del out
            if i + 1 >= window and (i + 1 - window) % CHECK_EVERY == 0 and windows:
                windows[-1][2].synchronize()
                dev = _elapsed(windows, arms, dev)
                lo, hi = _speedup_interval(dev, resamples=100)
                mid = _speedup_point(dev)
                if (hi - lo) / 2.0 <= TIMING_CI * mid:
                    break
        torch.cuda.synchronize()  # device-wide, before the last timestamp is read
        cx.timed_ms += (_time.perf_counter() - timed_start) * 1000.0
    spin_because: Optional[SpinBecause] = None
    if not sync_each and gate is None:
        spin_because = "probe_gave_up" if gated_ok else gate_why_not()
    opened = WindowOpen(how="synchronised" if sync_each else "gate" if gate is not None else "cushion",
                        gates_given_up=gate.given_up() if gate is not None else 0,
                        spin_because=spin_because)
    return _elapsed(windows, arms, dev), audit, checked, opened


def check_timed_output(cx: Context, reference: Any, i: int, clean: List[Any], out: Any,
                       done: List[TrialStat]) -> None:
    """The candidate's output of timed call `i` against the reference on a clean copy of
    its inputs, checked at once (outside the windows) so that no copy outlives its call:
    on a problem of several GiB, keeping every checked call's data to the end did not fit."""
    with cx.torch.no_grad():
        expected = _flatten(reference(*clean))
    try:
        check_outputs(cx, i, expected, _flatten(out), done)
    except _Fail as fail:
        v = fail.verdict
        if isinstance(v, Verdict):  # always: output checks only fail with verdicts
            v.stage = "timing"
            v.message = f"timed call {i} gave a wrong output ({v.message}); outputs must be right on every call"
        raise


# Timing stops once the speedup's 95% interval is within ±1% of it, or at the budget.
TIMING_CI = 0.01
# A call of 60 ms (a slow candidate's convolution) at 30 repetitions held the GPU alone
# for 2 s of a 400 ms budget, its interval within ±0.1%: the floor is what the checks need.
MIN_REPS = 16
MAX_REPS = 1000
# The audited and spot-checked calls are picked among the first AUDIT_WINDOW
# repetitions (no stop before them); later ones are audited with LATE_AUDIT_P each.
AUDIT_WINDOW = 48
LATE_AUDIT_P = 1.0 / 16.0
CHECK_EVERY = 8


def checks_for(window: int) -> Tuple[int, int]:
    """(audited, spot-checked) repetitions drawn among the first `window`: 5 and 3 from 30
    repetitions up (the floor before it was 16: no timed run is checked less than then), 3
    and 2 in the shorter runs of slow calls that floor now allows."""
    return (5, 3) if window >= 30 else (3, 2)


def _elapsed(windows: List[Tuple[str, Any, Any]], arms: List[Tuple[str, Any]],
             done: Optional[Dict[str, List[float]]]) -> Dict[str, List[float]]:
    """Per-arm window times in ms; `done` holds those already read (windows are appended in order)."""
    dev: Dict[str, List[float]] = {name: list(done[name]) if done else [] for name, _ in arms}
    seen = sum(len(v) for v in dev.values())
    for name, start, end in windows[seen:]:
        dev[name].append(float(start.elapsed_time(end)))
    return dev


def _speedup_point(dev: Dict[str, List[float]]) -> float:
    import numpy as np

    h = float(np.median(dev["empty"]))
    return max(float(np.median(dev["reference"])) - h, 1e-6) / max(float(np.median(dev["candidate"])) - h, 1e-6)


def _speedup_interval(dev: Dict[str, List[float]], resamples: int) -> Tuple[float, float]:
    """95% bootstrap interval of the speedup, resampling repetitions in pairs."""
    import numpy as np

    ref = np.asarray(dev["reference"])
    can = np.asarray(dev["candidate"])
    emp = np.asarray(dev["empty"])
    n = min(len(ref), len(can), len(emp))
    if n < 2:
        return 0.0, float("inf")
    idx = np.random.default_rng(0).integers(0, n, size=(resamples, n))
    h = np.median(emp[:n][idx], axis=1)
    ratios = (np.maximum(np.median(ref[:n][idx], axis=1) - h, 1e-6)
              / np.maximum(np.median(can[:n][idx], axis=1) - h, 1e-6))
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)


# The cushion: a GPU spin before each timed window, long enough to cover the host's
# launch of the call that follows it: CUSHION_MARGIN times the slowest side's host time
# to enqueue its call (measured in the probe round), at least CUSHION_MS, at most
# CUSHION_MAX_MS. On 2026-11-29 a 12 µs Triton ReLU, whose call took the host 0.15-0.19 ms
# to enqueue (the reference's 0.05-0.1), was timed at 71 µs in one copy of five under a
# fixed 0.2 ms spin: its launch was no longer covered, in most repetitions.
CUSHION_MS = 0.2
CUSHION_MARGIN = 2.5
CUSHION_MAX_MS = 2.0
# The spin's cycles per ms are the fastest of CUSHION_TRIES timed spins (one that shares
# the GPU with another context runs long; calibrated on it, every cushion of the process
# would come out short), and never below the device's top clock.
CUSHION_TRIES = 5
CUSHION_PROBE = 1_000_000


def cushion_ms(enqueue_ms: List[float]) -> float:
    """The spin before each window, from each side's host time to enqueue its call (ms)."""
    return min(max(CUSHION_MS, CUSHION_MARGIN * max(enqueue_ms, default=0.0)), CUSHION_MAX_MS)


def spin_per_ms(cx: Context) -> float:
    """Cycles of `torch.cuda._sleep` per ms on this device, calibrated once per process."""
    if cx.spin_per_ms <= 0.0:
        torch = cx.torch
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        clock_khz = int(getattr(props, "clock_rate", 0) or 0)
        cx.spin_per_ms = float(cushion_cycles(torch.cuda._sleep, lambda: torch.cuda.Event(enable_timing=True),
                                              1.0, clock_khz))
    return cx.spin_per_ms


def cushion_cycles(sleep: Any, new_event: Any, target_ms: float, clock_khz: int) -> int:
    """Spin cycles that last at least `target_ms`: the fastest of CUSHION_TRIES timed spins
    (sharing the GPU only ever makes one slower), and at least `target_ms` at the top
    clock `clock_khz` (cycles per ms; 0 when the device does not say)."""
    fastest = float("inf")
    for _ in range(CUSHION_TRIES):
        a, b = new_event(), new_event()
        a.record()
        sleep(CUSHION_PROBE)
        b.record()
        b.synchronize()
        fastest = min(fastest, max(float(a.elapsed_time(b)), 1e-3))
    return max(int(CUSHION_PROBE * target_ms / fastest), int(target_ms * clock_khz))


# -- the sequence -------------------------------------------------------------


class Executor:
    """One candidate against one problem: the phases above, in order; the first
    failure's verdict (or `ProblemError`) is the outcome."""

    def __init__(self, job: EvalJob, workdir: str, lease: Any = None) -> None:
        self.cx = new_context(job, workdir, lease)

    @property
    def recorder(self) -> Any:
        """The launch recorder `build` installed (None before `run`)."""
        return self.cx.recorder

    def run(self) -> Verdict | ProblemError:
        cx = self.cx
        clock = _PhaseClock()
        try:
            built = build(cx)
            clock.lap("build")
            trials = run_trials(cx, built)
            clock.lap("trials")
            recall_check(cx, built, trials)
            shape_note = check_shapes(cx, built, trials)
            clock.lap("shape_check")
            gpu_share = profile_share(cx, built)
            timing, note = timing_phase(cx, built, trials, gpu_share)
            clock.lap("timing")
        except _Fail as fail:
            clock.lap(clock.next_phase())
            return clock.attach(fail.verdict, cx)
        except BaseException as exc:  # noqa: BLE001 - memory running out outside any phase's own handling
            if not is_out_of_memory(exc):
                raise
            info = error_info(exc, cx.candidate_path)
            clock.lap(clock.next_phase())
            return clock.attach(verdict(cx, "runtime_error", "correctness", f"memory ran out: {_describe(info)}", [],
                                        error=info), cx)
        worst = max((s.max_abs_err or 0.0 for s in trials), default=0.0)
        msg = f"all {len(trials)} trials match (max abs err {worst:.3g}){shape_note}"
        return clock.attach(verdict(cx, "correct", "correctness", msg, trials, timing=timing, timing_note=note,
                                    gpu_share=gpu_share), cx)


class _PhaseClock:
    """Wall time per executor phase, for the verdict's `phases` (where the time goes)."""

    ORDER = ("build", "trials", "shape_check", "timing")

    def __init__(self) -> None:
        import time as _time

        self._now = _time.perf_counter
        self._last = self._now()
        self.ms: Dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = self._now()
        self.ms[phase] = self.ms.get(phase, 0.0) + (now - self._last) * 1000.0
        self._last = now

    def next_phase(self) -> str:
        """The phase that was running when a failure ended the evaluation."""
        return next((p for p in self.ORDER if p not in self.ms), "timing")

    def attach(self, outcome: Verdict | ProblemError, cx: Optional[Context] = None) -> Verdict | ProblemError:
        """The phases' times on a verdict, with the timed run's, the compiles' and the
        shared-hold waits' from `cx` (none without one: nothing was built)."""
        if isinstance(outcome, Verdict):
            m = {p: round(self.ms.get(p, 0.0), 3) for p in self.ORDER}
            recorder = cx.recorder if cx is not None else None
            outcome.phases = PhaseTimes(
                build_ms=m["build"], trials_ms=m["trials"], shape_check_ms=m["shape_check"], timing_ms=m["timing"],
                timed_ms=round(cx.timed_ms, 3) if cx is not None else 0.0,
                compile_ms=round(recorder.compile_ms, 3) if recorder is not None else None,
                shared_wait_ms=round(cx.lease.waited_ms.get("shared", 0.0), 3) if cx is not None else None)
        return outcome


def _same_bits(torch: Any, a: Any, b: Any) -> bool:
    """Bit for bit the same (NaN where NaN), a chunk at a time so that the copies it makes
    stay small beside tensors of gigabytes."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    n = a.numel()
    if n <= COMPARE_CHUNK:
        return _same_bits_whole(torch, a, b)
    fa, fb = a.reshape(-1), b.reshape(-1)
    return all(_same_bits_whole(torch, fa[s:s + COMPARE_CHUNK], fb[s:s + COMPARE_CHUNK])
               for s in range(0, n, COMPARE_CHUNK))


def _same_bits_whole(torch: Any, a: Any, b: Any) -> bool:
    if a.is_floating_point():
        # NaN-aware exact comparison: a NaN input left in place is unchanged.
        return bool(torch.equal(a.isnan(), b.isnan())) and bool(torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)))
    return bool(torch.equal(a, b))


def _unravel(flat: int, shape: Sequence[int]) -> List[int]:
    idx = []
    for dim in reversed(list(shape)):
        idx.append(flat % dim)
        flat //= dim
    return list(reversed(idx))


def _is_compile_error(exc: BaseException) -> bool:
    for e in (exc, exc.__cause__, exc.__context__):
        if e is not None and type(e).__module__.startswith("triton.compiler"):
            return True
    return False


def _safe_name(name: str, default: str) -> str:
    base = os.path.basename(name)
    if not base.endswith(".py") or not base[:-3].replace("_", "a").replace("-", "a").isalnum():
        return default
    return base


# -- the preflight: the import alone, in a process that never touched the GPU --


def device_files() -> Tuple[str, ...]:
    """Path prefixes whose open descriptors mean the process reached the GPU's driver."""
    raw = os.environ.get("TRITONFORGE_PREFLIGHT_DEVICE_FILES", "/dev/nvidia")
    return tuple(p for p in raw.split(":") if p)


def touched_device(torch: Any) -> bool:
    """Whether this process has reached the GPU: a CUDA context, or any descriptor open on
    the driver's device files (CUDA, NVML or Triton's own driver all open them)."""
    if torch.cuda.is_initialized():
        return True
    prefixes = device_files()
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return True  # cannot tell: never trust the preflight then
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(prefixes):
            return True
    return False


def preflight(job: EvalJob, workdir: str, mode: str) -> PreflightOutcome:
    """Import the problem and the candidate exactly as `build` does, with no device
    touched beforehand. A `compile_error` at the import is the evaluation's verdict only
    when nothing about it can depend on the device: the import reached no GPU and did not
    run out of memory. Anything else is inconclusive, and the full evaluation runs."""
    # The process's memory cap would create a CUDA context; nothing here allocates on the
    # device unless the candidate does, and then the outcome is inconclusive anyway.
    # The device is the process's mode, not asked of the driver ("auto" would ask it).
    device: DeviceRequest = "cuda" if mode == "cuda" else "cpu"
    cx = new_context(dataclasses.replace(job, gpu_memory_fraction=None, device=device), workdir)
    clock = _PhaseClock()
    try:
        import_both(cx)
    except _Fail as fail:
        clock.lap("build")
        outcome = clock.attach(fail.verdict)
        if isinstance(outcome, ProblemError):
            return PreflightInconclusive(kind="inconclusive", reason="the problem failed: the evaluation reports it")
        if touched_device(cx.torch):
            return PreflightInconclusive(kind="inconclusive", reason="the candidate's import reached the GPU")
        if outcome.error is not None and outcome.error.out_of_memory:
            return PreflightInconclusive(kind="inconclusive", reason="memory ran out during the import")
        if outcome.status != "compile_error" or outcome.stage != "import":
            return PreflightInconclusive(kind="inconclusive", reason=f"{outcome.status} at {outcome.stage}")
        return PreflightFailed(kind="failed", verdict=outcome)
    finally:
        if cx.recorder is not None:
            cx.recorder.uninstall()
    return PreflightPassed(kind="passed")

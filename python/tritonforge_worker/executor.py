"""Run one candidate against one problem: import, build, correctness trials, timing.

The executor never decides anything the host could decide better: it returns
numbers and text (a `Verdict`, or a `ProblemError` when the problem itself is
broken), and the Rust side owns budgets, crashes and caching.
"""

from __future__ import annotations

import ast
import os
import statistics
import sys
import traceback
import types
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .protocol import (
    ErrorInfo,
    EvalJob,
    Frame,
    Mismatch,
    ProblemError,
    Stage,
    Status,
    Timing,
    TimingStats,
    Tolerance,
    TrialStat,
    Verdict,
    finite_or_none,
)

# Default tolerances by dtype; a problem's manifest may override both.
_DEFAULT_TOL = {
    "float32": (1e-4, 1e-4),
    "float64": (1e-7, 1e-7),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1e-2, 1e-2),
}


class _Fail(Exception):
    """Internal: carries a finished verdict out of nested code."""

    def __init__(self, verdict: Verdict) -> None:
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
    return ErrorInfo(exc_type=type(exc).__name__, message=message[:4000], frames=frames[-12:])


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
        targets: List[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        for t in targets:
            if isinstance(t, ast.Name) and t.id in overrides:
                new = ast.copy_location(ast.Constant(overrides[t.id]), node.value)  # type: ignore[arg-type]
                node.value = new  # type: ignore[union-attr]
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


class Executor:
    def __init__(self, job: EvalJob, workdir: str) -> None:
        import torch

        self.torch = torch
        self.job = job
        self.workdir = Path(workdir)
        self.problem_path = _problem_file(self.workdir, job.problem.name)
        self.candidate_path = str(self.workdir / _safe_name(job.candidate.name, "candidate.py"))
        if job.device == "cuda" or (job.device == "auto" and torch.cuda.is_available()):
            self.device = torch.device("cuda")
        else:
            self.device = torch.device("cpu")
        self.tolerance_used = Tolerance(atol=1e-4, rtol=1e-4)

    # -- verdict helpers -------------------------------------------------
    def _verdict(
        self,
        status: Status,
        stage: Stage,
        message: str,
        trials: List[TrialStat],
        error: Optional[ErrorInfo] = None,
        mismatch: Optional[Mismatch] = None,
        timing: Optional[Timing] = None,
        timing_note: Optional[str] = None,
    ) -> Verdict:
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
            tolerance=self.tolerance_used,
        )

    def _to_device(self, values: Sequence[Any]) -> List[Any]:
        torch = self.torch
        return [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in values]

    def _clone(self, values: Sequence[Any]) -> List[Any]:
        torch = self.torch
        return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]

    # -- the pipeline ----------------------------------------------------
    def run(self) -> Any:
        torch = self.torch
        job = self.job
        Path(self.problem_path).write_text(job.problem.source, encoding="utf-8")
        Path(self.candidate_path).write_text(job.candidate.source, encoding="utf-8")

        # The problem: any failure here is the problem's fault, not the candidate's.
        try:
            problem = load_problem(self.problem_path, job.overrides)
            torch.manual_seed(job.seed)
            init_inputs = list(problem.get_init_inputs())
        except BaseException as exc:  # noqa: BLE001 - reported, never swallowed
            info = error_info(exc, self.problem_path)
            return ProblemError(kind="problem_error", message=f"{job.problem.name}: {_describe(info)}", error=info)

        # The candidate's import: syntax errors, missing names, bad imports.
        try:
            candidate = load_module("tf_candidate", self.candidate_path, {})
            if not isinstance(getattr(candidate, "ModelNew", None), type):
                raise AttributeError("candidate defines no class `ModelNew`")
        except BaseException as exc:  # noqa: BLE001
            info = error_info(exc, self.candidate_path)
            return self._verdict("compile_error", "import", _describe(info), [], error=info)

        try:
            torch.manual_seed(job.seed)
            reference = problem.Model(*self._to_device(self._clone(init_inputs)))
            if isinstance(reference, torch.nn.Module):
                reference = reference.to(self.device)
        except BaseException as exc:  # noqa: BLE001
            info = error_info(exc, self.problem_path)
            return ProblemError(kind="problem_error", message=f"{job.problem.name}: {_describe(info)}", error=info)
        try:
            torch.manual_seed(job.seed)
            model = candidate.ModelNew(*self._to_device(self._clone(init_inputs)))
            if isinstance(model, torch.nn.Module):
                model = model.to(self.device)
        except BaseException as exc:  # noqa: BLE001
            info = error_info(exc, self.candidate_path)
            return self._verdict("runtime_error", "init", f"building ModelNew failed: {_describe(info)}", [], error=info)

        trials: List[TrialStat] = []
        try:
            for t in range(job.trials):
                trials.append(self._trial(t, problem, reference, model, trials))
        except _Fail as fail:
            return fail.verdict

        note = None
        timing = None
        if not job.timing:
            note = "timing not requested"
        elif self.device.type != "cuda":
            note = "timing unavailable in CPU mode (Triton interpreter)"
        else:
            try:
                timing = self._time(problem, reference, model)
            except BaseException as exc:  # noqa: BLE001
                info = error_info(exc, self.candidate_path)
                return self._verdict("runtime_error", "timing", f"during timing: {_describe(info)}", trials, error=info)
        worst = max((s.max_abs_err or 0.0 for s in trials), default=0.0)
        msg = f"all {len(trials)} trials match (max abs err {worst:.3g})"
        return self._verdict("correct", "correctness", msg, trials, timing=timing, timing_note=note)

    def _time(self, problem: Any, reference: Any, model: Any) -> Timing:
        """Interleaved reference/candidate timing on the GPU with CUDA events.

        Several input sets rotate (fresh allocations, never one buffer reused every
        time), a large buffer is rewritten before each call to flush L2, warm-up (and
        any autotuning) happens before the numbers, and repetitions are time-budgeted.
        """
        import time as _time

        torch = self.torch
        sets = []
        for k in range(3):
            torch.manual_seed(self.job.seed + 100_000 + k)
            sets.append(self._to_device(list(problem.get_inputs())))
        flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device=self.device)  # 256 MiB > any L2
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(2)]

        def once(fn: Any, inputs: List[Any], ev: Any) -> float:
            flush.zero_()
            ev[0].record()
            fn(*inputs)
            ev[1].record()
            torch.cuda.synchronize()
            return float(ev[0].elapsed_time(ev[1]))

        ref_ms: List[float] = []
        cand_ms: List[float] = []
        with torch.no_grad():
            for inputs in sets:
                model(*inputs)
                reference(*inputs)
            torch.cuda.synchronize()
            start = _time.perf_counter()
            i = 0
            while len(ref_ms) < 1000 and (len(ref_ms) < 20 or _time.perf_counter() - start < 2.0):
                inputs = sets[i % len(sets)]
                cand_ms.append(once(model, inputs, events[0]))
                ref_ms.append(once(reference, inputs, events[1]))
                i += 1

        def stats(xs: List[float]) -> Tuple[TimingStats, float, float]:
            q = statistics.quantiles(xs, n=4)
            return TimingStats(median_ms=statistics.median(xs), iqr_ms=q[2] - q[0], samples=len(xs)), q[0], q[2]

        r, r_lo, r_hi = stats(ref_ms)
        c, c_lo, c_hi = stats(cand_ms)
        return Timing(
            reference=r,
            candidate=c,
            speedup=r.median_ms / max(c.median_ms, 1e-9),
            speedup_low=r_lo / max(c_hi, 1e-9),
            speedup_high=r_hi / max(c_lo, 1e-9),
        )

    def _trial(self, t: int, problem: Any, reference: Any, model: Any, done: List[TrialStat]) -> TrialStat:
        torch = self.torch
        seed = self.job.seed + 1 + t * 7919
        try:
            torch.manual_seed(seed)
            inputs = self._to_device(list(problem.get_inputs()))
        except BaseException as exc:  # noqa: BLE001
            info = error_info(exc, self.problem_path)
            raise _Fail(self._verdict("runtime_error", "correctness", f"problem get_inputs failed: {_describe(info)}", done, error=info))
        cand_inputs = self._clone(inputs)
        before = self._clone(cand_inputs)
        # The candidate runs first, so its output buffers can never be memory the
        # reference just freed with the right answer in it.
        try:
            with torch.no_grad():
                got = model(*cand_inputs)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001
            info = error_info(exc, self.candidate_path)
            status: Status = "compile_error" if _is_compile_error(exc) else "runtime_error"
            raise _Fail(self._verdict(status, "correctness", f"trial {t}: {_describe(info)}", done, error=info))
        with torch.no_grad():
            torch.manual_seed(seed)
            expected = reference(*inputs)

        for i, (b, a) in enumerate(zip(before, cand_inputs)):
            if isinstance(b, torch.Tensor) and not _same_bits(torch, b, a):
                raise _Fail(
                    self._verdict(
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
        out = _flatten(got)
        if len(exp) != len(out):
            raise _Fail(self._mismatch(t, 0, "count", f"{len(exp)} outputs", f"{len(out)} outputs", done))
        worst_abs = 0.0
        worst_rel = 0.0
        for i, (e, o) in enumerate(zip(exp, out)):
            a, r = self._compare(t, i, e, o, done)
            worst_abs = max(worst_abs, a)
            worst_rel = max(worst_rel, r)
        return TrialStat(trial=t, seed=seed, outputs=len(exp), max_abs_err=finite_or_none(worst_abs), max_rel_err=finite_or_none(worst_rel), passed=True)

    def _mismatch(self, t: int, i: int, kind: Any, expected: str, got: str, done: List[TrialStat], **kw: Any) -> _Fail:
        m = Mismatch(
            trial=t, output=i, kind=kind, expected=expected, got=got,
            max_abs_err=kw.get("max_abs_err"), max_rel_err=kw.get("max_rel_err"),
            worst_index=kw.get("worst_index", []), mismatched=kw.get("mismatched", 0), total=kw.get("total", 0),
        )
        detail = kw.get("detail") or f"expected {expected}, got {got}"
        return _Fail(self._verdict("incorrect", "correctness", f"trial {t}, output {i}: {detail}", done, mismatch=m))

    def _compare(self, t: int, i: int, e: Any, o: Any, done: List[TrialStat]) -> Tuple[float, float]:
        torch = self.torch
        if not isinstance(e, torch.Tensor):
            if e != o:
                raise self._mismatch(t, i, "value", repr(e)[:80], repr(o)[:80], done)
            return 0.0, 0.0
        # Exactly a Tensor: a subclass could lie about its values when compared.
        if type(o) is not torch.Tensor:
            raise self._mismatch(t, i, "type", "torch.Tensor", type(o).__name__, done)
        if o.device.type != e.device.type:
            raise self._mismatch(t, i, "device", str(e.device), str(o.device), done)
        if tuple(o.shape) != tuple(e.shape):
            raise self._mismatch(t, i, "shape", str(tuple(e.shape)), str(tuple(o.shape)), done)
        if o.dtype != e.dtype:
            raise self._mismatch(t, i, "dtype", str(e.dtype), str(o.dtype), done)
        atol, rtol = _tolerance_for(str(e.dtype).replace("torch.", ""), self.job.tolerance)
        self.tolerance_used = Tolerance(atol=atol, rtol=rtol)
        total = int(e.numel())
        if total == 0:
            return 0.0, 0.0
        if not (e.is_floating_point() or e.is_complex()):
            diff = o != e
            n = int(diff.sum())
            if n:
                idx = _unravel(int(diff.flatten().nonzero()[0]), e.shape)
                raise self._mismatch(t, i, "value", str(e[tuple(idx)].item()), str(o[tuple(idx)].item()), done,
                                     worst_index=idx, mismatched=n, total=total,
                                     detail=f"{n}/{total} elements differ, first at {idx}")
            return 0.0, 0.0
        of = o.detach().double()
        ef = e.detach().double()
        nonfinite = ~torch.isfinite(of)
        if bool(nonfinite.any()):
            n = int(nonfinite.sum())
            idx = _unravel(int(nonfinite.flatten().nonzero()[0]), e.shape)
            raise self._mismatch(t, i, "nonfinite", f"{ef[tuple(idx)].item():.6g}", str(of[tuple(idx)].item()), done,
                                 worst_index=idx, mismatched=n, total=total,
                                 detail=f"{n}/{total} elements are NaN or Inf (first at {idx}); NaN/Inf never pass")
        abs_err = (of - ef).abs()
        rel_err = abs_err / ef.abs().clamp_min(1e-12)
        bad = abs_err > (atol + rtol * ef.abs())
        bad |= ~torch.isfinite(ef)
        max_abs = float(abs_err.max())
        max_rel = float(rel_err.max())
        n = int(bad.sum())
        if n:
            flat = int(torch.argmax(torch.where(bad, abs_err, torch.zeros_like(abs_err))))
            idx = _unravel(flat, e.shape)
            raise self._mismatch(
                t, i, "value", f"{ef[tuple(idx)].item():.6g}", f"{of[tuple(idx)].item():.6g}", done,
                max_abs_err=finite_or_none(max_abs), max_rel_err=finite_or_none(max_rel), worst_index=idx,
                mismatched=n, total=total,
                detail=(f"{n}/{total} elements outside atol={atol:g} rtol={rtol:g}; max abs err {max_abs:.4g}, "
                        f"max rel err {max_rel:.4g}; worst at {idx}: expected {ef[tuple(idx)].item():.6g}, "
                        f"got {of[tuple(idx)].item():.6g}"),
            )
        return max_abs, max_rel


def _same_bits(torch: Any, a: Any, b: Any) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
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


def check_problem(job: Any, workdir: str) -> Any:
    """Suite validation of one problem at one shape variant.

    Sound means: it imports; `Model` builds; the same seeds give bit-identical outputs;
    no output holds NaN or Inf; every output varies (over elements and input seeds) by
    well over the comparison tolerance, so a constant or all-zero answer can never
    pass; and the output depends on the inputs.
    """
    import time as _time

    import torch

    from .protocol import OutputSummary, ProblemReport

    findings: List[str] = []
    outputs: List[OutputSummary] = []
    path = _problem_file(Path(workdir), job.problem.name)
    Path(path).write_text(job.problem.source, encoding="utf-8")
    device = torch.device("cuda" if job.device != "cpu" and torch.cuda.is_available() else "cpu")

    def report(max_ms: float, error: Optional[ErrorInfo] = None) -> ProblemReport:
        return ProblemReport(findings=findings, error=error, outputs=outputs, max_forward_ms=max_ms)

    try:
        problem = load_problem(path, job.overrides)
    except BaseException as exc:  # noqa: BLE001
        info = error_info(exc, path)
        findings.append(f"does not import: {_describe(info)}")
        return report(0.0, info)

    def run(input_seed: int) -> Tuple[List[Any], float]:
        torch.manual_seed(job.seed)
        init = [v.to(device) if isinstance(v, torch.Tensor) else v for v in problem.get_init_inputs()]
        model = problem.Model(*init)
        if isinstance(model, torch.nn.Module):
            model = model.to(device)
        torch.manual_seed(input_seed)
        inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in problem.get_inputs()]
        start = _time.perf_counter()
        with torch.no_grad():
            out = model(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return _flatten(out), (_time.perf_counter() - start) * 1000.0

    max_ms = 0.0
    try:
        runs = []
        for k in range(max(2, job.seeds)):
            out, ms = run(job.seed + 1 + k * 7919)
            runs.append(out)
            max_ms = max(max_ms, ms)
        again, ms = run(job.seed + 1)
        max_ms = max(max_ms, ms)
    except BaseException as exc:  # noqa: BLE001
        info = error_info(exc, path)
        findings.append(f"reference forward fails: {_describe(info)}")
        return report(max_ms, info)

    first = runs[0]
    # Reproducible within 1% of the tolerance: GPU libraries may reorder floating-point
    # sums between runs (cuDNN's transposed convolutions do), which is harmless far below
    # the tolerance; anything larger would make verdicts flip between runs.
    if len(again) != len(first):
        findings.append("not deterministic: the same seeds gave a different number of outputs")
    for i, (a, b) in enumerate(zip(first, again)):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            findings.append(f"not deterministic: output {i} changed shape or dtype between identical runs")
        elif not a.is_floating_point():
            if not torch.equal(a, b):
                findings.append(f"not deterministic: output {i} differs between identical runs")
        else:
            atol, rtol = _tolerance_for(str(a.dtype).replace("torch.", ""), job.tolerance)
            ad, bd = a.detach().double(), b.detach().double()
            diff = (ad - bd).abs().nan_to_num(nan=float("inf"))
            both_nan = ad.isnan() & bd.isnan()
            limit = 0.01 * (atol + rtol * bd.abs())
            if bool(((diff > limit) & ~both_nan).any()):
                findings.append(
                    f"not deterministic: output {i} differs between identical runs by up to "
                    f"{float(diff[~both_nan].max()):.3g}, more than 1% of the tolerance"
                )
    for i, o in enumerate(first):
        if not isinstance(o, torch.Tensor):
            findings.append(f"output {i} is a {type(o).__name__}, not a tensor")
            continue
        stacked = [r[i] for r in runs if i < len(r) and isinstance(r[i], torch.Tensor)]
        summary = OutputSummary(shape=[int(d) for d in o.shape], dtype=str(o.dtype).replace("torch.", ""),
                                std=None, tolerance_scale=None)
        outputs.append(summary)
        if o.numel() == 0:
            findings.append(f"output {i} is empty")
            continue
        if o.is_floating_point():
            allv = torch.cat([s.detach().double().flatten() for s in stacked])
            if not bool(torch.isfinite(allv).all()):
                findings.append(f"output {i} holds NaN or Inf")
                continue
            atol, rtol = _tolerance_for(summary.dtype, job.tolerance)
            scale = atol + rtol * float(allv.abs().mean())
            std = float(allv.std()) if allv.numel() > 1 else 0.0
            summary.std = finite_or_none(std)
            summary.tolerance_scale = finite_or_none(scale)
            if std <= 10.0 * scale:
                findings.append(
                    f"output {i} is degenerate: its spread (std {std:.3g}) is not well above the "
                    f"tolerance scale {scale:.3g}, so a constant answer could pass"
                )
        else:
            allv = torch.cat([s.flatten() for s in stacked])
            if int(torch.unique(allv).numel()) < 2:
                findings.append(f"output {i} is constant")
        if len(stacked) > 1 and all(_same_bits(torch, stacked[0], s) for s in stacked[1:]):
            findings.append(f"output {i} does not depend on the inputs (identical for every input seed)")
    return report(max_ms)

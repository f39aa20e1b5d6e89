"""Suite validation of one problem (`suite validate`): is it sound to evaluate against?

Called by `__main__` for a `check_problem` message; uses the executor's loading and
comparison helpers, never a candidate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional, Tuple

from .executor import (
    _describe,
    _flatten,
    _problem_file,
    _same_bits,
    _tolerance_for,
    apply_memory_fraction,
    error_info,
    is_out_of_memory,
    load_problem,
)
from .protocol import ErrorInfo, MemoryNeed, finite_or_none


def check_problem(job: Any, workdir: str) -> Any:
    """Suite validation of one problem at one shape variant.

    Sound means: it imports; `Model` builds; the same seeds give bit-identical outputs;
    no output holds NaN or Inf; every output varies (over elements and input seeds) by
    well over the comparison tolerance, so a constant or all-zero answer can never
    pass; and the output depends on the inputs.

    First, before anything else is allocated, what evaluating a candidate against it takes
    of the device's memory at this shape (`memory.py`), for the host to store.
    """
    import time as _time

    import torch

    from .protocol import OutputSummary, ProblemReport

    findings: List[str] = []
    outputs: List[OutputSummary] = []
    path = _problem_file(Path(workdir), job.problem.name)
    Path(path).write_text(job.problem.source, encoding="utf-8")
    device = torch.device("cuda" if job.device != "cpu" and torch.cuda.is_available() else "cpu")
    apply_memory_fraction(torch, device, job.gpu_memory_fraction)
    memory: Optional[MemoryNeed] = None

    def report(max_ms: float, error: Optional[ErrorInfo] = None) -> ProblemReport:
        return ProblemReport(findings=findings, error=error, outputs=outputs, max_forward_ms=max_ms, memory=memory)

    try:
        problem = load_problem(path, job.overrides)
    except BaseException as exc:  # noqa: BLE001
        info = error_info(exc, path)
        findings.append(f"does not import: {_describe(info)}")
        return report(0.0, info)
    try:
        from .memory import measure_problem

        memory = measure_problem(torch, problem, path, job.overrides, None, job.seed, device)
    except BaseException as exc:  # noqa: BLE001
        if is_out_of_memory(exc):
            info = error_info(exc, path)
            findings.append(f"memory ran out building and running it: {_describe(info)}")
            return report(0.0, info)
        # Any other failure is met again, and named, by the checks below.

    on_device = [device.type == "cuda"]

    def build(init: List[Any]) -> Any:
        # On a GPU the model is built under `torch.device` (a whole model's random
        # initialisation on the host costs seconds to minutes), as the executor builds it;
        # the host when that fails for a reason other than memory.
        if on_device[0]:
            try:
                torch.manual_seed(job.seed)
                with torch.device(device):
                    return problem.Model(*init)
            except Exception as exc:  # noqa: BLE001
                if is_out_of_memory(exc):
                    raise
                on_device[0] = False
        torch.manual_seed(job.seed)
        return problem.Model(*init)

    def run(input_seed: int) -> Tuple[List[Any], float]:
        torch.manual_seed(job.seed)
        init = [v.to(device) if isinstance(v, torch.Tensor) else v for v in problem.get_init_inputs()]
        model = build(init)
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
    for i, (a, b) in enumerate(zip(first, again, strict=False)):
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

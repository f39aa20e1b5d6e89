"""What evaluating one candidate against a problem takes of its device's memory.

The host has each problem measured once per (content, shapes, device, worker) by a fresh
process (`measure_memory`; `suite validate`'s problem check does it too), stores the
answer, and admits candidates to a GPU only while the needs of those running fit its
memory (docs/evaluator.md, "Memory"). A measurement runs the reference alone: what the
executor holds beside it is added up here, by `correctness_need` and `timing_need`,
which mirror `executor.py` and must follow it when it changes what it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from .executor import (
    COMPARE_CHUNK,
    _flatten,
    _problem_file,
    apply_memory_fraction,
    error_info,
    load_module,
    load_problem,
    unseen_shapes,
)
from .protocol import MemoryJob, MemoryNeed, MemoryReport

# The timing phase's L2 flush buffer (`timed_run`: 64 Mi int32).
FLUSH_BYTES = 256 << 20
# Working memory per element of the comparison (`compare`): float64 copies of both sides,
# their difference, the relative error, the tolerance and the masks, over at most
# `COMPARE_CHUNK` elements at a time.
COMPARE_BYTES_PER_ELEMENT = 64


@dataclass
class Shape:
    """The reference at one shape: bytes of its parameters, one set of inputs, its outputs
    and its forward's peak above its inputs (outputs and workspace); the element count of
    its largest input or output tensor (the comparison works in chunks of those)."""

    params: int
    inputs: int
    outputs: int
    forward: int
    largest: int


def _transient(s: Shape) -> int:
    return min(s.largest, COMPARE_CHUNK) * COMPARE_BYTES_PER_ELEMENT


def correctness_need(s: Shape) -> int:
    """The executor's peak through build and one correctness trial (`build`, `trial`).

    Held throughout: `Model` and `ModelNew` (the candidate's parameters taken to be as large
    as the reference's), the inputs, the candidate's clones of them and the `before` copy
    that catches writes to them (three sets), and the candidate's output. Beside those, the
    larger of: the reference's forward (its outputs and workspace); a second output with the
    comparison's working memory (or `call_candidate`'s copy of the output at return)."""
    return 2 * s.params + 3 * s.inputs + s.outputs + max(s.forward, s.outputs + _transient(s))


def timing_need(s: Shape) -> int:
    """The executor's peak while timing (`timed_run`), an upper bound.

    Held throughout: both models. During the repetitions: the flush buffer, the current
    inputs, the next ones (drawn while the current are still referenced), a clean copy, one
    call's forward; on a checked repetition also the candidate's output kept for its check,
    the reference's output on the clean copy, and the comparison (each checked repetition is
    checked at once: nothing outlives its call). (A candidate timed again for side streams
    runs a second time after the first: not more at once.)"""
    during = FLUSH_BYTES + 3 * s.inputs + s.forward
    checking = s.outputs + s.forward + _transient(s)
    return 2 * s.params + during + checking


def _storage_bytes(torch: Any, values: List[Any]) -> int:
    """Bytes of the distinct storages behind the tensors among `values`."""
    seen: Dict[int, int] = {}
    for v in values:
        if isinstance(v, torch.Tensor):
            st = v.untyped_storage()
            seen[st.data_ptr()] = int(st.nbytes())
    return sum(seen.values())


def _largest(torch: Any, values: List[Any]) -> int:
    return max((int(v.numel()) for v in values if isinstance(v, torch.Tensor)), default=0)


def measure_shape(torch: Any, problem: Any, device: Any, seed: int) -> Shape:
    """Build the reference, draw its inputs and run it once, as the executor does.

    On a GPU the allocator says what each step took (so a forward's workspace is seen); on
    the CPU the tensors' byte sizes are counted instead."""
    on_gpu = device.type == "cuda"

    def to_device(values: List[Any]) -> List[Any]:
        return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]

    def allocated() -> int:
        return int(torch.cuda.memory_allocated()) if on_gpu else 0

    if on_gpu:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    base = allocated()
    torch.manual_seed(seed)
    model = problem.Model(*to_device(list(problem.get_init_inputs())))
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
    built = allocated()
    torch.manual_seed(seed + 1)
    inputs = to_device(list(problem.get_inputs()))
    drawn = allocated()
    if on_gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        outputs = _flatten(model(*inputs))
    if on_gpu:
        torch.cuda.synchronize()
        params, input_bytes = built - base, drawn - built
        forward = int(torch.cuda.max_memory_allocated()) - drawn
    else:
        held = list(model.parameters()) + list(model.buffers()) if isinstance(model, torch.nn.Module) else []
        params, input_bytes = _storage_bytes(torch, held), _storage_bytes(torch, inputs)
        forward = _storage_bytes(torch, outputs)
    shape = Shape(params=max(params, 0), inputs=max(input_bytes, 0), outputs=_storage_bytes(torch, outputs),
                  forward=max(forward, 0), largest=max(_largest(torch, inputs), _largest(torch, outputs)))
    del model, inputs, outputs
    if on_gpu:
        torch.cuda.empty_cache()
    return shape


def measure_problem(
    torch: Any, problem: Any, path: str, overrides: Dict[str, Any], shape_check: Optional[Dict[str, Any]],
    seed: int, device: Any,
) -> MemoryNeed:
    """The need of `problem` (imported from `path` with `overrides`) at its shape and at the
    unseen shapes its shape check would run; raises what the problem raises."""
    main = measure_shape(torch, problem, device, seed)
    correctness = correctness_need(main)
    for k, unseen in enumerate(unseen_shapes(overrides, shape_check, problem)):
        other = measure_shape(torch, load_module(f"tf_problem_memory_{k}", path, unseen), device, seed)
        # The benchmark shape's models stay built while the unseen shapes are checked.
        correctness = max(correctness, 2 * main.params + correctness_need(other))
    on_gpu = device.type == "cuda"
    return MemoryNeed(
        method="allocator" if on_gpu else "tensor_sizes",
        params_bytes=main.params,
        input_bytes=main.inputs,
        output_bytes=main.outputs,
        forward_bytes=main.forward,
        correctness_bytes=correctness,
        timing_bytes=timing_need(main) if on_gpu else None,
    )


def measure(job: MemoryJob, workdir: str) -> MemoryReport:
    """Answer a `measure_memory` job; a failure (memory running out included, flagged) is
    reported, never raised."""
    import torch

    device = torch.device("cuda" if job.device != "cpu" and torch.cuda.is_available() else "cpu")
    apply_memory_fraction(torch, device, job.gpu_memory_fraction)
    path = _problem_file(Path(workdir), job.problem.name)
    Path(path).write_text(job.problem.source, encoding="utf-8")
    try:
        problem = load_problem(path, job.overrides)
        need = measure_problem(torch, problem, path, job.overrides, job.shape_check, job.seed, device)
    except BaseException as exc:  # noqa: BLE001 - reported to the host, which decides
        return MemoryReport(need=None, error=error_info(exc, path))
    return MemoryReport(need=need, error=None)

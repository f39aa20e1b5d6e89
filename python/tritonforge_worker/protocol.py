"""Mirror of the Rust protocol crate (`crates/protocol`).

Every message is one JSON object on one line. The Rust definitions are the
source of truth; `cargo test -p tritonforge-protocol` round-trips every message
type through this module, so a field added on one side only fails CI.

Decoding is strict: unknown keys, missing keys and wrong types are errors, so a
drift between the two sides is loud rather than silently lossy.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Literal, Optional, Union

PROTOCOL_VERSION = 7

Status = Literal["rejected", "compile_error", "runtime_error", "timeout", "incorrect", "correct"]
Stage = Literal["guard", "import", "init", "correctness", "provenance", "timing", "process"]
LeaseKind = Literal["shared", "baseline", "exclusive"]
TimingFlag = Literal["implausible_speedup", "clock_disagreement", "side_streams", "unconverged"]
WindowHow = Literal["gate", "cushion", "synchronised"]
SpinBecause = Literal["asked", "check_raised", "check_gave_up", "check_held_short", "probe_gave_up"]
DeviceRequest = Literal["auto", "cpu", "cuda"]
MemoryMethod = Literal["allocator", "tensor_sizes"]
MismatchKind = Literal[
    "value", "nonfinite", "shape", "dtype", "count", "type", "device", "input_mutated"
]
# The trainer's closed sets (Rust: `Precision`, `Attention`, `Compile`, `WeightDtype`).
Precision = Literal["auto", "mixed", "bf16", "fp32"]
Attention = Literal["auto", "varlen", "sdpa", "flex_attention", "eager"]
Compile = Literal["auto", "on", "off"]
WeightDtype = Literal["float32", "bfloat16"]


class ProtocolError(ValueError):
    """A message that does not match the protocol."""


@dataclass
class GpuInfo:
    index: int
    name: str
    memory_bytes: int
    capability: str


@dataclass
class EnvInfo:
    python: str
    platform: str
    torch: str
    triton: str
    numpy: str
    device: Literal["cpu", "cuda"]
    interpret: bool
    cuda: Optional[str]
    driver: Optional[str]
    gpus: List[GpuInfo]


@dataclass
class SourceFile:
    name: str
    source: str


@dataclass
class Tolerance:
    atol: float
    rtol: float


@dataclass
class RuntimePolicy:
    allow_aten: List[str]
    allow_torch_compute: bool
    min_kernel_share: float


@dataclass
class EvalJob:
    problem: SourceFile
    candidate: SourceFile
    trials: int
    seed: int
    tolerance: Optional[Tolerance]
    overrides: Dict[str, Any]
    device: DeviceRequest
    timing: bool
    timing_budget_ms: int
    speedup_cap: float
    profile: bool
    compile_baseline: bool
    runtime: RuntimePolicy
    shape_check: Optional[Dict[str, Any]]
    gpu_memory_fraction: Optional[float] = None


@dataclass
class Frame:
    file: str
    line: int
    function: str
    code: str


@dataclass
class ErrorInfo:
    exc_type: str
    message: str
    frames: List[Frame]
    out_of_memory: bool = False


@dataclass
class Mismatch:
    trial: int
    output: int
    kind: MismatchKind
    expected: str
    got: str
    max_abs_err: Optional[float]
    max_rel_err: Optional[float]
    worst_index: List[int]
    mismatched: int
    total: int


@dataclass
class TrialStat:
    trial: int
    seed: int
    outputs: int
    max_abs_err: Optional[float]
    max_rel_err: Optional[float]
    passed: bool


@dataclass
class TimingStats:
    median_ms: float
    iqr_ms: float
    samples: int
    host_median_ms: float
    mean_ms: Optional[float] = None
    std_ms: Optional[float] = None
    min_ms: Optional[float] = None
    max_ms: Optional[float] = None


@dataclass
class Timing:
    reference: TimingStats
    candidate: TimingStats
    speedup: float
    speedup_low: float
    speedup_high: float
    flags: List[TimingFlag]
    checked_outputs: int
    harness_ms: float
    compiled: Optional[TimingStats]
    window: Optional[WindowOpen] = None


@dataclass
class WindowOpen:
    """How the reported windows were opened: `gate` (the stream held until the host had
    enqueued the call, gate.py), `cushion` (a spin of 2.5 times the launch) or
    `synchronised` (an idle device: side streams); gates that gave up unreleased."""

    how: WindowHow
    gates_given_up: int = 0
    # Under the spin on a GPU, why not the gate (`SpinBecause` on the host's side).
    spin_because: Optional[SpinBecause] = None


@dataclass
class KernelLaunches:
    name: str
    launches: int


@dataclass
class Provenance:
    kernels: List[KernelLaunches]
    calls: int
    calls_without_launch: int
    gpu_share: Optional[float]
    window_share: Optional[float] = None
    model_share: Optional[float] = None


@dataclass
class Verdict:
    KIND: ClassVar[str] = "verdict"
    kind: Literal["verdict"]
    status: Status
    stage: Stage
    message: str
    error: Optional[ErrorInfo]
    mismatch: Optional[Mismatch]
    trials: List[TrialStat]
    timing: Optional[Timing]
    timing_note: Optional[str]
    tolerance: Optional[Tolerance]
    provenance: Optional[Provenance]
    phases: Optional["PhaseTimes"] = None
    # Not checked here: work on another stream with fewer hardware queues than the
    # driver's 8 (the host evaluates it again in a process that has them).
    needs_hardware_queues: bool = False


@dataclass
class PhaseTimes:
    """Wall time of each executor phase in ms (0 for a phase that did not run)."""

    build_ms: float
    trials_ms: float
    shape_check_ms: float
    timing_ms: float
    timed_ms: float
    # Over all phases: Triton compiling, and waiting for shared holds (None: not measured).
    compile_ms: Optional[float] = None
    shared_wait_ms: Optional[float] = None


@dataclass
class ProblemError:
    """The problem file itself is broken: not a verdict on the candidate."""

    KIND: ClassVar[str] = "problem_error"
    kind: Literal["problem_error"]
    message: str
    error: Optional[ErrorInfo]


Outcome = Union[Verdict, ProblemError]


@dataclass
class Sandbox:
    landlock_abi: Optional[int]
    filesystem: bool
    network: bool
    signals: bool
    gpu_memory_fraction: Optional[float]
    notes: List[str]


@dataclass
class StartupTimes:
    """Where a process's start went, in ms: creating its CUDA context (zero without a
    GPU), the built-in warm-up evaluation, and all of it from the process's (or fork
    child's) first line to its hello."""
    context_ms: float
    warm_up_ms: float
    total_ms: float


@dataclass
class Hello:
    TYPE: ClassVar[str] = "hello"
    type: Literal["hello"]
    worker_version: str
    pid: int
    env: EnvInfo
    sandbox: Sandbox
    startup: Optional[StartupTimes] = None


@dataclass
class Evaluate:
    TYPE: ClassVar[str] = "evaluate"
    type: Literal["evaluate"]
    id: str
    job: EvalJob


@dataclass
class EvalResult:
    TYPE: ClassVar[str] = "result"
    type: Literal["result"]
    id: str
    outcome: Outcome
    elapsed_ms: float


@dataclass
class Error:
    TYPE: ClassVar[str] = "error"
    type: Literal["error"]
    id: Optional[str]
    message: str


@dataclass
class Shutdown:
    TYPE: ClassVar[str] = "shutdown"
    type: Literal["shutdown"]


@dataclass
class ProblemCheckJob:
    problem: SourceFile
    overrides: Dict[str, Any]
    seed: int
    seeds: int
    tolerance: Optional[Tolerance]
    device: DeviceRequest
    gpu_memory_fraction: Optional[float] = None


@dataclass
class MemoryNeed:
    method: MemoryMethod
    params_bytes: int
    input_bytes: int
    output_bytes: int
    forward_bytes: int
    correctness_bytes: int
    timing_bytes: Optional[int]


@dataclass
class MemoryJob:
    problem: SourceFile
    overrides: Dict[str, Any]
    shape_check: Optional[Dict[str, Any]]
    seed: int
    device: DeviceRequest
    gpu_memory_fraction: Optional[float]


@dataclass
class MemoryReport:
    need: Optional[MemoryNeed]
    error: Optional[ErrorInfo]


@dataclass
class OutputSummary:
    shape: List[int]
    dtype: str
    std: Optional[float]
    tolerance_scale: Optional[float]


@dataclass
class ProblemReport:
    findings: List[str]
    error: Optional[ErrorInfo]
    outputs: List[OutputSummary]
    max_forward_ms: float
    memory: Optional[MemoryNeed] = None


@dataclass
class CheckProblem:
    TYPE: ClassVar[str] = "check_problem"
    type: Literal["check_problem"]
    id: str
    job: ProblemCheckJob


@dataclass
class ProblemReportMessage:
    TYPE: ClassVar[str] = "problem_report"
    type: Literal["problem_report"]
    id: str
    report: ProblemReport
    elapsed_ms: float


@dataclass
class LeaseRequest:
    TYPE: ClassVar[str] = "lease_request"
    type: Literal["lease_request"]
    id: str
    kind: LeaseKind


@dataclass
class LeaseGrant:
    TYPE: ClassVar[str] = "lease_grant"
    type: Literal["lease_grant"]
    id: str
    kind: LeaseKind


@dataclass
class LeaseRelease:
    TYPE: ClassVar[str] = "lease_release"
    type: Literal["lease_release"]
    id: str


@dataclass
class MeasureMemory:
    TYPE: ClassVar[str] = "measure_memory"
    type: Literal["measure_memory"]
    id: str
    job: MemoryJob


@dataclass
class MemoryReportMessage:
    TYPE: ClassVar[str] = "memory_report"
    type: Literal["memory_report"]
    id: str
    report: MemoryReport
    elapsed_ms: float


@dataclass
class Preflight:
    TYPE: ClassVar[str] = "preflight"
    type: Literal["preflight"]
    id: str
    job: EvalJob


@dataclass
class PreflightPassed:
    KIND: ClassVar[str] = "passed"
    kind: Literal["passed"]


@dataclass
class PreflightFailed:
    KIND: ClassVar[str] = "failed"
    kind: Literal["failed"]
    verdict: Verdict


@dataclass
class PreflightInconclusive:
    KIND: ClassVar[str] = "inconclusive"
    kind: Literal["inconclusive"]
    reason: str


PreflightOutcome = Union[PreflightPassed, PreflightFailed, PreflightInconclusive]


@dataclass
class PreflightResult:
    TYPE: ClassVar[str] = "preflight_result"
    type: Literal["preflight_result"]
    id: str
    outcome: PreflightOutcome
    elapsed_ms: float


@dataclass
class ChatTurn:
    role: str
    content: str


@dataclass
class GenerateJob:
    messages: List[ChatTurn]
    temperature: float
    top_p: float
    max_tokens: int
    seed: Optional[int]
    top_k: Optional[int] = None
    stop_token_ids: Optional[List[int]] = None


@dataclass
class Generated:
    text: str
    prompt_ids: List[int]
    token_ids: List[int]
    logprobs: List[float]
    finish_reason: str
    sampling_logprobs: Optional[List[float]] = None


@dataclass
class Generate:
    TYPE: ClassVar[str] = "generate"
    type: Literal["generate"]
    id: str
    job: GenerateJob


@dataclass
class Generation:
    TYPE: ClassVar[str] = "generation"
    type: Literal["generation"]
    id: str
    result: Generated
    elapsed_ms: float


@dataclass
class LoraSetup:
    rank: int
    alpha: float
    dropout: float
    target_modules: List[str]


@dataclass
class TrainSetupJob:
    model: str
    resume: Optional[str]
    lora: Optional[LoraSetup]
    lr: float
    min_lr: float
    warmup_steps: int
    total_steps: int
    weight_decay: float
    grad_clip: float
    gradient_checkpointing: bool
    dtype: Precision
    seed: int
    attention: Attention
    compile: Compile
    one_per_row: bool = False


@dataclass
class TrainInfo:
    parameters: int
    trainable: int
    head_parameters: int
    vocab_size: int
    layers: int
    attention_width: int
    dtype: WeightDtype
    device: str
    world_size: int
    gpu_name: Optional[str]
    step: int
    compiled: bool
    attention: str = ""


@dataclass
class MicroBatch:
    input_ids: List[List[int]]
    loss_mask: List[List[int]]
    position_ids: List[List[int]]
    lengths: List[int]


@dataclass
class TrainBatch:
    micro: List[MicroBatch]


@dataclass
class StepStats:
    step: int
    loss: float
    loss_tokens: int
    tokens: int
    grad_norm: Optional[float]
    lr: float
    elapsed_ms: float
    memory_bytes: Optional[int]


@dataclass
class SaveJob:
    dir: str
    merge_lora: bool
    trainer_state: bool


@dataclass
class RlMicroBatch:
    """Rows with, per target token (the order `MicroBatch`'s loss mask gives), what the
    PPO loss needs: every list of a row holds one value per target token of that row."""

    rows: MicroBatch
    advantages: List[List[float]]
    behaviour: List[List[float]]
    proximal: Optional[List[List[float]]]
    reference: Optional[List[List[float]]]


@dataclass
class RlLoss:
    clip_low: float
    clip_high: float
    kl_coef: float
    entropy_coef: float
    tis_cap: float
    loss_tokens: int
    temperature: float = 1.0


@dataclass
class RlBatch:
    micro: List[RlMicroBatch]
    loss: RlLoss


@dataclass
class EngineUse:
    """The policy worker's engine counts, cumulative since it started, over every engine it
    made: why generation took the time it did (few rows a step, rows computed for nothing,
    prompt tokens prefilled)."""

    decode_steps: int
    # Rows with a request, and rows computed (the batch bucket), summed over decode steps.
    decode_rows: int
    decode_width: int
    prefill_tokens: int
    reused_tokens: int
    prefill_forwards: int
    # Running rows moved down into free slots before a decode step (`Engine._compact`).
    moved_rows: int = 0
    # The device's time in decode steps and in prefill forwards, milliseconds (`Engine._clock`).
    decode_ms: float = 0.0
    prefill_ms: float = 0.0
    # Tokens the prefill forwards computed, padding included, and prefill shapes captured
    # as CUDA graphs (`Engine._prefill_graphed`).
    prefill_padded: int = 0
    prefill_graphs: int = 0


@dataclass
class DeviceUse:
    """The policy worker's time, cumulative since it started (see `usage`)."""

    wall_s: float
    generate_s: float
    train_s: float
    refresh_s: float
    gpu_busy_s: Optional[float]
    gpu_sampled_s: Optional[float]
    graphs_compiled: Optional[int] = None
    alloc_retries: Optional[int] = None
    engine: Optional[EngineUse] = None


@dataclass
class RlStats:
    step: int
    loss: float
    policy_loss: float
    kl: Optional[float]
    entropy: float
    clip_fraction: float
    ratio_mean: float
    ratio_max: float
    tis_capped: float
    grad_norm: float
    lr: float
    loss_tokens: int
    tokens: int
    elapsed_ms: float
    memory_bytes: Optional[int]
    device: Optional[DeviceUse] = None


@dataclass
class ScoreJob:
    batch: TrainBatch
    reference: bool
    temperature: float = 1.0


@dataclass
class Scores:
    logprobs: List[List[List[float]]]
    elapsed_ms: float


@dataclass
class TrainSetup:
    TYPE: ClassVar[str] = "train_setup"
    type: Literal["train_setup"]
    id: str
    setup: TrainSetupJob


@dataclass
class TrainReady:
    TYPE: ClassVar[str] = "train_ready"
    type: Literal["train_ready"]
    id: str
    info: TrainInfo


@dataclass
class TrainStep:
    TYPE: ClassVar[str] = "train_step"
    type: Literal["train_step"]
    id: str
    batch: TrainBatch


@dataclass
class EvalLoss:
    TYPE: ClassVar[str] = "eval_loss"
    type: Literal["eval_loss"]
    id: str
    batch: TrainBatch


@dataclass
class StepDone:
    TYPE: ClassVar[str] = "step_done"
    type: Literal["step_done"]
    id: str
    stats: StepStats


@dataclass
class SaveCheckpoint:
    TYPE: ClassVar[str] = "save_checkpoint"
    type: Literal["save_checkpoint"]
    id: str
    save: SaveJob


@dataclass
class Checkpointed:
    TYPE: ClassVar[str] = "checkpointed"
    type: Literal["checkpointed"]
    id: str
    dir: str
    step: int


@dataclass
class Score:
    TYPE: ClassVar[str] = "score"
    type: Literal["score"]
    id: str
    job: ScoreJob


@dataclass
class Scored:
    TYPE: ClassVar[str] = "scored"
    type: Literal["scored"]
    id: str
    scores: Scores


@dataclass
class RlStep:
    TYPE: ClassVar[str] = "rl_step"
    type: Literal["rl_step"]
    id: str
    batch: RlBatch


@dataclass
class RlDone:
    TYPE: ClassVar[str] = "rl_done"
    type: Literal["rl_done"]
    id: str
    stats: RlStats


MESSAGE_TYPES: Dict[str, type] = {
    cls.TYPE: cls
    for cls in (
        Hello, Evaluate, EvalResult, Error, Shutdown, CheckProblem, ProblemReportMessage,
        LeaseRequest, LeaseGrant, LeaseRelease, MeasureMemory, MemoryReportMessage, Preflight, PreflightResult,
        Generate, Generation,
        TrainSetup, TrainReady, TrainStep, EvalLoss, StepDone, SaveCheckpoint, Checkpointed,
        Score, Scored, RlStep, RlDone,
    )
}


def _decode(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin is Union:
        if type(None) in args and value is None:
            return None
        options = [a for a in args if a is not type(None)]
        if all(dataclasses.is_dataclass(a) for a in options) and len(options) > 1:
            if not isinstance(value, dict) or "kind" not in value:
                raise ProtocolError(f"{path}: expected a tagged object")
            for opt in options:
                if getattr(opt, "KIND", None) == value["kind"]:
                    return _decode(opt, value, path)
            raise ProtocolError(f"{path}: unknown kind {value['kind']!r}")
        if len(options) == 1:
            return _decode(options[0], value, path)
        raise ProtocolError(f"{path}: unsupported union")
    if origin is Literal:
        if value not in args:
            raise ProtocolError(f"{path}: {value!r} is not one of {list(args)}")
        return value
    if origin in (list, List):
        if not isinstance(value, list):
            raise ProtocolError(f"{path}: expected a list")
        if args[0] is int and all(type(v) is int for v in value):
            # Token ids by the hundred thousand: checked in one pass; the slow path below
            # only runs to name the culprit.
            return value
        if args[0] is float:
            # Per-token values (log-probs, advantages), as many as token ids: converted in
            # one pass; the slow path below only runs to name a culprit.
            floats = [float(v) for v in value if type(v) is float or type(v) is int]
            if len(floats) == len(value):
                return floats
        return [_decode(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, Dict):
        if not isinstance(value, dict):
            raise ProtocolError(f"{path}: expected an object")
        return {str(k): _decode(args[1], v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ProtocolError(f"{path}: expected an object for {tp.__name__}")
        hints = typing.get_type_hints(tp)
        names = [f.name for f in dataclasses.fields(tp)]
        unknown = set(value) - set(names)
        if unknown:
            raise ProtocolError(f"{path}: unknown field(s) {sorted(unknown)} in {tp.__name__}")
        kwargs = {}
        for name in names:
            if name not in value:
                raise ProtocolError(f"{path}: missing field {name!r} in {tp.__name__}")
            kwargs[name] = _decode(hints[name], value[name], f"{path}.{name}")
        return tp(**kwargs)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(f"{path}: expected a number")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError(f"{path}: expected an integer")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ProtocolError(f"{path}: expected a boolean")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ProtocolError(f"{path}: expected a string")
        return value
    raise ProtocolError(f"{path}: unsupported type {tp!r}")


def decode(line: str) -> Any:
    """Parse one protocol line into its message dataclass."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ProtocolError("a message is an object with a string 'type' field")
    cls = MESSAGE_TYPES.get(data["type"])
    if cls is None:
        raise ProtocolError(f"unknown message type {data['type']!r}")
    # The version lives in the envelope, not in the message dataclasses.
    body = dict(data)
    proto = body.pop("protocol", None)
    if proto != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol version mismatch: message speaks {proto!r}, this worker speaks {PROTOCOL_VERSION}"
        )
    return _decode(cls, body, data["type"])


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        raise ProtocolError("non-finite floats cannot cross the protocol; send null")
    return value


def encode(message: Any) -> str:
    """Serialise a message dataclass to one line (no trailing newline).

    A message (a dataclass with a `TYPE`) goes in the envelope: `type`, then `protocol`,
    then its fields. Anything else (e.g. `EnvInfo` for `probe`) is written as it is."""
    plain = _plain(message)
    if isinstance(plain, dict) and isinstance(getattr(message, "TYPE", None), str):
        plain = {"type": plain.pop("type"), "protocol": PROTOCOL_VERSION, **plain}
    return json.dumps(plain, allow_nan=False, separators=(",", ":"))


def finite_or_none(x: float) -> Optional[float]:
    return float(x) if math.isfinite(x) else None


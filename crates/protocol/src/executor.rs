//! The executor's protocol: what the host asks of a candidate's process (`evaluate`,
//! `check_problem`), what the process answers (a verdict, a problem report), the GPU
//! leases it takes meanwhile, and the environment it reports on start-up.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The closed set of verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Rejected,
    CompileError,
    RuntimeError,
    Timeout,
    Incorrect,
    Correct,
}

impl Status {
    pub const ALL: [Status; 6] = [
        Status::Rejected,
        Status::CompileError,
        Status::RuntimeError,
        Status::Timeout,
        Status::Incorrect,
        Status::Correct,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Rejected => "rejected",
            Status::CompileError => "compile_error",
            Status::RuntimeError => "runtime_error",
            Status::Timeout => "timeout",
            Status::Incorrect => "incorrect",
            Status::Correct => "correct",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which stage decided the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Static analysis before anything runs.
    Guard,
    /// Importing the candidate file.
    Import,
    /// Building `ModelNew`.
    Init,
    /// Correctness trials.
    Correctness,
    /// Proof that the candidate's own kernels ran (launch hooks).
    Provenance,
    /// Timing.
    Timing,
    /// Decided by the host from the process itself: budget expiry, a crash.
    Process,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        f.write_str(&s)
    }
}

closed_set! {
    /// Where a process runs: the Triton interpreter on the CPU, or a CUDA GPU.
    pub enum DeviceKind("device") {
        Cpu = "cpu",
        Cuda = "cuda",
    }
}

closed_set! {
    /// The host's wish for where candidates run (`auto`: a GPU when one is visible).
    #[derive(Default)]
    pub enum DeviceRequest("device") {
        #[default]
        Auto = "auto",
        Cpu = "cpu",
        Cuda = "cuda",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    pub memory_bytes: u64,
    pub capability: String,
}

/// The environment fingerprint: part of every cache key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvInfo {
    pub python: String,
    pub platform: String,
    pub torch: String,
    pub triton: String,
    pub numpy: String,
    pub device: DeviceKind,
    /// True when Triton kernels run under `TRITON_INTERPRET=1`.
    pub interpret: bool,
    pub cuda: Option<String>,
    pub driver: Option<String>,
    pub gpus: Vec<GpuInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceFile {
    /// File name as the model should see it in diagnostics, e.g. `relu.py`.
    pub name: String,
    pub source: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
}

/// One evaluation request, as the executor sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalJob {
    pub problem: SourceFile,
    pub candidate: SourceFile,
    pub trials: u32,
    pub seed: u64,
    /// `None`: the executor's per-dtype defaults.
    pub tolerance: Option<Tolerance>,
    /// Module-level constants of the problem replaced before import (shape variants).
    pub overrides: BTreeMap<String, serde_json::Value>,
    pub device: DeviceRequest,
    pub timing: bool,
    /// Wall-clock budget for the timed repetitions, milliseconds (like `do_bench`'s `rep`).
    pub timing_budget_ms: u32,
    /// Speedups above this are flagged `implausible_speedup` in the record.
    pub speedup_cap: f64,
    /// Measure the candidate kernels' share of GPU time with the profiler.
    pub profile: bool,
    /// Also time `torch.compile(Model)` as a baseline.
    pub compile_baseline: bool,
    /// What the runtime layers allow a forward (the dispatch recorder's allow-list and
    /// knobs); always set, guard or no guard.
    pub runtime: RuntimePolicy,
    /// Module-level constants of a second shape (the heldout variant) to run two more
    /// trials at, after the main ones pass; GPU mode only (the interpreter is too slow).
    pub shape_check: Option<BTreeMap<String, serde_json::Value>>,
    /// The share of its GPU's memory the process may take for this job, in place of the
    /// cap it was started with: the pool's memory grant for the job (its problem's need,
    /// with room to spare), or 90% when it holds the device alone after running out of
    /// memory while sharing. `None`: the start-up cap stands.
    #[serde(default)]
    pub gpu_memory_fraction: Option<f64>,
}

/// What the executor's runtime layers allow a forward to do. The evaluator sends the
/// guard rules' (`allow_aten`, `[runtime]`, relaxed per level) when a guard runs, else
/// its default: the same strict lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimePolicy {
    /// ATen operators (`aten::` names without the prefix, overloads folded; other
    /// namespaces written `ns::name`) a forward may dispatch outside the candidate's own
    /// kernel launches: allocation, fills, copies, views.
    pub allow_aten: Vec<String>,
    /// Any ATen operator may run (levels where PyTorch and Triton mix); host reads and
    /// every other runtime layer still apply.
    pub allow_torch_compute: bool,
    /// The least share of a watched forward's GPU window that the candidate's own kernels
    /// must fill (timing phase, GPU only); 0 turns the check off.
    pub min_kernel_share: f64,
}

/// Which hold on its GPU a candidate asks for. Shared holders (import, compile,
/// correctness) run side by side; an exclusive holder (timing) runs alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseKind {
    Shared,
    /// Shared, while the reference is compiled with `torch.compile` for the compiled
    /// baseline. It is the reference's cost, not the candidate's, so it does not count
    /// against the candidate's hold limit (a whole model's compile alone can pass it).
    Baseline,
    Exclusive,
}

/// One traceback frame of the candidate's own file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Frame {
    pub file: String,
    pub line: u32,
    pub function: String,
    pub code: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorInfo {
    pub exc_type: String,
    pub message: String,
    pub frames: Vec<Frame>,
    /// The worker found the error to be memory running out (PyTorch's `OutOfMemoryError`,
    /// or a CUDA allocation failure anywhere in its chain of causes). The host reads this
    /// flag, never the message: a candidate that ran out of memory while sharing its
    /// device is evaluated again alone before any verdict.
    #[serde(default)]
    pub out_of_memory: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MismatchKind {
    Value,
    Nonfinite,
    Shape,
    Dtype,
    Count,
    Type,
    Device,
    InputMutated,
}

/// Where a candidate's output first went wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mismatch {
    pub trial: u32,
    /// Index into the flattened outputs (or inputs, for `input_mutated`).
    pub output: u32,
    pub kind: MismatchKind,
    pub expected: String,
    pub got: String,
    /// `None` when not finite or not applicable.
    pub max_abs_err: Option<f64>,
    pub max_rel_err: Option<f64>,
    pub worst_index: Vec<u64>,
    pub mismatched: u64,
    pub total: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrialStat {
    pub trial: u32,
    pub seed: u64,
    pub outputs: u32,
    pub max_abs_err: Option<f64>,
    pub max_rel_err: Option<f64>,
    pub passed: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingStats {
    /// Median of device-event times.
    pub median_ms: f64,
    pub iqr_ms: f64,
    pub samples: u32,
    /// Median host wall-clock time of the audited calls (each followed by a device-wide
    /// synchronisation): the cross-check against the device events.
    pub host_median_ms: f64,
    /// Mean, standard deviation and extremes of the device-event times: what
    /// KernelBench-style clients read (`runtime_stats`). Absent from older records.
    #[serde(default)]
    pub mean_ms: Option<f64>,
    #[serde(default)]
    pub std_ms: Option<f64>,
    #[serde(default)]
    pub min_ms: Option<f64>,
    #[serde(default)]
    pub max_ms: Option<f64>,
}

/// Something about a timing that makes it suspect; the record keeps it, a reader decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingFlag {
    /// The speedup is above the configured plausibility cap.
    ImplausibleSpeedup,
    /// On audited calls the candidate's host time exceeds its device window by much
    /// more than the reference's does (work outside the timed stream?).
    ClockDisagreement,
    /// The candidate launched kernels on other streams; it was timed with a device-wide
    /// synchronisation inside every window instead.
    SideStreams,
    /// The timing budget ran out before the speedup's 95% interval narrowed to ±1%
    /// (timing stops as soon as it does).
    Unconverged,
}

/// Which of the candidate's own Triton kernels ran, from launch hooks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub kernels: Vec<KernelLaunches>,
    /// Forward calls observed (correctness and timing).
    pub calls: u64,
    /// Forward calls that launched none of the candidate's kernels.
    pub calls_without_launch: u64,
    /// The candidate's kernels' share of GPU time over profiled calls, when measured.
    pub gpu_share: Option<f64>,
    /// The candidate's kernels' share of the GPU window of its watched timed calls
    /// (events around each launch against events around the call; the best of them),
    /// when measured (GPU timing).
    #[serde(default)]
    pub window_share: Option<f64>,
    /// Mixed levels: the least share of a trial's work the candidate's kernels did, by a
    /// roofline model (FLOPs, bytes) of the PyTorch operators it ran against the
    /// reference's; what CPU mode checks in place of the GPU window share.
    #[serde(default)]
    pub model_share: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelLaunches {
    pub name: String,
    pub launches: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    pub reference: TimingStats,
    pub candidate: TimingStats,
    /// Median reference time over median candidate time, each less the harness's own
    /// time (`harness_ms`).
    pub speedup: f64,
    /// 95% bootstrap interval of the speedup (paired resampling).
    pub speedup_low: f64,
    pub speedup_high: f64,
    pub flags: Vec<TimingFlag>,
    /// Outputs of randomly chosen timed calls that were checked against the reference.
    pub checked_outputs: u32,
    /// Median time of an empty call through the same timing path (two event records).
    pub harness_ms: f64,
    /// `torch.compile(Model)`, when that baseline was asked for.
    pub compiled: Option<TimingStats>,
    /// How the reported windows were opened (absent in records from before it was kept).
    #[serde(default)]
    pub window: Option<WindowOpen>,
}

/// How a timed run opened its windows, so that a figure says what it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowOpen {
    pub how: WindowHow,
    /// Gates that ended without being released (their windows may hold launch time).
    #[serde(default)]
    pub gates_given_up: u32,
    /// Under the spin (`cushion`) on a GPU: why not the gate (absent in records from
    /// before it was kept, and for the other ways).
    #[serde(default)]
    pub spin_because: Option<SpinBecause>,
}

/// Why a timed run on a GPU opened its windows with the spin rather than the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpinBecause {
    /// `TRITONFORGE_TIMING_GATE=0` asked for it.
    Asked,
    /// The process's check raised (Triton cannot read pinned host memory, or another error).
    CheckRaised,
    /// In the process's check the gate gave up unreleased in every try.
    CheckGaveUp,
    /// In the process's check the gate held the stream under 1 ms of the host's 2 ms pause.
    CheckHeldShort,
    /// A gate gave up in every gated probe round of this candidate.
    ProbeGaveUp,
}

/// What held the stream before each timed window's start event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowHow {
    /// A kernel that polls a host flag the host sets once the call and its end event are
    /// enqueued: nothing of the launch can fall inside the window.
    Gate,
    /// A spin of 2.5 times the host's measured enqueue time (0.2 to 2 ms): a host late by
    /// more than that puts launch time inside the window.
    Cushion,
    /// An idle device before every window (work on side streams is counted whole).
    Synchronised,
}

/// The executor's verdict on a candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    pub status: Status,
    pub stage: Stage,
    /// One line a model can act on.
    pub message: String,
    pub error: Option<ErrorInfo>,
    pub mismatch: Option<Mismatch>,
    pub trials: Vec<TrialStat>,
    pub timing: Option<Timing>,
    /// Why `timing` is absent, when it is.
    pub timing_note: Option<String>,
    /// The tolerance the outputs were judged at. The executor always sends it; `None`
    /// only in a record whose verdict the host decided before any check ran (guard
    /// rejection, timeout, crash), which is why the record can embed this struct.
    pub tolerance: Option<Tolerance>,
    /// `None` when the candidate never got as far as running.
    pub provenance: Option<Provenance>,
    /// Where the executor's time went; `None` in a record the host decided, and in
    /// records stored before it was reported.
    #[serde(default)]
    pub phases: Option<PhaseTimes>,
    /// The worker could not check this candidate: it launched work on another stream in a
    /// process with fewer hardware queues than the driver's 8, where work left running
    /// there at return cannot be seen. The host evaluates it again in a process with 8
    /// (its verdict then is never this one's).
    #[serde(default)]
    pub needs_hardware_queues: bool,
}

/// Wall time of each of the executor's phases, in milliseconds (a phase that did not
/// run is 0): where an evaluation's time goes, for throughput work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseTimes {
    /// Writing the files, importing problem and candidate, building both models.
    pub build_ms: f64,
    /// The correctness trials at the benchmark's shapes.
    pub trials_ms: f64,
    /// The trials at unseen shapes.
    pub shape_check_ms: f64,
    /// Profiling (`--profile`), the compiled baseline, waiting for the timing lease and
    /// the timed run.
    pub timing_ms: f64,
    /// Of `timing_ms`, the timed run itself under the exclusive lease.
    pub timed_ms: f64,
    /// Over all phases, Triton compiling (the candidate's kernels at each new
    /// specialisation, and any other `@triton.jit` it runs), summed over threads; the GPU
    /// is not held meanwhile.
    /// `None` in records from workers before it was reported.
    #[serde(default)]
    pub compile_ms: Option<f64>,
    /// Over all phases, waiting for the host to grant a shared hold (behind other
    /// candidates' timing): the pool's cost, not the candidate's. `None` as above.
    #[serde(default)]
    pub shared_wait_ms: Option<f64>,
}

impl Verdict {
    /// A verdict the host decides before any check ran (guard rejection, timeout, crash):
    /// no trials, timing, tolerance or provenance to report.
    pub fn decided(status: Status, stage: Stage, message: impl Into<String>) -> Verdict {
        Verdict {
            status,
            stage,
            message: message.into(),
            error: None,
            mismatch: None,
            trials: vec![],
            timing: None,
            timing_note: None,
            tolerance: None,
            provenance: None,
            phases: None,
            needs_hardware_queues: false,
        }
    }
}

/// The problem file itself is broken; no verdict on the candidate is possible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProblemError {
    pub message: String,
    pub error: Option<ErrorInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // built once per evaluation; boxing buys nothing
pub enum Outcome {
    Verdict(Verdict),
    ProblemError(ProblemError),
}

/// A verdict inside another message, tagged with its `kind` as the worker writes every
/// verdict (in [`Outcome`] the tag is the enum's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaggedVerdict {
    Verdict(Verdict),
}

/// What a preflight found: the candidate's import tried in a process that never touched
/// the GPU (no CUDA context, no warm-up), so that a candidate failing there needs no
/// GPU process at all. Only a failure that cannot depend on the device is `Failed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // one per evaluation, moved once
pub enum PreflightOutcome {
    /// The candidate imported and defines `ModelNew`; the evaluation runs as usual.
    Passed {},
    /// The import failed as it would in a GPU process: this is the verdict.
    Failed { verdict: TaggedVerdict },
    /// No conclusion (the import touched the GPU, memory ran out, the problem failed);
    /// the evaluation runs as usual.
    Inconclusive { reason: String },
}

/// Suite validation of one problem file at one shape variant (no candidate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProblemCheckJob {
    pub problem: SourceFile,
    pub overrides: BTreeMap<String, serde_json::Value>,
    pub seed: u64,
    /// Distinct input seeds the output must differ across (at least 2).
    pub seeds: u32,
    /// `None`: the executor's per-dtype defaults.
    pub tolerance: Option<Tolerance>,
    pub device: DeviceRequest,
    /// The process's share of its GPU's memory for this check, as in [`EvalJob`]; set
    /// when the check runs alone after running out of memory while sharing.
    #[serde(default)]
    pub gpu_memory_fraction: Option<f64>,
}

/// What the executor found about a problem: empty `findings` means it is sound.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProblemReport {
    /// Each a sentence naming what is wrong (does not import, not deterministic, degenerate output, ...).
    pub findings: Vec<String>,
    pub error: Option<ErrorInfo>,
    pub outputs: Vec<OutputSummary>,
    /// Slowest reference forward, milliseconds.
    pub max_forward_ms: f64,
    /// What evaluating a candidate against it takes of its device's memory at this shape
    /// (no shape check), measured before the other checks; `None` when that failed (the
    /// findings say why). The host stores it, as it stores a `measure_memory` answer.
    #[serde(default)]
    pub memory: Option<MemoryNeed>,
}

closed_set! {
    /// How a worker found a problem's memory need.
    pub enum MemoryMethod("memory method") {
        /// On a GPU: PyTorch's caching allocator (`max_memory_allocated`) around the
        /// reference's build, inputs and forward.
        Allocator = "allocator",
        /// On the CPU: the byte sizes of parameters, inputs and outputs (no workspace is
        /// seen), so that admission can be exercised without a GPU.
        TensorSizes = "tensor_sizes",
    }
}

/// What evaluating one candidate against a problem takes of its device's memory, at one
/// shape (with the unseen shapes of its shape check, if any): measured once per problem
/// content, shapes, device and worker by a fresh process, and stored. The pool admits a
/// candidate to a device only while the needs of those running fit its memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryNeed {
    pub method: MemoryMethod,
    /// The reference's parameters and buffers (and what its constructor put on the device).
    pub params_bytes: u64,
    /// One set of the problem's inputs on the device.
    pub input_bytes: u64,
    /// The reference's outputs.
    pub output_bytes: u64,
    /// The reference forward's peak above what it was called with: its outputs and its
    /// workspace (on the CPU only the outputs are seen).
    pub forward_bytes: u64,
    /// The executor's peak through build and the correctness trials (those at unseen
    /// shapes included): both models, the inputs and the evaluator's copies of them, both
    /// outputs, the comparison's working memory (`memory.py` adds it up).
    pub correctness_bytes: u64,
    /// The executor's peak while timing, where timing runs (a GPU); `None` on the CPU.
    pub timing_bytes: Option<u64>,
}

impl MemoryNeed {
    /// The peak of an evaluation that is timed (`timing`) or not.
    pub fn bytes(&self, timing: bool) -> u64 {
        match (timing, self.timing_bytes) {
            (true, Some(t)) => t.max(self.correctness_bytes),
            _ => self.correctness_bytes,
        }
    }
}

/// Measure what evaluating candidates against a problem takes of the device's memory:
/// build the reference, draw its inputs, run it once, at every shape an evaluation with
/// these overrides and this shape check would run (no candidate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryJob {
    pub problem: SourceFile,
    pub overrides: BTreeMap<String, serde_json::Value>,
    pub shape_check: Option<BTreeMap<String, serde_json::Value>>,
    pub seed: u64,
    pub device: DeviceRequest,
    /// As in [`EvalJob`]: set when the measurement runs alone after running out of memory.
    pub gpu_memory_fraction: Option<f64>,
}

/// The answer to [`MemoryJob`]: the need, or why it could not be measured (the problem
/// fails to import, build or run; `error.out_of_memory` when memory ran out).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryReport {
    pub need: Option<MemoryNeed>,
    pub error: Option<ErrorInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSummary {
    pub shape: Vec<u64>,
    pub dtype: String,
    /// Standard deviation over all elements and seeds (`None` if not finite).
    pub std: Option<f64>,
    /// The tolerance scale `atol + rtol·mean|x|` the spread is compared with.
    pub tolerance_scale: Option<f64>,
}

/// Where a candidate process's start went, in ms, as the process timed it: creating its
/// CUDA context (zero without a GPU), the built-in warm-up evaluation, and everything from
/// its first line (a fork child's, or a fresh interpreter's) to its hello.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartupTimes {
    pub context_ms: f64,
    pub warm_up_ms: f64,
    pub total_ms: f64,
}

/// What confines a worker process, as the worker itself applied it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    /// The kernel's landlock ABI version; `None` where landlock is unavailable.
    pub landlock_abi: Option<u32>,
    /// Writes confined to the scratch directory (and /dev).
    pub filesystem: bool,
    /// TCP bind/connect denied.
    pub network: bool,
    /// Signals and abstract unix sockets confined to the process's own domain.
    pub signals: bool,
    /// Cap on the PyTorch allocator's share of GPU memory.
    pub gpu_memory_fraction: Option<f64>,
    /// What is not enforced, and why.
    pub notes: Vec<String>,
}

//! The seam between `tritonforge` and its Python children.
//!
//! Messages are newline-delimited JSON objects tagged by `type`, each carrying the
//! protocol version. These definitions are the source of truth;
//! `python/tritonforge_worker/protocol.py` mirrors them and the crate's tests
//! round-trip every message through it. Tensors never cross: only numbers and text.
//!
//! The evaluation record ([`EvalRecord`]) lives here too, because the executor's
//! verdict is a part of it and every other crate (store, eval, cli) reads it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub mod record;

pub use record::{EvalConfig, EvalRecord, GuardFinding, SourceRef};

/// Bumped whenever a message's shape changes; both sides refuse a mismatch.
pub const PROTOCOL_VERSION: u32 = 4;

/// Errors decoding a protocol line.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("worker sent a line that is not a protocol message ({source}): {line}")]
    Malformed {
        line: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "protocol version mismatch: the worker speaks version {found}, this tritonforge speaks \
         {expected}; the worker package and the binary come from different releases"
    )]
    VersionMismatch { expected: u32, found: u32 },
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Cpu,
    Cuda,
}

/// The host's wish for where candidates run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceRequest {
    #[default]
    Auto,
    Cpu,
    Cuda,
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
    /// ATen operators `forward` may dispatch outside the candidate's kernel launches
    /// (the guard policy's runtime half); `None` when the guard is off.
    pub allow_aten: Option<Vec<String>>,
    /// Module-level constants of a second shape (the heldout variant) to run two more
    /// trials at, after the main ones pass; GPU mode only (the interpreter is too slow).
    pub shape_check: Option<BTreeMap<String, serde_json::Value>>,
    /// The share of its GPU's memory the process may take for this job, in place of the
    /// cap it was started with: set when the job holds its device alone after running out
    /// of memory under the shared cap. `None`: the start-up cap stands.
    #[serde(default)]
    pub gpu_memory_fraction: Option<f64>,
}

/// Which hold on its GPU a candidate asks for. Shared holders (import, compile,
/// correctness) run side by side; an exclusive holder (timing) runs alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseKind {
    Shared,
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
    pub tolerance: Tolerance,
    /// `None` when the candidate never got as far as running.
    pub provenance: Option<Provenance>,
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

/// Every message of the protocol, in both directions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[allow(clippy::large_enum_variant)] // a few per evaluation; boxing buys nothing
pub enum Message {
    /// Worker → host, once, when torch and triton are imported and the device is up.
    Hello {
        protocol: u32,
        worker_version: String,
        pid: u32,
        env: EnvInfo,
        sandbox: Sandbox,
    },
    /// Host → worker: the one job this process will ever run.
    Evaluate {
        protocol: u32,
        id: String,
        job: EvalJob,
    },
    /// Worker → host: the answer to `evaluate`.
    Result {
        protocol: u32,
        id: String,
        outcome: Outcome,
        elapsed_ms: f64,
    },
    /// Either way: a message could not be understood.
    Error {
        protocol: u32,
        id: Option<String>,
        message: String,
    },
    /// Host → worker: exit without running anything.
    Shutdown { protocol: u32 },
    /// Host → worker: validate a problem (the one job of this process).
    CheckProblem {
        protocol: u32,
        id: String,
        job: ProblemCheckJob,
    },
    /// Worker → host: the answer to `check_problem`.
    ProblemReport {
        protocol: u32,
        id: String,
        report: ProblemReport,
        elapsed_ms: f64,
    },
    /// Worker → host: block until the job holds its GPU this way (any other hold is dropped first).
    LeaseRequest {
        protocol: u32,
        id: String,
        kind: LeaseKind,
    },
    /// Host → worker: the hold asked for is granted.
    LeaseGrant {
        protocol: u32,
        id: String,
        kind: LeaseKind,
    },
    /// Worker → host: the job needs no hold on the GPU for now (e.g. while compiling).
    LeaseRelease { protocol: u32, id: String },
    /// Host → policy worker: answer this chat.
    Generate {
        protocol: u32,
        id: String,
        job: GenerateJob,
    },
    /// Policy worker → host: the completion, with exact token ids.
    Generation {
        protocol: u32,
        id: String,
        result: Generated,
        elapsed_ms: f64,
    },
    /// Host → policy worker: load the model for training, with its optimizer and schedule.
    TrainSetup {
        protocol: u32,
        id: String,
        setup: TrainSetup,
    },
    /// Policy worker → host: ready to train; what it trains.
    TrainReady {
        protocol: u32,
        id: String,
        info: TrainInfo,
    },
    /// Host → policy worker: one optimizer step over these micro-batches.
    TrainStep {
        protocol: u32,
        id: String,
        batch: TrainBatch,
    },
    /// Host → policy worker: the loss on these micro-batches, no update.
    EvalLoss {
        protocol: u32,
        id: String,
        batch: TrainBatch,
    },
    /// Policy worker → host: what a step (or an evaluation) did.
    StepDone {
        protocol: u32,
        id: String,
        stats: StepStats,
    },
    /// Host → policy worker: write a checkpoint.
    SaveCheckpoint {
        protocol: u32,
        id: String,
        save: SaveJob,
    },
    /// Policy worker → host: the checkpoint is written (every file in place).
    Checkpointed {
        protocol: u32,
        id: String,
        dir: String,
        step: u64,
    },
}

/// How the policy worker trains: the model, what is trained, the optimizer and schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSetup {
    /// A Hugging Face model directory (a config alone: random weights), a `.gguf` file,
    /// or `smollm2`.
    pub model: String,
    /// A checkpoint of ours to resume from: its weights (or adapter), optimizer, schedule
    /// and random state.
    pub resume: Option<String>,
    pub lora: Option<LoraSetup>,
    pub lr: f64,
    pub min_lr: f64,
    pub warmup_steps: u64,
    pub total_steps: u64,
    pub weight_decay: f64,
    /// Gradient-norm clip; 0 turns clipping off (the norm is still reported).
    pub grad_clip: f64,
    pub gradient_checkpointing: bool,
    /// `mixed` (fp32 weights, bf16 compute), `bf16`, `fp32`, or `auto` (mixed on a GPU,
    /// fp32 on a CPU).
    pub dtype: String,
    pub seed: u64,
    /// `auto`, `varlen` (flash attention over packed rows), or transformers' `sdpa`,
    /// `flex_attention`, `eager`.
    pub attention: String,
    /// `torch.compile` of the decoder layers and the loss: `auto` (on a GPU), `on`, `off`.
    pub compile: String,
    /// The plan puts one conversation in each row, rows of like length together
    /// (`group_by_length`): the worker may then attend over the padded rows as they are
    /// (cuDNN on a GPU) instead of joining them.
    #[serde(default)]
    pub one_per_row: bool,
}

/// Low-rank adapters instead of full fine-tuning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraSetup {
    pub rank: u32,
    pub alpha: f64,
    pub dropout: f64,
    pub target_modules: Vec<String>,
}

/// What the worker loaded: sizes for the FLOP count, and where it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainInfo {
    pub parameters: u64,
    pub trainable: u64,
    /// Parameters of the output projection (counted per loss token, not per token).
    pub head_parameters: u64,
    pub vocab_size: u64,
    pub layers: u32,
    /// Width of the attention (heads × head size), for the attention FLOPs.
    pub attention_width: u32,
    pub dtype: String,
    pub device: String,
    /// Processes training together (FSDP ranks); 1 on one device.
    pub world_size: u32,
    pub gpu_name: Option<String>,
    /// The step the schedule stands at (0, or the resumed checkpoint's step).
    pub step: u64,
    /// Whether the decoder layers and the loss run under `torch.compile`.
    pub compiled: bool,
    /// The attention the worker settled on, and for rows of one conversation each which
    /// kernel passed its check (e.g. `tritonforge_varlen, rows: cudnn (...)`).
    #[serde(default)]
    pub attention: String,
}

/// Rows of token ids, each with its loss mask and position ids (positions restart at 0
/// where a packed conversation starts, which also keeps attention inside it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MicroBatch {
    pub input_ids: Vec<Vec<u32>>,
    /// 1 where the token is a target of the loss (an assistant token).
    pub loss_mask: Vec<Vec<u8>>,
    pub position_ids: Vec<Vec<u32>>,
    /// Real tokens at the start of each row; the rest is padding, which a worker with
    /// variable-length attention drops instead of computing on it.
    pub lengths: Vec<u32>,
}

/// One optimizer step's micro-batches (gradient accumulation), or an evaluation's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainBatch {
    pub micro: Vec<MicroBatch>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepStats {
    /// The schedule's step after this one (unchanged by an evaluation).
    pub step: u64,
    /// Mean loss per target token over the whole batch.
    pub loss: f64,
    pub loss_tokens: u64,
    pub tokens: u64,
    /// Gradient norm before clipping; `None` for an evaluation.
    pub grad_norm: Option<f64>,
    /// The learning rate this step used.
    pub lr: f64,
    pub elapsed_ms: f64,
    /// Peak accelerator memory during the step (`None` on a CPU).
    pub memory_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaveJob {
    pub dir: String,
    /// LoRA: write the merged model (loadable anywhere) instead of the adapter alone.
    pub merge_lora: bool,
    /// Also write the optimizer, schedule and random state (to resume from).
    pub trainer_state: bool,
}

/// One chat message for the embedded policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatTurn {
    pub role: String,
    pub content: String,
}

/// A chat to complete, with sampling parameters (`temperature` 0: greedy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateJob {
    pub messages: Vec<ChatTurn>,
    pub temperature: f64,
    pub top_p: f64,
    pub max_tokens: u32,
    pub seed: Option<u64>,
}

/// A completion from the embedded policy: the prompt exactly as tokenised (chat template
/// applied), the completion's token ids and each one's log-probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generated {
    pub text: String,
    pub prompt_ids: Vec<u32>,
    pub token_ids: Vec<u32>,
    pub logprobs: Vec<f64>,
    /// `stop` (end-of-sequence token) or `length`.
    pub finish_reason: String,
}

impl Message {
    /// The `type` tags of every message, for the mirror test.
    pub const TYPES: [&'static str; 19] = [
        "hello",
        "evaluate",
        "result",
        "error",
        "shutdown",
        "check_problem",
        "problem_report",
        "lease_request",
        "lease_grant",
        "lease_release",
        "generate",
        "generation",
        "train_setup",
        "train_ready",
        "train_step",
        "eval_loss",
        "step_done",
        "save_checkpoint",
        "checkpointed",
    ];

    pub fn protocol(&self) -> u32 {
        match self {
            Message::Hello { protocol, .. }
            | Message::Evaluate { protocol, .. }
            | Message::Result { protocol, .. }
            | Message::Error { protocol, .. }
            | Message::Shutdown { protocol }
            | Message::CheckProblem { protocol, .. }
            | Message::ProblemReport { protocol, .. }
            | Message::LeaseRequest { protocol, .. }
            | Message::LeaseGrant { protocol, .. }
            | Message::LeaseRelease { protocol, .. }
            | Message::Generate { protocol, .. }
            | Message::Generation { protocol, .. }
            | Message::TrainSetup { protocol, .. }
            | Message::TrainReady { protocol, .. }
            | Message::TrainStep { protocol, .. }
            | Message::EvalLoss { protocol, .. }
            | Message::StepDone { protocol, .. }
            | Message::SaveCheckpoint { protocol, .. }
            | Message::Checkpointed { protocol, .. } => *protocol,
        }
    }

    /// One line of the wire format, without the newline.
    pub fn to_line(&self) -> String {
        // Serialising these types cannot fail: no maps with non-string keys.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parse one line, checking the version before the shape so a mismatch is named as such.
    pub fn from_line(line: &str) -> Result<Message, ProtocolError> {
        let trimmed = line.trim_end();
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(trimmed) {
            if let Some(found) = value.get("protocol").and_then(|p| p.as_u64()) {
                if found != u64::from(PROTOCOL_VERSION) {
                    return Err(ProtocolError::VersionMismatch {
                        expected: PROTOCOL_VERSION,
                        found: u32::try_from(found).unwrap_or(u32::MAX),
                    });
                }
            }
        }
        serde_json::from_str(trimmed).map_err(|source| ProtocolError::Malformed {
            line: truncate(trimmed, 300),
            source,
        })
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// One example of every message type, with every optional field both set and unset
/// somewhere: what the mirror test sends through Python.
pub fn sample_messages() -> Vec<Message> {
    let env = EnvInfo {
        python: "3.11.7".into(),
        platform: "Linux-x86_64".into(),
        torch: "2.11.0".into(),
        triton: "3.6.0".into(),
        numpy: "2.4.6".into(),
        device: DeviceKind::Cuda,
        interpret: false,
        cuda: Some("13.0".into()),
        driver: None,
        gpus: vec![GpuInfo {
            index: 0,
            name: "NVIDIA H100".into(),
            memory_bytes: 80 << 30,
            capability: "9.0".into(),
        }],
    };
    let job = EvalJob {
        problem: SourceFile {
            name: "relu.py".into(),
            source: "import torch\n# ünïcode\n".into(),
        },
        candidate: SourceFile {
            name: "relu.py".into(),
            source: "class ModelNew: pass\n".into(),
        },
        trials: 5,
        seed: 42,
        tolerance: Some(Tolerance {
            atol: 1e-4,
            rtol: 0.5,
        }),
        overrides: BTreeMap::from([
            ("N".to_string(), serde_json::json!(64)),
            ("EPS".to_string(), serde_json::json!(1e-5)),
        ]),
        device: DeviceRequest::Auto,
        timing: true,
        timing_budget_ms: 400,
        speedup_cap: 10.0,
        profile: true,
        compile_baseline: false,
        allow_aten: Some(vec!["empty_like".into(), "view".into()]),
        shape_check: Some(BTreeMap::from([("N".to_string(), serde_json::json!(37))])),
        gpu_memory_fraction: None,
    };
    let frame = Frame {
        file: "relu.py".into(),
        line: 12,
        function: "forward".into(),
        code: "y = x / 0".into(),
    };
    let verdict = Verdict {
        status: Status::Incorrect,
        stage: Stage::Correctness,
        message: "trial 1, output 0: mismatch".into(),
        error: Some(ErrorInfo {
            exc_type: "ValueError".into(),
            message: "boom".into(),
            frames: vec![frame],
        }),
        mismatch: Some(Mismatch {
            trial: 1,
            output: 0,
            kind: MismatchKind::Value,
            expected: "1.0".into(),
            got: "2.5".into(),
            max_abs_err: Some(1.5),
            max_rel_err: None,
            worst_index: vec![3, 7],
            mismatched: 2,
            total: 1024,
        }),
        trials: vec![TrialStat {
            trial: 0,
            seed: 43,
            outputs: 1,
            max_abs_err: Some(0.0),
            max_rel_err: Some(0.0),
            passed: true,
        }],
        timing: Some(Timing {
            reference: TimingStats {
                median_ms: 1.25,
                iqr_ms: 0.01,
                samples: 100,
                host_median_ms: 1.3,
            },
            candidate: TimingStats {
                median_ms: 0.5,
                iqr_ms: 0.02,
                samples: 100,
                host_median_ms: 0.55,
            },
            speedup: 2.5,
            speedup_low: 2.4,
            speedup_high: 2.6,
            flags: vec![
                TimingFlag::ImplausibleSpeedup,
                TimingFlag::ClockDisagreement,
            ],
            checked_outputs: 3,
            harness_ms: 0.012,
            compiled: Some(TimingStats {
                median_ms: 0.9,
                iqr_ms: 0.01,
                samples: 100,
                host_median_ms: 0.95,
            }),
        }),
        timing_note: None,
        tolerance: Tolerance {
            atol: 1e-4,
            rtol: 1e-4,
        },
        provenance: Some(Provenance {
            kernels: vec![KernelLaunches {
                name: "relu_kernel".into(),
                launches: 12,
            }],
            calls: 12,
            calls_without_launch: 0,
            gpu_share: Some(0.97),
        }),
    };
    vec![
        Message::Hello {
            protocol: PROTOCOL_VERSION,
            worker_version: "0.1.0".into(),
            pid: 1234,
            env: env.clone(),
            sandbox: Sandbox {
                landlock_abi: Some(7),
                filesystem: true,
                network: true,
                signals: true,
                gpu_memory_fraction: Some(0.2),
                notes: vec![],
            },
        },
        Message::Hello {
            protocol: PROTOCOL_VERSION,
            worker_version: "0.1.0".into(),
            pid: 1,
            env: EnvInfo {
                device: DeviceKind::Cpu,
                interpret: true,
                cuda: None,
                gpus: vec![],
                ..env
            },
            sandbox: Sandbox {
                landlock_abi: None,
                filesystem: false,
                network: false,
                signals: false,
                gpu_memory_fraction: None,
                notes: vec!["landlock unavailable".into()],
            },
        },
        Message::Evaluate {
            protocol: PROTOCOL_VERSION,
            id: "job-1".into(),
            job: job.clone(),
        },
        Message::Evaluate {
            protocol: PROTOCOL_VERSION,
            id: "job-2".into(),
            job: EvalJob {
                tolerance: None,
                overrides: BTreeMap::new(),
                device: DeviceRequest::Cpu,
                timing: false,
                profile: false,
                allow_aten: None,
                shape_check: None,
                gpu_memory_fraction: Some(0.9),
                ..job
            },
        },
        Message::Result {
            protocol: PROTOCOL_VERSION,
            id: "job-1".into(),
            outcome: Outcome::Verdict(verdict.clone()),
            elapsed_ms: 12.5,
        },
        Message::Result {
            protocol: PROTOCOL_VERSION,
            id: "job-2".into(),
            outcome: Outcome::Verdict(Verdict {
                status: Status::Correct,
                error: None,
                mismatch: None,
                timing: None,
                timing_note: Some("timing unavailable in CPU mode".into()),
                provenance: None,
                ..verdict
            }),
            elapsed_ms: 3.0,
        },
        Message::Result {
            protocol: PROTOCOL_VERSION,
            id: "job-3".into(),
            outcome: Outcome::ProblemError(ProblemError {
                message: "relu.py: problem file defines no `get_inputs`".into(),
                error: None,
            }),
            elapsed_ms: 1.0,
        },
        Message::Error {
            protocol: PROTOCOL_VERSION,
            id: None,
            message: "not JSON".into(),
        },
        Message::Error {
            protocol: PROTOCOL_VERSION,
            id: Some("job-9".into()),
            message: "bad".into(),
        },
        Message::Shutdown {
            protocol: PROTOCOL_VERSION,
        },
        Message::CheckProblem {
            protocol: PROTOCOL_VERSION,
            id: "check-1".into(),
            job: ProblemCheckJob {
                problem: SourceFile {
                    name: "relu.py".into(),
                    source: "N = 4\n".into(),
                },
                overrides: BTreeMap::from([("N".to_string(), serde_json::json!(8))]),
                seed: 7,
                seeds: 3,
                tolerance: None,
                device: DeviceRequest::Cpu,
            },
        },
        Message::ProblemReport {
            protocol: PROTOCOL_VERSION,
            id: "check-1".into(),
            report: ProblemReport {
                findings: vec!["output 0 is constant".into()],
                error: None,
                outputs: vec![
                    OutputSummary {
                        shape: vec![4, 8],
                        dtype: "float32".into(),
                        std: Some(0.99),
                        tolerance_scale: Some(1.8e-4),
                    },
                    OutputSummary {
                        shape: vec![],
                        dtype: "int64".into(),
                        std: None,
                        tolerance_scale: None,
                    },
                ],
                max_forward_ms: 1.5,
            },
            elapsed_ms: 30.0,
        },
        Message::LeaseRequest {
            protocol: PROTOCOL_VERSION,
            id: "job-1".into(),
            kind: LeaseKind::Exclusive,
        },
        Message::LeaseGrant {
            protocol: PROTOCOL_VERSION,
            id: "job-1".into(),
            kind: LeaseKind::Shared,
        },
        Message::LeaseRelease {
            protocol: PROTOCOL_VERSION,
            id: "job-1".into(),
        },
        Message::Generate {
            protocol: PROTOCOL_VERSION,
            id: "gen-1".into(),
            job: GenerateJob {
                messages: vec![
                    ChatTurn {
                        role: "system".into(),
                        content: "You write Triton kernels.".into(),
                    },
                    ChatTurn {
                        role: "user".into(),
                        content: "relu, please".into(),
                    },
                ],
                temperature: 0.7,
                top_p: 0.95,
                max_tokens: 64,
                seed: Some(3),
            },
        },
        Message::Generation {
            protocol: PROTOCOL_VERSION,
            id: "gen-1".into(),
            result: Generated {
                text: "```python\n```".into(),
                prompt_ids: vec![1, 9690, 198],
                token_ids: vec![4236, 2],
                logprobs: vec![-0.25, -1.5],
                finish_reason: "stop".into(),
            },
            elapsed_ms: 812.5,
        },
        Message::TrainSetup {
            protocol: PROTOCOL_VERSION,
            id: "train-1".into(),
            setup: TrainSetup {
                model: "configs/models/tiny-llama".into(),
                resume: None,
                lora: Some(LoraSetup {
                    rank: 16,
                    alpha: 32.0,
                    dropout: 0.05,
                    target_modules: vec!["q_proj".into(), "v_proj".into()],
                }),
                lr: 1e-5,
                min_lr: 1e-6,
                warmup_steps: 10,
                total_steps: 100,
                weight_decay: 0.0,
                grad_clip: 1.0,
                gradient_checkpointing: true,
                dtype: "auto".into(),
                seed: 7,
                attention: "sdpa".into(),
                compile: "off".into(),
                one_per_row: false,
            },
        },
        Message::TrainSetup {
            protocol: PROTOCOL_VERSION,
            id: "train-2".into(),
            setup: TrainSetup {
                model: "smollm2".into(),
                resume: Some("out/checkpoint-000020".into()),
                lora: None,
                lr: 2e-5,
                min_lr: 0.0,
                warmup_steps: 0,
                total_steps: 40,
                weight_decay: 0.1,
                grad_clip: 0.0,
                gradient_checkpointing: false,
                dtype: "fp32".into(),
                seed: 0,
                attention: "flex_attention".into(),
                compile: "auto".into(),
                one_per_row: true,
            },
        },
        Message::TrainReady {
            protocol: PROTOCOL_VERSION,
            id: "train-1".into(),
            info: TrainInfo {
                parameters: 134_515_008,
                trainable: 134_515_008,
                head_parameters: 28_311_552,
                vocab_size: 49152,
                layers: 30,
                attention_width: 576,
                dtype: "bfloat16".into(),
                device: "cuda".into(),
                world_size: 1,
                gpu_name: Some("NVIDIA H100 80GB HBM3".into()),
                step: 0,
                compiled: true,
                attention: "tritonforge_varlen, rows: cudnn".into(),
            },
        },
        Message::TrainStep {
            protocol: PROTOCOL_VERSION,
            id: "step-1".into(),
            batch: TrainBatch {
                micro: vec![MicroBatch {
                    input_ids: vec![vec![1, 2, 3, 4]],
                    loss_mask: vec![vec![0, 0, 1, 1]],
                    position_ids: vec![vec![0, 1, 0, 1]],
                    lengths: vec![4],
                }],
            },
        },
        Message::EvalLoss {
            protocol: PROTOCOL_VERSION,
            id: "eval-1".into(),
            batch: TrainBatch { micro: vec![] },
        },
        Message::StepDone {
            protocol: PROTOCOL_VERSION,
            id: "step-1".into(),
            stats: StepStats {
                step: 1,
                loss: 2.5,
                loss_tokens: 2,
                tokens: 4,
                grad_norm: Some(0.75),
                lr: 1e-6,
                elapsed_ms: 12.5,
                memory_bytes: None,
            },
        },
        Message::StepDone {
            protocol: PROTOCOL_VERSION,
            id: "eval-1".into(),
            stats: StepStats {
                step: 1,
                loss: 2.25,
                loss_tokens: 2,
                tokens: 4,
                grad_norm: None,
                lr: 1e-6,
                elapsed_ms: 3.0,
                memory_bytes: Some(1 << 30),
            },
        },
        Message::SaveCheckpoint {
            protocol: PROTOCOL_VERSION,
            id: "save-1".into(),
            save: SaveJob {
                dir: "out/checkpoint-000001".into(),
                merge_lora: true,
                trainer_state: true,
            },
        },
        Message::Checkpointed {
            protocol: PROTOCOL_VERSION,
            id: "save-1".into(),
            dir: "out/checkpoint-000001".into(),
            step: 1,
        },
    ]
}

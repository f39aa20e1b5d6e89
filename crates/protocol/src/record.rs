//! The evaluation record: one per (problem, candidate, config, environment).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::executor::{DeviceRequest, EnvInfo, Sandbox, StartupTimes, Status, Tolerance, Verdict};

/// Bumped when the record's shape changes; part of the cache key.
pub const RECORD_SCHEMA: u32 = 3;

closed_set! {
    /// How a guard finding weighs, as the guard policy set it.
    pub enum FindingSeverity("guard finding severity") {
        /// The candidate does not run.
        Reject = "reject",
        /// Kept in the record; the candidate runs.
        Warn = "warn",
        Off = "off",
    }
}

/// One finding of the static guard, as the record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardFinding {
    pub rule: String,
    pub severity: FindingSeverity,
    pub line: u32,
    pub column: u32,
    pub message: String,
}

/// A file that took part in an evaluation, identified by content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceRef {
    pub name: String,
    pub path: String,
    pub sha256: String,
}

/// Everything about *how* a candidate is evaluated that can change the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalConfig {
    pub trials: u32,
    pub seed: u64,
    pub tolerance: Option<Tolerance>,
    /// The shape variant's name, when one was chosen.
    pub variant: Option<String>,
    pub overrides: BTreeMap<String, serde_json::Value>,
    pub device: DeviceRequest,
    pub timing: bool,
    /// Wall-clock budget for the candidate's whole process, in milliseconds
    /// (time spent waiting for the GPU is not counted).
    pub budget_ms: u64,
    /// Wall-clock budget for the timed repetitions, milliseconds.
    pub timing_budget_ms: u32,
    /// Speedups above this are flagged as implausible.
    pub speedup_cap: f64,
    /// Measure the candidate kernels' share of GPU time with the profiler.
    pub profile: bool,
    /// Also time `torch.compile(Model)` (cached per problem, variant and environment).
    pub compile_baseline: bool,
    /// The guard policy's fingerprint; `None` when the guard did not run.
    pub guard: Option<String>,
    /// Overrides of a second, unseen shape the candidate must also be right at (GPU mode).
    #[serde(default)]
    pub shape_check: Option<BTreeMap<String, serde_json::Value>>,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            trials: 5,
            seed: 42,
            tolerance: None,
            variant: None,
            overrides: BTreeMap::new(),
            device: DeviceRequest::Auto,
            timing: true,
            budget_ms: 120_000,
            timing_budget_ms: 400,
            speedup_cap: 10.0,
            profile: false,
            compile_baseline: false,
            guard: None,
            shape_check: None,
        }
    }
}

/// How a candidate's evaluation used its device's memory: what its problem needs, what
/// the pool granted, and whether it had to be evaluated again alone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryUse {
    /// The problem's measured need for this evaluation (its peak, timing included when
    /// timed); `None` where the pool admits without knowing it (no device capacity known,
    /// or the problem failed to be measured).
    pub need_bytes: Option<u64>,
    /// The device's memory as the pool saw it (a GPU's total, or a configured capacity).
    pub capacity_bytes: Option<u64>,
    /// The cap on the process's share of the device the candidate last ran under; `None`:
    /// the cap its process was started with.
    pub cap_fraction: Option<f64>,
    /// Time spent waiting for the device's memory to be free enough to admit it (inside
    /// `wall_ms`, outside the budget).
    pub admission_wait_ms: f64,
    /// It ran out of memory while sharing its device and was evaluated again holding the
    /// device alone with its cap lifted; the verdict is that second evaluation's.
    pub retried_alone: bool,
}

/// What the preflight (the candidate's import, tried in a process that never touched the
/// GPU) found for this evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreflightFound {
    /// The import worked; the verdict is the full evaluation's.
    Passed,
    /// The import failed; the verdict is the preflight's, and no GPU process ran.
    Failed,
    /// No conclusion; the verdict is the full evaluation's.
    Inconclusive,
}

/// The preflight of one evaluation, when the pool ran one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreflightUse {
    pub found: PreflightFound,
    /// Why it was inconclusive.
    pub reason: Option<String>,
    /// Host-side wall time of the preflight (inside `wall_ms`).
    pub wall_ms: f64,
}

/// The verdict plus its full context; what the store keeps and `--json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalRecord {
    pub schema: u32,
    /// Content hash of everything that determines the record.
    pub key: String,
    pub problem: SourceRef,
    pub candidate: SourceRef,
    pub config: EvalConfig,
    /// The verdict, its fields inline (as the record always stored them): the executor's
    /// when it answered, else the host's (guard rejection, timeout, crash).
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The static guard's findings (warnings on a candidate that ran; the reasons for a
    /// guard rejection).
    pub guard: Vec<GuardFinding>,
    pub environment: EnvInfo,
    /// How the candidate's process was confined.
    pub sandbox: Option<Sandbox>,
    pub worker_version: String,
    /// The last lines the candidate's process wrote to stderr, when it died or hung.
    pub stderr_tail: Option<String>,
    /// Host-side wall time from sending the job to the verdict.
    pub wall_ms: f64,
    /// Executor-side time, when the executor answered.
    pub executor_ms: Option<f64>,
    /// Time spent waiting for GPU leases (inside `wall_ms`, outside the budget).
    pub lease_wait_ms: f64,
    /// Time the candidate held its device alone (timing; its whole life in exclusive mode).
    pub exclusive_ms: f64,
    /// Time it waited for a started process (inside `wall_ms`): the pool's start-up
    /// falling behind shows here.
    #[serde(default)]
    pub start_wait_ms: f64,
    /// Time it waited, before `wall_ms` began, for a place among the candidates the pool
    /// runs at once (`--jobs`; its preflight's too): the pool's concurrency shows here.
    #[serde(default)]
    pub queue_wait_ms: f64,
    /// Time it waited, before `wall_ms` began, for its problem's memory need to be
    /// measured (once per problem, shared by every candidate that came meanwhile).
    #[serde(default)]
    pub prepare_ms: f64,
    /// How long the process that ran it took to start (fork or spawn to hello, CUDA
    /// context and warm-up included), and how long it had been ready, banked as a spare,
    /// before it was asked for (zero when the candidate waited for it).
    #[serde(default)]
    pub process_start_ms: f64,
    #[serde(default)]
    pub process_banked_ms: f64,
    /// The process's own account of that start: its CUDA context, its warm-up, and all
    /// of it to hello.
    #[serde(default)]
    pub process_startup: Option<StartupTimes>,
    /// Which device slot of the pool ran it.
    pub device_slot: u32,
    /// Memory need, grant and out-of-memory retry; `None` when no process ran (guard
    /// rejection) and in records from before it existed.
    #[serde(default)]
    pub memory: Option<MemoryUse>,
    /// The import tried first without a GPU; `None` where the pool does not preflight
    /// (CPU mode by default) and in records from before it existed.
    #[serde(default)]
    pub preflight: Option<PreflightUse>,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    pub tritonforge_version: String,
}

impl EvalRecord {
    pub fn is_correct(&self) -> bool {
        self.verdict.status == Status::Correct
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DeviceKind, Stage};

    fn record() -> EvalRecord {
        EvalRecord {
            schema: RECORD_SCHEMA,
            key: "k".into(),
            problem: SourceRef { name: "relu".into(), path: "relu.py".into(), sha256: "aa".into() },
            candidate: SourceRef { name: "relu".into(), path: "c.py".into(), sha256: "bb".into() },
            config: EvalConfig::default(),
            verdict: Verdict::decided(Status::Rejected, Stage::Guard, "no"),
            guard: vec![GuardFinding {
                rule: "r".into(),
                severity: FindingSeverity::Reject,
                line: 1,
                column: 2,
                message: "m".into(),
            }],
            environment: EnvInfo {
                python: "3.11".into(),
                platform: "linux".into(),
                torch: "2".into(),
                triton: "3".into(),
                numpy: "2".into(),
                device: DeviceKind::Cpu,
                interpret: true,
                cuda: None,
                driver: None,
                gpus: vec![],
            },
            sandbox: None,
            worker_version: "0.1.0".into(),
            stderr_tail: None,
            wall_ms: 1.0,
            executor_ms: None,
            lease_wait_ms: 0.0,
            exclusive_ms: 0.0,
            start_wait_ms: 0.0,
            queue_wait_ms: 0.0,
            prepare_ms: 0.0,
            process_start_ms: 0.0,
            process_banked_ms: 0.0,
            process_startup: None,
            device_slot: 0,
            memory: Some(MemoryUse { need_bytes: Some(1 << 20), ..MemoryUse::default() }),
            preflight: Some(PreflightUse {
                found: PreflightFound::Inconclusive,
                reason: Some("the candidate's import reached the GPU".into()),
                wall_ms: 80.0,
            }),
            created_at: 1,
            tritonforge_version: "0.1.0".into(),
        }
    }

    /// Stored records and `--json` output keep the verdict's fields at the top level.
    #[test]
    fn the_embedded_verdict_keeps_the_stored_shape() {
        let value = serde_json::to_value(record()).unwrap();
        let keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        for k in [
            "status",
            "stage",
            "message",
            "error",
            "mismatch",
            "trials",
            "tolerance",
            "timing",
            "timing_note",
            "provenance",
            "guard",
        ] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
        assert!(!keys.contains(&"verdict"), "{keys:?}");
        assert_eq!(value["status"], "rejected");
        assert_eq!(value["guard"][0]["severity"], "reject");
        let back: EvalRecord = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(back, record());

        let mut extra = value;
        extra["surprise"] = serde_json::json!(1);
        assert!(serde_json::from_value::<EvalRecord>(extra).is_err());
    }

    #[test]
    fn severities_parse_by_their_wire_names() {
        assert_eq!("warn".parse::<FindingSeverity>(), Ok(FindingSeverity::Warn));
        let err = "fatal".parse::<FindingSeverity>().unwrap_err();
        assert!(err.to_string().contains("\"fatal\""), "{err}");
        assert!(err.to_string().contains("reject, warn, off"), "{err}");
    }
}

//! What crosses the wire between `tritonforge serve` and its clients. The server and the
//! balancing client both build on these types, so the two cannot drift apart.
//!
//! Native API (`/v1/...`): a request names a problem (source or suite id), a candidate and
//! either `options` (the `eval` command's flags) or an exact `config` (what a client that
//! resolved the options itself sends, so that a remote record equals a local one). The
//! reply for a finished job carries the full evaluation record, as `eval --json` prints it.
//! [`compat`] holds the KernelBench-style `/eval` shapes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tritonforge_protocol::{DeviceKind, EnvInfo, EvalConfig, EvalRecord, Tolerance};

pub mod compat;

/// Path prefix of the native API.
pub const V1: &str = "/v1";
/// Header naming a client when no bearer token does (per-client limits, listing).
pub const CLIENT_HEADER: &str = "x-tritonforge-client";
/// Header carrying an idempotency key (a body field of the same name wins).
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// A Python file given inline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    /// File stem (`relu`); letters, digits, `_`, `-` and `.` only. Defaults to `problem`
    /// or `candidate`.
    #[serde(default)]
    pub name: Option<String>,
    pub source: String,
    /// Where the file lives on the client: a label the record keeps (`problem.path`), so a
    /// record made remotely reads like one made locally. Its last part must be a file
    /// name of the same kind as `name`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// The `eval` command's flags; any left out take `eval`'s defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalOptions {
    pub trials: Option<u32>,
    pub seed: Option<u64>,
    /// Shape variant (`small`, `heldout`, ...); default as `eval`.
    pub variant: Option<String>,
    /// `off`, or a variant the candidate must also be right at.
    pub shape_check: Option<String>,
    /// Wall-clock budget of the candidate's process, milliseconds.
    pub budget_ms: Option<u64>,
    pub timing: Option<bool>,
    pub timing_budget_ms: Option<u32>,
    pub speedup_cap: Option<f64>,
    pub profile: Option<bool>,
    pub compile_baseline: Option<bool>,
}

/// One evaluation to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// The problem's source; or name it with `problem_id`.
    #[serde(default)]
    pub problem: Option<SourceSpec>,
    /// A problem of the server's suite, by id (`L1-001`), key (`level1/relu`) or name.
    #[serde(default)]
    pub problem_id: Option<String>,
    pub candidate: SourceSpec,
    #[serde(default)]
    pub options: EvalOptions,
    /// The exact configuration (overrides `options`); the balancing client sends it.
    #[serde(default)]
    pub config: Option<EvalConfig>,
    /// A problem given inline has no manifest: its tolerance can come with it.
    #[serde(default)]
    pub tolerance: Option<Tolerance>,
    /// A repeat with the same key (from the same client) returns the first job.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// Several evaluations in one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub evaluations: Vec<SubmitRequest>,
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl JobState {
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Done | JobState::Failed | JobState::Cancelled)
    }
}

/// What submitting did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Submitted {
    pub id: String,
    pub state: JobState,
    /// The idempotency key named an earlier job: this is it.
    pub existing: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchSubmitted {
    pub jobs: Vec<Submitted>,
}

/// A job and, once done, its record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: String,
    pub state: JobState,
    pub client: String,
    pub problem: String,
    pub candidate: String,
    pub created_ms: i64,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    /// Runs started (more than one only after a server restart).
    pub attempts: u32,
    /// The verdict came from the store without running.
    pub cached: bool,
    /// Why the evaluator gave no verdict (`failed`).
    pub error: Option<String>,
    pub record: Option<EvalRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobList {
    pub evaluations: Vec<JobView>,
}

/// `GET /v1/info`: what a client needs to know to send exact configurations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub version: String,
    pub device: DeviceKind,
    pub environment: EnvInfo,
    /// Candidates the pool evaluates at once.
    pub capacity: usize,
    pub queued: u64,
    pub running: u64,
    /// Whether the server stopped accepting work (shutting down).
    pub draining: bool,
}

/// `POST /v1/problem-checks`: validate a problem at one shape (suite validation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProblemCheckRequest {
    pub problem: SourceSpec,
    #[serde(default)]
    pub tolerance: Option<Tolerance>,
    #[serde(default)]
    pub overrides: BTreeMap<String, serde_json::Value>,
    pub budget_ms: u64,
}

/// Every error: a sentence, and the request field it is about when there is one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiError {
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// Whether `name` is a safe file stem (it names files in the worker's scratch directory).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_leave_the_scratch_directory_are_refused() {
        for ok in ["relu", "level1_relu", "a-b.c"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "../x", "a/b", ".hidden", "a b", "ä", &"x".repeat(129)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn requests_refuse_unknown_fields_and_take_defaults() {
        let r: SubmitRequest =
            serde_json::from_str(r#"{"problem_id":"relu","candidate":{"source":"x"}}"#).unwrap();
        assert_eq!(r.options, EvalOptions::default());
        let err = serde_json::from_str::<SubmitRequest>(
            r#"{"problem_id":"relu","candidate":{"source":"x"},"trails":3}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("trails"), "{err}");
    }
}

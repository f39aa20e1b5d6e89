//! Evaluate candidates against problems: each in a fresh, pre-started Python
//! process; verdicts decided by the executor or, for hangs and crashes, by the
//! host; every record keyed by content and written to the store as it finishes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sha2::{Digest, Sha256};
use tritonforge_protocol::record::RECORD_SCHEMA;
use tritonforge_protocol::{
    DeviceKind, EnvInfo, EvalConfig, EvalJob, EvalRecord, FindingSeverity, GuardFinding, MemoryUse,
    Message, Outcome, PreflightFound, PreflightOutcome, PreflightUse, ProblemCheckJob,
    ProblemError, ProblemReport, ProtocolError, RuntimePolicy, SourceFile, SourceRef, Stage,
    Status, TaggedVerdict, TimingStats, Verdict, PROTOCOL_VERSION,
};
use tritonforge_store::{Store, StoreError};
use tritonforge_suite::{Candidate, Problem, SuiteError};

pub mod batch;
mod cost;
mod device_lock;
pub mod doctor;
mod fork_server;
pub mod import;
pub mod lane;
pub mod memory;
mod need;
pub mod places;
pub mod pool;
pub mod report;
pub mod service;
pub mod setup;
pub mod validate;

pub use batch::{evaluate_all, evaluate_sources, BatchResults, PairOutcome};
pub use memory::{Charge, JobKind, MemoryBudget};
pub use need::{Measured, MemoryPlan};
pub use places::Priority;
pub use pool::{
    AdmissionEvent, Execution, Exit, LeaseEvent, Pool, PoolConfig, PoolStart, Preflight,
    PreflightRun, ShareMode, WorkerSpec, START_LEASE,
};
pub use service::{BoxFuture, EvalService};
pub use setup::{EvalSettings, EvaluatorSetup, ShapeCheck, TimingSettings, Workspace};
pub use tritonforge_suite::SourcePair;
pub use validate::{
    validate_suite, CheckDone, Checked, FailedCheck, ValidateSpec, ValidationReport,
};

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The problem, not the candidate, is broken.
    #[error("problem {path}: {message}")]
    Problem { path: PathBuf, message: String },
    #[error("could not start an executor process: {reason}{}", tail(stderr))]
    WorkerStart { reason: String, stderr: String },
    #[error("executor refused the job: {0}")]
    WorkerRefused(String),
    #[error("talking to an executor process: {0}")]
    WorkerIo(#[source] std::io::Error),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Suite(#[from] SuiteError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the pool is shut down")]
    PoolClosed,
    #[error("an evaluation task failed: {0}")]
    TaskFailed(String),
    /// A setting from the environment that cannot be used.
    #[error("{0}")]
    Setting(String),
    /// An evaluation server could not give a verdict (none healthy, a refusal, a failure).
    #[error("evaluation server: {0}")]
    Remote(String),
}

fn tail(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("\n--- worker stderr ---\n{stderr}")
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Everything that determines a record; its hash is the record's key.
#[derive(Serialize)]
struct KeyParts<'a> {
    schema: u32,
    protocol: u32,
    worker: &'a str,
    problem: (&'a str, String),
    candidate: (&'a str, String),
    config: &'a EvalConfig,
    env: &'a EnvInfo,
    runtime: &'a RuntimePolicy,
}

/// The content hash of an evaluation: same inputs, same key, same verdict.
pub fn cache_key(
    worker_fingerprint: &str,
    problem: &Problem,
    candidate: &Candidate,
    config: &EvalConfig,
    env: &EnvInfo,
    runtime: &RuntimePolicy,
) -> String {
    let parts = KeyParts {
        runtime,
        schema: RECORD_SCHEMA,
        protocol: PROTOCOL_VERSION,
        worker: worker_fingerprint,
        problem: (&problem.name, sha256_hex(problem.source.as_bytes())),
        candidate: (&candidate.name, sha256_hex(candidate.source.as_bytes())),
        config,
        env,
    };
    sha256_hex(serde_json::to_string(&parts).unwrap_or_default().as_bytes())
}

/// A finished evaluation and whether it came from the cache.
#[derive(Debug, Clone)]
pub struct Evaluation {
    pub record: EvalRecord,
    pub cached: bool,
}

/// The pool plus the store: what `tritonforge eval` and, later, the agent call.
pub struct Evaluator {
    pool: Pool,
    store: Option<Mutex<Store>>,
    /// Identifies the executor code (hash of the embedded worker package).
    worker_fingerprint: String,
    /// Re-evaluate even when a record exists (the new one replaces it).
    pub refresh: bool,
    /// The static guard's policy and its fingerprint (hashed once); `None` runs no guard.
    guard: Option<(tritonforge_guard::GuardRules, String)>,
    /// Problems' memory needs by measurement key, each measured once however many
    /// candidates of a batch ask at the same time.
    needs: Mutex<HashMap<String, need::NeedCell>>,
    /// One lock per evaluation key in flight: an identical request arriving meanwhile
    /// (G samples of a group writing the same code, a client's retry) waits for the first
    /// and then reads its stored verdict instead of running again.
    inflight: Mutex<HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
    /// Executor times seen by problem: the pool starts the costliest candidates first.
    costs: cost::Costs,
}

impl Evaluator {
    pub fn new(pool: Pool, store: Option<Store>, worker_fingerprint: String) -> Evaluator {
        Evaluator {
            pool,
            store: store.map(Mutex::new),
            worker_fingerprint,
            refresh: false,
            guard: None,
            needs: Mutex::default(),
            inflight: Mutex::default(),
            costs: cost::Costs::default(),
        }
    }

    /// Run the static guard before every evaluation: a `reject` finding ends it as
    /// `rejected` at stage `guard` without starting the candidate.
    pub fn with_guard(mut self, policy: tritonforge_guard::GuardRules) -> Evaluator {
        let fingerprint = sha256_hex(policy.fingerprint().as_bytes())[..16].to_string();
        self.guard = Some((policy, fingerprint));
        self
    }

    /// `config` as this evaluator runs it (the guard policy is part of it, and of the key).
    fn effective(&self, config: &EvalConfig) -> EvalConfig {
        EvalConfig { guard: self.guard.as_ref().map(|(_, f)| f.clone()), ..config.clone() }
    }

    pub fn environment(&self) -> &EnvInfo {
        self.pool.environment()
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub fn key(&self, problem: &Problem, candidate: &Candidate, config: &EvalConfig) -> String {
        cache_key(
            &self.worker_fingerprint,
            problem,
            candidate,
            &self.effective(config),
            self.pool.environment(),
            &self.runtime_policy(problem),
        )
    }

    /// What the runtime layers allow `problem`'s forward: the guard rules' when a guard
    /// runs, else the evaluator's default (the default rules' lists and knobs), under the
    /// problem's mixed-kernel policy (its manifest's, or its level's default when it came
    /// without one), then the rules' own section for its level. Sent with every job: the
    /// dispatch recorder, mode and audit checks run whether or not the static guard does.
    pub fn runtime_policy(&self, problem: &Problem) -> RuntimePolicy {
        let default;
        let rules = match &self.guard {
            Some((rules, _)) => rules,
            None => {
                default = tritonforge_guard::GuardRules::default();
                &default
            }
        };
        let level = problem.meta.level.map(|l| format!("level{l}"));
        let r = rules.runtime_for_level(level.as_deref(), suite_policy(problem));
        RuntimePolicy {
            allow_aten: r.allow_aten.into_iter().collect(),
            allow_torch_compute: r.allow_torch_compute,
            min_kernel_share: r.min_kernel_share,
        }
    }

    /// The stored verdict for `key`, if any. A stored timeout is not reused: whether a
    /// candidate finished in its wall-clock budget depends on what else the machine ran
    /// then, so it runs again (the record stays in the store's history).
    fn cached(&self, key: &str) -> Result<Option<EvalRecord>, EvalError> {
        match &self.store {
            Some(s) if !self.refresh => {
                let store = s.lock().map_err(|_| EvalError::PoolClosed)?;
                Ok(store.get(key)?.filter(|r| r.verdict.status != Status::Timeout))
            }
            _ => Ok(None),
        }
    }

    /// The key of a problem's `torch.compile` baseline: problem content, shape, timing budget, environment.
    fn baseline_key(&self, problem: &Problem, config: &EvalConfig) -> String {
        let parts = serde_json::json!({
            "kind": "torch.compile",
            "problem": sha256_hex(problem.source.as_bytes()),
            "overrides": config.overrides,
            "seed": config.seed,
            "timing_budget_ms": config.timing_budget_ms,
            "env": self.pool.environment(),
            "worker": self.worker_fingerprint,
        });
        sha256_hex(parts.to_string().as_bytes())
    }

    fn stored_baseline(&self, key: &str) -> Result<Option<TimingStats>, EvalError> {
        match &self.store {
            Some(s) => {
                let store = s.lock().map_err(|_| EvalError::PoolClosed)?;
                Ok(store.get_baseline(key)?)
            }
            None => Ok(None),
        }
    }

    /// Get ready for candidates of `problem`: measure its memory need now (once per
    /// problem and shapes, then stored), so that its first candidates do not wait for
    /// it. Worth calling as soon as the problem is known: an RL step draws its problems,
    /// then generates for seconds before the first candidate exists. A problem too big
    /// for the device is the same error its candidates would get.
    pub async fn prepare(&self, problem: &Problem, config: &EvalConfig) -> Result<(), EvalError> {
        let config = &self.effective(config);
        let timed = config.timing && self.device() == DeviceKind::Cuda;
        self.memory_plan(problem, config, timed).await.map(|_| ())
    }

    /// Evaluate one pair (or return the stored verdict); the record is stored before this
    /// returns. With a store, identical pairs evaluated at once run once.
    pub async fn evaluate(
        &self,
        problem: &Problem,
        candidate: &Candidate,
        config: &EvalConfig,
    ) -> Result<Evaluation, EvalError> {
        let key = self.key(problem, candidate, config);
        if let Some(record) = self.cached(&key)? {
            return Ok(Evaluation { record, cached: true });
        }
        if self.store.is_none() || self.refresh {
            return self.evaluate_key(key, problem, candidate, config).await;
        }
        let lock = {
            let mut map = self.inflight.lock().map_err(|_| EvalError::PoolClosed)?;
            map.entry(key.clone()).or_default().clone()
        };
        let result = async {
            let _turn = lock.lock().await;
            if let Some(record) = self.cached(&key)? {
                return Ok(Evaluation { record, cached: true });
            }
            self.evaluate_key(key.clone(), problem, candidate, config).await
        }
        .await;
        if let Ok(mut map) = self.inflight.lock() {
            // The last one out removes the entry (the map holds one reference, we another).
            if map.get(&key).is_some_and(|l| std::sync::Arc::strong_count(l) <= 2) {
                map.remove(&key);
            }
        }
        result
    }

    async fn evaluate_key(
        &self,
        key: String,
        problem: &Problem,
        candidate: &Candidate,
        config: &EvalConfig,
    ) -> Result<Evaluation, EvalError> {
        let config = &self.effective(config);
        let guard_started = std::time::Instant::now();
        // Where the problem's policy lets PyTorch compute run (levels 3 and 4), the static
        // rule against it only warns; the runtime share check takes its place.
        let mixed = self.runtime_policy(problem).allow_torch_compute;
        let report = self.guard.as_ref().map(|(p, _)| {
            if mixed {
                tritonforge_guard::check(&candidate.source, &p.for_mixed())
            } else {
                tritonforge_guard::check(&candidate.source, p)
            }
        });
        let guard_ms = guard_started.elapsed().as_secs_f64() * 1000.0;
        let findings: Vec<GuardFinding> =
            report.as_ref().map(|r| r.findings.iter().map(to_record).collect()).unwrap_or_default();
        let mut record = self.blank_record(key, problem, candidate, config, findings);
        if report.as_ref().is_some_and(|r| r.rejects()) {
            let reasons: Vec<String> = record
                .guard
                .iter()
                .filter(|f| f.severity == FindingSeverity::Reject)
                .map(|f| format!("line {}: [{}] {}", f.line, f.rule, f.message))
                .collect();
            record.verdict.status = Status::Rejected;
            record.verdict.stage = Stage::Guard;
            record.verdict.message = format!("the guard rejected it: {}", reasons.join("; "));
            record.wall_ms = guard_ms;
            self.put(&record, problem, candidate)?;
            return Ok(Evaluation { record, cached: false });
        }
        let job = EvalJob {
            problem: SourceFile { name: file_name(&problem.path), source: problem.source.clone() },
            candidate: SourceFile {
                name: file_name(&candidate.path),
                source: candidate.source.clone(),
            },
            trials: config.trials,
            seed: config.seed,
            tolerance: config.tolerance,
            overrides: config.overrides.clone(),
            device: config.device,
            timing: config.timing,
            timing_budget_ms: config.timing_budget_ms,
            speedup_cap: config.speedup_cap,
            profile: config.profile,
            compile_baseline: false,
            runtime: self.runtime_policy(problem),
            shape_check: config.shape_check.clone(),
            gpu_memory_fraction: None,
        };
        // The torch.compile baseline is timed once per problem, variant and environment.
        let baseline_key =
            (config.compile_baseline && config.timing).then(|| self.baseline_key(problem, config));
        let stored = match &baseline_key {
            Some(k) => self.stored_baseline(k)?,
            None => None,
        };
        let job = EvalJob {
            compile_baseline: config.compile_baseline && config.timing && stored.is_none(),
            ..job
        };
        let budget = Duration::from_millis(config.budget_ms);
        // A candidate whose import fails needs no GPU process: on a GPU its import is
        // tried first in a process that never touched the device, and a failure there
        // that cannot depend on the device is the verdict (`Pool::preflight`).
        let preflight = self.pool.preflight(&job, budget).await;
        let preflight_ms = preflight.as_ref().map_or(0.0, |p| p.wall_ms);
        record.queue_wait_ms = preflight.as_ref().map_or(0.0, |p| p.queue_wait_ms);
        if let Some(run) = preflight {
            let (found, reason) = match &run.outcome {
                PreflightOutcome::Passed {} => (PreflightFound::Passed, None),
                PreflightOutcome::Failed { .. } => (PreflightFound::Failed, None),
                PreflightOutcome::Inconclusive { reason } => {
                    (PreflightFound::Inconclusive, Some(reason.clone()))
                }
            };
            record.preflight = Some(PreflightUse { found, reason, wall_ms: run.wall_ms });
            if let PreflightOutcome::Failed { verdict: TaggedVerdict::Verdict(verdict) } =
                run.outcome
            {
                record.verdict = verdict;
                record.executor_ms = run.executor_ms;
                record.wall_ms = run.wall_ms;
                self.put(&record, problem, candidate)?;
                return Ok(Evaluation { record, cached: false });
            }
        }
        // Admitted once its problem's need fits the device beside those running, under a
        // cap that follows that need; a problem the device cannot hold is a problem error.
        let timed = config.timing && self.device() == DeviceKind::Cuda;
        let preparing = std::time::Instant::now();
        let plan = self.memory_plan(problem, config, timed).await?;
        record.prepare_ms = preparing.elapsed().as_secs_f64() * 1000.0;
        let job = EvalJob { gpu_memory_fraction: plan.cap, ..job };
        // Timed or not, and at which shapes, a problem's candidates cost differently.
        let cost_key = sha256_hex(
            serde_json::json!([problem.source, job.overrides, job.shape_check, job.timing])
                .to_string()
                .as_bytes(),
        );
        let priority = self.costs.priority(&cost_key, &candidate.source);
        let mut execution = self.pool.run(&job, budget, plan.charge, priority).await?;
        // Sharing a device, a candidate may still run out of memory: a neighbour took more
        // than its problem's need, or its own cap was too tight. One that did, anywhere in
        // its life (building the models, drawing inputs, trials, timing, the reference), is
        // evaluated once more holding the device and its memory alone, its cap lifted to
        // 90%, so that an honest solution is not failed for sharing.
        let retried = self.pool.shares_devices() && out_of_memory(&execution.exit);
        let alone_job =
            || EvalJob { gpu_memory_fraction: Some(memory::ALONE_FRACTION), ..job.clone() };
        if retried {
            let again = self.pool.run_alone(&alone_job(), budget).await?;
            execution = again.after(&execution);
        }
        // A process with fewer hardware queues than the driver's cannot see work a candidate
        // left running on another stream at return: one that launched there is evaluated
        // once more in a process started with the driver's queues, and that is its verdict.
        // That run holds the device and its memory alone (as after running out of memory),
        // so that it cannot fail for sharing with nothing left to retry it; it is rare (the
        // guard rejects streams before they run).
        let requeued = needs_hardware_queues(&execution.exit);
        if requeued {
            let again = self.pool.run_alone_with_driver_queues(&alone_job(), budget).await?;
            execution = again.after(&execution);
        }
        let alone = retried || requeued || !self.pool.shares_devices();
        record.memory = Some(MemoryUse {
            need_bytes: plan.need,
            capacity_bytes: self.pool.memory_budget().map(|b| b.capacity_bytes),
            cap_fraction: if retried || requeued { Some(memory::ALONE_FRACTION) } else { plan.cap },
            admission_wait_ms: execution.admission_wait_ms,
            retried_alone: retried,
        });
        record.environment = execution.env.clone();
        record.wall_ms = execution.wall_ms + preflight_ms;
        record.lease_wait_ms = execution.lease_wait_ms;
        record.exclusive_ms = execution.exclusive_ms;
        record.start_wait_ms = execution.start_wait_ms;
        record.queue_wait_ms += execution.queue_wait_ms;
        record.process_start_ms = execution.process_start_ms;
        record.process_banked_ms = execution.process_banked_ms;
        record.process_startup = execution.process_startup;
        record.device_slot = u32::try_from(execution.slot).unwrap_or(u32::MAX);
        if let Exit::Answered { executor_ms, .. } = &execution.exit {
            self.costs.observe(&cost_key, *executor_ms);
        }
        match execution.exit {
            Exit::Answered { outcome: Outcome::ProblemError(p), .. }
                if alone && p.error.as_ref().is_some_and(|e| e.out_of_memory) =>
            {
                record.verdict = out_of_memory_alone(p, plan.need);
            }
            Exit::Answered { outcome: Outcome::ProblemError(p), .. } => {
                return Err(EvalError::Problem { path: problem.path.clone(), message: p.message })
            }
            Exit::Answered { outcome: Outcome::Verdict(v), executor_ms } => {
                record.verdict = v;
                record.executor_ms = Some(executor_ms);
                if let Some(t) = record.verdict.timing.as_mut() {
                    match (&t.compiled, stored) {
                        (Some(fresh), _) => {
                            if let (Some(s), Some(k)) = (&self.store, &baseline_key) {
                                let store = s.lock().map_err(|_| EvalError::PoolClosed)?;
                                store.put_baseline(k, &problem.name, fresh)?;
                            }
                        }
                        (None, Some(cached)) => t.compiled = Some(cached),
                        (None, None) => {}
                    }
                }
            }
            Exit::Reply { message } => {
                return Err(EvalError::WorkerRefused(format!(
                    "unexpected reply {}",
                    message.to_line()
                )))
            }
            Exit::TimedOut { stderr_tail, gpu_hold, in_baseline } => {
                record.verdict.status = Status::Timeout;
                record.verdict.message = match gpu_hold {
                    None if in_baseline => "the candidate passed correctness, but compiling the reference with torch.compile for the compiled baseline did not finish within its allowance (the reference's cost, not the candidate's); rerun without --compile-baseline to time it against eager".to_string(),
                    Some(limit) => format!(
                        "the candidate held its GPU for import, build and correctness longer than the {:.0}s limit (a kernel that never ends, or far too slow); its process group was killed",
                        limit.as_secs_f64()
                    ),
                    None => format!(
                        "the candidate did not finish within its wall-clock budget of {:.1}s; its process group was killed (an infinite loop, or far too slow)",
                        budget.as_secs_f64()
                    ),
                };
                record.stderr_tail = Some(stderr_tail).filter(|s| !s.is_empty());
            }
            Exit::Crashed { exit, stderr_tail } => {
                record.verdict.status = Status::RuntimeError;
                record.verdict.message = crash_message(&exit, &stderr_tail, &job.candidate.name);
                record.stderr_tail = Some(stderr_tail).filter(|s| !s.is_empty());
            }
        }
        if retried {
            record.verdict.message.push_str(
                " (it ran out of memory while sharing its device and was evaluated again alone, with 90% of the device's memory; this is that verdict)",
            );
        }
        if requeued && record.verdict.needs_hardware_queues {
            // A process started with the driver's queues never says this of itself: the
            // candidate changed what the worker reads.
            record.verdict.status = Status::Rejected;
            record.verdict.stage = Stage::Provenance;
            record.verdict.message = format!(
                "[runtime-patched] evaluated again in a process with the driver's hardware queues, the worker still found too few: the candidate changed what the evaluator reads ({})",
                record.verdict.message
            );
        } else if requeued {
            record.verdict.message.push_str(
                " (it launched work on another stream in a process with fewer hardware queues than the driver's 8, where work left running at return cannot be seen, and was evaluated again alone in a process with 8; this is that verdict)",
            );
        }
        self.put(&record, problem, candidate)?;
        Ok(Evaluation { record, cached: false })
    }

    /// Store the record with both sources (kept once per content), so the dashboard can
    /// show what was evaluated.
    fn put(
        &self,
        record: &EvalRecord,
        problem: &Problem,
        candidate: &Candidate,
    ) -> Result<(), EvalError> {
        if let Some(s) = &self.store {
            let store = s.lock().map_err(|_| EvalError::PoolClosed)?;
            store.put_with_sources(record, &problem.source, &candidate.source)?;
        }
        Ok(())
    }

    /// A record with everything known before the candidate runs.
    fn blank_record(
        &self,
        key: String,
        problem: &Problem,
        candidate: &Candidate,
        config: &EvalConfig,
        guard: Vec<GuardFinding>,
    ) -> EvalRecord {
        EvalRecord {
            schema: RECORD_SCHEMA,
            key,
            problem: SourceRef {
                name: problem.name.clone(),
                path: problem.path.display().to_string(),
                sha256: sha256_hex(problem.source.as_bytes()),
            },
            candidate: SourceRef {
                name: candidate.name.clone(),
                path: candidate.path.display().to_string(),
                sha256: sha256_hex(candidate.source.as_bytes()),
            },
            config: config.clone(),
            verdict: Verdict::decided(Status::RuntimeError, Stage::Process, String::new()),
            guard,
            environment: self.pool.environment().clone(),
            sandbox: Some(self.pool.sandbox().clone()),
            worker_version: self.pool.worker_version().to_string(),
            stderr_tail: None,
            wall_ms: 0.0,
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
            memory: None,
            preflight: None,
            created_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            tritonforge_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// The problem's mixed-kernel policy as the guard takes it: the manifest's resolved one,
/// or, for a problem that came with a level but no policy (a queued job, a row), the
/// level's built-in default.
fn suite_policy(problem: &Problem) -> Option<tritonforge_guard::SuitePolicy> {
    let meta = &problem.meta;
    let p = meta.policy.or_else(|| meta.level.and_then(tritonforge_suite::default_level_policy))?;
    Some(tritonforge_guard::SuitePolicy {
        allow_torch_compute: p.allow_torch_compute,
        min_kernel_share: p.min_kernel_share,
    })
}

fn to_record(f: &tritonforge_guard::Finding) -> GuardFinding {
    GuardFinding {
        rule: f.rule.clone(),
        severity: match f.severity {
            tritonforge_guard::Severity::Reject => FindingSeverity::Reject,
            tritonforge_guard::Severity::Warn => FindingSeverity::Warn,
            tritonforge_guard::Severity::Off => FindingSeverity::Off,
        },
        line: f.line,
        column: f.column,
        message: f.message.clone(),
    }
}

impl Evaluator {
    /// Validate a problem at one shape variant in a fresh process (suite validation).
    /// A hang or crash becomes a finding, so validation can report every problem.
    pub async fn check_problem(
        &self,
        problem: &Problem,
        overrides: std::collections::BTreeMap<String, serde_json::Value>,
        budget: Duration,
    ) -> Result<ProblemReport, EvalError> {
        let job = ProblemCheckJob {
            problem: SourceFile { name: file_name(&problem.path), source: problem.source.clone() },
            overrides: overrides.clone(),
            seed: 42,
            seeds: 3,
            tolerance: problem.meta.tolerance(),
            device: tritonforge_protocol::DeviceRequest::Auto,
            gpu_memory_fraction: None,
        };
        let finding = |f: String| ProblemReport {
            findings: vec![f],
            error: None,
            outputs: vec![],
            max_forward_ms: 0.0,
            memory: None,
        };
        // As for a candidate: memory running out while sharing the device is tried again alone.
        let shares = self.pool.shares_devices();
        let mut exit = self.pool.check_problem(&job, budget, !shares).await?.exit;
        if shares && need::reported_out_of_memory(&exit) {
            let alone =
                ProblemCheckJob { gpu_memory_fraction: Some(memory::ALONE_FRACTION), ..job };
            exit = self.pool.check_problem(&alone, budget, true).await?.exit;
        }
        let report = match exit {
            Exit::Reply { message: Message::ProblemReport { report, .. } } => report,
            Exit::Reply { message } => {
                return Err(EvalError::WorkerRefused(format!(
                    "unexpected reply {}",
                    message.to_line()
                )))
            }
            Exit::Answered { .. } => {
                return Err(EvalError::WorkerRefused("unexpected verdict".into()))
            }
            Exit::TimedOut { .. } => {
                finding(format!("checking it took longer than {:.0}s", budget.as_secs_f64()))
            }
            Exit::Crashed { exit, stderr_tail } => {
                finding(crash_message(&exit, &stderr_tail, &file_name(&problem.path)))
            }
        };
        // The need it measured at this shape is kept for the evaluations that follow.
        if let Some(need) = &report.memory {
            let shapes = need::Shapes { overrides: &overrides, shape_check: None };
            self.remember_need(problem, &shapes, need)?;
        }
        Ok(report)
    }
}

/// The worker could not check the candidate with its process's hardware queues.
fn needs_hardware_queues(exit: &Exit) -> bool {
    matches!(exit, Exit::Answered { outcome: Outcome::Verdict(v), .. } if v.needs_hardware_queues)
}

/// An answer that memory ran out, as the executor flagged it (`ErrorInfo::out_of_memory`):
/// in the candidate, the problem's reference or inputs, or the evaluator's own copies. A
/// candidate may raise it falsely; that only buys one more evaluation, alone, with the
/// same checks.
fn out_of_memory(exit: &Exit) -> bool {
    let error = match exit {
        Exit::Answered { outcome: Outcome::Verdict(v), .. } => v.error.as_ref(),
        Exit::Answered { outcome: Outcome::ProblemError(p), .. } => p.error.as_ref(),
        _ => None,
    };
    error.is_some_and(|e| e.out_of_memory)
}

/// The verdict when the problem's own code (its reference, inputs, or the models at
/// unseen shapes) ran out of memory with the device held alone: the candidate's
/// `runtime_error`, since the problem alone fits (or no capacity is known to say otherwise)
/// and the candidate's import ran first in the same process.
fn out_of_memory_alone(p: ProblemError, need: Option<u64>) -> Verdict {
    let measured = need
        .map(|n| format!(" (the problem alone was measured to need {})", memory::human(n)))
        .unwrap_or_default();
    let message = format!(
        "memory ran out with the device held alone, in the problem's own code{measured}; what the candidate allocated (at import, or building ModelNew) may hold the rest: {}",
        p.message
    );
    Verdict { error: p.error, ..Verdict::decided(Status::RuntimeError, Stage::Init, message) }
}

fn crash_message(exit: &str, stderr_tail: &str, candidate_file: &str) -> String {
    let mut msg = format!("the candidate's process {exit} before answering");
    if let Some(fatal) = stderr_tail.lines().find(|l| l.starts_with("Fatal Python error")) {
        msg.push_str(&format!(" ({})", fatal.trim()));
    }
    // faulthandler prints `File "/scratch/.../cand.py", line 11 in forward`, innermost first.
    let needle = format!("/{candidate_file}\", line ");
    if let Some(at) = stderr_tail.lines().find_map(|l| {
        let i = l.find(&needle)?;
        let rest = &l[i + needle.len()..];
        let (line, func) = rest.split_once(" in ")?;
        Some(format!(" at {candidate_file}:{line} in {}", func.trim()))
    }) {
        msg.push_str(&at);
    } else if let Some(last) = stderr_tail.lines().rev().find(|l| !l.trim().is_empty()) {
        msg.push_str(&format!("; last stderr line: {}", last.trim()));
    }
    msg
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "file.py".into())
}

#[cfg(test)]
mod policy_tests {
    use super::*;
    use tritonforge_suite::{MixedPolicy, ProblemMeta};

    fn problem(level: Option<u32>, policy: Option<MixedPolicy>) -> Problem {
        Problem {
            name: "p".into(),
            path: "p.py".into(),
            source: String::new(),
            meta: ProblemMeta { level, policy, ..ProblemMeta::default() },
        }
    }

    #[test]
    fn a_problem_without_a_policy_takes_its_levels_default_never_a_laxer_one() {
        assert_eq!(suite_policy(&problem(Some(1), None)), None);
        let l3 = suite_policy(&problem(Some(3), None)).unwrap();
        assert_eq!((l3.allow_torch_compute, l3.min_kernel_share), (Some(true), Some(0.5)));
        let l4 = suite_policy(&problem(Some(4), None)).unwrap();
        assert_eq!(l4.min_kernel_share, Some(0.3));
        let own = MixedPolicy { allow_torch_compute: Some(true), min_kernel_share: Some(0.7) };
        assert_eq!(suite_policy(&problem(Some(3), Some(own))).unwrap().min_kernel_share, Some(0.7));
        assert_eq!(suite_policy(&problem(None, None)), None);
    }
}

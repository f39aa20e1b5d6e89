//! Each problem's memory need: stored, or measured once by a fresh process (one
//! measurement per problem content, shapes, device and worker, however many candidates
//! ask at once); what the pool charges a job for it, the cap it runs under, or why the
//! problem cannot run on this device at all.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tritonforge_protocol::{EvalConfig, MemoryJob, MemoryNeed, Message, SourceFile};
use tritonforge_suite::Problem;

use crate::memory::{human, Charge, MemoryBudget, ALONE_FRACTION, HEADROOM};
use crate::pool::Exit;
use crate::{file_name, sha256_hex, EvalError, Evaluator};

/// What is known of a problem's memory need.
#[derive(Debug, Clone, PartialEq)]
pub enum Measured {
    /// The pool knows no device capacity (CPU mode without a configured one): nothing is
    /// measured, and nothing admitted by memory.
    Skipped,
    Need(MemoryNeed),
    /// The problem failed to build or run for another reason than memory (or its process
    /// died): the evaluation meets the same failure and names it.
    Failed,
    /// Memory ran out measuring it with the device held alone: why, for the problem error.
    TooBig(String),
}

/// What a job is charged for its device's memory and the cap it runs under.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryPlan {
    pub charge: Charge,
    /// The job's cap, as a share of its device (`EvalJob::gpu_memory_fraction`); `None`:
    /// the cap its process was started with.
    pub cap: Option<f64>,
    /// The need the charge was made from, when measured.
    pub need: Option<u64>,
}

/// The shapes a measurement is keyed by: the problem's constants and its shape check.
pub(crate) struct Shapes<'a> {
    pub overrides: &'a BTreeMap<String, Value>,
    pub shape_check: Option<&'a BTreeMap<String, Value>>,
}

impl Evaluator {
    /// What evaluating against `problem` under `config` takes of a device's memory.
    pub async fn memory_need(
        &self,
        problem: &Problem,
        config: &EvalConfig,
    ) -> Result<Measured, EvalError> {
        if self.pool.memory_budget().is_none() {
            return Ok(Measured::Skipped);
        }
        let shapes =
            Shapes { overrides: &config.overrides, shape_check: config.shape_check.as_ref() };
        let key = self.memory_key(problem, &shapes);
        let cell: NeedCell = {
            let mut needs = self.needs.lock().map_err(|_| EvalError::PoolClosed)?;
            needs.entry(key.clone()).or_default().clone()
        };
        let budget = Duration::from_millis(config.budget_ms);
        let measured = cell
            .get_or_try_init(|| self.measure(problem, &shapes, &key, config.seed, budget))
            .await?;
        Ok(measured.clone())
    }

    /// The charge and cap of a job evaluating against `problem` under `config` (`timed`:
    /// it will be timed), or a problem error when the problem cannot fit the device.
    pub(crate) async fn memory_plan(
        &self,
        problem: &Problem,
        config: &EvalConfig,
        timed: bool,
    ) -> Result<MemoryPlan, EvalError> {
        let unknown = MemoryPlan { charge: Charge::Share, cap: None, need: None };
        let Some(budget) = self.pool.memory_budget() else {
            return Ok(unknown);
        };
        match self.memory_need(problem, config).await? {
            Measured::Skipped | Measured::Failed => Ok(unknown),
            Measured::TooBig(message) => {
                Err(EvalError::Problem { path: problem.path.clone(), message })
            }
            Measured::Need(n) => {
                let need = n.bytes(timed);
                let charge = budget.charge(need);
                if !budget.fits(charge) {
                    let message = too_big(&file_name(&problem.path), &n, timed, &budget);
                    return Err(EvalError::Problem { path: problem.path.clone(), message });
                }
                // Holding its device alone (exclusive mode), a job may take what a run alone does.
                let cap = match self.pool.shares_devices() {
                    true => budget.cap_fraction(need),
                    false => budget.fixed_cap.unwrap_or(ALONE_FRACTION),
                };
                Ok(MemoryPlan { charge: Charge::Bytes(charge), cap: Some(cap), need: Some(need) })
            }
        }
    }

    /// Keep a need a problem check measured (`suite validate`), for the evaluations after it.
    pub(crate) fn remember_need(
        &self,
        problem: &Problem,
        shapes: &Shapes<'_>,
        need: &MemoryNeed,
    ) -> Result<(), EvalError> {
        let key = self.memory_key(problem, shapes);
        self.put_need(&key, problem, need)?;
        if let Ok(mut needs) = self.needs.lock() {
            // A measurement under way for the same key finds it set and keeps its own.
            let _ = needs.entry(key).or_default().set(Measured::Need(need.clone()));
        }
        Ok(())
    }

    /// The key of a measurement: problem content, shapes, environment (the device
    /// included), and the worker (whose copies the need counts).
    fn memory_key(&self, problem: &Problem, shapes: &Shapes<'_>) -> String {
        let parts = serde_json::json!({
            "kind": "memory",
            "problem": sha256_hex(problem.source.as_bytes()),
            "overrides": shapes.overrides,
            "shape_check": shapes.shape_check,
            "env": self.pool.environment(),
            "worker": self.worker_fingerprint,
        });
        sha256_hex(parts.to_string().as_bytes())
    }

    fn put_need(&self, key: &str, problem: &Problem, need: &MemoryNeed) -> Result<(), EvalError> {
        if let Some(s) = &self.store {
            let store = s.lock().map_err(|_| EvalError::PoolClosed)?;
            store.put_memory_need(key, &problem.name, need)?;
        }
        Ok(())
    }

    /// The stored need, or one measured now: in a fresh process sharing the device, and
    /// again alone (its cap lifted) if memory ran out there.
    async fn measure(
        &self,
        problem: &Problem,
        shapes: &Shapes<'_>,
        key: &str,
        seed: u64,
        budget: Duration,
    ) -> Result<Measured, EvalError> {
        if let Some(s) = &self.store {
            let stored = s.lock().map_err(|_| EvalError::PoolClosed)?.get_memory_need(key)?;
            if let Some(need) = stored {
                return Ok(Measured::Need(need));
            }
        }
        let job = MemoryJob {
            problem: SourceFile { name: file_name(&problem.path), source: problem.source.clone() },
            overrides: shapes.overrides.clone(),
            shape_check: shapes.shape_check.cloned(),
            seed,
            device: tritonforge_protocol::DeviceRequest::Auto,
            gpu_memory_fraction: None,
        };
        let shares = self.pool.shares_devices();
        let mut exit = self.pool.measure_memory(&job, budget, !shares).await?.exit;
        if shares && reported_out_of_memory(&exit) {
            let alone = MemoryJob { gpu_memory_fraction: Some(ALONE_FRACTION), ..job };
            exit = self.pool.measure_memory(&alone, budget, true).await?.exit;
        }
        let report = match exit {
            Exit::Reply { message: Message::MemoryReport { report, .. } } => report,
            Exit::TimedOut { .. } | Exit::Crashed { .. } => return Ok(Measured::Failed),
            Exit::Reply { message } => {
                return Err(EvalError::WorkerRefused(format!(
                    "expected a memory report, got {}",
                    message.to_line()
                )))
            }
            Exit::Answered { .. } => {
                return Err(EvalError::WorkerRefused("unexpected verdict".into()))
            }
        };
        match (report.need, report.error) {
            (Some(need), _) => {
                self.put_need(key, problem, &need)?;
                Ok(Measured::Need(need))
            }
            (None, Some(e)) if e.out_of_memory => {
                let capacity = self.pool.memory_budget().map(|b| human(b.capacity_bytes));
                Ok(Measured::TooBig(format!(
                    "{}: memory ran out building and running its reference with the device held alone ({} in all), so no candidate can be evaluated against it here: {}: {}",
                    file_name(&problem.path),
                    capacity.unwrap_or_else(|| "size unknown".into()),
                    e.exc_type,
                    e.message.lines().next().unwrap_or_default()
                )))
            }
            (None, _) => Ok(Measured::Failed),
        }
    }
}

/// A measurement (or a problem check) whose failure was memory running out.
pub(crate) fn reported_out_of_memory(exit: &Exit) -> bool {
    match exit {
        Exit::Reply { message: Message::MemoryReport { report, .. } } => {
            report.error.as_ref().is_some_and(|e| e.out_of_memory)
        }
        Exit::Reply { message: Message::ProblemReport { report, .. } } => {
            report.error.as_ref().is_some_and(|e| e.out_of_memory)
        }
        _ => false,
    }
}

/// Why a problem cannot be evaluated on this device, with the sizes.
fn too_big(file: &str, need: &MemoryNeed, timed: bool, budget: &MemoryBudget) -> String {
    let most = budget.usable().saturating_sub(budget.process_overhead_bytes);
    let timing = match (timed, need.timing_bytes) {
        (true, Some(t)) => format!(", timing {}", human(t)),
        _ => String::new(),
    };
    let mut msg = format!(
        "{file}: one candidate needs {} of device memory at these shapes (correctness {}{timing}; inputs {}, outputs {}, parameters {}, the reference's forward {}), but can have at most {} on this device ({} in all, less {:.0}% headroom",
        human(need.bytes(timed)),
        human(need.correctness_bytes),
        human(need.input_bytes),
        human(need.output_bytes),
        human(need.params_bytes),
        human(need.forward_bytes),
        human(most),
        human(budget.capacity_bytes),
        HEADROOM * 100.0,
    );
    if budget.process_overhead_bytes > 0 {
        msg.push_str(&format!(
            ", and {} for its own process and each of the pool's {} spare ones",
            human(budget.process_overhead_bytes),
            budget.spares
        ));
    }
    msg.push(')');
    if timed && budget.fits(budget.charge(need.correctness_bytes)) {
        msg.push_str(&format!("; untimed it needs {} and fits", human(need.correctness_bytes)));
    }
    msg
}

/// A problem whose need is measured: `Arc` so that a batch's tasks share one cell.
pub(crate) type NeedCell = Arc<tokio::sync::OnceCell<Measured>>;

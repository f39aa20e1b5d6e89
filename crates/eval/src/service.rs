//! Where verdicts come from, behind one trait: the local pool ([`Evaluator`]) or
//! evaluation servers (the balancing client in `tritonforge-client`). The agent's runner,
//! batch evaluation and suite validation take either, so `--eval-server` changes where a
//! candidate runs and nothing else.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tritonforge_protocol::{DeviceKind, EnvInfo, EvalConfig, ProblemReport};
use tritonforge_suite::{Candidate, Problem};

use crate::{EvalError, Evaluation, Evaluator};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub trait EvalService: Send + Sync {
    /// The device candidates run on (decides shape variants and whether timing happens).
    fn device(&self) -> DeviceKind;
    /// The environment fingerprint records carry.
    fn environment(&self) -> &EnvInfo;
    /// Evaluate one pair with an exact configuration (or return the stored verdict).
    fn evaluate<'a>(
        &'a self,
        problem: &'a Problem,
        candidate: &'a Candidate,
        config: &'a EvalConfig,
    ) -> BoxFuture<'a, Result<Evaluation, EvalError>>;
    /// Get ready for candidates of `problem` ahead of the first (what is measured once
    /// per problem); nothing where there is nothing to prepare here (a remote server
    /// measures at its first candidate).
    fn prepare<'a>(
        &'a self,
        problem: &'a Problem,
        config: &'a EvalConfig,
    ) -> BoxFuture<'a, Result<(), EvalError>> {
        let _ = (problem, config);
        Box::pin(async { Ok(()) })
    }
    /// Validate a problem at one shape (suite validation).
    fn check_problem<'a>(
        &'a self,
        problem: &'a Problem,
        overrides: BTreeMap<String, serde_json::Value>,
        budget: Duration,
    ) -> BoxFuture<'a, Result<ProblemReport, EvalError>>;
    /// Stop whatever runs now: a batch that ends early.
    fn abort_all(&self);
}

impl EvalService for Evaluator {
    fn device(&self) -> DeviceKind {
        Evaluator::device(self)
    }

    fn environment(&self) -> &EnvInfo {
        Evaluator::environment(self)
    }

    fn evaluate<'a>(
        &'a self,
        problem: &'a Problem,
        candidate: &'a Candidate,
        config: &'a EvalConfig,
    ) -> BoxFuture<'a, Result<Evaluation, EvalError>> {
        Box::pin(Evaluator::evaluate(self, problem, candidate, config))
    }

    fn prepare<'a>(
        &'a self,
        problem: &'a Problem,
        config: &'a EvalConfig,
    ) -> BoxFuture<'a, Result<(), EvalError>> {
        Box::pin(Evaluator::prepare(self, problem, config))
    }

    fn check_problem<'a>(
        &'a self,
        problem: &'a Problem,
        overrides: BTreeMap<String, serde_json::Value>,
        budget: Duration,
    ) -> BoxFuture<'a, Result<ProblemReport, EvalError>> {
        Box::pin(Evaluator::check_problem(self, problem, overrides, budget))
    }

    fn abort_all(&self) {
        self.pool().kill_all();
    }
}

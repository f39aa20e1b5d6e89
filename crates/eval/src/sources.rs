//! Pairs given as source text rather than files (rows of a training set): evaluated
//! together, each verdict stored as it comes. A row whose PyTorch side is broken is that
//! row's problem error; any other failure is the evaluator's and stops the batch.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::task::JoinSet;
use tritonforge_bench::{Candidate, Problem};

use crate::{EvalError, EvalSettings, Evaluation, Evaluator};

/// One pair: a problem module's source and a candidate's.
#[derive(Debug, Clone)]
pub struct SourcePair {
    /// Names the files the executor writes; anything but ASCII letters and digits becomes `_`.
    pub id: String,
    pub problem: String,
    pub candidate: String,
}

/// What became of one pair.
#[derive(Debug, Clone)]
pub enum PairOutcome {
    Evaluated(Box<Evaluation>),
    /// The pair's problem is broken (it does not import, build or run).
    ProblemError(String),
}

impl SourcePair {
    fn files(&self) -> (Problem, Candidate) {
        let stem: String = self
            .id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let problem = Problem {
            name: format!("row_{stem}"),
            path: PathBuf::from(format!("row_{stem}.py")),
            source: self.problem.clone(),
            meta: Default::default(),
        };
        let candidate = Candidate {
            name: format!("row_{stem}_answer"),
            path: PathBuf::from(format!("row_{stem}_answer.py")),
            source: self.candidate.clone(),
        };
        (problem, candidate)
    }
}

/// Evaluate `pairs` (one outcome each, in order); `progress` hears the count done every
/// ten and at the end. On the evaluator's own failure every process is killed.
pub async fn evaluate_sources(
    evaluator: &Arc<Evaluator>,
    pairs: &[SourcePair],
    settings: &EvalSettings,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<PairOutcome>, EvalError> {
    let mut set = JoinSet::new();
    for (i, pair) in pairs.iter().enumerate() {
        let (problem, candidate) = pair.files();
        let config = settings.config(&problem, evaluator.device());
        let ev = evaluator.clone();
        set.spawn(async move {
            let result = match config {
                Ok(c) => ev.evaluate(&problem, &candidate, &c).await,
                Err(e) => Err(e),
            };
            (i, result)
        });
    }
    let mut outcomes: Vec<Option<PairOutcome>> = vec![None; pairs.len()];
    let mut done = 0;
    while let Some(joined) = set.join_next().await {
        let (i, result) = joined.map_err(|e| EvalError::TaskFailed(e.to_string()))?;
        outcomes[i] = Some(match result {
            Ok(ev) => PairOutcome::Evaluated(Box::new(ev)),
            Err(e @ (EvalError::Problem { .. } | EvalError::Bench(_))) => {
                PairOutcome::ProblemError(e.to_string())
            }
            Err(e) => {
                evaluator.pool().kill_all();
                set.abort_all();
                return Err(e);
            }
        });
        done += 1;
        if done % 10 == 0 || done == pairs.len() {
            progress(done);
        }
    }
    Ok(outcomes.into_iter().flatten().collect())
}

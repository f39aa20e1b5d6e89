//! Batches: many pairs evaluated together, each verdict stored as it comes; and pairs
//! given as source text rather than files (rows of a training set), where a row whose
//! PyTorch side is broken is that row's problem error and any other failure is the
//! evaluator's and stops the batch.

use std::ops::ControlFlow;
use std::sync::Arc;

use tokio::task::JoinSet;
use tritonforge_suite::{Candidate, Problem, SourcePair};

use crate::{EvalError, EvalService, EvalSettings, Evaluation};

/// What became of one pair.
#[derive(Debug, Clone)]
pub enum PairOutcome {
    Evaluated(Box<Evaluation>),
    /// The pair's problem is broken (it does not import, build or run).
    ProblemError(String),
}

/// A result for each pair of a batch, in the batch's order (`None`: stopped before it ended).
pub type BatchResults = Vec<Option<Result<Evaluation, EvalError>>>;

/// Hears each finished evaluation of a batch (its index, its result); `Break` stops the batch.
pub type OnDone<'a> =
    dyn FnMut(usize, &Result<Evaluation, EvalError>) -> ControlFlow<()> + Send + 'a;

/// Evaluate every pair at once (the pool bounds how many run). `on_done(i, &result)` hears
/// each as it ends; returning `Break` stops the batch: the rest are aborted and every
/// process killed. Dropping the future (Ctrl-C) aborts the rest too.
pub async fn evaluate_all<E: EvalService + ?Sized + 'static>(
    evaluator: &Arc<E>,
    pairs: Vec<(Problem, Candidate)>,
    settings: &EvalSettings,
    on_done: &mut OnDone<'_>,
) -> Result<BatchResults, EvalError> {
    let mut set = JoinSet::new();
    let n = pairs.len();
    for (i, (problem, candidate)) in pairs.into_iter().enumerate() {
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
    let mut results: BatchResults = (0..n).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        let (i, result) = joined.map_err(|e| EvalError::TaskFailed(e.to_string()))?;
        let flow = on_done(i, &result);
        results[i] = Some(result);
        if flow.is_break() {
            evaluator.abort_all();
            set.abort_all();
            break;
        }
    }
    Ok(results)
}

/// Evaluate rows given as source (one outcome each, in order); `progress` hears the count
/// done every ten and at the end. The evaluator's own failure stops the batch.
pub async fn evaluate_sources<E: EvalService + ?Sized + 'static>(
    evaluator: &Arc<E>,
    pairs: &[SourcePair],
    settings: &EvalSettings,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<PairOutcome>, EvalError> {
    let files = pairs.iter().map(SourcePair::files).collect();
    let mut done = 0;
    let mut on_done = |_: usize, r: &Result<Evaluation, EvalError>| {
        done += 1;
        if done % 10 == 0 || done == pairs.len() {
            progress(done);
        }
        match r {
            Ok(_) | Err(EvalError::Problem { .. } | EvalError::Suite(_)) => {
                ControlFlow::Continue(())
            }
            Err(_) => ControlFlow::Break(()),
        }
    };
    let results = evaluate_all(evaluator, files, settings, &mut on_done).await?;
    results
        .into_iter()
        .flatten()
        .map(|r| match r {
            Ok(ev) => Ok(PairOutcome::Evaluated(Box::new(ev))),
            // The row's PyTorch side is broken: the row goes, the build goes on.
            Err(e @ (EvalError::Problem { .. } | EvalError::Suite(_))) => {
                Ok(PairOutcome::ProblemError(e.to_string()))
            }
            Err(e) => Err(e),
        })
        .collect()
}

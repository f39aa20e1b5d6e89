//! `tritonforge eval`: one pair, or two directories paired by file name.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use tritonforge_eval::report::{self, Row};
use tritonforge_eval::{evaluate_all, EvalError, EvalSettings, Evaluation, Evaluator};
use tritonforge_protocol::Status;
use tritonforge_suite::{pair_dirs, Candidate, Problem};

use crate::args::{short, EvalFlags, Global, GuardOpts, PoolArgs};
use crate::exit::{self, usage};
use crate::progress;
use crate::runlog::{self, RunLog};
use tritonforge_store::{RunKind, RunStatus};

#[derive(Args)]
pub struct EvalArgs {
    /// A problem file (with --candidate).
    #[arg(long)]
    problem: Option<PathBuf>,
    /// A candidate file defining `ModelNew` (with --problem).
    #[arg(long)]
    candidate: Option<PathBuf>,
    /// A directory of problem files (with --candidates); pairs by file name.
    #[arg(long)]
    problems: Option<PathBuf>,
    /// A directory of candidate files (with --problems).
    #[arg(long)]
    candidates: Option<PathBuf>,
    /// Print JSON (one record; JSON lines for a batch, a pair without a record as its error).
    #[arg(long)]
    json: bool,
    /// Base seed for weights and inputs.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[command(flatten)]
    eval: EvalFlags,
    #[command(flatten)]
    pool: PoolArgs,
    #[command(flatten)]
    guard: GuardOpts,
    /// Evaluate again even when the store has this exact evaluation.
    #[arg(long)]
    refresh: bool,
    /// Do not use or write the store.
    #[arg(long)]
    no_store: bool,
}

type Pair = (Problem, Candidate);

pub async fn run(global: &Global, args: EvalArgs) -> anyhow::Result<u8> {
    let single =
        match (&args.problem, &args.candidate, &args.problems, &args.candidates) {
            (Some(_), Some(_), None, None) => true,
            (None, None, Some(_), Some(_)) => false,
            _ => return Err(usage(
                "give either --problem FILE --candidate FILE, or --problems DIR --candidates DIR",
            )),
        };
    let settings = EvalSettings { seed: args.seed, ..args.eval.settings()? };
    args.pool.config(usize::MAX)?; // bad pool flags fail before any file is read
    let guard = args.guard.load()?;
    // Read every input before starting anything, so bad input fails fast and named.
    let pairs = load_pairs(&args).map_err(usage)?;
    if pairs.is_empty() {
        return Err(usage(
            "no problem/candidate pairs found (candidates pair with problems by file name)",
        ));
    }
    let pool = args.pool.config(pairs.len())?;
    let opening = Instant::now();
    let mut evaluator = global.open_evaluator(pool, guard, !args.no_store).await?;
    let opened = opening.elapsed();
    evaluator.refresh = args.refresh;
    if !args.json {
        eprintln!("{}", report::env_line(evaluator.environment()));
    }
    // A batch is a run the dashboard lists, with its evaluations linked to it.
    let run = (!single && !args.no_store).then(|| {
        let settings = serde_json::json!({
            "problems": args.problems.as_ref().map(|p| p.display().to_string()),
            "candidates": args.candidates.as_ref().map(|p| p.display().to_string()),
            "pairs": pairs.len(),
            "seed": settings.seed,
            "refresh": args.refresh,
        });
        RunLog::begin(
            &global.workspace().store_path(),
            runlog::new_id("eval"),
            RunKind::Eval,
            &settings,
        )
    });
    let evaluator = Arc::new(evaluator);
    let code = batch(evaluator.clone(), pairs, &settings, args.json, single, run.as_ref()).await?;
    if !single {
        eprintln!("{}", report::pool_start_line(&evaluator.pool().start_times(), opened));
    }
    Ok(code)
}

fn load_pairs(args: &EvalArgs) -> Result<Vec<Pair>, String> {
    let paths = match (&args.problem, &args.candidate, &args.problems, &args.candidates) {
        (Some(p), Some(c), _, _) => vec![(p.clone(), c.clone())],
        (_, _, Some(p), Some(c)) => {
            let pairing = pair_dirs(p, c).map_err(|e| e.to_string())?;
            for p in &pairing.unmatched_problems {
                eprintln!("note: no candidate for problem {}", short(p));
            }
            for c in &pairing.unmatched_candidates {
                eprintln!("note: no problem for candidate {}", short(c));
            }
            pairing.pairs
        }
        _ => Vec::new(),
    };
    tritonforge_suite::load_pairs(paths).map_err(|e| e.join("\nerror: "))
}

/// Evaluate every pair; one pair prints its verdict, several a progress line each and a table.
async fn batch(
    evaluator: Arc<Evaluator>,
    pairs: Vec<Pair>,
    settings: &EvalSettings,
    json: bool,
    single: bool,
    run: Option<&RunLog>,
) -> anyhow::Result<u8> {
    let total = pairs.len();
    let started = Instant::now();
    let bar = progress::bar(
        Some(total as u64),
        "{bar:30} {pos}/{len} {elapsed_precise} {msg}",
        json || single,
    );
    let mut on_done = |_: usize, result: &Result<Evaluation, EvalError>| {
        if json {
            println!("{}", report::json_result(result));
        }
        if let (Some(run), Ok(ev)) = (run, result) {
            run.link(&ev.record.key, ev.record.created_at);
        }
        let line = Row::from_result(result).progress_line();
        let done = bar.position() + 1;
        let line = if bar.is_hidden() { format!("[{done}/{total}] {line}") } else { line };
        progress::line(&bar, json || single, line);
        bar.inc(1);
        ControlFlow::Continue(())
    };
    let results = tokio::select! {
        r = evaluate_all(&evaluator, pairs, settings, &mut on_done) => Some(r?),
        _ = tokio::signal::ctrl_c() => None,
    };
    bar.finish_and_clear();
    let Some(mut results) = results else {
        evaluator.pool().kill_all();
        if let Some(run) = run {
            run.finish(RunStatus::Interrupted, None);
        }
        match single {
            true => eprintln!("interrupted"),
            false => eprintln!(
                "interrupted: {} of {total} evaluations finished and are stored; run the same command again to finish the rest (finished ones are cache hits)",
                bar.position()
            ),
        }
        return Ok(exit::INTERRUPTED);
    };
    if single {
        return match results.pop().flatten().context("one evaluation")? {
            Ok(ev) => {
                if !json {
                    print!("{}", report::verdict_text(&ev));
                }
                Ok(if ev.record.verdict.status == Status::Correct {
                    exit::CORRECT
                } else {
                    exit::VERDICT
                })
            }
            Err(e @ (EvalError::Problem { .. } | EvalError::Suite(_))) => Err(usage(e)),
            Err(e) => Err(e.into()),
        };
    }
    let rows: Vec<Row> = results.iter().flatten().map(Row::from_result).collect();
    if !json {
        print!("{}", report::table(&rows));
    }
    eprintln!("{}", report::summary(&rows, started.elapsed()));
    let (events, ended) = (evaluator.pool().lease_events(), Instant::now());
    let lost = evaluator.pool().lease_events_lost();
    for slot in 0..evaluator.pool().devices() {
        let split = tritonforge_eval::lane::split(&events, slot, started, ended);
        eprintln!("{}", report::lane_line(slot, &split, lost));
    }
    if let Some(run) = run {
        let failed = rows.iter().any(|r| r.env_error || r.problem_error);
        let status = if failed { RunStatus::Failed } else { RunStatus::Done };
        let summary =
            serde_json::json!({"pairs": rows.len(), "wall_s": started.elapsed().as_secs_f64()});
        run.finish(status, Some(&summary));
    }
    Ok(if rows.iter().any(|r| r.env_error) {
        exit::ENV
    } else if rows.iter().any(|r| r.problem_error) {
        exit::USAGE
    } else if rows.iter().all(|r| r.status == Some(Status::Correct)) {
        exit::CORRECT
    } else {
        exit::VERDICT
    })
}

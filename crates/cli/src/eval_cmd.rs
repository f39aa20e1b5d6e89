//! `tritonforge eval`: one pair, or two directories paired by file name.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinSet;
use tritonforge_bench::{pair_dirs, Candidate, Manifest, Problem};
use tritonforge_eval::{EvalError, Evaluation, Evaluator};
use tritonforge_protocol::{DeviceKind, EvalConfig, Status};
use tritonforge_store::Store;

use crate::report::{self, Row};
use crate::{short, Global, EXIT_CORRECT, EXIT_ENV, EXIT_INTERRUPTED, EXIT_USAGE, EXIT_VERDICT};

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
    /// Print JSON (one record; JSON lines for a batch).
    #[arg(long)]
    json: bool,
    /// Correctness trials, each with a fresh seed.
    #[arg(long, default_value_t = 5)]
    trials: u32,
    /// Base seed for weights and inputs.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Shape variant from the manifest (`full`, `small`, `heldout`, ...). Default: `small` in CPU mode when defined.
    #[arg(long)]
    variant: Option<String>,
    /// Also run two trials at this shape variant, unseen by the candidate, after the main
    /// ones pass: kernels hard-coded to the benchmark's shapes fail there. Default:
    /// `heldout` on a GPU; none in CPU mode (the interpreter is too slow for those sizes).
    #[arg(long, conflicts_with = "no_shape_check")]
    shape_check: Option<String>,
    /// Skip the trials at unseen shapes.
    #[arg(long)]
    no_shape_check: bool,
    /// Wall-clock budget per candidate, seconds, from the moment its job is sent
    /// (time spent waiting for its GPU is not counted).
    #[arg(long, default_value_t = 120.0)]
    budget: f64,
    #[command(flatten)]
    pool: crate::PoolArgs,
    #[command(flatten)]
    timing: TimingArgs,
    #[command(flatten)]
    guard: crate::GuardOpts,
    /// Evaluate again even when the store has this exact evaluation.
    #[arg(long)]
    refresh: bool,
    /// Do not use or write the store.
    #[arg(long)]
    no_store: bool,
}

/// How candidates are timed (GPU only).
#[derive(Args, Clone)]
pub struct TimingArgs {
    /// Skip timing.
    #[arg(long)]
    pub no_timing: bool,
    /// Wall-clock budget for the timed repetitions per candidate, milliseconds.
    #[arg(long, default_value_t = 400)]
    pub timing_budget_ms: u32,
    /// Flag speedups above this as implausible.
    #[arg(long, default_value_t = 10.0)]
    pub speedup_cap: f64,
    /// Measure the candidate kernels' share of GPU time with the profiler.
    #[arg(long)]
    pub profile: bool,
    /// Also time `torch.compile` of the reference (cached per problem, variant and environment).
    #[arg(long)]
    pub compile_baseline: bool,
}

impl TimingArgs {
    /// Fill the timing fields of `config`.
    pub fn apply(&self, config: EvalConfig) -> EvalConfig {
        EvalConfig {
            timing: !self.no_timing,
            timing_budget_ms: self.timing_budget_ms,
            speedup_cap: self.speedup_cap,
            profile: self.profile,
            compile_baseline: self.compile_baseline,
            ..config
        }
    }
}

enum Mode {
    Single(PathBuf, PathBuf),
    Batch(PathBuf, PathBuf),
}

impl EvalArgs {
    fn mode(&self) -> Result<Mode, String> {
        match (
            &self.problem,
            &self.candidate,
            &self.problems,
            &self.candidates,
        ) {
            (Some(p), Some(c), None, None) => Ok(Mode::Single(p.clone(), c.clone())),
            (None, None, Some(p), Some(c)) => Ok(Mode::Batch(p.clone(), c.clone())),
            _ => Err(
                "give either --problem FILE --candidate FILE, or --problems DIR --candidates DIR"
                    .into(),
            ),
        }
    }

    fn config(&self, problem: &Problem, cpu_mode: bool) -> Result<EvalConfig, EvalError> {
        let (variant, overrides) = problem.variant(self.variant.as_deref(), cpu_mode)?;
        let shape_check = match (&self.shape_check, self.no_shape_check) {
            (_, true) => None,
            (Some(name), false) => Some(problem.variant(Some(name), cpu_mode)?.1),
            (None, false) if !cpu_mode => problem.shape_check(variant.as_deref()),
            (None, false) => None,
        };
        Ok(self.timing.apply(EvalConfig {
            shape_check,
            trials: self.trials,
            seed: self.seed,
            tolerance: problem.meta.tolerance(),
            variant,
            overrides,
            device: tritonforge_protocol::DeviceRequest::Auto,
            budget_ms: (self.budget * 1000.0) as u64,
            ..EvalConfig::default()
        }))
    }
}

pub async fn run(global: &Global, args: EvalArgs) -> anyhow::Result<u8> {
    let mode = match args.mode() {
        Ok(m) => m,
        Err(msg) => {
            eprintln!("error: {msg}");
            return Ok(EXIT_USAGE);
        }
    };
    if args.trials == 0
        || args.budget <= 0.0
        || args.timing.timing_budget_ms == 0
        || args.timing.speedup_cap.is_nan()
        || args.timing.speedup_cap <= 1.0
    {
        eprintln!("error: --trials, --budget and --timing-budget-ms must be positive; --speedup-cap above 1");
        return Ok(EXIT_USAGE);
    }
    if let Some(msg) = args.pool.problem() {
        eprintln!("error: {msg}");
        return Ok(EXIT_USAGE);
    }
    let policy = match args.guard.load() {
        Ok(p) => p,
        Err(msg) => {
            eprintln!("error: {msg}");
            return Ok(EXIT_USAGE);
        }
    };
    // Read every input before starting anything, so bad input fails fast and named.
    let pairs = match load_pairs(&mode) {
        Ok(p) => p,
        Err(msg) => {
            eprintln!("error: {msg}");
            return Ok(EXIT_USAGE);
        }
    };
    if pairs.is_empty() {
        eprintln!(
            "error: no problem/candidate pairs found (candidates pair with problems by file name)"
        );
        return Ok(EXIT_USAGE);
    }

    let pool = global.start_pool(args.pool.config(pairs.len())).await?;
    let store = if args.no_store {
        None
    } else {
        Some(Store::open(&global.store_path())?)
    };
    let cpu_mode = pool.environment().device == DeviceKind::Cpu;
    if !args.json {
        eprintln!("{}", report::env_line(pool.environment()));
    }
    let mut evaluator = crate::guarded(
        Evaluator::new(pool, store, tritonforge_pyenv::worker_hash()),
        policy,
    );
    evaluator.refresh = args.refresh;
    let evaluator = Arc::new(evaluator);

    match mode {
        Mode::Single(..) => {
            let (problem, candidate) = pairs.into_iter().next().context("one pair")?;
            let config = match args.config(&problem, cpu_mode) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(EXIT_USAGE);
                }
            };
            let result = tokio::select! {
                r = evaluator.evaluate(&problem, &candidate, &config) => r,
                _ = tokio::signal::ctrl_c() => {
                    evaluator.pool().kill_all();
                    eprintln!("interrupted");
                    return Ok(EXIT_INTERRUPTED);
                }
            };
            match result {
                Ok(ev) => {
                    if args.json {
                        println!("{}", report::json_line(&ev));
                    } else {
                        print!("{}", report::verdict_text(&ev));
                    }
                    Ok(if ev.record.verdict.status == Status::Correct {
                        EXIT_CORRECT
                    } else {
                        EXIT_VERDICT
                    })
                }
                Err(e @ EvalError::Problem { .. }) => {
                    eprintln!("error: {e}");
                    Ok(EXIT_USAGE)
                }
                Err(e) => Err(e.into()),
            }
        }
        Mode::Batch(..) => batch(evaluator, pairs, &args, cpu_mode).await,
    }
}

type Pair = (Problem, Candidate);

fn load_pairs(mode: &Mode) -> Result<Vec<Pair>, String> {
    let paths = match mode {
        Mode::Single(p, c) => vec![(p.clone(), c.clone())],
        Mode::Batch(p, c) => {
            let pairing = pair_dirs(p, c).map_err(|e| e.to_string())?;
            for p in &pairing.unmatched_problems {
                eprintln!("note: no candidate for problem {}", short(p));
            }
            for c in &pairing.unmatched_candidates {
                eprintln!("note: no problem for candidate {}", short(c));
            }
            pairing.pairs
        }
    };
    // Every problem of a batch lives in one directory: read its manifest once.
    let manifest = match paths.first() {
        Some((p, _)) => Manifest::find_for(p).map_err(|e| e.to_string())?,
        None => None,
    };
    let mut errors = Vec::new();
    let mut pairs = Vec::new();
    for (p, c) in paths {
        match (
            Problem::load_with(&p, manifest.as_ref()),
            Candidate::load(&c),
        ) {
            (Ok(p), Ok(c)) => pairs.push((p, c)),
            (p, c) => {
                if let Err(e) = p {
                    errors.push(e.to_string());
                }
                if let Err(e) = c {
                    errors.push(e.to_string());
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(pairs)
    } else {
        Err(errors.join("\nerror: "))
    }
}

async fn batch(
    evaluator: Arc<Evaluator>,
    pairs: Vec<Pair>,
    args: &EvalArgs,
    cpu_mode: bool,
) -> anyhow::Result<u8> {
    let total = pairs.len();
    let started = Instant::now();
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    };
    let interactive = !bar.is_hidden();
    let mut set: JoinSet<(usize, Result<Evaluation, EvalError>)> = JoinSet::new();
    let mut rows: Vec<Option<Row>> = (0..total).map(|_| None).collect();
    for (i, (problem, candidate)) in pairs.into_iter().enumerate() {
        let config = args.config(&problem, cpu_mode);
        let ev = evaluator.clone();
        set.spawn(async move {
            let result = match config {
                Ok(c) => ev.evaluate(&problem, &candidate, &c).await,
                Err(e) => Err(e),
            };
            (i, result)
        });
    }
    let mut done = 0usize;
    let interrupted = loop {
        tokio::select! {
            next = set.join_next() => {
                let Some(joined) = next else { break false };
                let (i, result) = match joined {
                    Ok(r) => r,
                    Err(e) => anyhow::bail!("an evaluation task failed: {e}"),
                };
                done += 1;
                let row = Row::from_result(&result);
                if args.json {
                    if let Ok(ev) = &result {
                        println!("{}", report::json_line(ev));
                    }
                }
                let line = row.progress_line();
                if interactive {
                    bar.println(line);
                } else if !args.json {
                    eprintln!("[{done}/{total}] {line}");
                }
                bar.inc(1);
                rows[i] = Some(row);
            }
            _ = tokio::signal::ctrl_c() => break true,
        }
    };
    bar.finish_and_clear();
    if interrupted {
        evaluator.pool().kill_all();
        set.abort_all();
        eprintln!(
            "interrupted: {done} of {total} evaluations finished and are stored; run the same command again to finish the rest (finished ones are cache hits)"
        );
        return Ok(EXIT_INTERRUPTED);
    }
    let rows: Vec<Row> = rows.into_iter().flatten().collect();
    if !args.json {
        print!("{}", report::table(&rows));
    }
    eprintln!("{}", report::summary(&rows, started.elapsed()));
    Ok(if rows.iter().any(|r| r.env_error) {
        EXIT_ENV
    } else if rows.iter().any(|r| r.problem_error) {
        EXIT_USAGE
    } else if rows.iter().all(|r| r.status == Some(Status::Correct)) {
        EXIT_CORRECT
    } else {
        EXIT_VERDICT
    })
}

//! `tritonforge data`: build the SFT set from a `data.toml`, and show what a build kept.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Subcommand;
use tokio::task::JoinSet;
use tritonforge_bench::{Candidate, Problem};
use tritonforge_data::{synth, write, Config, Report, Verdict, Verifier, VerifyItem};
use tritonforge_eval::{EvalError, Evaluator};
use tritonforge_protocol::EvalConfig;
use tritonforge_store::Store;

use crate::{Global, EXIT_USAGE};

#[derive(Subcommand)]
pub enum DataCmd {
    /// Ingest, normalise, filter, deduplicate, decontaminate, split and write (stages and
    /// inputs from the config; see docs/data.md).
    Build {
        #[arg(long)]
        config: PathBuf,
        /// Print the stats as JSON instead of Markdown.
        #[arg(long)]
        json: bool,
        /// Run every pair through the evaluator (`--device`) and keep only correct ones
        /// (the same as `verify.enabled = true`); verdicts are stored and reused.
        #[arg(long)]
        verify: bool,
    },
    /// Write synthetic KernelBook-shaped rows (kernelbook.jsonl and kernelbook.parquet):
    /// for tests and throughput figures.
    Synth {
        #[arg(long, default_value_t = 1000)]
        rows: usize,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Plant rows every stage must drop (uuids `bad-...`), a malformed and a non-UTF-8
        /// JSONL line, and a heldout problem of the suite under another name.
        #[arg(long)]
        defects: bool,
        #[arg(long, default_value = "bench")]
        suite: PathBuf,
    },
    /// Show the stats of a finished build (its output directory).
    Stats {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(global: &Global, cmd: DataCmd) -> anyhow::Result<u8> {
    match cmd {
        DataCmd::Build {
            config,
            json,
            verify,
        } => {
            let mut cfg = match Config::load(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(EXIT_USAGE);
                }
            };
            cfg.verify.enabled |= verify;
            let verifier = if cfg.verify.enabled {
                Some(EvalVerifier::start(global, &cfg).await?)
            } else {
                None
            };
            let built = tokio::task::spawn_blocking(move || {
                let progress = |stage: &str| {
                    if !json {
                        eprintln!("data: {stage}");
                    }
                };
                tritonforge_data::build(
                    &cfg,
                    &progress,
                    verifier.as_ref().map(|v| v as &dyn Verifier),
                )
            })
            .await?;
            let (report, _) = match built {
                Ok(r) => r,
                Err(e @ tritonforge_data::DataError::Verify(_)) => {
                    eprintln!(
                        "error: {e} (verdicts reached so far are stored; run again to go on)"
                    );
                    return Ok(crate::EXIT_ENV);
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(EXIT_USAGE);
                }
            };
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", write::markdown(&report));
                eprintln!("wrote {}", report.outputs.join(", "));
            }
            Ok(0)
        }
        DataCmd::Synth {
            rows,
            out,
            seed,
            defects,
            suite,
        } => {
            let heldout = if defects {
                let s = tritonforge_bench::Suite::load(&suite)?;
                s.entries
                    .iter()
                    .find(|e| e.meta.split.as_deref() == Some("heldout"))
                    .and_then(|e| std::fs::read_to_string(&e.problem_path).ok())
            } else {
                None
            };
            let made = synth::rows(rows, seed, defects, heldout.as_deref());
            std::fs::create_dir_all(&out)?;
            synth::write_jsonl(&out.join("kernelbook.jsonl"), &made, defects)?;
            synth::write_parquet(&out.join("kernelbook.parquet"), &made)?;
            eprintln!("wrote {} rows to {}", made.len(), out.display());
            Ok(0)
        }
        DataCmd::Stats { dir, json } => {
            let path = dir.join("stats.json");
            let report: Report = match std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!(
                        "error: {}: {e} (is it a `data build` output directory?)",
                        path.display()
                    );
                    return Ok(EXIT_USAGE);
                }
            };
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", write::markdown(&report));
            }
            Ok(0)
        }
    }
}

/// The real evaluator behind `data build --verify`: a pool of executor processes and the
/// store, so each verdict is kept as it comes and a rerun only evaluates what is new.
struct EvalVerifier {
    evaluator: Arc<Evaluator>,
    config: EvalConfig,
    handle: tokio::runtime::Handle,
}

impl EvalVerifier {
    async fn start(global: &Global, cfg: &Config) -> anyhow::Result<EvalVerifier> {
        let v = &cfg.verify;
        let pool_args = crate::PoolArgs {
            jobs: v.jobs,
            ..crate::PoolArgs::default()
        };
        let pool = global.start_pool(pool_args.config(usize::MAX)).await?;
        let store = Store::open(&global.store_path())?;
        let policy = match &cfg.quality.policy {
            Some(p) => crate::guard_cmd::load_policy(Some(p)).map_err(anyhow::Error::msg)?,
            None => tritonforge_guard::Policy::default(),
        };
        let evaluator =
            Evaluator::new(pool, Some(store), tritonforge_pyenv::worker_hash()).with_guard(policy);
        Ok(EvalVerifier {
            evaluator: Arc::new(evaluator),
            config: EvalConfig {
                trials: v.trials,
                timing: v.timing,
                budget_ms: (v.budget_s * 1000.0) as u64,
                ..EvalConfig::default()
            },
            handle: tokio::runtime::Handle::current(),
        })
    }
}

impl Verifier for EvalVerifier {
    fn verify(
        &self,
        items: &[VerifyItem],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Verdict>, String> {
        self.handle.block_on(async {
            let mut set = JoinSet::new();
            for (i, item) in items.iter().enumerate() {
                // The row id names the files the executor writes; keep it a plain name.
                let stem: String = item
                    .id
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect();
                let problem = Problem {
                    name: format!("row_{stem}"),
                    path: PathBuf::from(format!("row_{stem}.py")),
                    source: item.problem.clone(),
                    meta: Default::default(),
                };
                let candidate = Candidate {
                    name: format!("row_{stem}_answer"),
                    path: PathBuf::from(format!("row_{stem}_answer.py")),
                    source: item.answer.clone(),
                };
                let ev = self.evaluator.clone();
                let config = self.config.clone();
                set.spawn(async move { (i, ev.evaluate(&problem, &candidate, &config).await) });
            }
            let mut verdicts: Vec<Option<Verdict>> = vec![None; items.len()];
            let mut done = 0;
            while let Some(joined) = set.join_next().await {
                let (i, result) = joined.map_err(|e| format!("an evaluation task failed: {e}"))?;
                let verdict = match result {
                    Ok(ev) => Verdict {
                        status: ev.record.verdict.status.to_string(),
                        message: ev.record.verdict.message.clone(),
                        key: ev.record.key.clone(),
                        cached: ev.cached,
                        speedup: ev.record.verdict.timing.as_ref().map(|t| t.speedup),
                    },
                    // The row's PyTorch side is broken: the row goes, the build goes on.
                    Err(e @ (EvalError::Problem { .. } | EvalError::Bench(_))) => Verdict {
                        status: "problem_error".into(),
                        message: e.to_string(),
                        key: String::new(),
                        cached: false,
                        speedup: None,
                    },
                    Err(e) => {
                        self.evaluator.pool().kill_all();
                        set.abort_all();
                        return Err(e.to_string());
                    }
                };
                verdicts[i] = Some(verdict);
                done += 1;
                if done % 10 == 0 || done == items.len() {
                    progress(done);
                }
            }
            Ok(verdicts.into_iter().flatten().collect())
        })
    }
}

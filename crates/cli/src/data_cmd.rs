//! `tritonforge data`: build the SFT set from a `data.toml`, and show what a build kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Subcommand;
use tritonforge_data::{synth, write, Config, RowStatus, RowVerdict, Verifier};
use tritonforge_eval::{
    evaluate_sources, EvalService, EvalSettings, PairOutcome, SourcePair, TimingSettings,
};

use crate::args::{load_rules, Global, PoolArgs};
use crate::exit::{self, usage};

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
        DataCmd::Build { config, json, verify } => build(global, &config, json, verify).await,
        DataCmd::Synth { rows, out, seed, defects } => {
            // A heldout problem of the suite, planted under another name for decontamination.
            let heldout = if defects {
                let s = global.load_suite()?;
                s.entries
                    .iter()
                    .find(|e| e.meta.split.as_deref() == Some("heldout"))
                    .and_then(|e| std::fs::read_to_string(&e.problem_path).ok())
            } else {
                None
            };
            let n = synth::write_set(&out, rows, seed, defects, heldout.as_deref())?;
            eprintln!("wrote {n} rows to {}", out.display());
            Ok(0)
        }
        DataCmd::Stats { dir, json } => {
            let report = write::read_stats(&dir).map_err(usage)?;
            match json {
                true => println!("{}", serde_json::to_string(&report)?),
                false => print!("{}", write::markdown(&report)),
            }
            Ok(0)
        }
    }
}

async fn build(global: &Global, config: &Path, json: bool, verify: bool) -> anyhow::Result<u8> {
    let mut cfg = Config::load(config).map_err(usage)?;
    cfg.verify.enabled |= verify;
    let verifier = match cfg.verify.enabled {
        true => Some(EvalVerifier::start(global, &cfg).await?),
        false => None,
    };
    let built = tokio::task::spawn_blocking(move || {
        let progress = |stage: &str| {
            if !json {
                eprintln!("data: {stage}");
            }
        };
        tritonforge_data::build(&cfg, &progress, verifier.as_ref().map(|v| v as &dyn Verifier))
    })
    .await?;
    let (report, _) = match built {
        Ok(r) => r,
        Err(e @ tritonforge_data::DataError::Verify(_)) => {
            eprintln!("error: {e} (verdicts reached so far are stored; run again to go on)");
            return Ok(exit::ENV);
        }
        Err(e) => return Err(usage(e)),
    };
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", write::markdown(&report));
        eprintln!("wrote {}", report.outputs.join(", "));
    }
    Ok(0)
}

/// The real evaluator behind `data build --verify`: a pool of executor processes and the
/// store, so each verdict is kept as it comes and a rerun only evaluates what is new.
struct EvalVerifier {
    evaluator: Arc<dyn EvalService>,
    settings: EvalSettings,
    handle: tokio::runtime::Handle,
}

impl EvalVerifier {
    async fn start(global: &Global, cfg: &Config) -> anyhow::Result<EvalVerifier> {
        let v = &cfg.verify;
        let pool_args = PoolArgs { jobs: v.jobs, ..PoolArgs::default() };
        let rules = load_rules(cfg.quality.rules.as_deref())?;
        let evaluator = global.eval_service(|| pool_args.config(usize::MAX), Some(rules)).await?;
        let settings = EvalSettings {
            trials: v.trials,
            budget: std::time::Duration::try_from_secs_f64(v.budget_s).map_err(usage)?,
            timing: TimingSettings { enabled: v.timing, ..TimingSettings::default() },
            ..EvalSettings::default()
        };
        Ok(EvalVerifier { evaluator, settings, handle: tokio::runtime::Handle::current() })
    }
}

impl Verifier for EvalVerifier {
    fn verify(
        &self,
        pairs: &[SourcePair],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<RowVerdict>, String> {
        let outcomes = self
            .handle
            .block_on(evaluate_sources(&self.evaluator, pairs, &self.settings, progress))
            .map_err(|e| e.to_string())?;
        Ok(outcomes
            .into_iter()
            .map(|o| match o {
                PairOutcome::Evaluated(ev) => RowVerdict {
                    status: RowStatus::Evaluated(ev.record.verdict.status),
                    message: ev.record.verdict.message.clone(),
                    key: ev.record.key.clone(),
                    cached: ev.cached,
                    speedup: ev.record.verdict.timing.as_ref().map(|t| t.speedup),
                },
                PairOutcome::ProblemError(message) => RowVerdict::problem_error(message),
            })
            .collect())
    }
}

//! `tritonforge train sft --config sft.toml`: supervised fine-tuning. Rust renders,
//! tokenises, masks, packs and schedules (`tritonforge-train`); the policy worker trains.
//! Every metric goes to the store and to `metrics.jsonl` as it happens.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;
use tritonforge_store::Store;
use tritonforge_train::events::MetricsLog;
use tritonforge_train::worker::{TrainerSpec, WorkerPolicy};
use tritonforge_train::{Event, Policy, RunOptions, SftConfig, TrainError};

use crate::args::Global;
use crate::exit::{self, usage};
use crate::progress;
use crate::runlog::RunLog;
use tritonforge_store::{RunKind, RunStatus};

#[derive(Subcommand)]
pub enum TrainCmd {
    /// Supervised fine-tuning of a Hugging Face model on an SFT set (`data build` output).
    Sft {
        #[arg(long)]
        config: PathBuf,
        /// Continue the run in `output.dir` from its latest checkpoint (same schedule and
        /// data order).
        #[arg(long)]
        resume: bool,
        /// Stop after this step, with a checkpoint (a time-sliced job; `--resume` goes on).
        #[arg(long)]
        until: Option<u64>,
        /// One JSON line per event on stdout instead of a progress bar.
        #[arg(long)]
        json: bool,
    },
    /// Multi-turn reinforcement learning (GRPO) rewarded by the evaluator; running the
    /// same command again resumes from the latest checkpoint.
    Rl(crate::rl_cmd::RlArgs),
}

pub async fn run(global: &Global, cmd: TrainCmd) -> anyhow::Result<u8> {
    let (config, resume, until, json) = match cmd {
        TrainCmd::Sft { config, resume, until, json } => (config, resume, until, json),
        TrainCmd::Rl(args) => return crate::rl_cmd::run(global, args).await,
    };
    let cfg = SftConfig::load(&config).map_err(usage)?;
    let py = global.python_env()?;
    let device = global.device_kind(&py)?;
    std::fs::create_dir_all(&cfg.output.dir)
        .with_context(|| format!("creating {}", cfg.output.dir.display()))?;
    let tok_dir = tritonforge_train::tokenizer_dir(&cfg, &py).map_err(usage)?;
    let spec = TrainerSpec {
        python: py.interpreter.clone(),
        worker_path: py.worker_path.clone(),
        device,
        log: cfg.output.dir.join("worker.log"),
        procs: cfg.train.gpus,
        torchrun: cfg.train.torchrun.clone(),
    };
    let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let opts = RunOptions {
        resume,
        until,
        run_id: format!("sft-{}", millis.map(|d| d.as_millis()).unwrap_or(0)),
    };
    let store_path = global.workspace().store_path();
    let store = Store::open(&store_path)?;
    let log = MetricsLog::open(store, &cfg.output.dir.join("metrics.jsonl"), opts.run_id.clone());
    let result = tokio::task::spawn_blocking(move || {
        train(&cfg, &tok_dir, &opts, &spec, log, json, &store_path)
    })
    .await?;
    match result {
        Ok(state) => {
            let how = if state.done { "finished" } else { "stopped" };
            let latest = state.latest.unwrap_or_default();
            eprintln!(
                "{how} at step {}/{}; latest checkpoint: {latest}",
                state.step, state.total_steps
            );
            Ok(0)
        }
        Err(
            e @ (TrainError::Config { .. }
            | TrainError::Data { .. }
            | TrainError::Resume(_)
            | TrainError::Tokenizer(_)),
        ) => Err(usage(e)),
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!(
                "(checkpoints written so far are kept; `--resume` continues from the latest)"
            );
            Ok(exit::ENV)
        }
    }
}

/// Run the trainer with progress: a bar (or plain lines) and every metric kept.
fn train(
    cfg: &SftConfig,
    tok_dir: &Path,
    opts: &RunOptions,
    spec: &TrainerSpec,
    mut log: MetricsLog,
    json: bool,
    store_path: &Path,
) -> Result<tritonforge_train::RunState, TrainError> {
    // The run's row for the dashboard, begun once the trainer names the run (a resumed
    // run keeps its first id).
    let mut run: Option<RunLog> = None;
    let bar = progress::bar(None, "{bar:30} {pos}/{len} {elapsed_precise} {msg}", json);
    let mut start = || -> Result<Box<dyn Policy>, TrainError> {
        Ok(Box::new(WorkerPolicy::start(spec, &cfg.model)?))
    };
    let mut sink = |e: Event| {
        if let Some(warning) = log.record(&e) {
            progress::line(&bar, false, warning);
        }
        match &e {
            Event::Prepared { run: id, steps, start, train, validation, .. } => {
                let settings = serde_json::json!({
                    "config": cfg, "train": train, "validation": validation,
                    "steps": steps, "start": start,
                });
                run = Some(RunLog::begin(store_path, id.clone(), RunKind::Sft, &settings));
                bar.set_length(*steps);
                bar.set_position(*start);
            }
            Event::Metric(m) if m.split == "train" => {
                bar.set_position(m.step);
                bar.set_message(m.progress());
                if !bar.is_hidden() {
                    return; // the bar shows it
                }
            }
            _ => {}
        }
        if json {
            println!("{}", e.to_json());
        } else {
            progress::line(&bar, false, e.describe());
        }
    };
    let r = tritonforge_train::run(cfg, tok_dir, opts, &mut start, &mut sink);
    bar.finish_and_clear();
    if let Some(run) = &run {
        match &r {
            Ok(state) => {
                let status = if state.done { RunStatus::Done } else { RunStatus::Interrupted };
                let summary = serde_json::json!({
                    "step": state.step, "total_steps": state.total_steps, "latest": state.latest,
                });
                run.finish(status, Some(&summary));
            }
            Err(e) => {
                run.finish(RunStatus::Failed, Some(&serde_json::json!({"error": e.to_string()})))
            }
        }
    }
    r
}

//! `tritonforge train sft --config sft.toml`: supervised fine-tuning. Rust renders,
//! tokenises, masks, packs and schedules (`tritonforge-train`); the policy worker trains.
//! Every metric goes to the store and to `metrics.jsonl` as it happens.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;
use tritonforge_protocol::DeviceKind;
use tritonforge_pyenv::WorkerMode;
use tritonforge_store::Store;
use tritonforge_train::events::MetricsLog;
use tritonforge_train::worker::{TrainerSpec, WorkerPolicy};
use tritonforge_train::{Event, Policy, RunOptions, SftConfig, TrainError};

use crate::args::Global;
use crate::exit::USAGE as EXIT_USAGE;
use crate::progress;

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
}

pub async fn run(global: &Global, cmd: TrainCmd) -> anyhow::Result<u8> {
    let TrainCmd::Sft {
        config,
        resume,
        until,
        json,
    } = cmd;
    let cfg = match SftConfig::load(&config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let py = global.python_env()?;
    let device = match global.device {
        crate::args::Device::Cpu => DeviceKind::Cpu,
        crate::args::Device::Cuda => DeviceKind::Cuda,
        crate::args::Device::Auto => tritonforge_pyenv::probe(&py, global.device.into())?.device,
    };
    std::fs::create_dir_all(&cfg.output.dir)
        .with_context(|| format!("creating {}", cfg.output.dir.display()))?;
    let tok_dir = match tokenizer_dir(&cfg, &py) {
        Ok(d) => d,
        Err(msg) => {
            eprintln!("error: {msg}");
            return Ok(EXIT_USAGE);
        }
    };
    let store = Store::open(&global.store_path())?;
    let spec = TrainerSpec {
        python: py.interpreter.clone(),
        worker_path: py.worker_path.clone(),
        device,
        log: cfg.output.dir.join("worker.log"),
        procs: cfg.train.gpus,
        torchrun: cfg.train.torchrun.clone(),
    };
    let opts = RunOptions {
        resume,
        until,
        run_id: format!(
            "sft-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0)
        ),
    };
    let log = MetricsLog::open(
        store,
        &cfg.output.dir.join("metrics.jsonl"),
        opts.run_id.clone(),
    );
    let result =
        tokio::task::spawn_blocking(move || train(&cfg, &tok_dir, &opts, &spec, log, json)).await?;
    match result {
        Ok(state) => {
            eprintln!(
                "{} at step {}/{}; latest checkpoint: {}",
                if state.done { "finished" } else { "stopped" },
                state.step,
                state.total_steps,
                state.latest.unwrap_or_default()
            );
            Ok(0)
        }
        Err(
            e @ (TrainError::Config { .. }
            | TrainError::Data { .. }
            | TrainError::Resume(_)
            | TrainError::Tokenizer(_)),
        ) => {
            eprintln!("error: {e}");
            Ok(EXIT_USAGE)
        }
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!(
                "(checkpoints written so far are kept; `--resume` continues from the latest)"
            );
            Ok(crate::exit::ENV)
        }
    }
}

/// The tokenizer directory: configured, the model's own, or exported from the model
/// into the output directory (a GGUF file carries its tokenizer inside).
fn tokenizer_dir(cfg: &SftConfig, py: &tritonforge_pyenv::PythonEnv) -> Result<PathBuf, String> {
    if let Some(t) = &cfg.tokenizer {
        return if t.join("tokenizer.json").is_file() {
            Ok(t.clone())
        } else {
            Err(format!(
                "tokenizer {}: no tokenizer.json there",
                t.display()
            ))
        };
    }
    let model = Path::new(&cfg.model);
    if model.join("tokenizer.json").is_file() {
        return Ok(model.to_path_buf());
    }
    if model.is_dir() {
        return Err(format!(
            "model {}: no tokenizer.json in the directory; set `tokenizer = DIR` in the config",
            model.display()
        ));
    }
    let out = cfg.output.dir.join("tokenizer");
    if out.join("tokenizer.json").is_file() {
        return Ok(out);
    }
    let status = py
        .worker(WorkerMode::Tokenizer {
            model: cfg.model.clone(),
            out: out.clone(),
        })
        .command()
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("running {}: {e}", py.interpreter.display()))?;
    if status.success() {
        Ok(out)
    } else {
        Err(format!("could not export the tokenizer of {}", cfg.model))
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
) -> Result<tritonforge_train::RunState, TrainError> {
    let bar = progress::bar(None, "{bar:30} {pos}/{len} {elapsed_precise} {msg}", json);
    let mut start = || -> Result<Box<dyn Policy>, TrainError> {
        Ok(Box::new(WorkerPolicy::start(spec, &cfg.model)?))
    };
    let mut sink = |e: Event| {
        if let Some(warning) = log.record(&e) {
            progress::line(&bar, false, warning);
        }
        match &e {
            Event::Prepared { steps, start, .. } => {
                bar.set_length(*steps);
                bar.set_position(*start);
            }
            Event::Metric(m) if m.split == "train" => {
                bar.set_position(m.step);
                let mfu = m.mfu.map(|x| format!(" MFU {:.1}%", x * 100.0));
                bar.set_message(format!(
                    "loss {:.4} lr {:.2e} {:.0} tok/s{}",
                    m.loss,
                    m.lr,
                    m.tokens_per_s,
                    mfu.unwrap_or_default()
                ));
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
    r
}

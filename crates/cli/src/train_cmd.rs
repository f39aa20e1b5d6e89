//! `tritonforge train sft --config sft.toml`: supervised fine-tuning. Rust renders,
//! tokenises, masks, packs and schedules (`tritonforge-train`); the policy worker trains.
//! Every metric goes to the store and to `metrics.jsonl` as it happens.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tritonforge_protocol::DeviceKind;
use tritonforge_pyenv::WorkerMode;
use tritonforge_store::Store;
use tritonforge_train::worker::{TrainerSpec, WorkerPolicy};
use tritonforge_train::{Event, Policy, RunOptions, SftConfig, TrainError};

use crate::{Global, EXIT_USAGE};

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
        crate::Device::Cpu => DeviceKind::Cpu,
        crate::Device::Cuda => DeviceKind::Cuda,
        crate::Device::Auto => tritonforge_pyenv::probe(&py, global.device.into())?.device,
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
    let result = tokio::task::spawn_blocking(move || {
        let model = cfg.model.clone();
        let metrics_path = cfg.output.dir.join("metrics.jsonl");
        let mut metrics_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&metrics_path)
            .ok();
        let bar = if json {
            ProgressBar::hidden()
        } else {
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
        };
        let interactive = !bar.is_hidden();
        let mut run_id = opts.run_id.clone();
        let mut start = || -> Result<Box<dyn Policy>, TrainError> {
            Ok(Box::new(WorkerPolicy::start(&spec, &model)?))
        };
        let mut sink = |e: Event| {
            let line = event_json(&e);
            match &e {
                Event::Prepared {
                    run, steps, start, ..
                } => {
                    run_id = run.clone();
                    bar.set_length(*steps);
                    bar.set_position(*start);
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{bar:30} {pos}/{len} {elapsed_precise} {msg}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                    );
                }
                Event::Metric(m) => {
                    let text = serde_json::to_string(m).unwrap_or_default();
                    if let Err(err) = store.put_train_metric(&run_id, m.step, &m.split, &text) {
                        bar.println(format!("warning: storing a metric: {err}"));
                    }
                    if let Some(f) = metrics_file.as_mut() {
                        let _ = writeln!(f, "{{\"run\":{:?},\"metric\":{text}}}", run_id);
                    }
                    if m.split == "train" {
                        bar.set_position(m.step);
                        bar.set_message(format!(
                            "loss {:.4} lr {:.2e} {:.0} tok/s{}",
                            m.loss,
                            m.lr,
                            m.tokens_per_s,
                            m.mfu
                                .map(|x| format!(" MFU {:.1}%", x * 100.0))
                                .unwrap_or_default()
                        ));
                    }
                }
                _ => {}
            }
            if json {
                println!("{line}");
            } else if interactive {
                if !matches!(e, Event::Metric(ref m) if m.split == "train") {
                    bar.println(human(&e));
                }
            } else {
                eprintln!("{}", human(&e));
            }
        };
        let r = tritonforge_train::run(&cfg, &tok_dir, &opts, &mut start, &mut sink);
        bar.finish_and_clear();
        r
    })
    .await?;
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
            Ok(crate::EXIT_ENV)
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

fn event_json(e: &Event) -> String {
    let v = match e {
        Event::Prepared {
            run,
            train,
            validation,
            skipped,
            samples,
            steps,
            start,
        } => {
            serde_json::json!({"event": "prepared", "run": run, "train": train, "validation": validation,
            "skipped": skipped, "samples": samples, "steps": steps, "start": start})
        }
        Event::Ready(info) => serde_json::json!({"event": "ready", "info": info}),
        Event::Metric(m) => serde_json::json!({"event": "metric", "metric": m}),
        Event::Saved { dir, step } => {
            serde_json::json!({"event": "saved", "dir": dir, "step": step})
        }
    };
    v.to_string()
}

fn human(e: &Event) -> String {
    match e {
        Event::Prepared {
            train,
            validation,
            skipped,
            steps,
            start,
            ..
        } => format!(
            "data: {train} train and {validation} validation conversations; skipped {skipped:?}; {steps} steps{}",
            if *start > 0 { format!(", resuming after step {start}") } else { String::new() }
        ),
        Event::Ready(i) => format!(
            "model: {:.1}M parameters ({:.1}M trained), {} on {}{}",
            i.parameters as f64 / 1e6,
            i.trainable as f64 / 1e6,
            i.dtype,
            i.device,
            i.gpu_name.as_deref().map(|g| format!(" ({g})")).unwrap_or_default()
        ),
        Event::Metric(m) => format!(
            "step {} {}: loss {:.4}, lr {:.2e}, {} tokens, {:.0} tok/s{}",
            m.step,
            m.split,
            m.loss,
            m.lr,
            m.tokens,
            m.tokens_per_s,
            m.grad_norm.map(|g| format!(", grad norm {g:.3}")).unwrap_or_default()
        ),
        Event::Saved { dir, step } => format!("saved step {step}: {}", dir.display()),
    }
}

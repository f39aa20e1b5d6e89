//! Supervised fine-tuning, driven from Rust. This crate reads the SFT set, renders and
//! tokenises each conversation, masks the assistant turns, packs rows, plans every step
//! (a seeded order per epoch, so a resumed run sees the same batches), streams batches to
//! the policy worker and writes checkpoints in the Hugging Face layout. The worker does
//! tensor math only. The crate never prints: what happens goes to an [`Event`] sink.

pub mod config;
pub mod events;
pub mod examples;
pub mod pack;
pub mod worker;

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tritonforge_chat::ChatTokenizer;
use tritonforge_protocol::{LoraSetup, SaveJob, StepStats, TrainBatch, TrainInfo, TrainSetup};

pub use config::SftConfig;
use examples::Example;

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("{path}: {reason}")]
    Config { path: PathBuf, reason: String },
    #[error("data {path}: {reason}")]
    Data { path: PathBuf, reason: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("policy worker: {0}")]
    Worker(String),
    /// The worker refused or failed a request (out of memory, a non-finite gradient).
    #[error("{0}")]
    Step(String),
    #[error("output {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    #[error("{0}")]
    Resume(String),
}

/// The worker's side of training. The real one is [`worker::WorkerPolicy`].
pub trait Policy {
    fn setup(&mut self, setup: TrainSetup) -> Result<TrainInfo, TrainError>;
    /// Sends a training step without waiting for it. The run keeps the next step queued
    /// while the worker computes this one, so the device never waits for the host.
    fn send_step(&mut self, batch: TrainBatch) -> Result<(), TrainError>;
    /// The result of the oldest step sent and not yet taken.
    fn take_step(&mut self) -> Result<StepStats, TrainError>;
    fn eval(&mut self, batch: TrainBatch) -> Result<StepStats, TrainError>;
    /// Writes the checkpoint; returns the step it holds.
    fn save(&mut self, save: SaveJob) -> Result<u64, TrainError>;
}

/// A split, tokenised: its examples and what was skipped, by reason.
#[derive(Debug, Default)]
pub struct Split {
    pub examples: Vec<Example>,
    pub skipped: BTreeMap<String, usize>,
    /// A few skipped rows with their place and reason, for the user to look at.
    pub samples: Vec<String>,
}

/// Reads and tokenises one file of conversations.
pub fn load_split(path: &Path, tok: &ChatTokenizer, seq_len: usize) -> Result<Split, TrainError> {
    let (rows, bad) = tritonforge_rows::read(path)
        .map_err(|e| TrainError::Data { path: path.to_path_buf(), reason: e.to_string() })?;
    let mut split = Split::default();
    for b in bad {
        *split.skipped.entry(b.reason.clone()).or_default() += 1;
        if split.samples.len() < 5 {
            split.samples.push(format!("{}: {}", b.place, b.reason));
        }
    }
    for (place, row) in rows {
        let result = match examples::messages_of(&row) {
            Some(m) => examples::tokenize(tok, &m, seq_len),
            None => Err(examples::SkipError::NoMessages),
        };
        match result {
            Ok(ex) => split.examples.push(ex),
            Err(e) => {
                *split.skipped.entry(examples::skip_reason(&e).to_string()).or_default() += 1;
                if split.samples.len() < 5 {
                    split.samples.push(format!("{place}: {e}"));
                }
            }
        }
    }
    Ok(split)
}

/// One line of metrics, as written to `metrics.jsonl` and the store.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Metric {
    pub step: u64,
    /// `train` or `validation`.
    pub split: String,
    pub epoch: u32,
    pub loss: f64,
    pub loss_tokens: u64,
    /// Real tokens (padding left out).
    pub tokens: u64,
    pub lr: f64,
    pub grad_norm: Option<f64>,
    pub seconds: f64,
    pub tokens_per_s: f64,
    /// Model FLOPs utilisation against the accelerator's dense bf16 peak, counting the
    /// work the step needs (`batch_flops`: the output projection at target tokens only).
    pub mfu: Option<f64>,
    /// The same by the common formula, 6 × parameters × tokens plus causal attention: the
    /// output projection counted at every token, though the trainer computes it only at
    /// targets. Higher than `mfu`; for comparison with figures quoted that way.
    #[serde(default)]
    pub mfu_standard: Option<f64>,
    pub tflops: f64,
    pub memory_bytes: Option<u64>,
}

/// What happens during a run, for the binary to show and store.
#[derive(Debug, Clone)]
pub enum Event {
    Prepared {
        /// The run's id (a resumed run keeps the id it started with).
        run: String,
        train: usize,
        validation: usize,
        skipped: BTreeMap<String, usize>,
        samples: Vec<String>,
        steps: u64,
        start: u64,
    },
    Ready(TrainInfo),
    Metric(Metric),
    Saved {
        dir: PathBuf,
        step: u64,
    },
}

/// `state.json` in the output directory: which run this is and its latest checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunState {
    pub run: String,
    pub fingerprint: String,
    pub latest: Option<String>,
    pub step: u64,
    pub total_steps: u64,
    pub done: bool,
}

pub const STATE_FILE: &str = "state.json";
/// Tokenizer files copied into every checkpoint (those that exist).
const TOKENIZER_FILES: [&str; 4] =
    ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"];

/// How a run is asked for.
pub struct RunOptions {
    pub resume: bool,
    /// Stop after this step (with a checkpoint), as a time-sliced job would.
    pub until: Option<u64>,
    /// A new run's id (a resumed run keeps its own).
    pub run_id: String,
}

fn out_err(path: &Path, e: impl std::fmt::Display) -> TrainError {
    TrainError::Output { path: path.to_path_buf(), reason: e.to_string() }
}

fn write_atomic(path: &Path, text: &str) -> Result<(), TrainError> {
    use std::io::Write as _;
    let tmp = path.with_extension("partial");
    let mut f = std::fs::File::create(&tmp).map_err(|e| out_err(&tmp, e))?;
    f.write_all(text.as_bytes()).and_then(|_| f.sync_all()).map_err(|e| out_err(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| out_err(path, e))
}

/// Flushes every file of a directory to disk (a checkpoint before it is renamed into
/// place: after a crash, `state.json` must not point at truncated weights).
fn sync_dir(dir: &Path) -> Result<(), TrainError> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| out_err(&d, e))? {
            let path = entry.map_err(|e| out_err(&d, e))?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                std::fs::File::open(&path)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| out_err(&path, e))?;
            }
        }
    }
    Ok(())
}

/// The step of a `checkpoint-NNNNNN` directory name.
fn checkpoint_step(name: &str) -> Option<u64> {
    name.strip_prefix("checkpoint-")?.parse().ok()
}

fn read_state(dir: &Path) -> Result<Option<RunState>, TrainError> {
    let path = dir.join(STATE_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| out_err(&path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(out_err(&path, e)),
    }
}

/// The accelerator's dense bf16 peak in FLOP/s, by name (datasheet figures).
pub fn peak_flops(gpu: Option<&str>, configured_tflops: Option<f64>) -> Option<f64> {
    if let Some(t) = configured_tflops {
        return Some(t * 1e12);
    }
    let name = gpu?;
    let table = [("H200", 989.0), ("H100", 989.0), ("A100", 312.0), ("L40S", 362.0)];
    table.iter().find(|(k, _)| name.contains(k)).map(|(_, t)| t * 1e12)
}

/// Training FLOPs of one batch: the matrix multiplies of every token through the body
/// (forward 2, backward 2 for activations, 2 more for trainable weights), the output
/// projection only at target tokens (where the loss is computed), and causal attention
/// (6 × layers × width × n² per example of n tokens).
pub fn batch_flops(info: &TrainInfo, tokens: u64, loss_tokens: u64, docs: &[usize]) -> f64 {
    let head = info.head_parameters as f64;
    let body = (info.parameters as f64 - head).max(0.0);
    let trainable_body = (info.trainable as f64).min(body);
    let head_factor = if info.trainable >= info.parameters { 6.0 } else { 4.0 };
    let attention: f64 = docs.iter().map(|&n| (n as f64) * (n as f64)).sum::<f64>()
        * 6.0
        * f64::from(info.layers)
        * f64::from(info.attention_width);
    (4.0 * body + 2.0 * trainable_body) * tokens as f64
        + head_factor * head * loss_tokens as f64
        + attention
}

/// Trains as the config says, from scratch or from the output directory's latest
/// checkpoint. Every step's metrics go to `events` as they happen; checkpoints are
/// written every `save_every` steps and at the end, so an interruption loses at most the
/// steps since the last one.
/// A `[train]` setting the config keeps as written (checked on load) as the protocol's
/// closed set; a config built in code without that check fails here, not in the worker.
fn closed<T: std::str::FromStr<Err = tritonforge_protocol::UnknownName>>(
    value: &str,
) -> Result<T, TrainError> {
    value.parse().map_err(|e: tritonforge_protocol::UnknownName| TrainError::Config {
        path: PathBuf::from("[train]"),
        reason: e.to_string(),
    })
}

pub fn run(
    cfg: &SftConfig,
    tok_dir: &Path,
    opts: &RunOptions,
    start_policy: &mut dyn FnMut() -> Result<Box<dyn Policy>, TrainError>,
    events: &mut dyn FnMut(Event),
) -> Result<RunState, TrainError> {
    let out = &cfg.output.dir;
    let t = &cfg.train;
    let existing = read_state(out)?;
    match (&existing, opts.resume) {
        (None, true) => {
            return Err(TrainError::Resume(format!(
                "{}: nothing to resume (no {STATE_FILE})",
                out.display()
            )))
        }
        (Some(_), false) => {
            return Err(TrainError::Resume(format!(
            "{} already holds a run; pass --resume to continue it, or choose another output.dir",
            out.display()
        )))
        }
        _ => {}
    }
    std::fs::create_dir_all(out).map_err(|e| out_err(out, e))?;

    let tok = ChatTokenizer::from_dir(tok_dir).map_err(|e| TrainError::Tokenizer(e.to_string()))?;
    let train = load_split(&cfg.data.train, &tok, t.seq_len)?;
    let validation = match &cfg.data.validation {
        Some(p) => Some(load_split(p, &tok, t.seq_len)?),
        None => None,
    };
    if train.examples.is_empty() {
        return Err(TrainError::Data {
            path: cfg.data.train.clone(),
            reason: format!(
                "no conversation left to train on (skipped: {:?}; e.g. {})",
                train.skipped,
                train.samples.join("; ")
            ),
        });
    }
    // The plan is a function of the settings and of the tokenised examples: a rebuilt
    // data file, another tokenizer or another template is another plan.
    let fingerprint = {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(cfg.schedule_fingerprint().as_bytes());
        for ex in &train.examples {
            h.update((ex.ids.len() as u64).to_le_bytes());
            for id in &ex.ids {
                h.update(id.to_le_bytes());
            }
            h.update(&ex.mask);
        }
        hex::encode(h.finalize())
    };
    let (run_id, resume_from) = match &existing {
        Some(s) => {
            if s.fingerprint != fingerprint {
                return Err(TrainError::Resume(format!(
                    "{}: the run there was planned with other settings or data (model, data \
                     content, tokenizer, template, schedule or seed differ); resume with the \
                     same config and data, or use another output.dir",
                    out.display()
                )));
            }
            (s.run.clone(), s.latest.clone())
        }
        None => (opts.run_id.clone(), None),
    };
    let lens: Vec<usize> = train.examples.iter().map(|e| e.ids.len()).collect();
    let plan = pack::plan(&lens, t);
    let total = plan.steps.len() as u64;
    let pad = tok.token_id("<|endoftext|>").or_else(|| tok.token_id("<pad>")).unwrap_or(0);

    let mut state = RunState {
        run: run_id,
        fingerprint,
        latest: resume_from.clone(),
        step: 0,
        total_steps: total,
        done: false,
    };
    let mut skipped = train.skipped.clone();
    if let Some(v) = &validation {
        for (k, n) in &v.skipped {
            *skipped.entry(format!("validation:{k}")).or_default() += n;
        }
    }
    let mut policy = start_policy()?;
    let info = policy.setup(TrainSetup {
        model: cfg.model.clone(),
        resume: resume_from.as_ref().map(|d| out.join(d).display().to_string()),
        lora: cfg.lora.enabled.then(|| LoraSetup {
            rank: cfg.lora.rank,
            alpha: cfg.lora.alpha,
            dropout: cfg.lora.dropout,
            target_modules: cfg.lora.target_modules.clone(),
        }),
        lr: t.lr,
        min_lr: t.min_lr,
        warmup_steps: t.warmup_steps,
        total_steps: total,
        weight_decay: t.weight_decay,
        grad_clip: t.grad_clip,
        gradient_checkpointing: t.gradient_checkpointing,
        dtype: closed(&t.dtype)?,
        seed: t.seed,
        attention: closed(&t.attention)?,
        compile: closed(&t.compile)?,
        one_per_row: t.group_by_length,
    })?;
    let vocab = tok.vocab_size() as u64;
    if vocab > info.vocab_size {
        return Err(TrainError::Tokenizer(format!(
            "the tokenizer in {} has {vocab} tokens but the model's embedding has {} rows: \
             they are not a pair",
            tok_dir.display(),
            info.vocab_size
        )));
    }
    state.step = info.step;
    if state.step > total {
        return Err(TrainError::Resume(format!(
            "the checkpoint is at step {} but the plan has {total}",
            state.step
        )));
    }
    events(Event::Prepared {
        run: state.run.clone(),
        train: train.examples.len(),
        validation: validation.as_ref().map_or(0, |v| v.examples.len()),
        skipped,
        samples: train.samples.clone(),
        steps: total,
        start: state.step,
    });
    events(Event::Ready(info.clone()));
    let peak = peak_flops(info.gpu_name.as_deref(), t.peak_tflops)
        .map(|p| p * f64::from(info.world_size.max(1)));

    let stop_at = opts.until.map_or(total, |u| u.min(total));
    // What follows step `s` (counted from 1): an evaluation, a checkpoint. The worker must
    // have finished exactly step `s` for either, so no step is sent ahead across them.
    let evaluate_after = |s: u64| {
        validation.is_some() && ((t.eval_every > 0 && s.is_multiple_of(t.eval_every)) || s == total)
    };
    let save_after = |s: u64| {
        t.checkpoints && ((t.save_every > 0 && s.is_multiple_of(t.save_every)) || s == stop_at)
    };
    let mut last_saved = state.step;
    // Steps sent and not yet answered (index into the plan, documents per row), at most
    // two: the one the worker runs and the next, already in its queue.
    let mut in_flight: VecDeque<(usize, Vec<usize>)> = VecDeque::new();
    let mut next = state.step;
    // When the worker became free for the oldest step in flight: a step's time runs from
    // the previous step's answer, or from its own sending if the worker was idle.
    let mut since = Instant::now();
    while state.step < stop_at {
        while in_flight.len() < 2
            && next < stop_at
            && (in_flight.is_empty() || !(evaluate_after(next) || save_after(next)))
        {
            let i = next as usize;
            let mut docs = Vec::new();
            let micro: Vec<_> = plan.steps[i]
                .iter()
                .map(|rows| {
                    let (mb, d) =
                        pack::materialise(&train.examples, rows, pad, pack::align(t), t.seq_len);
                    docs.extend(d);
                    mb
                })
                .collect();
            if in_flight.is_empty() {
                since = Instant::now();
            }
            policy.send_step(TrainBatch { micro })?;
            in_flight.push_back((i, docs));
            next += 1;
        }
        let Some((i, docs)) = in_flight.pop_front() else {
            break;
        };
        let stats = policy.take_step()?;
        let seconds = since.elapsed().as_secs_f64();
        since = Instant::now();
        if stats.step != i as u64 + 1 {
            return Err(TrainError::Worker(format!(
                "the worker answered step {} for step {}",
                stats.step,
                i + 1
            )));
        }
        state.step = stats.step;
        let real: u64 = docs.iter().map(|&n| n as u64).sum();
        events(Event::Metric(metric(
            &stats,
            "train",
            plan.epoch[i],
            real,
            &docs,
            seconds,
            &info,
            peak,
        )));
        if evaluate_after(state.step) {
            if let Some(v) = &validation {
                evaluate(
                    policy.as_mut(),
                    v,
                    cfg,
                    pad,
                    state.step,
                    plan.epoch[i],
                    &info,
                    peak,
                    events,
                )?;
            }
        }
        if save_after(state.step) {
            save(policy.as_mut(), cfg, tok_dir, &mut state, total, events)?;
            last_saved = state.step;
        }
    }
    if t.checkpoints && state.step == total && last_saved != total {
        save(policy.as_mut(), cfg, tok_dir, &mut state, total, events)?;
    }
    state.done = state.step == total;
    Ok(state)
}

#[allow(clippy::too_many_arguments)]
fn metric(
    stats: &StepStats,
    split: &str,
    epoch: u32,
    real_tokens: u64,
    docs: &[usize],
    seconds: f64,
    info: &TrainInfo,
    peak: Option<f64>,
) -> Metric {
    let share = if split == "train" { 1.0 } else { 1.0 / 3.0 };
    let flops = batch_flops(info, real_tokens, stats.loss_tokens, docs) * share;
    let standard = batch_flops(info, real_tokens, real_tokens, docs) * share;
    Metric {
        step: stats.step,
        split: split.into(),
        epoch,
        loss: stats.loss,
        loss_tokens: stats.loss_tokens,
        tokens: real_tokens,
        lr: stats.lr,
        grad_norm: stats.grad_norm,
        seconds,
        tokens_per_s: real_tokens as f64 / seconds.max(1e-9),
        mfu: peak.map(|p| flops / seconds.max(1e-9) / p),
        mfu_standard: peak.map(|p| standard / seconds.max(1e-9) / p),
        tflops: flops / seconds.max(1e-9) / 1e12,
        memory_bytes: stats.memory_bytes,
    }
}

/// Validation loss over the whole split (token-weighted), in batches the size of a step.
#[allow(clippy::too_many_arguments)]
fn evaluate(
    policy: &mut dyn Policy,
    split: &Split,
    cfg: &SftConfig,
    pad: u32,
    step: u64,
    epoch: u32,
    info: &TrainInfo,
    peak: Option<f64>,
    events: &mut dyn FnMut(Event),
) -> Result<(), TrainError> {
    if split.examples.is_empty() {
        return Ok(());
    }
    let t = &cfg.train;
    let lens: Vec<usize> = split.examples.iter().map(|e| e.ids.len()).collect();
    let order: Vec<usize> = (0..lens.len()).collect();
    let micro_batches = pack::micro_batches(&lens, &order, t, None);
    let started = Instant::now();
    let (mut loss_sum, mut n, mut real, mut lr, mut mem) = (0.0, 0u64, 0u64, 0.0, None);
    let mut all_docs = Vec::new();
    for chunk in micro_batches.chunks(t.grad_accum) {
        let mut micro = Vec::new();
        for rows in chunk {
            let (mb, docs) =
                pack::materialise(&split.examples, rows, pad, pack::align(t), t.seq_len);
            real += docs.iter().map(|&d| d as u64).sum::<u64>();
            all_docs.extend(docs);
            micro.push(mb);
        }
        let s = policy.eval(TrainBatch { micro })?;
        loss_sum += s.loss * s.loss_tokens as f64;
        n += s.loss_tokens;
        lr = s.lr;
        mem = s.memory_bytes.max(mem);
    }
    let stats = StepStats {
        step,
        loss: loss_sum / (n.max(1) as f64),
        loss_tokens: n,
        tokens: real,
        grad_norm: None,
        lr,
        elapsed_ms: 0.0,
        memory_bytes: mem,
    };
    let seconds = started.elapsed().as_secs_f64();
    events(Event::Metric(metric(
        &stats,
        "validation",
        epoch,
        real,
        &all_docs,
        seconds,
        info,
        peak,
    )));
    Ok(())
}

/// Writes `checkpoint-NNNNNN` (weights, config, tokenizer, trainer state), then points
/// `state.json` at it, then deletes checkpoints beyond `keep_checkpoints`. The final
/// checkpoint of a LoRA run holds the merged model when `lora.merge` is on.
fn save(
    policy: &mut dyn Policy,
    cfg: &SftConfig,
    tok_dir: &Path,
    state: &mut RunState,
    total: u64,
    events: &mut dyn FnMut(Event),
) -> Result<(), TrainError> {
    let out = &cfg.output.dir;
    let name = format!("checkpoint-{:06}", state.step);
    let dir = out.join(&name);
    let partial = out.join(format!("{name}.partial"));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(|e| out_err(&partial, e))?;
    }
    let last = state.step == total;
    let step = policy.save(SaveJob {
        dir: partial.display().to_string(),
        merge_lora: cfg.lora.enabled && cfg.lora.merge && last,
        trainer_state: true,
    })?;
    for f in TOKENIZER_FILES {
        let src = tok_dir.join(f);
        if src.is_file() {
            std::fs::copy(&src, partial.join(f)).map_err(|e| out_err(&src, e))?;
        }
    }
    let meta =
        serde_json::json!({"run": state.run, "step": step, "fingerprint": state.fingerprint});
    write_atomic(&partial.join("tritonforge.json"), &meta.to_string())?;
    sync_dir(&partial)?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| out_err(&dir, e))?;
    }
    std::fs::rename(&partial, &dir).map_err(|e| out_err(&dir, e))?;
    state.latest = Some(name.clone());
    state.done = last;
    let text = serde_json::to_string_pretty(&state).map_err(|e| out_err(out, e))?;
    write_atomic(&out.join(STATE_FILE), &text)?;
    // Older checkpoints beyond the number kept.
    let mut ckpts: Vec<(u64, String)> = std::fs::read_dir(out)
        .map_err(|e| out_err(out, e))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter_map(|n| checkpoint_step(&n).map(|s| (s, n)))
        .collect();
    ckpts.sort();
    let keep = cfg.train.keep_checkpoints;
    if ckpts.len() > keep {
        for (_, old) in &ckpts[..ckpts.len() - keep] {
            if *old != name {
                let _ = std::fs::remove_dir_all(out.join(old));
            }
        }
    }
    events(Event::Saved { dir, step });
    Ok(())
}

/// The tokenizer directory: configured, the model's own, or exported from the model
/// into the output directory (a GGUF file carries its tokenizer inside).
pub fn tokenizer_dir(
    cfg: &SftConfig,
    py: &tritonforge_pyenv::PythonEnv,
) -> Result<PathBuf, TrainError> {
    tokenizer_dir_or(cfg, py).map_err(TrainError::Tokenizer)
}

fn tokenizer_dir_or(cfg: &SftConfig, py: &tritonforge_pyenv::PythonEnv) -> Result<PathBuf, String> {
    if let Some(t) = &cfg.tokenizer {
        return if t.join("tokenizer.json").is_file() {
            Ok(t.clone())
        } else {
            Err(format!("tokenizer {}: no tokenizer.json there", t.display()))
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
    let exported = py.export_tokenizer(&cfg.model, &out, true).map_err(|e| e.to_string())?;
    if exported {
        Ok(out)
    } else {
        Err(format!("could not export the tokenizer of {}", cfg.model))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tritonforge_protocol::WeightDtype;

    fn info(parameters: u64, trainable: u64) -> TrainInfo {
        TrainInfo {
            parameters,
            trainable,
            head_parameters: 100,
            vocab_size: 10,
            layers: 2,
            attention_width: 8,
            dtype: WeightDtype::Bfloat16,
            device: "cuda".into(),
            world_size: 1,
            gpu_name: None,
            step: 0,
            compiled: false,
            attention: String::new(),
        }
    }

    /// Counted by hand: body 900 parameters, head 100, 50 tokens of which 10 are targets,
    /// two conversations of 20 and 30 tokens.
    #[test]
    fn flops_count_the_head_at_targets_and_causal_attention_per_conversation() {
        let attention = 6.0 * 2.0 * 8.0 * (20.0 * 20.0 + 30.0 * 30.0);
        let full = info(1000, 1000);
        assert_eq!(
            batch_flops(&full, 50, 10, &[20, 30]),
            6.0 * 900.0 * 50.0 + 6.0 * 100.0 * 10.0 + attention
        );
        // The common formula: every parameter at every token.
        assert_eq!(batch_flops(&full, 50, 50, &[20, 30]), 6.0 * 1000.0 * 50.0 + attention);
        // LoRA: frozen weights skip their own gradient (4 instead of 6).
        let lora = info(1000, 10);
        assert_eq!(
            batch_flops(&lora, 50, 10, &[20, 30]),
            (4.0 * 900.0 + 2.0 * 10.0) * 50.0 + 4.0 * 100.0 * 10.0 + attention
        );
        let stats = StepStats {
            step: 1,
            loss: 1.0,
            loss_tokens: 10,
            tokens: 50,
            grad_norm: None,
            lr: 0.0,
            elapsed_ms: 0.0,
            memory_bytes: None,
        };
        let m = metric(&stats, "train", 0, 50, &[20, 30], 2.0, &full, Some(1e3));
        let (mfu, standard) = (m.mfu.unwrap(), m.mfu_standard.unwrap());
        assert!((mfu - batch_flops(&full, 50, 10, &[20, 30]) / 2.0 / 1e3).abs() < 1e-9);
        assert!(standard > mfu);
    }
}

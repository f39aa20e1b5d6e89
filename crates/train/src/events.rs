//! How a training run reports: each [`Event`] as a JSON line or a sentence, and every
//! metric written where it is kept (the store and `metrics.jsonl`) as it happens.

use std::io::Write as _;
use std::path::Path;

use tritonforge_store::Store;

use crate::{Event, Metric};

impl Event {
    /// One JSON object (`--json` prints one per line).
    pub fn to_json(&self) -> String {
        let e = self;
        let v = match e {
            Event::Prepared { run, train, validation, skipped, samples, steps, start } => {
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

    /// One line a person reads.
    pub fn describe(&self) -> String {
        let e = self;
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
}

impl Metric {
    /// What a progress bar shows of a training step.
    pub fn progress(&self) -> String {
        let mfu = self.mfu.map(|x| format!(" MFU {:.1}%", x * 100.0)).unwrap_or_default();
        format!("loss {:.4} lr {:.2e} {:.0} tok/s{mfu}", self.loss, self.lr, self.tokens_per_s)
    }
}

/// Keeps every metric of a run: in the store (per run, step and split) and appended to
/// `metrics.jsonl` in the output directory. A failed write is reported, never fatal:
/// losing a metric line must not stop training.
pub struct MetricsLog {
    store: Store,
    file: Option<std::fs::File>,
    /// The run's id (taken from `Event::Prepared`: a resumed run keeps its first id).
    pub run: String,
}

impl MetricsLog {
    pub fn open(store: Store, path: &Path, run: String) -> MetricsLog {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).ok();
        MetricsLog { store, file, run }
    }

    /// Note the run id from `Prepared`; store a `Metric`. Returns a warning to show, if any.
    pub fn record(&mut self, e: &Event) -> Option<String> {
        match e {
            Event::Prepared { run, .. } => {
                self.run = run.clone();
                None
            }
            Event::Metric(m) => self.metric(m),
            _ => None,
        }
    }

    fn metric(&mut self, m: &Metric) -> Option<String> {
        let text = serde_json::to_string(m).unwrap_or_default();
        if let Some(f) = self.file.as_mut() {
            let _ = writeln!(f, "{{\"run\":{:?},\"metric\":{text}}}", self.run);
        }
        self.store
            .put_train_metric(&self.run, m.step, &m.split, &text)
            .err()
            .map(|err| format!("warning: storing a metric: {err}"))
    }
}

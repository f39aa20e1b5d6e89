//! The concrete generators and learners: the colocated policy worker (it trains and
//! generates from the same weights, one process), and SGLang servers refreshed from the
//! trainer's weights on disk (disaggregated).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tritonforge_agent::embedded::EmbeddedBackend;
use tritonforge_agent::http::{HttpClient, HttpConfig};
use tritonforge_agent::sglang::SglangBackend;
use tritonforge_agent::{Backend, BackendError, ChatMessage, Completion, Sampling};
use tritonforge_protocol::{
    Message, RlBatch, RlStats, SaveJob, ScoreJob, Scores, TrainInfo, TrainSetup,
};

use crate::env::BoxFuture;
use crate::run::{Generator, Learner};

/// The policy worker started with `--train`: the learner, and (colocated) the generator.
pub struct WorkerLearner {
    pub policy: Arc<EmbeddedBackend>,
    /// How long one training request may take (a setup that loads a model, a step).
    pub timeout: Duration,
}

fn wrong(what: &str, m: &Message) -> String {
    let line: String = m.to_line().chars().take(120).collect();
    format!("expected {what}, got {line}")
}

impl Learner for WorkerLearner {
    fn setup(&self, setup: TrainSetup) -> BoxFuture<'_, Result<TrainInfo, String>> {
        Box::pin(async move {
            match self
                .policy
                .train_request(|id| Message::TrainSetup { id, setup }, self.timeout)
                .await?
            {
                Message::TrainReady { info, .. } => Ok(info),
                m => Err(wrong("train_ready", &m)),
            }
        })
    }

    fn score(&self, job: ScoreJob) -> BoxFuture<'_, Result<Scores, String>> {
        Box::pin(async move {
            match self.policy.train_request(|id| Message::Score { id, job }, self.timeout).await? {
                Message::Scored { scores, .. } => Ok(scores),
                m => Err(wrong("scored", &m)),
            }
        })
    }

    fn step(&self, batch: RlBatch) -> BoxFuture<'_, Result<RlStats, String>> {
        Box::pin(async move {
            match self
                .policy
                .train_request(|id| Message::RlStep { id, batch }, self.timeout)
                .await?
            {
                Message::RlDone { stats, .. } => Ok(stats),
                m => Err(wrong("rl_done", &m)),
            }
        })
    }

    fn save(&self, save: SaveJob) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            match self
                .policy
                .train_request(|id| Message::SaveCheckpoint { id, save }, self.timeout)
                .await?
            {
                Message::Checkpointed { step, .. } => Ok(step),
                m => Err(wrong("checkpointed", &m)),
            }
        })
    }
}

/// Colocated: the training worker generates from the weights it trains.
pub struct Colocated(pub Arc<EmbeddedBackend>);

impl Generator for Colocated {
    fn backend(&self) -> &dyn Backend {
        &*self.0
    }

    fn refresh<'a>(&'a self, _dir: &'a Path) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    fn needs_weights_on_disk(&self) -> bool {
        false
    }
}

/// SGLang servers behind one backend (round robin), each told to load new weights from
/// disk after every step (`POST /update_weights_from_disk {"model_path": DIR}`).
pub struct SglangEngines {
    engines: Vec<SglangBackend>,
    control: Vec<HttpClient>,
    next: AtomicUsize,
}

impl SglangEngines {
    pub fn new(
        urls: &[String],
        tokenizer: &Path,
        timeout: Duration,
    ) -> Result<SglangEngines, BackendError> {
        let mut engines = Vec::new();
        let mut control = Vec::new();
        for url in urls {
            let http = HttpConfig { timeout, ..HttpConfig::new(url.trim_end_matches('/')) };
            engines.push(SglangBackend::new(http.clone(), tokenizer)?);
            control.push(HttpClient::new(http)?);
        }
        Ok(SglangEngines { engines, control, next: AtomicUsize::new(0) })
    }
}

impl Backend for SglangEngines {
    fn describe(&self) -> String {
        let urls: Vec<&str> = self.control.iter().map(|c| c.config.base_url.as_str()).collect();
        format!("sglang:{}", urls.join(","))
    }

    fn complete<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        sampling: &'a Sampling,
    ) -> BoxFuture<'a, Result<Completion, BackendError>> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.engines.len().max(1);
        self.engines[i].complete(messages, sampling)
    }
}

impl Generator for SglangEngines {
    fn backend(&self) -> &dyn Backend {
        self
    }

    fn refresh<'a>(&'a self, dir: &'a Path) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            for c in &self.control {
                let url = format!("{}/update_weights_from_disk", c.config.base_url);
                let body = json!({"model_path": dir.display().to_string()});
                let resp = c.post(&url, &body).await.map_err(|e| e.to_string())?;
                let v = c.json(&url, resp).await.map_err(|e| e.to_string())?;
                if v["success"].as_bool() != Some(true) {
                    return Err(format!(
                        "{url}: the engine did not load {}: {}",
                        dir.display(),
                        v["message"].as_str().unwrap_or("no message")
                    ));
                }
            }
            Ok(())
        })
    }

    fn needs_weights_on_disk(&self) -> bool {
        true
    }
}

//! The concrete generators and learners: the colocated policy worker (it trains and
//! generates from the same weights, one process), the policy worker under `torchrun` on
//! several ranks (it only trains), and SGLang or vLLM servers refreshed from the trainer's
//! weights on disk (disaggregated). [`build`] picks them from the config.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tritonforge_agent::embedded::{EmbeddedBackend, EmbeddedConfig};
use tritonforge_agent::http::HttpConfig;
use tritonforge_agent::sglang::SglangBackend;
use tritonforge_agent::vllm::VllmBackend;
use tritonforge_agent::{Backend, BackendError, ChatMessage, Completion, Sampling};
use tritonforge_protocol::{
    DeviceKind, Message, RlBatch, RlStats, SaveJob, ScoreJob, Scores, TrainInfo, TrainSetup,
};
use tritonforge_train::worker::{TrainerSpec, WorkerPolicy};
use tritonforge_train::{Policy as _, TrainError};

use crate::config::{GenerationCfg, RlConfig};
use crate::env::BoxFuture;
use crate::refresh::{EngineKind, Refresher};
use crate::run::{Generator, Learner};
use crate::RlError;

/// How to start the policy worker that learns (and, colocated, generates).
#[derive(Debug, Clone)]
pub struct WorkerLaunch {
    pub python: PathBuf,
    /// Directory holding `tritonforge_worker/`.
    pub worker_path: PathBuf,
    /// The model the worker loads (resolved: a directory, an adapter, a `.gguf` file).
    pub model: String,
    /// What reports call it.
    pub label: String,
    pub device: DeviceKind,
    /// Where a learner on several ranks writes its stderr.
    pub log: PathBuf,
}

/// The learner and the generator of a run.
pub struct Engines {
    pub learner: Arc<dyn Learner>,
    pub generator: Arc<dyn Generator>,
}

/// The learner and the generator `cfg` asks for. Nothing is started yet: the worker
/// starts on its first request.
/// - `learner.procs = 1`: the policy worker in one process learns; colocated, it also
///   generates.
/// - `learner.procs > 1`: the policy worker under `torchrun` learns ([`RanksLearner`]);
///   generation is on the external engines (the config's check refuses anything else).
pub fn build(cfg: &RlConfig, launch: &WorkerLaunch) -> Result<Engines, RlError> {
    let lora = cfg.model.lora.is_some();
    let stale = cfg.schedule.max_staleness;
    let engines = ExternalEngines::from_config(&cfg.generation, lora, stale)?.map(Arc::new);
    if cfg.learner.procs > 1 {
        let Some(engines) = engines else {
            return Err(RlError::Config(
                "learner.procs > 1 needs external engines (generation.kind = \"sglang\" or \"vllm\")"
                    .into(),
            ));
        };
        let spec = TrainerSpec {
            python: launch.python.clone(),
            worker_path: launch.worker_path.clone(),
            device: launch.device,
            log: launch.log.clone(),
            procs: cfg.learner.procs,
            torchrun: cfg.learner.torchrun.clone(),
        };
        return Ok(Engines {
            learner: Arc::new(RanksLearner::new(spec, &launch.model)),
            generator: engines,
        });
    }
    let policy = Arc::new(EmbeddedBackend::new(EmbeddedConfig {
        python: launch.python.clone(),
        worker_path: launch.worker_path.clone(),
        model: launch.model.clone(),
        label: launch.label.clone(),
        device: launch.device,
        startup_timeout: Duration::from_secs(600),
        request_timeout: Duration::from_secs(1800),
        max_batch: cfg.rollout.parallel,
        train: true,
    }));
    let learner =
        Arc::new(WorkerLearner { policy: policy.clone(), timeout: Duration::from_secs(3600) });
    let generator: Arc<dyn Generator> = match engines {
        Some(e) => e,
        None => Arc::new(Colocated(policy)),
    };
    Ok(Engines { learner, generator })
}

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

/// The policy worker under `torchrun` on several ranks (FSDP2), started on its first
/// request: `tritonforge-train`'s trainer process, with the launcher, protocol and
/// clean-up `train sft` uses. Rank 0 reads the requests and answers them; every rank
/// computes; a checkpoint is gathered to rank 0, which writes it and answers only once
/// it is whole (so an engine told to load it finds it complete). It only trains: a
/// worker of several ranks does not generate.
pub struct RanksLearner {
    spec: Arc<TrainerSpec>,
    model: String,
    worker: Arc<Mutex<Option<WorkerPolicy>>>,
}

impl RanksLearner {
    pub fn new(spec: TrainerSpec, model: &str) -> RanksLearner {
        RanksLearner {
            spec: Arc::new(spec),
            model: model.to_string(),
            worker: Arc::new(Mutex::new(None)),
        }
    }

    /// `f` on the worker (started first if it is not yet), on a blocking thread: the
    /// trainer's protocol is synchronous, and a step takes as long as it takes.
    fn with<T, F>(&self, f: F) -> BoxFuture<'_, Result<T, String>>
    where
        T: Send + 'static,
        F: FnOnce(&mut WorkerPolicy) -> Result<T, TrainError> + Send + 'static,
    {
        let (spec, model, worker) = (self.spec.clone(), self.model.clone(), self.worker.clone());
        Box::pin(async move {
            let call = move || -> Result<T, String> {
                let mut slot = worker
                    .lock()
                    .map_err(|_| "the learner failed in an earlier request".to_string())?;
                if slot.is_none() {
                    *slot = Some(WorkerPolicy::start(&spec, &model).map_err(|e| e.to_string())?);
                }
                match slot.as_mut() {
                    Some(w) => f(w).map_err(|e| e.to_string()),
                    None => Err("the learner did not start".into()),
                }
            };
            tokio::task::spawn_blocking(call)
                .await
                .map_err(|e| format!("the learner's thread: {e}"))?
        })
    }
}

impl Learner for RanksLearner {
    fn setup(&self, setup: TrainSetup) -> BoxFuture<'_, Result<TrainInfo, String>> {
        self.with(move |w| w.setup(setup))
    }

    fn score(&self, job: ScoreJob) -> BoxFuture<'_, Result<Scores, String>> {
        self.with(move |w| w.score(job))
    }

    fn step(&self, batch: RlBatch) -> BoxFuture<'_, Result<RlStats, String>> {
        self.with(move |w| w.rl_step(batch))
    }

    fn save(&self, save: SaveJob) -> BoxFuture<'_, Result<u64, String>> {
        self.with(move |w| w.save(save))
    }
}

/// Colocated: the training worker generates from the weights it trains.
pub struct Colocated(pub Arc<EmbeddedBackend>);

impl Generator for Colocated {
    fn backend(&self) -> &dyn Backend {
        &*self.0
    }

    fn refresh<'a>(
        &'a self,
        _dir: &'a Path,
        _version: &'a str,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    fn needs_weights_on_disk(&self) -> bool {
        false
    }
}

/// External engines (SGLang or vLLM servers) behind one backend, round robin, each told
/// to load the learner's weights from disk after every step ([`Refresher`]).
pub struct ExternalEngines {
    engines: Vec<Box<dyn Backend>>,
    refresher: Refresher,
    next: AtomicUsize,
    /// The weight versions handed to the engines, in order. A completion that says which
    /// weights made it (SGLang does) must name the version current when it was asked for
    /// or a later one: anything else is an engine that restarted from other weights, or
    /// was refreshed by someone else, since its last check.
    loaded: Mutex<Vec<String>>,
    /// A full-weight refresh is under way: until it ends, an engine not yet paused may
    /// still answer from the version before it.
    refreshing: AtomicBool,
    /// The first completion refused for coming from other weights: the engines are not
    /// what the run believes, and the run stops at its next check ([`Generator::fault`]).
    fault: Mutex<Option<String>>,
    /// The run trains a LoRA adapter: each version is an adapter loaded under its own
    /// name beside the base model, and every request names the latest.
    lora: bool,
    /// Versions before the latest that requests in flight may still name
    /// (`schedule.max_staleness`): their adapters stay loaded.
    stale: usize,
}

impl ExternalEngines {
    /// The engines of `cfg` (`None` when colocated); `lora`: the run trains an adapter;
    /// `stale`: the run's `max_staleness`. A tokenizer directory that does not load (or
    /// has no chat template) is an error naming `generation.tokenizer`.
    pub fn from_config(
        cfg: &GenerationCfg,
        lora: bool,
        stale: u64,
    ) -> Result<Option<ExternalEngines>, RlError> {
        let (kind, urls, tokenizer, model, timeout_s) = match cfg {
            GenerationCfg::Colocated => return Ok(None),
            GenerationCfg::Sglang { urls, tokenizer, timeout_s } => {
                (EngineKind::Sglang, urls, tokenizer, None, *timeout_s)
            }
            GenerationCfg::Vllm { urls, tokenizer, model, timeout_s } => {
                (EngineKind::Vllm, urls, tokenizer, model.clone(), *timeout_s)
            }
        };
        let timeout = Duration::from_secs_f64(timeout_s.max(1.0));
        let named = |e: BackendError| RlError::Config(format!("generation.tokenizer: {e}"));
        let mut engines: Vec<Box<dyn Backend>> = Vec::new();
        for url in urls {
            let http = HttpConfig { timeout, ..HttpConfig::new(url) };
            engines.push(match kind {
                EngineKind::Sglang => Box::new(SglangBackend::new(http, tokenizer).map_err(named)?),
                EngineKind::Vllm => {
                    Box::new(VllmBackend::new(http, tokenizer, model.clone()).map_err(named)?)
                }
            });
        }
        let refresher = Refresher::new(kind, urls, timeout)
            .map_err(|e| RlError::Config(format!("generation.urls: {e}")))?;
        Ok(Some(ExternalEngines::new(engines, refresher, lora, stale)))
    }

    fn new(
        engines: Vec<Box<dyn Backend>>,
        refresher: Refresher,
        lora: bool,
        stale: u64,
    ) -> ExternalEngines {
        ExternalEngines {
            engines,
            refresher,
            next: AtomicUsize::new(0),
            loaded: Mutex::new(Vec::new()),
            refreshing: AtomicBool::new(false),
            fault: Mutex::new(None),
            lora,
            stale: usize::try_from(stale).unwrap_or(usize::MAX),
        }
    }

    pub fn refresher(&self) -> &Refresher {
        &self.refresher
    }

    fn poisoned() -> String {
        "the engines' version record was poisoned by an earlier panic".into()
    }

    async fn refresh_adapter(&self, dir: &Path, version: &str) -> Result<(), String> {
        // The learner writes an adapter under `adapter/` (beside the base's name).
        let adapter = dir.join(ADAPTER_DIR);
        let adapter = if adapter.is_dir() { adapter } else { dir.to_path_buf() };
        let keep: Vec<String> = match self.loaded.lock() {
            Ok(l) => l.iter().rev().take(self.stale).cloned().collect(),
            Err(_) => return Err(Self::poisoned()),
        };
        self.refresher.load_adapter(&adapter, version, &keep).await.map_err(join_errors)?;
        // Named once loaded: requests name it from now on.
        let kept: Vec<String> = match self.loaded.lock() {
            Ok(mut loaded) => {
                loaded.push(version.to_string());
                loaded.iter().rev().take(self.stale + 2).cloned().collect()
            }
            Err(_) => return Err(Self::poisoned()),
        };
        prune_adapters(dir, version, &kept);
        Ok(())
    }
}

fn join_errors(errors: Vec<crate::refresh::RefreshError>) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

impl Backend for ExternalEngines {
    fn describe(&self) -> String {
        format!("{}:{}", self.refresher.kind().name(), self.refresher.urls().join(","))
    }

    fn complete<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        sampling: &'a Sampling,
    ) -> BoxFuture<'a, Result<Completion, BackendError>> {
        let n = self.engines.len();
        let Some(engine) = self.engines.get(self.next.fetch_add(1, Ordering::Relaxed) % n.max(1))
        else {
            return Box::pin(async {
                Err(BackendError::Setup { url: String::new(), reason: "no engine".into() })
            });
        };
        // The versions this request may come back with: the current one and any later
        // (and, during a full-weight refresh, the one before it).
        let refreshing = usize::from(self.refreshing.load(Ordering::SeqCst));
        let (since, latest) = match self.loaded.lock() {
            Ok(l) => (l.len().saturating_sub(1 + refreshing), l.last().cloned()),
            Err(_) => (0, None),
        };
        // With adapters, the request names the latest one loaded.
        let adapted = self.lora.then(|| Sampling { adapter: latest.clone(), ..sampling.clone() });
        Box::pin(async move {
            if adapted.as_ref().is_some_and(|s| s.adapter.is_none()) {
                return Err(BackendError::Setup {
                    url: engine.describe(),
                    reason: "no adapter loaded yet to generate with".into(),
                });
            }
            let c = engine.complete(messages, adapted.as_ref().unwrap_or(sampling)).await?;
            let expected = match (&c.weight_version, self.loaded.lock()) {
                (Some(v), Ok(loaded)) if !loaded.is_empty() && !loaded[since..].contains(v) => {
                    Some(loaded[since..].join(" or "))
                }
                _ => None,
            };
            match expected {
                Some(expected) => {
                    let e = BackendError::WrongWeights {
                        url: engine.describe(),
                        found: c.weight_version.unwrap_or_default(),
                        expected,
                    };
                    if let Ok(mut fault) = self.fault.lock() {
                        fault.get_or_insert_with(|| e.to_string());
                    }
                    Err(e)
                }
                None => Ok(c),
            }
        })
    }
}

impl Generator for ExternalEngines {
    fn backend(&self) -> &dyn Backend {
        self
    }

    fn refresh<'a>(&'a self, dir: &'a Path, version: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            if self.lora {
                return self.refresh_adapter(dir, version).await;
            }
            // Named before the load: a request in flight may finish on the new weights
            // while the refresh is still checking them.
            self.refreshing.store(true, Ordering::SeqCst);
            match self.loaded.lock() {
                Ok(mut loaded) => loaded.push(version.to_string()),
                Err(_) => return Err(Self::poisoned()),
            }
            let done = self.refresher.refresh(dir, version).await.map_err(join_errors);
            self.refreshing.store(false, Ordering::SeqCst);
            done
        })
    }

    fn weights_dir(&self, out: &Path, version: &str) -> PathBuf {
        if self.lora {
            out.join("adapters").join(version)
        } else {
            out.join("weights")
        }
    }

    fn needs_weights_on_disk(&self) -> bool {
        true
    }

    fn fault(&self) -> Option<String> {
        self.fault.lock().ok().and_then(|f| f.clone())
    }
}

/// Where the policy worker writes a LoRA adapter within a save (`trainer.py`'s
/// `ADAPTER_DIR`).
const ADAPTER_DIR: &str = "adapter";

/// Removes the run's adapter directories beside `dir` (those named like `version`) but
/// those of `kept`: an engine may read an adapter again from its directory (vLLM's CPU
/// cache holds one by default; SGLang reloads an evicted one), so the last few stay.
fn prune_adapters(dir: &Path, version: &str, kept: &[String]) {
    let Some(parent) = dir.parent() else { return };
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if crate::refresh::same_run(&name, version) && !kept.contains(&name) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine that answers with whatever version it is set to report.
    struct Reports(Arc<Mutex<Option<String>>>);

    impl Backend for Reports {
        fn describe(&self) -> String {
            "sglang:http://engine-a".into()
        }

        fn complete<'a>(
            &'a self,
            _: &'a [ChatMessage],
            _: &'a Sampling,
        ) -> BoxFuture<'a, Result<Completion, BackendError>> {
            // Read when the answer comes, not when the request is sent.
            let reports = self.0.clone();
            Box::pin(async move {
                let weight_version = reports.lock().unwrap().clone();
                Ok(Completion { weight_version, ..Completion::default() })
            })
        }
    }

    fn engines(loaded: &[&str]) -> (ExternalEngines, Arc<Mutex<Option<String>>>) {
        let reports = Arc::new(Mutex::new(None));
        let refresher =
            Refresher::new(EngineKind::Sglang, &["http://engine-a".into()], Duration::from_secs(1))
                .unwrap();
        let mut e =
            ExternalEngines::new(vec![Box::new(Reports(reports.clone()))], refresher, false, 1);
        e.loaded = Mutex::new(loaded.iter().map(|v| v.to_string()).collect());
        (e, reports)
    }

    fn answer(
        e: &ExternalEngines,
        reports: &Mutex<Option<String>>,
        v: Option<&str>,
    ) -> Result<Completion, BackendError> {
        *reports.lock().unwrap() = v.map(str::to_owned);
        block(e.complete(&[], &Sampling::default()))
    }

    fn block<T>(f: BoxFuture<'_, T>) -> T {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    #[test]
    fn a_completion_from_weights_other_than_those_loaded_is_refused() {
        let (e, reports) = engines(&["step-0", "step-1"]);
        assert!(answer(&e, &reports, Some("step-1")).is_ok());
        // An engine that does not say is trusted (vLLM's completions carry no version).
        assert!(answer(&e, &reports, None).is_ok());
        for wrong in ["default", "step-0", "step-2"] {
            match answer(&e, &reports, Some(wrong)) {
                Err(BackendError::WrongWeights { url, found, expected }) => {
                    assert_eq!((url.as_str(), found.as_str()), ("sglang:http://engine-a", wrong));
                    assert_eq!(expected, "step-1");
                }
                other => panic!("{wrong}: {other:?}"),
            }
        }
        // Nothing loaded yet (a caller that never refreshed): nothing to compare.
        let (e, reports) = engines(&[]);
        assert!(answer(&e, &reports, Some("default")).is_ok());
    }

    #[test]
    fn a_request_in_flight_across_a_refresh_may_finish_on_the_new_weights() {
        let (e, reports) = engines(&["step-0"]);
        *reports.lock().unwrap() = Some("step-1".into());
        // Asked while step-0 was current; step-1 is named before its load starts.
        let sampling = Sampling::default();
        let asked = e.complete(&[], &sampling);
        e.loaded.lock().unwrap().push("step-1".into());
        assert!(block(asked).is_ok());
        let asked = e.complete(&[], &sampling);
        *reports.lock().unwrap() = Some("step-0".into());
        match block(asked) {
            Err(BackendError::WrongWeights { expected, .. }) => assert_eq!(expected, "step-1"),
            other => panic!("asked after step-1 was named, answered by step-0: {other:?}"),
        }
        // The run learns of it and stops at its next check.
        assert!(e.fault().is_some_and(|f| f.contains("`step-0`")), "{:?}", e.fault());
    }

    /// While a full-weight refresh is under way an engine not yet paused may answer from
    /// the version before the one just named; once it ends, it may not.
    #[test]
    fn during_a_refresh_the_version_before_is_still_accepted() {
        let (e, reports) = engines(&["step-0", "step-1"]);
        e.refreshing.store(true, Ordering::SeqCst);
        assert!(answer(&e, &reports, Some("step-0")).is_ok());
        assert!(e.fault().is_none());
        e.refreshing.store(false, Ordering::SeqCst);
        assert!(answer(&e, &reports, Some("step-0")).is_err());
    }
}

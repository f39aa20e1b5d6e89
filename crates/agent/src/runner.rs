//! The episode runner as a library: select problems of the suite, play S samples × up
//! to T turns of each through a policy backend and the evaluator, store every episode
//! the moment it ends (a rerun with the same settings resumes), and summarise. It never
//! prints: progress goes out as [`RunEvent`]s and the result comes back typed, so
//! `tritonforge run`, the RL loop and the server can all drive it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tritonforge_eval::{sha256_hex, EvalError, EvalService, EvalSettings};
use tritonforge_protocol::{DeviceKind, EnvInfo};
use tritonforge_store::{Store, StoreError};
use tritonforge_suite::{Problem, Selection, SelectionError, Suite, SuiteEntry, SuiteError};

use crate::backend::{Backend, BackendError, Sampling};
use crate::embedded::{EmbeddedBackend, EmbeddedConfig};
use crate::episode::{run_episode, Episode, EpisodeConfig};
use crate::http::HttpConfig;
use crate::metrics::{self, Labels, Summary};
use crate::openai::{OpenAiBackend, OpenAiConfig};
use crate::prompts::{Prompts, Target};
use crate::reward::RewardConfig;
use crate::sglang::SglangBackend;
use crate::vllm::VllmBackend;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Selection(#[from] SelectionError),
    #[error("{key}: {source}")]
    Problem {
        key: String,
        #[source]
        source: SuiteError,
    },
    #[error(transparent)]
    Eval(#[from] EvalError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("stored episode {id}: {source}")]
    Encode {
        id: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("an episode task failed: {0}")]
    Task(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where completions come from.
#[derive(Debug, Clone)]
pub enum BackendSpec {
    /// Chat completions from an OpenAI-compatible endpoint.
    OpenAi(OpenAiConfig),
    /// SGLang's native `/generate`, token ids in and out, with the served model's tokenizer.
    Sglang { http: HttpConfig, tokenizer: PathBuf },
    /// vLLM's `/v1/completions` with token ids in and out, with the served model's tokenizer.
    Vllm { http: HttpConfig, tokenizer: PathBuf, model: Option<String> },
    /// The policy worker running a model here.
    Embedded(EmbeddedConfig),
}

/// The wire API of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointApi {
    /// Chat completions under the base URL (`.../v1`).
    OpenAi,
    /// SGLang's native `/generate` under the server root, token ids in and out.
    Sglang,
    /// vLLM's `/v1/completions` under the server root, token ids in and out.
    Vllm,
}

impl std::str::FromStr for EndpointApi {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "openai" => Ok(EndpointApi::OpenAi),
            "sglang" => Ok(EndpointApi::Sglang),
            "vllm" => Ok(EndpointApi::Vllm),
            other => Err(format!("{other:?}: the API is openai, sglang or vllm")),
        }
    }
}

/// A policy model behind an HTTP endpoint, as a user names it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub api: EndpointApi,
    pub http: HttpConfig,
    /// The model name sent with each request [default: `default`].
    pub model: Option<String>,
    pub stream: bool,
    /// The served model's tokenizer directory (needed by `Sglang` and `Vllm`).
    pub tokenizer: Option<PathBuf>,
}

impl BackendSpec {
    /// The spec of `endpoint`, or why it cannot be used.
    pub fn endpoint(e: Endpoint) -> Result<BackendSpec, String> {
        Ok(match e.api {
            EndpointApi::OpenAi => BackendSpec::OpenAi(OpenAiConfig {
                http: e.http,
                model: e.model.unwrap_or_else(|| "default".into()),
                stream: e.stream,
            }),
            EndpointApi::Sglang => BackendSpec::Sglang {
                http: e.http,
                tokenizer: e.tokenizer.ok_or(
                    "--api sglang sends token ids: --tokenizer DIR must name the served model's \
                     tokenizer (tokenizer.json and chat template)",
                )?,
            },
            EndpointApi::Vllm => BackendSpec::Vllm {
                http: e.http,
                tokenizer: e.tokenizer.ok_or(
                    "--api vllm sends token ids: --tokenizer DIR must name the served model's \
                     tokenizer (tokenizer.json and chat template)",
                )?,
                model: e.model,
            },
        })
    }

    pub fn build(self) -> Result<Arc<dyn Backend>, BackendError> {
        Ok(match self {
            BackendSpec::OpenAi(c) => Arc::new(OpenAiBackend::new(c)?),
            BackendSpec::Sglang { http, tokenizer } => {
                Arc::new(SglangBackend::new(http, &tokenizer)?)
            }
            BackendSpec::Vllm { http, tokenizer, model } => {
                Arc::new(VllmBackend::new(http, &tokenizer, model)?)
            }
            BackendSpec::Embedded(c) => Arc::new(EmbeddedBackend::new(c)),
        })
    }
}

/// What a run plays, and how.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub selection: Selection,
    /// Samples (episodes) per problem.
    pub samples: u32,
    /// Turns per episode (at least 1).
    pub turns: u32,
    /// An episode stops early once correct and at least this fast.
    pub target_speedup: f64,
    pub sampling: Sampling,
    pub reward: RewardConfig,
    pub eval: EvalSettings,
    /// Episodes played at once.
    pub parallel: usize,
    /// The run's name; default: a hash of its settings, so a rerun resumes.
    pub run_id: Option<String>,
    /// Completions asked again when a turn repeats an earlier turn's code
    /// ([`EpisodeConfig::repeat_retries`]).
    pub repeat_retries: u32,
}

/// Progress, as it happens.
#[derive(Debug, Clone)]
pub enum RunEvent {
    /// Problems chosen, stored episodes found, the rest about to be played.
    Planned {
        run_id: String,
        problems: usize,
        samples: u32,
        turns: u32,
        stored: usize,
        to_play: usize,
    },
    /// One episode ended (and is stored).
    EpisodeDone { done: usize, to_play: usize, episode: Box<Episode>, solved_so_far: usize },
}

/// A finished run.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub run_id: String,
    pub policy: String,
    pub problems: usize,
    pub samples: u32,
    pub turns: u32,
    pub target_speedup: f64,
    #[serde(skip)]
    pub episodes: Vec<(Episode, Labels)>,
    pub summary: Summary,
    pub wall: Duration,
}

impl RunResult {
    /// Every episode was cut short by an error (nothing was learned about the policy).
    pub fn all_failed(&self) -> bool {
        !self.episodes.is_empty() && self.episodes.iter().all(|(e, _)| e.error.is_some())
    }

    /// The report's header lines.
    pub fn header(&self, env: &str) -> Vec<(String, String)> {
        vec![
            ("run".to_string(), self.run_id.clone()),
            ("policy".to_string(), self.policy.clone()),
            ("environment".to_string(), env.to_string()),
            (
                "problems".to_string(),
                format!(
                    "{} ({} samples, up to {} turns, target speedup {})",
                    self.problems, self.samples, self.turns, self.target_speedup
                ),
            ),
            (
                "wall time of this invocation".to_string(),
                format!("{:.1} s", self.wall.as_secs_f64()),
            ),
        ]
    }

    /// The summary as JSON (what `report.json` and `run --json` hold).
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({"run": self.run_id, "policy": self.policy, "summary": self.summary})
    }

    /// Write `report.md`, `report.html` and `report.json` into `dir`; returns the Markdown.
    pub fn write_reports(&self, dir: &Path, env: &str) -> Result<String, RunError> {
        let header = self.header(env);
        let md = metrics::markdown("TritonForge run", &header, &self.summary);
        let io = |path: PathBuf| move |source| RunError::Io { path, source };
        std::fs::create_dir_all(dir).map_err(io(dir.to_owned()))?;
        let json = serde_json::to_string_pretty(&self.json())
            .map_err(|e| io(dir.join("report.json"))(std::io::Error::other(e)))?;
        let files = [
            ("report.md", md.clone()),
            ("report.html", crate::html::html("TritonForge run", &header, &self.summary)),
            ("report.json", json),
        ];
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(io(path.clone()))?;
        }
        Ok(md)
    }
}

/// The id of sample `sample` of `problem` in run `run`: the one place it is built.
pub fn episode_id(run: &str, problem: &str, sample: u32) -> String {
    format!("{run}/{problem}/{sample}")
}

/// Store `ep` under its id (replacing an earlier attempt).
pub fn store_episode(store: &Store, ep: &Episode) -> Result<(), RunError> {
    let text = serde_json::to_string(ep)
        .map_err(|source| RunError::Encode { id: ep.id.clone(), source })?;
    store.put_episode(&ep.id, &ep.run, &ep.problem, ep.sample, &text)?;
    Ok(())
}

/// The episodes stored for `run` that ended normally (those cut short are played again).
pub fn finished_episodes(store: &Store, run: &str) -> Result<Vec<Episode>, RunError> {
    Ok(store
        .episodes(run)?
        .into_iter()
        .filter_map(|(_, text)| serde_json::from_str::<Episode>(&text).ok())
        .filter(|ep| ep.error.is_none())
        .collect())
}

/// What the prompts tell the policy about the machine.
pub fn target_for(env: &EnvInfo, timing: bool) -> Target {
    let cpu_mode = env.device == DeviceKind::Cpu;
    Target {
        device: if cpu_mode {
            "CPU (Triton interpreter; correctness only, no timing)".into()
        } else {
            env.gpus
                .first()
                .map(|g| format!("{} (CUDA)", g.name))
                .unwrap_or_else(|| "NVIDIA GPU (CUDA)".into())
        },
        dtype: "float32".into(),
        timing: !cpu_mode && timing,
    }
}

/// The run's default name: a hash of everything that decides what it plays.
fn default_run_id(spec: &RunSpec, backend: &str, keys: &[&str], cpu_mode: bool) -> String {
    let mut settings = serde_json::json!({
        "backend": backend, "problems": keys, "samples": spec.samples,
        "turns": spec.turns.max(1), "sampling": spec.sampling, "target": spec.target_speedup,
        "reward": spec.reward, "variant": spec.eval.variant, "device": cpu_mode,
        "set": spec.selection.effective_set(),
    });
    // Only when on: runs made before the setting existed keep their ids and resume.
    if spec.repeat_retries > 0 {
        settings["repeat_retries"] = spec.repeat_retries.into();
    }
    format!("run-{}", &sha256_hex(settings.to_string().as_bytes())[..12])
}

/// One episode to play.
struct Job {
    problem: Problem,
    config: tritonforge_protocol::EvalConfig,
    labels: Labels,
    sample: u32,
}

/// Load the chosen problems and plan the episodes not yet stored.
fn plan(
    spec: &RunSpec,
    suite: &Suite,
    entries: &[SuiteEntry],
    device: DeviceKind,
    run_id: &str,
    done: &[Episode],
) -> Result<(Vec<Job>, BTreeMap<String, Labels>), RunError> {
    let mut jobs = Vec::new();
    let mut labels_of = BTreeMap::new();
    for e in entries {
        let problem = Problem::load_with(&e.problem_path, Some(&suite.manifest))
            .map_err(|source| RunError::Problem { key: e.key.clone(), source })?;
        let config = spec.eval.config(&problem, device)?;
        let labels = Labels { level: e.meta.level, family: e.meta.family.clone() };
        labels_of.insert(problem.name.clone(), labels.clone());
        for sample in 0..spec.samples {
            let id = episode_id(run_id, &problem.name, sample);
            if done.iter().any(|d| d.id == id) {
                continue;
            }
            jobs.push(Job {
                problem: problem.clone(),
                config: config.clone(),
                labels: labels.clone(),
                sample,
            });
        }
    }
    Ok((jobs, labels_of))
}

/// Play a run: `spec`'s problems of `suite`, through `backend` and `evaluator`, episodes
/// stored in `store` as they end. `events` hears the plan and every finished episode.
pub async fn run(
    spec: &RunSpec,
    suite: &Suite,
    backend: Arc<dyn Backend>,
    evaluator: Arc<dyn EvalService>,
    prompts: Prompts,
    store: &Store,
    events: &mut (dyn FnMut(RunEvent) + Send),
) -> Result<RunResult, RunError> {
    let started = Instant::now();
    let entries = spec.selection.select(suite)?;
    let device = evaluator.device();
    let policy = backend.describe();
    let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    let run_id = spec
        .run_id
        .clone()
        .unwrap_or_else(|| default_run_id(spec, &policy, &keys, device == DeviceKind::Cpu));
    let done = finished_episodes(store, &run_id)?;
    let (jobs, labels_of) = plan(spec, suite, &entries, device, &run_id, &done)?;
    let cfg = Arc::new(EpisodeConfig {
        turns: spec.turns.max(1),
        target_speedup: spec.target_speedup,
        sampling: spec.sampling.clone(),
        reward: spec.reward.clone(),
        target: target_for(evaluator.environment(), spec.eval.timing.enabled),
        repeat_retries: spec.repeat_retries,
    });
    let to_play = jobs.len();
    events(RunEvent::Planned {
        run_id: run_id.clone(),
        problems: entries.len(),
        samples: spec.samples,
        turns: cfg.turns,
        stored: done.len(),
        to_play,
    });
    let mut set = spawn_episodes(jobs, spec.parallel, &backend, &evaluator, prompts, &cfg, &run_id);
    let mut all: Vec<(Episode, Labels)> = done
        .into_iter()
        .map(|ep| {
            let l = labels_of.get(&ep.problem).cloned().unwrap_or_default();
            (ep, l)
        })
        .collect();
    let (mut finished, mut solved) = (0usize, 0usize);
    while let Some(joined) = set.join_next().await {
        let (ep, labels) = joined.map_err(|e| RunError::Task(e.to_string()))?;
        // Stored as it finishes: an interrupted run loses nothing already played.
        store_episode(store, &ep)?;
        finished += 1;
        solved += usize::from(ep.solved());
        events(RunEvent::EpisodeDone {
            done: finished,
            to_play,
            episode: Box::new(ep.clone()),
            solved_so_far: solved,
        });
        all.push((ep, labels));
    }
    all.sort_by(|a, b| a.0.id.cmp(&b.0.id));
    Ok(RunResult {
        run_id,
        policy,
        problems: entries.len(),
        samples: spec.samples,
        turns: cfg.turns,
        target_speedup: spec.target_speedup,
        summary: metrics::summarize(&all),
        episodes: all,
        wall: started.elapsed(),
    })
}

/// Start every planned episode, at most `parallel` playing at once.
fn spawn_episodes(
    jobs: Vec<Job>,
    parallel: usize,
    backend: &Arc<dyn Backend>,
    evaluator: &Arc<dyn EvalService>,
    prompts: Prompts,
    cfg: &Arc<EpisodeConfig>,
    run_id: &str,
) -> JoinSet<(Episode, Labels)> {
    let slots = Arc::new(Semaphore::new(parallel.max(1)));
    let prompts = Arc::new(prompts);
    let mut set = JoinSet::new();
    for job in jobs {
        let (backend, evaluator, prompts, cfg, slots) =
            (backend.clone(), evaluator.clone(), prompts.clone(), cfg.clone(), slots.clone());
        let run_id = run_id.to_string();
        set.spawn(async move {
            let _slot = slots.acquire().await;
            let Job { problem, config, labels, sample } = job;
            let played = run_episode(
                backend.as_ref(),
                &*evaluator,
                &prompts,
                &problem,
                &config,
                &cfg,
                &run_id,
                sample,
            )
            .await;
            // A broken prompt template ends the episode with its error, like a dead backend.
            let ep = played.unwrap_or_else(|e| Episode {
                id: episode_id(&run_id, &problem.name, sample),
                run: run_id.clone(),
                problem: problem.name.clone(),
                problem_path: problem.path.display().to_string(),
                sample,
                backend: backend.describe(),
                turns: Vec::new(),
                error: Some(e.to_string()),
            });
            (ep, labels)
        });
    }
    set
}

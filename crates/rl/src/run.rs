//! The loop: a producer plays rollout batches (as far ahead as the staleness gate lets
//! it), the trainer consumes them in order, and both report to the caller's event sink.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use tritonforge_agent::{Backend, Episode, Sampling};
use tritonforge_protocol::{
    DeviceUse, RlLoss, RlStats, SaveJob, ScoreJob, Scores, TrainInfo, TrainSetup,
};
use tritonforge_store::Store;

use crate::advantage::group_advantages;
use crate::batch;
use crate::config::{HeldoutPlan, RlConfig};
use crate::env::{Activity, BoxFuture, Environment, Play, TimedBackend, Timeline};
use crate::layout::{lay_out, Sequence};
use crate::metrics::{ChainTimes, HeldoutMetrics, SourceStep, StepMetrics, WorkerShare};
use crate::pool::{Pool, PoolState};
use crate::rng::Rng;
use crate::staleness::Gate;
use crate::RlError;
use tritonforge_agent::reward::discounted_returns;

/// The trainer's side: the policy worker with `--train`.
pub trait Learner: Send + Sync {
    fn setup(&self, setup: TrainSetup) -> BoxFuture<'_, Result<TrainInfo, String>>;
    fn score(&self, job: ScoreJob) -> BoxFuture<'_, Result<Scores, String>>;
    fn step(&self, batch: tritonforge_protocol::RlBatch) -> BoxFuture<'_, Result<RlStats, String>>;
    /// Writes a checkpoint; returns the optimizer step it holds.
    fn save(&self, job: SaveJob) -> BoxFuture<'_, Result<u64, String>>;
}

/// Where completions come from, and how it learns of new weights.
pub trait Generator: Send + Sync {
    fn backend(&self) -> &dyn Backend;
    /// External engines load the weights in `dir` (written by the learner) and must then
    /// report `version`; a colocated generator already generates from the trained
    /// weights and has nothing to do.
    fn refresh<'a>(&'a self, dir: &'a Path, version: &'a str) -> BoxFuture<'a, Result<(), String>>;
    /// Whether new weights must be written to disk for it after every step.
    fn needs_weights_on_disk(&self) -> bool;
    /// Where the learner writes the weights of `version` for it (under the run's `out`).
    fn weights_dir(&self, out: &Path, _version: &str) -> PathBuf {
        out.join("weights")
    }
    /// Why its completions can no longer be trusted to come from the trained weights
    /// (an engine answering from other ones), once that was seen: the run stops before it
    /// trains on, or reports, anything generated since.
    fn fault(&self) -> Option<String> {
        None
    }
}

/// Everything a run is made of.
pub struct Parts {
    pub env: Arc<dyn Environment>,
    /// Heldout sets by name.
    pub heldout: Vec<(String, Arc<dyn Environment>)>,
    pub generator: Arc<dyn Generator>,
    pub learner: Arc<dyn Learner>,
    /// The learner's set-up (`resume` is filled in here when a checkpoint exists).
    pub setup: TrainSetup,
    /// The token rows are padded with.
    pub pad_id: u32,
    /// The starting policy as `run` labels it (heldout figures record it).
    pub policy: String,
    pub timeline: Arc<Timeline>,
    /// Whether the evaluator times candidates (GPU) or not (CPU mode): only then can the
    /// speed term of the reward pay.
    pub timed: bool,
    /// The run's name in the store.
    pub run: String,
    /// Tokenizer files copied into every checkpoint (so that a full-weight checkpoint is
    /// a model directory `run --model` loads); `None`: not copied (an adapter finds its
    /// tokenizer through its base).
    pub tokenizer_dir: Option<PathBuf>,
    /// The evaluator's settings for training rollouts (budgets, trials, seed, timing; JSON,
    /// `Null`: none to record). They decide rewards, so they are recipe: runs 22 and 23
    /// timed their first slice's candidates for 100 ms and the later slices' for 400 ms,
    /// and nothing said so.
    pub evaluation: serde_json::Value,
}

#[derive(Debug, Clone)]
pub enum RlEvent {
    Ready {
        info: TrainInfo,
        start: u64,
        steps: u64,
        /// What the recipe changed since the checkpoint resumed from, where
        /// `schedule.allow_recipe_change` let it (`path: old → new`).
        recipe_changes: Vec<String>,
        /// Seconds to write the learner's weights and load them into the external
        /// engines before the first generation (`None`: colocated, nothing to load).
        engines_refresh_s: Option<f64>,
    },
    Heldout(HeldoutMetrics),
    Step(Box<StepMetrics>),
    Saved {
        dir: PathBuf,
        step: u64,
    },
    /// The clock (`schedule.max_seconds_now`) cut the heldout pass at `step` short:
    /// `played` of its `total` episodes are stored, and the next invocation plays the
    /// rest before anything else.
    HeldoutCut {
        step: u64,
        played: usize,
        total: usize,
    },
    /// Nothing to do: the checkpoint in `dir` holds all `steps` and the heldout pass due
    /// there is written. The learner is not started.
    Complete {
        dir: PathBuf,
        step: u64,
        steps: u64,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct RlSummary {
    pub run: String,
    pub start: u64,
    pub steps_done: u64,
    pub last_checkpoint: Option<PathBuf>,
    pub heldout: Vec<HeldoutMetrics>,
    /// The step whose heldout pass the clock cut short (left for the next invocation).
    pub heldout_cut: Option<u64>,
}

/// What a checkpoint holds beside the learner's files.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RlState {
    /// Steps completed.
    step: u64,
    pool: PoolState,
    /// The recipe the steps were trained with ([`crate::recipe`]); absent in checkpoints
    /// written before it was recorded (nothing to compare).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recipe: Option<serde_json::Value>,
    /// The run's name in the store ([`run_name`]); absent in checkpoints written before
    /// it was recorded. A checkpoint carried without `output.dir`'s other files (packed,
    /// copied) keeps its name this way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run: Option<String>,
}

const STATE: &str = "rl_state.json";
/// What a model directory needs to be tokenised and chatted with.
const TOKENIZER_FILES: [&str; 4] =
    ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"];
const LATEST: &str = "LATEST";
const HELDOUT: &str = "heldout.jsonl";
const METRICS: &str = "metrics.jsonl";
/// How the heldout pass in progress is played, while one is (see [`heldout`]).
const PASS: &str = "heldout-pass.json";

/// One played rollout batch.
struct Rollout {
    b: u64,
    generated_at: u64,
    groups: Vec<Group>,
    drawn: usize,
    fill_rounds: u32,
    started: f64,
    ended: f64,
    pool: PoolState,
}

struct Group {
    /// Index of the `data.train` source its problem came from.
    source: usize,
    episodes: Vec<Episode>,
    /// Per episode, per turn; `None`: no signal.
    advantages: Option<Vec<Vec<f64>>>,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> RlError {
    RlError::Output { path: path.to_path_buf(), reason: e.to_string() }
}

fn write_atomic(path: &Path, text: &str) -> Result<(), RlError> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, text).map_err(|e| io_err(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_err(path, e))
}

/// The last complete checkpoint under `out`, and its state.
fn latest(out: &Path) -> Result<Option<(PathBuf, RlState)>, RlError> {
    let marker = out.join(LATEST);
    let Ok(name) = std::fs::read_to_string(&marker) else { return Ok(None) };
    let dir = out.join("checkpoints").join(name.trim());
    let text = std::fs::read_to_string(dir.join(STATE))
        .map_err(|e| RlError::Resume { path: dir.clone(), reason: e.to_string() })?;
    let state: RlState = serde_json::from_str(&text)
        .map_err(|e| RlError::Resume { path: dir.join(STATE), reason: e.to_string() })?;
    Ok(Some((dir, state)))
}

/// Keeps the lines of `path` whose `step` passes `keep` (lines without one go).
fn keep_steps(path: &Path, keep: impl Fn(u64) -> bool) -> Result<(), RlError> {
    let Ok(text) = std::fs::read_to_string(path) else { return Ok(()) };
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["step"].as_u64())
                .is_some_and(&keep)
        })
        .collect();
    let mut body = kept.join("\n");
    if !body.is_empty() {
        body.push('\n');
    }
    std::fs::write(path, body).map_err(|e| io_err(path, e))
}

/// Drops what a resumed run will write again: lines of steps after `step`.
fn truncate_jsonl(path: &Path, step: u64) -> Result<(), RlError> {
    keep_steps(path, |s| s <= step)
}

/// Drops the lines of `path` written for `step` (a heldout pass about to be measured
/// again, with other settings or after a stop cut it short).
fn drop_step(path: &Path, step: u64) -> Result<(), RlError> {
    keep_steps(path, |s| s != step)
}

/// The lines of `path` that read as `T` (others, e.g. from an older version, skipped).
fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> std::io::Result<Vec<T>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}

/// Whether `path` holds figures played as each of `want` says (one per heldout set).
fn heldout_written(path: &Path, want: &[HeldoutMetrics]) -> bool {
    let Ok(written) = read_jsonl::<HeldoutMetrics>(path) else { return false };
    want.iter().all(|w| written.iter().any(|h| h.differs_from(w).is_none()))
}

/// Step 0's figures of every set from an earlier run's `heldout.jsonl`, when each was
/// played as `want` says; otherwise an error naming the set and what differs.
fn from_baseline(path: &Path, want: &[HeldoutMetrics]) -> Result<Vec<HeldoutMetrics>, RlError> {
    let named = |reason: String| {
        RlError::Config(format!("schedule.heldout_baseline {}: {reason}", path.display()))
    };
    let lines: Vec<HeldoutMetrics> = read_jsonl(path).map_err(|e| named(e.to_string()))?;
    want.iter()
        .map(|w| {
            let same_set: Vec<&HeldoutMetrics> =
                lines.iter().filter(|h| h.step == w.step && h.set == w.set).collect();
            match same_set.iter().find(|h| h.differs_from(w).is_none()) {
                Some(h) => Ok(HeldoutMetrics {
                    reused_from: Some(path.display().to_string()),
                    ..(*h).clone()
                }),
                None => Err(named(match same_set.first().and_then(|h| h.differs_from(w)) {
                    Some(diff) => format!("set {} was played otherwise: {diff}", w.set),
                    None => format!("no step-{} figures of set {}", w.step, w.set),
                })),
            }
        })
        .collect()
}

/// A heldout set as its figures identify it: its name and its problems' keys.
#[derive(Debug, Clone)]
pub struct HeldoutSet {
    pub name: String,
    pub keys: Vec<String>,
}

/// Whether a heldout pass is due after `step` steps (the last, or every `heldout_every`).
fn heldout_due(cfg: &RlConfig, step: u64) -> bool {
    step == cfg.schedule.steps
        || (cfg.schedule.heldout_every > 0 && step.is_multiple_of(cfg.schedule.heldout_every))
}

/// Where a run stands before anything starts, read from its config and its output
/// directory alone: the checkpoint it resumes from, the heldout pass due there, whether
/// anything is left to do. `train rl` reads it before it starts the policy worker and
/// the evaluator's pool (tens of seconds on a small machine), so that a complete run, an
/// unreadable checkpoint or a `heldout_baseline` that cannot stand in is reported at once;
/// [`train`] reads it again and acts on it.
#[derive(Debug, Clone)]
pub struct Standing {
    /// Steps done: those the latest checkpoint holds (0: none).
    pub start: u64,
    /// That checkpoint.
    pub checkpoint: Option<PathBuf>,
    /// Every configured step is done and the heldout pass due at the last is written:
    /// nothing is left to start.
    pub complete: bool,
    pool: PoolState,
    /// How the heldout pass due at `start` is to be played (empty: none due).
    due: Vec<HeldoutMetrics>,
    /// Its figures, when `schedule.heldout_baseline` stands in for playing it.
    baseline: Option<Vec<HeldoutMetrics>>,
    /// What the recipe changed since that checkpoint (allowed by the config).
    pub recipe_changes: Vec<String>,
    /// The evaluator's settings that checkpoint recorded (`Null`: none).
    recorded_evaluation: serde_json::Value,
}

impl Standing {
    /// `sets` in `data.heldout` order; `timed` and `policy` as the run's [`Parts`] say
    /// (both are part of what identifies a heldout figure); `evaluation` as
    /// [`Parts::evaluation`].
    pub fn read(
        cfg: &RlConfig,
        sets: &[HeldoutSet],
        timed: bool,
        policy: &str,
        evaluation: &serde_json::Value,
    ) -> Result<Standing, RlError> {
        let out = &cfg.output.dir;
        let resumed = latest(out)?;
        let start = resumed.as_ref().map_or(0, |(_, s)| s.step);
        // Heldout due where this invocation starts: before training, or a pass a stop cut
        // short after its step's checkpoint. One already written with these settings is
        // not played again (a first pass can take most of a device command).
        let want = plan_sets(cfg, sets, timed, policy, start);
        let due = if !want.is_empty()
            && (start == 0 || heldout_due(cfg, start))
            && !heldout_written(&out.join(HELDOUT), &want)
        {
            want
        } else {
            Vec::new()
        };
        let baseline = match &cfg.schedule.heldout_baseline {
            Some(path) if start == 0 && !due.is_empty() => Some(from_baseline(path, &due)?),
            _ => None,
        };
        let complete = resumed.is_some() && start >= cfg.schedule.steps && due.is_empty();
        let mut recipe_changes = Vec::new();
        let mut recorded_evaluation = serde_json::Value::Null;
        if let Some((dir, RlState { recipe: Some(old), .. })) = &resumed {
            recorded_evaluation =
                old.get(crate::recipe::EVALUATION).cloned().unwrap_or(serde_json::Value::Null);
            let mut old = old.clone();
            let mut now = crate::recipe::recipe(cfg, evaluation)?;
            // A checkpoint from before the evaluator's settings were recorded, or a caller
            // with none to record: the rest is compared.
            if recorded_evaluation.is_null() || evaluation.is_null() {
                for v in [&mut old, &mut now] {
                    if let Some(m) = v.as_object_mut() {
                        m.remove(crate::recipe::EVALUATION);
                    }
                }
            }
            recipe_changes = crate::recipe::changes(&old, &now);
            // A complete run trains nothing more: it is not refused for what it would change.
            if !recipe_changes.is_empty() && !cfg.schedule.allow_recipe_change && !complete {
                return Err(RlError::Resume {
                    path: dir.join(STATE),
                    reason: format!(
                        "the config trains otherwise than this checkpoint's steps did ({}); \
                         a resumed run trains as it began: set them back, start a new \
                         output.dir, or set schedule.allow_recipe_change = true",
                        recipe_changes.join("; ")
                    ),
                });
            }
        }
        let (checkpoint, pool) = match resumed {
            Some((dir, state)) => (Some(dir), state.pool),
            None => (None, PoolState::default()),
        };
        Ok(Standing {
            start,
            checkpoint,
            complete,
            pool,
            due,
            baseline,
            recipe_changes,
            recorded_evaluation,
        })
    }
}

/// A complete run (`standing.complete`) ended as [`train`] would end it, with nothing
/// started: the lines past its checkpoint dropped from `metrics.jsonl` and
/// `heldout.jsonl` (a stop between a step and its checkpoint leaves some), and
/// [`RlEvent::Complete`]. `None`: work remains.
pub fn conclude(
    cfg: &RlConfig,
    standing: &Standing,
    run: &str,
    events: &mut (dyn FnMut(RlEvent) + Send),
) -> Result<Option<RlSummary>, RlError> {
    let Some(dir) = standing.checkpoint.as_ref().filter(|_| standing.complete) else {
        return Ok(None);
    };
    let out = &cfg.output.dir;
    truncate_jsonl(&out.join(METRICS), standing.start)?;
    truncate_jsonl(&out.join(HELDOUT), standing.start)?;
    events(RlEvent::Complete { dir: dir.clone(), step: standing.start, steps: cfg.schedule.steps });
    Ok(Some(RlSummary {
        run: run.to_string(),
        start: standing.start,
        steps_done: standing.start,
        last_checkpoint: Some(dir.clone()),
        heldout: Vec::new(),
        heldout_cut: None,
    }))
}

/// Whether a step started now would likely end past `limit_s` seconds from `started`,
/// the step taken to last `estimate` seconds. Without an estimate (no step of this run
/// timed yet), whether half the limit is gone: a first step also compiles the engine, and
/// one started late is only killed by the backstop, its work lost. 0: no limit.
fn out_of_time(limit_s: u64, started: Instant, estimate: Option<f64>) -> bool {
    if limit_s == 0 {
        return false;
    }
    let used = started.elapsed().as_secs_f64();
    match estimate {
        Some(step) => used + step > limit_s as f64,
        None => used > limit_s as f64 / 2.0,
    }
}

/// How long the latest heldout pass `heldout.jsonl` holds took (its slowest set: the sets
/// play at once); `None` before any.
fn last_pass_s(path: &Path) -> Option<f64> {
    let lines = read_jsonl::<HeldoutMetrics>(path).ok()?;
    let step = lines.iter().map(|h| h.step).max()?;
    lines.iter().filter(|h| h.step == step).map(|h| h.wall_s).reduce(f64::max)
}

/// The lower median interval of the steps `metrics.jsonl` holds (earlier invocations').
fn earlier_step_median(path: &Path) -> Option<f64> {
    // `interval_s` (end to end), as this invocation times its own steps; `step_s` also
    // holds the rollout that overlapped the step before.
    let mut steps: Vec<f64> = read_jsonl::<StepMetrics>(path)
        .ok()?
        .into_iter()
        .map(|m| m.interval_s)
        .filter(|s| s.is_finite() && *s > 0.0)
        .collect();
    steps.sort_by(f64::total_cmp);
    // The lower median: of two, the faster (the other is likely a first step's).
    steps.get(steps.len().saturating_sub(1) / 2).copied()
}

/// What the next step of this invocation is taken to last. Its first step pays the
/// invocation's one-time costs (the engine's compile, the learner's first round: run 19's
/// took 263 s against about 32 s for the steps after it, and the run stopped a 500 s
/// slice after that one step, predicting the next from it). So once steps after the first
/// are timed, they alone count; with only the first timed, half of it, or the earlier
/// invocations' median step if smaller; with none, that median.
fn next_step_estimate(first_s: Option<f64>, later_s: &[f64], earlier: Option<f64>) -> Option<f64> {
    match (first_s, later_s) {
        (_, [_, ..]) => Some(later_s.iter().sum::<f64>() / later_s.len() as f64),
        (Some(first), []) => Some(earlier.map_or(first / 2.0, |e| e.min(first / 2.0))),
        (None, []) => earlier,
    }
}

fn append_jsonl(path: &Path, value: &impl Serialize) -> Result<(), RlError> {
    use std::io::Write as _;
    let line = serde_json::to_string(value).map_err(|e| io_err(path, e))?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io_err(path, e))?;
    writeln!(f, "{line}").map_err(|e| io_err(path, e))
}

/// A sampling seed for episode `sample` of task `task` in batch `b` (below 2^53).
fn seed_of(seed: u64, b: u64, task: usize, sample: u32) -> u64 {
    Rng::derive(seed ^ 0x5eed, (b << 32) ^ ((task as u64) << 8) ^ u64::from(sample)).next_u64()
        >> 11
}

/// Play `tasks` × `samples` episodes at once (at most `parallel` in flight).
async fn play_all(
    env: &Arc<dyn Environment>,
    generator: &Arc<dyn Generator>,
    timeline: &Arc<Timeline>,
    plays: Vec<Play>,
    parallel: usize,
) -> Vec<Episode> {
    let slots = Arc::new(Semaphore::new(parallel.max(1)));
    play_in(env, generator, timeline, plays, slots, None, &mut |_| {}).await.0
}

/// [`play_all`] within `slots` shared with other calls (heldout sets played together).
/// Each episode is handed to `done` as it ends. At `deadline` the plays still running are
/// dropped: the episodes that ended come back, with `true` for "cut short".
async fn play_in<F: FnMut(&Episode)>(
    env: &Arc<dyn Environment>,
    generator: &Arc<dyn Generator>,
    timeline: &Arc<Timeline>,
    plays: Vec<Play>,
    slots: Arc<Semaphore>,
    deadline: Option<Instant>,
    done: &mut F,
) -> (Vec<Episode>, bool) {
    use futures_util::FutureExt as _;
    let mut set = JoinSet::new();
    let n = plays.len();
    // What a failed episode keeps of its play (its place in `out` is its index), should
    // the play panic or its task fail to join.
    let keys = env.keys();
    let failed: Vec<Episode> = plays
        .iter()
        .map(|play| Episode {
            id: play.id.clone(),
            run: play.run.clone(),
            problem: keys
                .get(play.task)
                .and_then(|k| k.rsplit('/').next())
                .unwrap_or_default()
                .to_string(),
            sample: play.sample,
            ..Episode::default()
        })
        .collect();
    for (i, play) in plays.into_iter().enumerate() {
        let (env, generator, timeline, slots) =
            (env.clone(), generator.clone(), timeline.clone(), slots.clone());
        let failed = failed[i].clone();
        set.spawn(async move {
            let _slot = slots.acquire().await;
            let backend = TimedBackend { inner: generator.backend(), timeline: &timeline };
            // A panicking episode is a bug; it is recorded as a failed episode in its own
            // place (a join error alone would not say which play it was).
            let played =
                std::panic::AssertUnwindSafe(env.play(&backend, play)).catch_unwind().await;
            let ep = played.unwrap_or_else(|panic| {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Episode { error: Some(format!("episode task panicked: {why}")), ..failed }
            });
            (i, ep)
        });
    }
    let mut out: Vec<Option<Episode>> = vec![None; n];
    let stop = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stop);
    let mut stopped = false;
    loop {
        let joined = tokio::select! {
            joined = set.join_next() => joined,
            () = &mut stop => {
                // Plays that ended but were not yet joined are kept; the rest are dropped.
                stopped = true;
                set.abort_all();
                while let Some(joined) = set.join_next().await {
                    if let Ok((i, ep)) = joined {
                        done(&ep);
                        out[i] = Some(ep);
                    }
                }
                break;
            }
        };
        let Some(joined) = joined else { break };
        if let Ok((i, ep)) = joined {
            done(&ep);
            out[i] = Some(ep);
        }
    }
    if !stopped {
        // A task that did not join (it cannot panic: plays catch their panics) is a failed
        // episode in its place, so that rollouts keep their groups' positions.
        for (slot, failed) in out.iter_mut().zip(failed) {
            if slot.is_none() {
                let ep = Episode { error: Some("episode task did not finish".into()), ..failed };
                done(&ep);
                *slot = Some(ep);
            }
        }
    }
    let cut = out.iter().any(Option::is_none);
    (out.into_iter().flatten().collect(), cut)
}

struct Producer {
    cfg: RlConfig,
    env: Arc<dyn Environment>,
    generator: Arc<dyn Generator>,
    timeline: Arc<Timeline>,
    pool: Pool,
    run: String,
    reward_gamma: f64,
}

impl Producer {
    /// The source (index into `data.train`) problem `task` was drawn from.
    fn source(&self, task: usize) -> usize {
        self.pool.entries.get(task).map_or(0, |e| e.source)
    }

    fn sampling(&self, seed: u64, task: usize) -> Sampling {
        let r = &self.cfg.rollout;
        let cap = self.cfg.data.train.get(self.source(task)).and_then(|s| s.max_tokens);
        Sampling {
            temperature: r.temperature,
            top_p: r.top_p,
            max_tokens: cap.unwrap_or(r.max_tokens),
            seed: Some(seed),
            adapter: None,
        }
    }

    async fn rollout(&mut self, b: u64, generated_at: u64) -> Rollout {
        let r = self.cfg.rollout.clone();
        let seed = self.cfg.optim.seed;
        let started = self.timeline.now();
        let mut groups: Vec<Group> = Vec::new();
        let mut used: Vec<usize> = Vec::new();
        let mut rounds = 0;
        let keys = self.env.keys();
        for round in 0..=r.fill_rounds {
            let kept = groups.iter().filter(|g| g.advantages.is_some()).count();
            let need = r.problems.saturating_sub(kept);
            if need == 0 {
                break;
            }
            let extra = if round == 0 { r.oversample } else { 0 };
            let draw = self.pool.draw(need + extra, seed, b * 64 + u64::from(round), &used);
            if draw.is_empty() {
                break;
            }
            rounds = round;
            used.extend(&draw);
            let mut plays = Vec::new();
            for &task in &draw {
                for sample in 0..r.samples {
                    plays.push(Play {
                        task,
                        sample,
                        id: format!("{}/step-{b:06}/{}/{sample}", self.run, keys[task]),
                        run: self.run.clone(),
                        sampling: self.sampling(seed_of(seed, b, task, sample), task),
                    });
                }
            }
            let episodes =
                play_all(&self.env, &self.generator, &self.timeline, plays, r.parallel).await;
            for (k, &task) in draw.iter().enumerate() {
                let lo = k * r.samples as usize;
                let mine: Vec<Episode> = episodes[lo..lo + r.samples as usize].to_vec();
                let solved = mine.iter().filter(|e| e.solved()).count();
                self.pool.observe(task, solved, mine.len());
                // Episodes without a single turn (the backend was down) carry nothing.
                let live: Vec<&Episode> = mine.iter().filter(|e| !e.turns.is_empty()).collect();
                let returns: Vec<Vec<f64>> = live
                    .iter()
                    .map(|e| {
                        let rw: Vec<f64> = e.turns.iter().map(|t| t.reward).collect();
                        discounted_returns(&rw, self.reward_gamma)
                    })
                    .collect();
                let adv = group_advantages(&returns, self.cfg.advantage.estimator);
                // Advantages follow the live episodes; failed ones get none.
                let advantages = adv.map(|a| {
                    let mut it = a.into_iter();
                    mine.iter()
                        .map(|e| {
                            if e.turns.is_empty() {
                                Vec::new()
                            } else {
                                it.next().unwrap_or_default()
                            }
                        })
                        .collect()
                });
                groups.push(Group { source: self.source(task), episodes: mine, advantages });
            }
        }
        Rollout {
            b,
            generated_at,
            drawn: groups.len(),
            groups,
            fill_rounds: rounds,
            started,
            ended: self.timeline.now(),
            pool: self.pool.state.clone(),
        }
    }
}

/// Train: `cfg` with `parts`; metrics also to `store` when given. Resumes from the last
/// checkpoint under the output directory when there is one.
pub async fn train(
    cfg: &RlConfig,
    parts: Parts,
    store: Option<&Store>,
    events: &mut (dyn FnMut(RlEvent) + Send),
) -> Result<RlSummary, RlError> {
    let started_now = Instant::now();
    let out = cfg.output.dir.clone();
    std::fs::create_dir_all(out.join("checkpoints")).map_err(|e| io_err(&out, e))?;
    let reward = cfg.reward.resolve().map_err(RlError::Config)?;
    // Everything that needs no learner is read and checked before it starts.
    let standing =
        Standing::read(cfg, &sets_of(&parts), parts.timed, &parts.policy, &parts.evaluation)?;
    if let Some(summary) = conclude(cfg, &standing, &parts.run, events)? {
        return Ok(summary);
    }
    // A caller with no evaluator settings to record keeps those the checkpoint recorded.
    let evaluation = match &parts.evaluation {
        serde_json::Value::Null => standing.recorded_evaluation.clone(),
        e => e.clone(),
    };
    let recipe = crate::recipe::recipe(cfg, &evaluation)?;
    // The run starts: its name is its own from now on.
    record_run_name(&out, &parts.run)?;
    let start = standing.start;
    // A pass in progress is always one at the step this invocation starts from (a stop
    // during a pass resumes there); a marker of another step is stale (a checkpoint
    // rolled back, a kill between the figures and the marker's removal) and its episodes
    // came from other weights.
    let marker = out.join(PASS);
    let stale = std::fs::read_to_string(&marker)
        .ok()
        .and_then(|t| serde_json::from_str::<PassMarker>(&t).ok())
        .is_none_or(|m| m.plans.iter().any(|p| p.step != start));
    if stale && marker.exists() {
        std::fs::remove_file(&marker).map_err(|e| io_err(&marker, e))?;
    }
    let mut setup = parts.setup.clone();
    setup.resume = standing.checkpoint.as_ref().map(|d| d.display().to_string());
    let info = parts.learner.setup(setup).await.map_err(RlError::Learner)?;
    // External engines generate from whatever they were started with. The weights the
    // learner now holds (a resumed run's checkpoint, or a fresh run's start as the learner
    // loaded it) are loaded into them before anything is generated, a heldout pass
    // included.
    let engines_refresh_s = if parts.generator.needs_weights_on_disk() {
        Some(refresh_engines(&parts, &out, start).await?)
    } else {
        None
    };
    let metrics_path = out.join(METRICS);
    let heldout_path = out.join(HELDOUT);
    truncate_jsonl(&metrics_path, start)?;
    truncate_jsonl(&heldout_path, start)?;
    events(RlEvent::Ready {
        info,
        start,
        steps: cfg.schedule.steps,
        recipe_changes: standing.recipe_changes.clone(),
        engines_refresh_s,
    });

    let entries = parts
        .env
        .keys()
        .into_iter()
        .map(|key| {
            let source = cfg
                .data
                .train
                .iter()
                .position(|s| key.starts_with(&format!("{}/", source_name(s))))
                .unwrap_or(0);
            crate::pool::Entry { key, source }
        })
        .collect();
    let pool = Pool {
        entries,
        source_weights: cfg.data.train.iter().map(|s| s.weight).collect(),
        curriculum: cfg.data.curriculum.clone(),
        state: standing.pool.clone(),
    };
    let mut summary = RlSummary {
        run: parts.run.clone(),
        start,
        steps_done: start,
        last_checkpoint: standing.checkpoint.clone(),
        heldout: Vec::new(),
        heldout_cut: None,
    };
    let end = match cfg.schedule.max_steps_now {
        0 => cfg.schedule.steps,
        n => (start + n).min(cfg.schedule.steps),
    };
    // A heldout pass after a step stops itself at the invocation's limit (the next
    // invocation plays the rest first, whole: the first thing an invocation does always
    // runs, or a limit shorter than the set-up would never let the run move on).
    let deadline = match cfg.schedule.max_seconds_now {
        0 => None,
        s => Some(started_now + std::time::Duration::from_secs(s)),
    };
    // The heldout pass due where this invocation starts (see [`Standing`]).
    let mut heldout_now = false;
    if !standing.due.is_empty() {
        drop_step(&heldout_path, start)?;
        let figures = match &standing.baseline {
            Some(figures) => figures.clone(),
            None => {
                heldout_now = true;
                match heldout(cfg, &parts, start, store, None).await? {
                    Pass::Done(figures) => {
                        check_generator(&parts)?;
                        figures
                    }
                    Pass::Cut { played, total } => {
                        events(RlEvent::HeldoutCut { step: start, played, total });
                        summary.heldout_cut = Some(start);
                        return Ok(summary);
                    }
                }
            }
        };
        write_pass(figures, start, &out, store, &parts.run, events, &mut summary)?;
    }
    if start >= end {
        return Ok(summary);
    }
    // Steps are timed from here: a first heldout pass is not a step.
    let steps_from = Instant::now();

    // The producer: batches start..end, each once the gate allows.
    // The pool state a stop by the clock checkpoints: the last trained batch's.
    let mut last_pool = pool.state.clone();
    let gate = Gate { max_staleness: cfg.schedule.max_staleness };
    let (version_tx, mut version_rx) = watch::channel(start);
    let (batch_tx, mut batch_rx) = mpsc::unbounded_channel::<Rollout>();
    let mut producer = Producer {
        cfg: cfg.clone(),
        env: parts.env.clone(),
        generator: parts.generator.clone(),
        timeline: parts.timeline.clone(),
        pool,
        run: parts.run.clone(),
        reward_gamma: reward.gamma,
    };
    let produce = tokio::spawn(async move {
        for b in start..end {
            let mut version = *version_rx.borrow();
            while !gate.may_start(b, version) {
                if version_rx.changed().await.is_err() {
                    return;
                }
                version = *version_rx.borrow();
            }
            let rollout = producer.rollout(b, version).await;
            if batch_tx.send(rollout).is_err() {
                return;
            }
        }
    });

    let mut last_end = parts.timeline.now();
    // The worker's time totals at the previous update.
    let mut last_use: Option<DeviceUse> = None;
    let mut result = Ok(());
    // What a step is taken to last (`next_step_estimate`): the earlier invocations'
    // median, this one's first step, and the steps after it.
    let earlier = earlier_step_median(&metrics_path);
    let (mut first_s, mut later_s) = (None, Vec::new());
    let mut step_began = steps_from;
    // The step the latest checkpoint holds (written once per step).
    let mut last_saved = start;
    for step in start..end {
        // The first step of an invocation is always taken unless a heldout pass used the
        // time first (otherwise a limit under one step would never let the run move on).
        let estimate = next_step_estimate(first_s, &later_s, earlier);
        if (step > start || heldout_now)
            && out_of_time(cfg.schedule.max_seconds_now, started_now, estimate)
        {
            // Stopped by the clock: the last step's checkpoint is where the next resumes
            // (at the first step, the one this invocation resumed from, or none at 0:
            // the heldout pass is written and is not played again).
            if step > start && last_saved != step {
                let dir = save(&parts, &out, step, &last_pool, &recipe).await?;
                events(RlEvent::Saved { dir: dir.clone(), step });
                summary.last_checkpoint = Some(dir);
            }
            break;
        }
        let Some(rollout) = batch_rx.recv().await else {
            result = Err(RlError::Schedule("the rollout producer stopped early".into()));
            break;
        };
        // Nothing generated by weights other than the trained ones is trained on: the run
        // stops here and resumes from its last checkpoint, reloading the engines first.
        if let Err(e) = check_generator(&parts) {
            result = Err(e);
            break;
        }
        let done = step + 1;
        match train_step(cfg, &parts, &rollout, step, last_end, &reward, &mut last_use).await {
            Ok(mut m) => {
                // The generator's weights are refreshed before the next batch may start,
                // and the step reports what that took. A failed refresh stops the run
                // after the step's figures and episodes are kept.
                let refreshed = if parts.generator.needs_weights_on_disk() {
                    Some(refresh_engines(&parts, &out, done).await)
                } else {
                    None
                };
                if let Some(Ok(secs)) = &refreshed {
                    m.engines_refresh_s = Some(*secs);
                }
                append_jsonl(&metrics_path, &m)?;
                put_metric(store, &parts.run, done, "rl", &m)?;
                if let Some(s) = store {
                    let eps = rollout.groups.iter().flat_map(|g| &g.episodes);
                    store_episodes(s, &parts.run, &out, eps)?;
                }
                events(RlEvent::Step(Box::new(m)));
                if let Some(Err(e)) = refreshed {
                    // The learner holds the step: it is checkpointed, so that a resume
                    // goes on after it rather than training it again.
                    if last_saved != done && !matches!(e, RlError::Learner(_)) {
                        let dir = save(&parts, &out, done, &rollout.pool, &recipe).await?;
                        events(RlEvent::Saved { dir: dir.clone(), step: done });
                        summary.last_checkpoint = Some(dir);
                        summary.steps_done = done;
                    }
                    result = Err(e);
                    break;
                }
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        summary.steps_done = done;
        let _ = version_tx.send(done);
        last_pool = rollout.pool.clone();
        if done.is_multiple_of(cfg.schedule.save_every) || done == end {
            let dir = save(&parts, &out, done, &rollout.pool, &recipe).await?;
            events(RlEvent::Saved { dir: dir.clone(), step: done });
            summary.last_checkpoint = Some(dir);
            last_saved = done;
        }
        // The step's own time, its checkpoint included and a heldout pass after it not
        // (that pass has its own estimate, `last_pass_s`).
        let took = step_began.elapsed().as_secs_f64();
        if first_s.is_none() {
            first_s = Some(took);
        } else {
            later_s.push(took);
        }
        if heldout_due(cfg, done) && !parts.heldout.is_empty() {
            // The pass starts from this step's checkpoint, so that a stop during it resumes
            // there. With a store it is played until the clock stops it, and the next
            // invocation plays the rest first (run 22's final pass, left whole to a slice of
            // its own, was killed there by the command's limit). Without one, a pass the
            // clock would cut short is left whole to the next invocation (run 11 lost over
            // 100 s of a device command to a pass killed by its limit): it is taken to last
            // as long as the last one did.
            let resumable = store.is_some();
            let past = |d: Option<Instant>| d.is_some_and(|d| Instant::now() >= d);
            let no_time = if resumable {
                past(deadline)
            } else {
                out_of_time(cfg.schedule.max_seconds_now, started_now, last_pass_s(&heldout_path))
            };
            if last_saved != done && (resumable || no_time) {
                let dir = save(&parts, &out, done, &rollout.pool, &recipe).await?;
                events(RlEvent::Saved { dir: dir.clone(), step: done });
                summary.last_checkpoint = Some(dir);
                last_saved = done;
            }
            // (The save may have used the rest of the time.)
            if no_time || (resumable && past(deadline)) {
                // Left whole to the next invocation, which plays it first.
                let total = planned(cfg, &parts, done)
                    .iter()
                    .map(|p| p.problems * p.samples as usize)
                    .sum();
                events(RlEvent::HeldoutCut { step: done, played: 0, total });
                summary.heldout_cut = Some(done);
                break;
            }
            // Without a store nothing of a cut pass would be kept: it runs to its end.
            match heldout(cfg, &parts, done, store, deadline.filter(|_| resumable)).await? {
                Pass::Done(figures) => {
                    check_generator(&parts)?;
                    write_pass(figures, done, &out, store, &parts.run, events, &mut summary)?
                }
                Pass::Cut { played, total } => {
                    events(RlEvent::HeldoutCut { step: done, played, total });
                    summary.heldout_cut = Some(done);
                    break;
                }
            }
        }
        last_end = parts.timeline.now();
        parts.timeline.forget_before(rollout.started.min(last_end) - 1.0);
        step_began = Instant::now();
    }
    produce.abort();
    result.map(|_| summary)
}

fn put_metric(
    store: Option<&Store>,
    run: &str,
    step: u64,
    split: &str,
    value: &impl Serialize,
) -> Result<(), RlError> {
    if let Some(s) = store {
        let text = serde_json::to_string(value).unwrap_or_default();
        s.put_train_metric(run, step, split, &text)?;
    }
    Ok(())
}

/// The file in `output.dir` naming the run in the store.
const RUN_NAME: &str = "run-name";

/// The run's name in the store (its episodes' ids begin with it): the one `out` recorded
/// (`run-name`, written by [`train`] as a run starts), else the one its latest checkpoint
/// recorded; for a run begun before names were recorded, `rl-<last component of out>`;
/// for a new run, that name, or the first of `-2`, `-3`, ... that `taken` says no run in
/// the store has ([`name_taken`]). Nothing is written here: a run refused before it
/// starts reserves no name. Every GPU run was `rl-out`, and a second run of that name in
/// one store overwrote the first's training episodes.
pub fn run_name(
    out: &Path,
    taken: &dyn Fn(&str) -> Result<bool, RlError>,
) -> Result<String, RlError> {
    let path = out.join(RUN_NAME);
    let recorded = match std::fs::read_to_string(&path) {
        Ok(text) => Some(check_name(text.trim(), &path)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(&path, e)),
    };
    let checkpoint = match latest(out)? {
        Some((dir, RlState { run: Some(name), .. })) => Some(check_name(&name, &dir.join(STATE))?),
        _ => None,
    };
    match (recorded, checkpoint) {
        (Some(a), Some(b)) if a != b => {
            return Err(RlError::Resume {
                path,
                reason: format!("names the run {a:?}, its latest checkpoint {b:?}"),
            })
        }
        (Some(name), _) | (None, Some(name)) => return Ok(name),
        (None, None) => {}
    }
    let base = format!(
        "rl-{}",
        out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    );
    // A run begun before names were recorded (a checkpoint, figures or a heldout pass in
    // progress, but no record): its store rows are under the old name.
    if [LATEST, METRICS, HELDOUT, PASS].iter().any(|f| out.join(f).exists()) {
        return Ok(base);
    }
    for name in std::iter::once(base.clone()).chain((2..1000).map(|i| format!("{base}-{i}"))) {
        if !taken(&name)? {
            return Ok(name);
        }
    }
    Err(RlError::Config(format!("no free run name from {base} to {base}-999 in the store")))
}

/// Whether a store whose run ids are `ids` has a run `name`: one of that id, or rows under
/// it (`rl-out/heldout`), which a run whose own row is missing still leaves.
pub fn name_taken<'a>(mut ids: impl Iterator<Item = &'a str>, name: &str) -> bool {
    ids.any(|id| id == name || id.strip_prefix(name).is_some_and(|rest| rest.starts_with('/')))
}

/// `name` if a run may be called that (episode ids are `NAME/...`), else an error naming
/// where it was read.
fn check_name(name: &str, from: &Path) -> Result<String, RlError> {
    if name.is_empty() || name.contains('/') || name.chars().any(char::is_whitespace) {
        return Err(io_err(from, format!("{name:?} is not a run name")));
    }
    Ok(name.to_string())
}

/// Records `name` in `out` as the run starts, unless it is recorded already; another name
/// recorded there is an error (a caller naming the run otherwise than [`run_name`]).
fn record_run_name(out: &Path, name: &str) -> Result<(), RlError> {
    let path = out.join(RUN_NAME);
    match std::fs::read_to_string(&path) {
        Ok(text) if text.trim() == name => Ok(()),
        Ok(text) => Err(RlError::Resume {
            path,
            reason: format!("names the run {:?}; this run is called {name:?}", text.trim()),
        }),
        Err(_) => write_atomic(&path, &format!("{name}\n")),
    }
}

/// The name a source's problems carry in their keys.
pub fn source_name(s: &crate::config::SourceCfg) -> String {
    if let Some(n) = &s.name {
        return n.clone();
    }
    let dir = s.suite.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    match s.level {
        Some(l) => format!("{dir}:{}:l{l}", s.split),
        None => format!("{dir}:{}", s.split),
    }
}

/// Writes the learner's weights where the generator wants them and has the external
/// engines load them as `<run>-step-<step>` (named by the step, so that an engine that
/// kept older weights is told apart, and by the run, so that two runs sharing an engine
/// never take each other's); the seconds both took. The path is absolute: the engines
/// resolve it in their own working directories.
async fn refresh_engines(parts: &Parts, out: &Path, step: u64) -> Result<f64, RlError> {
    let began = Instant::now();
    let version = format!("{}-step-{step}", parts.run);
    let out = std::path::absolute(out).map_err(|e| io_err(out, e))?;
    let dir = parts.generator.weights_dir(&out, &version);
    let job = SaveJob { dir: dir.display().to_string(), merge_lora: false, trainer_state: false };
    parts.learner.save(job).await.map_err(RlError::Learner)?;
    parts.generator.refresh(&dir, &version).await.map_err(RlError::Generator)?;
    Ok(began.elapsed().as_secs_f64())
}

/// The generator's fault, if one was seen, as the run's error.
fn check_generator(parts: &Parts) -> Result<(), RlError> {
    match parts.generator.fault() {
        Some(f) => Err(RlError::Generator(format!(
            "{f}; nothing generated since is trained on or reported (the run resumes from its \
             last checkpoint and reloads the engines)"
        ))),
        None => Ok(()),
    }
}

async fn save(
    parts: &Parts,
    out: &Path,
    step: u64,
    pool: &PoolState,
    recipe: &serde_json::Value,
) -> Result<PathBuf, RlError> {
    let name = format!("step-{step:06}");
    let dir = out.join("checkpoints").join(&name);
    parts
        .learner
        .save(SaveJob { dir: dir.display().to_string(), merge_lora: false, trainer_state: true })
        .await
        .map_err(RlError::Learner)?;
    if let Some(tok) = &parts.tokenizer_dir {
        for f in TOKENIZER_FILES {
            let src = tok.join(f);
            if src.is_file() {
                std::fs::copy(&src, dir.join(f)).map_err(|e| io_err(&src, e))?;
            }
        }
    }
    let state = RlState {
        step,
        pool: pool.clone(),
        recipe: Some(recipe.clone()),
        run: Some(parts.run.clone()),
    };
    let text = serde_json::to_string_pretty(&state).map_err(|e| io_err(&dir, e))?;
    write_atomic(&dir.join(STATE), &text)?;
    // Only now is the checkpoint whole: the marker moves last.
    write_atomic(&out.join(LATEST), &name)?;
    Ok(dir)
}

/// Link the evaluations of `episodes` (each turn names its record) to `run` in the
/// store, so the dashboard's evaluation browser finds them under the run.
fn link_evaluations<'a>(
    store: &Store,
    run: &str,
    episodes: impl IntoIterator<Item = &'a Episode>,
) -> Result<(), RlError> {
    let keys: Vec<&str> =
        episodes.into_iter().flat_map(|e| &e.turns).filter_map(|t| t.record.as_deref()).collect();
    store.link_run_evaluations(run, &keys, tritonforge_store::now_ms() / 1000)?;
    Ok(())
}

/// The heldout sets of `parts`, as their figures identify them.
fn sets_of(parts: &Parts) -> Vec<HeldoutSet> {
    parts
        .heldout
        .iter()
        .map(|(name, env)| HeldoutSet { name: name.clone(), keys: env.keys() })
        .collect()
}

/// How each heldout set is played at `step`: its identity fields set, no figures yet.
fn planned(cfg: &RlConfig, parts: &Parts, step: u64) -> Vec<HeldoutMetrics> {
    plan_sets(cfg, &sets_of(parts), parts.timed, &parts.policy, step)
}

/// [`planned`] from the sets' keys alone (no environment needed).
fn plan_sets(
    cfg: &RlConfig,
    sets: &[HeldoutSet],
    timed: bool,
    policy: &str,
    step: u64,
) -> Vec<HeldoutMetrics> {
    sets.iter()
        .enumerate()
        .map(|(i, set)| {
            let plan = cfg.schedule.heldout_plan(&cfg.data, &cfg.rollout, i);
            HeldoutMetrics {
                step,
                set: set.name.clone(),
                problems: set.keys.len(),
                samples: plan.samples,
                turns: plan.turns,
                max_tokens: plan.max_tokens,
                temperature: f64::from(plan.temperature),
                seed: cfg.optim.seed,
                timed: timed && cfg.schedule.heldout_timing,
                policy: policy.to_string(),
                tasks: crate::metrics::tasks_digest(&set.keys),
                ..HeldoutMetrics::default()
            }
        })
        .collect()
}

/// How a heldout pass ended.
enum Pass {
    /// Every set's figures.
    Done(Vec<HeldoutMetrics>),
    /// The invocation's clock ran out first: `played` of `total` episodes are in the
    /// store, and the next invocation plays the rest.
    Cut { played: usize, total: usize },
}

/// The ids of a heldout pass's episodes at `step` start with this.
fn pass_prefix(run: &str, step: u64) -> String {
    format!("{run}/heldout-{step:06}/")
}

/// The heldout pass in progress (`heldout-pass.json`): how it is played and which
/// attempt at it the stored episodes belong to.
#[derive(Debug, Serialize, Deserialize)]
struct PassMarker {
    /// Written into every episode this attempt stores (`heldout_attempt` in its JSON):
    /// the store may be shared with another run of the same name (runs begun before
    /// [`run_name`] recorded names were all `rl-<dir>`), whose episodes must not count here.
    attempt: String,
    /// Each set's top-p (not among the figures' identity fields).
    top_p: Vec<f32>,
    plans: Vec<HeldoutMetrics>,
}

/// The field of a stored heldout episode's JSON naming its attempt.
const ATTEMPT: &str = "heldout_attempt";

/// A new attempt's id: unique enough among the attempts one store sees.
fn new_attempt() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}-{:x}", std::process::id())
}

/// The attempt at this very pass that an earlier invocation cut short, and the episodes
/// it stored, by id. They count only when `heldout-pass.json` says that attempt was
/// played as `marker` says (the same checkpoint, sets, samples, cap, temperature and
/// top-p), and only those that carry its id; otherwise a new attempt starts and what
/// is stored under the pass's prefix is deleted, so that a pass played otherwise is
/// never mixed with it.
fn reusable(
    store: &Store,
    out: &Path,
    prefix: &str,
    mut marker: PassMarker,
) -> Result<(PassMarker, std::collections::HashMap<String, Episode>), RlError> {
    let was = std::fs::read_to_string(out.join(PASS))
        .ok()
        .and_then(|t| serde_json::from_str::<PassMarker>(&t).ok())
        .filter(|was| {
            was.top_p == marker.top_p
                && was.plans.len() == marker.plans.len()
                && was.plans.iter().zip(&marker.plans).all(|(w, p)| w.differs_from(p).is_none())
        });
    let Some(was) = was else {
        store.delete_episodes_under(prefix)?;
        return Ok((marker, Default::default()));
    };
    marker.attempt = was.attempt;
    let found = store
        .episodes_under(prefix)?
        .into_iter()
        .filter_map(|(id, text)| {
            let value: serde_json::Value = serde_json::from_str(&text).ok()?;
            (value[ATTEMPT].as_str() == Some(marker.attempt.as_str())).then_some(())?;
            Some((id, serde_json::from_value::<Episode>(value).ok()?))
        })
        // A failed episode (the backend or the problem, not the policy) is played again.
        .filter(|(_, e)| e.error.is_none())
        .collect();
    Ok((marker, found))
}

/// One heldout episode into the store as it ends, tagged with its attempt.
fn store_heldout(
    s: &Store,
    run: &str,
    out: &Path,
    ep: &Episode,
    attempt: &str,
) -> Result<(), RlError> {
    let mut value = serde_json::to_value(ep).map_err(|e| io_err(out, e))?;
    if let Some(map) = value.as_object_mut() {
        map.insert(ATTEMPT.into(), attempt.into());
    }
    s.put_episode(&ep.id, &ep.run, &ep.problem, ep.sample, &value.to_string())?;
    link_evaluations(s, run, std::iter::once(ep))
}

/// A heldout pass's figures at `step` into `heldout.jsonl`, the store, the events and the
/// summary; then its marker goes (a stop before that plays nothing of it again).
fn write_pass(
    figures: Vec<HeldoutMetrics>,
    step: u64,
    out: &Path,
    store: Option<&Store>,
    run: &str,
    events: &mut (dyn FnMut(RlEvent) + Send),
    summary: &mut RlSummary,
) -> Result<(), RlError> {
    for h in figures {
        append_jsonl(&out.join(HELDOUT), &h)?;
        put_metric(store, run, step, &format!("heldout:{}", h.set), &h)?;
        events(RlEvent::Heldout(h.clone()));
        summary.heldout.push(h);
    }
    let marker = out.join(PASS);
    match std::fs::remove_file(&marker) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(&marker, e)),
        _ => Ok(()),
    }
}

/// Pass@1 of every heldout set, played through the generator (sampled as configured for
/// heldout: greedy by default, one sample). The sets are played together, within one
/// `rollout.parallel` cap: a set's tail of long answers then overlaps the next set's
/// start, where one after another left the engine and the evaluator waiting on a few
/// episodes each time. Each set's `wall_s` is from the common start to its own last
/// episode (this invocation's part, for a resumed pass). Its evaluations are linked to
/// the run.
///
/// With a store, each episode is stored as it ends, and a pass cut short (by `deadline`,
/// or killed) is resumed where it stopped: a pass takes minutes (run 22's final one was
/// killed by its command's limit with 1,156 of 1,280 episodes evaluated and nothing
/// written), and a device command's slice may be shorter.
async fn heldout(
    cfg: &RlConfig,
    parts: &Parts,
    step: u64,
    store: Option<&Store>,
    deadline: Option<Instant>,
) -> Result<Pass, RlError> {
    let slots = Arc::new(Semaphore::new(cfg.rollout.parallel.max(1)));
    let started = Instant::now();
    let out = &cfg.output.dir;
    let mut plans = planned(cfg, parts, step);
    let top_p =
        (0..plans.len()).map(|i| cfg.schedule.heldout_plan(&cfg.data, &cfg.rollout, i).top_p);
    let (attempt, mut earlier) = match store {
        Some(s) => {
            let marker = PassMarker { attempt: new_attempt(), top_p: top_p.collect(), plans };
            let (marker, found) = reusable(s, out, &pass_prefix(&parts.run, step), marker)?;
            let text = serde_json::to_string(&marker).map_err(|e| io_err(out, e))?;
            write_atomic(&out.join(PASS), &text)?;
            plans = marker.plans;
            (marker.attempt, found)
        }
        None => (String::new(), Default::default()),
    };
    let attempt = attempt.as_str();
    let failed: std::sync::Mutex<Option<RlError>> = std::sync::Mutex::new(None);
    let mut total = 0;
    let mut sets = Vec::new();
    for (i, ((_, env), plan)) in parts.heldout.iter().zip(plans).enumerate() {
        let HeldoutPlan { samples, max_tokens, temperature, top_p, .. } =
            cfg.schedule.heldout_plan(&cfg.data, &cfg.rollout, i);
        let keys = env.keys();
        let (mut plays, mut kept) = (Vec::new(), Vec::new());
        for (task, key) in keys.iter().enumerate() {
            for sample in 0..samples {
                let id = format!("{}{key}/{sample}", pass_prefix(&parts.run, step));
                total += 1;
                if let Some(ep) = earlier.remove(&id) {
                    kept.push(ep);
                    continue;
                }
                plays.push(Play {
                    task,
                    sample,
                    id,
                    run: format!("{}/heldout", parts.run),
                    sampling: Sampling {
                        temperature,
                        top_p,
                        max_tokens,
                        seed: Some(seed_of(cfg.optim.seed ^ 0xe7a1, step, task, sample)),
                        adapter: None,
                    },
                });
            }
        }
        let (slots, failed) = (slots.clone(), &failed);
        sets.push(async move {
            // Stored as each ends: what a stop cuts short is kept.
            let mut keep = |ep: &Episode| {
                if let Some(s) = store {
                    if let Err(e) = store_heldout(s, &parts.run, out, ep, attempt) {
                        if let Ok(mut f) = failed.lock() {
                            f.get_or_insert(e);
                        }
                    }
                }
            };
            let (new, cut) =
                play_in(env, &parts.generator, &parts.timeline, plays, slots, deadline, &mut keep)
                    .await;
            let reused = kept.len();
            let mut eps = kept;
            eps.extend(new);
            let n = eps.len().max(1) as f64;
            let first = eps
                .iter()
                .filter(|e| e.turns.first().is_some_and(|t| t.outcome.is_correct()))
                .count();
            let solved = eps.iter().filter(|e| e.solved()).count();
            let turns: Vec<&tritonforge_agent::Turn> = eps.iter().flat_map(|e| &e.turns).collect();
            let mut by_problem = std::collections::BTreeMap::new();
            for e in &eps {
                let right = e.turns.first().is_some_and(|t| t.outcome.is_correct());
                *by_problem.entry(e.problem.clone()).or_insert(0) += u32::from(right);
            }
            let h = HeldoutMetrics {
                pass_at_1: first as f64 / n,
                solved: solved as f64 / n,
                compile_rate: compile_rate(&turns),
                wall_s: started.elapsed().as_secs_f64(),
                by_problem,
                errors: errors(&eps),
                reused_episodes: reused,
                ..plan
            };
            (h, eps.len(), cut)
        });
    }
    let ended = futures_util::future::join_all(sets).await;
    if let Some(e) = failed.into_inner().ok().flatten() {
        return Err(e);
    }
    if ended.iter().any(|(_, _, cut)| *cut) {
        let played = ended.iter().map(|(_, n, _)| n).sum();
        return Ok(Pass::Cut { played, total });
    }
    Ok(Pass::Done(ended.into_iter().map(|(h, _, _)| h).collect()))
}

/// A training rollout's `eps` into the store as they were played, their evaluations
/// linked to the run (heldout episodes go one at a time through [`store_heldout`], under
/// `RUN/heldout` so the episode viewer shows them apart).
fn store_episodes<'a>(
    s: &Store,
    run: &str,
    out: &Path,
    eps: impl IntoIterator<Item = &'a Episode> + Clone,
) -> Result<(), RlError> {
    for ep in eps.clone() {
        let text = serde_json::to_string(ep).map_err(|e| io_err(out, e))?;
        s.put_episode(&ep.id, &ep.run, &ep.problem, ep.sample, &text)?;
    }
    link_evaluations(s, run, eps)
}

/// Up to three distinct failure reasons of `eps`.
fn errors<'a>(eps: impl IntoIterator<Item = &'a Episode>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in eps {
        if let Some(err) = &e.error {
            let short: String = err.chars().take(600).collect();
            if out.len() < 3 && !out.contains(&short) {
                out.push(short);
            }
        }
    }
    out
}

fn compile_rate(turns: &[&tritonforge_agent::Turn]) -> f64 {
    if turns.is_empty() {
        return 0.0;
    }
    turns.iter().filter(|t| tritonforge_agent::metrics::compiled(t)).count() as f64
        / turns.len() as f64
}

/// Train on one rollout batch (no update when no group carried signal, even after
/// filling: the metrics then say `updates: 0`).
async fn train_step(
    cfg: &RlConfig,
    parts: &Parts,
    rollout: &Rollout,
    step: u64,
    last_end: f64,
    reward: &tritonforge_agent::RewardConfig,
    last_use: &mut Option<DeviceUse>,
) -> Result<StepMetrics, RlError> {
    let gate = Gate { max_staleness: cfg.schedule.max_staleness };
    let staleness = gate.age(rollout.b, rollout.generated_at, step).map_err(RlError::Schedule)?;
    let mut m = StepMetrics {
        step: step + 1,
        generated_at: rollout.generated_at,
        staleness,
        groups_drawn: rollout.drawn,
        fill_rounds: rollout.fill_rounds,
        rollout_s: rollout.ended - rollout.started,
        reward_terms: if parts.timed {
            "compile+correct+speed".into()
        } else {
            "compile+correct (no timing: CPU mode)".into()
        },
        ..StepMetrics::default()
    };
    let tl = &parts.timeline;
    m.generate_s = tl.covered(&[Activity::Generate], rollout.started, rollout.ended);
    m.evaluate_s = tl.covered(&[Activity::Evaluate], rollout.started, rollout.ended);
    // Episode statistics over every group played.
    let all: Vec<&Episode> = rollout.groups.iter().flat_map(|g| &g.episodes).collect();
    m.episodes = all.len();
    m.episodes_failed = all.iter().filter(|e| e.error.is_some()).count();
    m.errors = errors(all.iter().copied());
    let rewards: Vec<f64> = all.iter().flat_map(|e| e.turns.iter().map(|t| t.reward)).collect();
    let nr = rewards.len().max(1) as f64;
    m.reward_mean = rewards.iter().sum::<f64>() / nr;
    m.reward_std = (rewards.iter().map(|r| (r - m.reward_mean).powi(2)).sum::<f64>() / nr).sqrt();
    let firsts: Vec<f64> = all
        .iter()
        .filter(|e| !e.turns.is_empty())
        .map(|e| {
            let rw: Vec<f64> = e.turns.iter().map(|t| t.reward).collect();
            discounted_returns(&rw, reward.gamma)[0]
        })
        .collect();
    m.return_mean = firsts.iter().sum::<f64>() / firsts.len().max(1) as f64;
    let turns = cfg.rollout.turns as usize;
    m.pass_by_turn = (0..turns)
        .map(|t| {
            let solved = all
                .iter()
                .filter(|e| e.turns.iter().take(t + 1).any(|x| x.outcome.is_correct()))
                .count();
            solved as f64 / all.len().max(1) as f64
        })
        .collect();
    let every_turn: Vec<&tritonforge_agent::Turn> = all.iter().flat_map(|e| &e.turns).collect();
    m.compile_rate = compile_rate(&every_turn);
    for v in every_turn.iter().filter_map(|t| t.completion.weight_version.as_ref()) {
        *m.weight_versions.entry(v.clone()).or_default() += 1;
    }
    m.generated_tokens = every_turn
        .iter()
        .map(|t| t.completion.token_ids.as_ref().map_or(0, |v| v.len() as u64))
        .sum();
    m.tokens_per_s = m.generated_tokens as f64 / m.rollout_s.max(1e-9);
    if let Some((slowest, mean)) = ChainTimes::of_step(all.iter().copied()) {
        m.slowest = Some(slowest);
        m.mean_chain = Some(mean);
    }
    m.by_source = cfg
        .data
        .train
        .iter()
        .enumerate()
        .filter_map(|(i, src)| {
            let groups: Vec<&Group> = rollout.groups.iter().filter(|g| g.source == i).collect();
            let eps: Vec<&Episode> = groups.iter().flat_map(|g| &g.episodes).collect();
            (!groups.is_empty()).then(|| SourceStep::of(source_name(src), groups.len(), &eps))
        })
        .collect();
    // Sequences from the groups with signal.
    let mut seqs: Vec<Sequence> = Vec::new();
    let mut abs_adv = (0.0, 0usize);
    for g in &rollout.groups {
        let Some(adv) = &g.advantages else {
            m.groups_skipped += 1;
            continue;
        };
        m.groups_kept += 1;
        for (ep, a) in g.episodes.iter().zip(adv) {
            if ep.turns.is_empty() {
                continue;
            }
            abs_adv.0 += a.iter().map(|x| x.abs()).sum::<f64>();
            abs_adv.1 += a.len();
            let laid = lay_out(
                ep,
                a,
                cfg.rollout.seq_len,
                cfg.loss.mask_truncated,
                cfg.rollout.behaviour(),
            )?;
            m.merged_turns += laid.merged;
            m.too_long_turns += laid.too_long;
            m.masked_turns += laid.masked;
            seqs.extend(laid.sequences);
        }
    }
    m.mean_abs_advantage = abs_adv.0 / abs_adv.1.max(1) as f64;
    // Sequences whose every advantage is zero teach nothing (the turn nobody else
    // reached); they cost a forward and backward pass, so they are left out.
    seqs.retain(|s| s.advantages.iter().any(|a| *a != 0.0));
    m.sequences = seqs.len();
    if seqs.is_empty() {
        // One reading of the clock for both, so that the pace never exceeds the latency.
        let now = tl.now();
        m.step_s = now - last_end.min(rollout.started);
        m.interval_s = now - last_end;
        let busy =
            tl.covered(&[Activity::Generate, Activity::Train], last_end.min(rollout.started), now);
        m.policy_idle = (1.0 - busy / m.step_s.max(1e-9)).clamp(0.0, 1.0);
        return Ok(m);
    }
    m.target_tokens = seqs.iter().map(|s| s.targets() as u64).sum();
    let plan = batch::plan(&seqs, cfg.optim.updates, cfg.optim.micro_tokens, cfg.optim.seed ^ step);
    let learner = &parts.learner;
    let t0 = tl.now();
    let score = |reference: bool| {
        let job = ScoreJob {
            batch: batch::score_batch(&seqs, &plan, parts.pad_id),
            reference,
            temperature: f64::from(cfg.rollout.temperature),
        };
        let (plan, n) = (&plan, seqs.len());
        async move {
            let scores = learner.score(job).await.map_err(RlError::Learner)?;
            Ok::<_, RlError>(batch::per_sequence(plan, n, scores.logprobs))
        }
    };
    let proximal = if cfg.loss.proximal { Some(score(false).await?) } else { None };
    let reference = if cfg.loss.scores_reference() { Some(score(true).await?) } else { None };
    let t1 = tl.now();
    tl.record(Activity::Train, t0, t1);
    m.score_s = t1 - t0;
    let loss = RlLoss {
        clip_low: cfg.loss.clip_low,
        clip_high: cfg.loss.clip_high,
        kl_coef: cfg.loss.kl_coef,
        entropy_coef: cfg.loss.entropy_coef,
        tis_cap: cfg.loss.tis_cap,
        loss_tokens: 0,
        temperature: f64::from(cfg.rollout.temperature),
    };
    let mut stats: Vec<RlStats> = Vec::new();
    for u in 0..plan.len() {
        let b = batch::rl_batch(
            &seqs,
            &plan,
            u,
            proximal.as_deref(),
            reference.as_deref(),
            loss.clone(),
            parts.pad_id,
        );
        stats.push(learner.step(b).await.map_err(RlError::Learner)?);
    }
    let t2 = tl.now();
    tl.record(Activity::Train, t1, t2);
    m.train_s = t2 - t1;
    m.updates = stats.len();
    let w: Vec<f64> = stats.iter().map(|s| s.loss_tokens as f64).collect();
    let wsum = w.iter().sum::<f64>().max(1.0);
    let avg = |f: &dyn Fn(&RlStats) -> f64| {
        stats.iter().zip(&w).map(|(s, w)| f(s) * w).sum::<f64>() / wsum
    };
    m.loss = avg(&|s| s.loss);
    m.policy_loss = avg(&|s| s.policy_loss);
    m.kl = stats.iter().all(|s| s.kl.is_some()).then(|| avg(&|s| s.kl.unwrap_or(0.0)));
    m.entropy = avg(&|s| s.entropy);
    m.clip_fraction = avg(&|s| s.clip_fraction);
    m.ratio_mean = avg(&|s| s.ratio_mean);
    m.ratio_max = stats.iter().map(|s| s.ratio_max).fold(0.0, f64::max);
    m.tis_capped = avg(&|s| s.tis_capped);
    m.grad_norm = stats.iter().map(|s| s.grad_norm).fold(0.0, f64::max);
    m.lr = stats.last().map_or(0.0, |s| s.lr);
    m.trained_tokens = stats.iter().map(|s| s.tokens).sum();
    if let Some(now) = stats.last().and_then(|s| s.device.clone()) {
        m.worker = Some(WorkerShare::between(last_use.as_ref(), &now));
        *last_use = Some(now);
    }
    // What else was in flight while the learner was asked to score and step: generation
    // queued ahead of it in the worker, or candidates on the same GPU.
    let learner_s = (t2 - t0).max(1e-9);
    m.learner_with_generation = tl.covered(&[Activity::Generate], t0, t2) / learner_s;
    m.learner_with_evaluation = tl.covered(&[Activity::Evaluate], t0, t2) / learner_s;
    m.step_s = t2 - last_end.min(rollout.started);
    m.interval_s = t2 - last_end;
    let window = (last_end.min(rollout.started), t2);
    let busy = tl.covered(&[Activity::Generate, Activity::Train], window.0, window.1);
    m.policy_idle = (1.0 - busy / (window.1 - window.0).max(1e-9)).clamp(0.0, 1.0);
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ago(s: u64) -> Instant {
        Instant::now().checked_sub(Duration::from_secs(s)).unwrap_or_else(Instant::now)
    }

    /// A new run takes the first name the store does not know, recorded only as it
    /// starts, and keeps it on resume; a run begun before names were recorded keeps
    /// `rl-<dir>`; a checkpoint carried without the record keeps its own.
    #[test]
    fn a_new_run_takes_a_name_no_earlier_run_has() {
        let dir = tempfile::tempdir().unwrap();
        let taken = |n: &str| Ok(n == "rl-out" || n == "rl-out-2");
        let out = dir.path().join("b/out");
        assert_eq!(run_name(&out, &taken).unwrap(), "rl-out-3");
        assert!(!out.join(RUN_NAME).exists(), "not recorded before the run starts");
        std::fs::create_dir_all(&out).unwrap();
        record_run_name(&out, "rl-out-3").unwrap();
        assert_eq!(std::fs::read_to_string(out.join(RUN_NAME)).unwrap(), "rl-out-3\n");
        // Resumed (the name is its own now, and taken in the store): the same name.
        let all = |_: &str| Ok(true);
        assert_eq!(run_name(&out, &all).unwrap(), "rl-out-3");
        let e = record_run_name(&out, "rl-out").unwrap_err().to_string();
        assert!(e.contains("rl-out-3") && e.contains("this run is called"), "{e}");

        let free = dir.path().join("a/out");
        assert_eq!(run_name(&free, &|_| Ok(false)).unwrap(), "rl-out");
        let e = run_name(&free, &all).unwrap_err().to_string();
        assert!(e.contains("rl-out-999"), "{e}");

        // Begun before names were recorded: a checkpoint without one, or only figures.
        let legacy = dir.path().join("c/out");
        let ckpt = legacy.join("checkpoints/step-000003");
        std::fs::create_dir_all(&ckpt).unwrap();
        let pool = r#""pool": {"solve_rate": {}, "drawn": {}}"#;
        std::fs::write(ckpt.join(STATE), format!("{{\"step\": 3, {pool}}}")).unwrap();
        std::fs::write(legacy.join(LATEST), "step-000003\n").unwrap();
        assert_eq!(run_name(&legacy, &taken).unwrap(), "rl-out", "a checkpoint before names");
        for f in [METRICS, HELDOUT, PASS] {
            let figures = dir.path().join(format!("d-{f}/out"));
            std::fs::create_dir_all(&figures).unwrap();
            std::fs::write(figures.join(f), "").unwrap();
            assert_eq!(run_name(&figures, &taken).unwrap(), "rl-out", "{f} before names");
        }
        // A checkpoint carried without the record (packed, copied) keeps its own name; a
        // record that disagrees with it is an error naming both.
        let named = |n: &str| format!("{{\"step\": 3, {pool}, \"run\": \"{n}\"}}");
        std::fs::write(ckpt.join(STATE), named("rl-out-7")).unwrap();
        assert_eq!(run_name(&legacy, &taken).unwrap(), "rl-out-7");
        std::fs::write(legacy.join(RUN_NAME), "rl-out-8\n").unwrap();
        let e = run_name(&legacy, &taken).unwrap_err().to_string();
        assert!(e.contains("rl-out-8") && e.contains("rl-out-7"), "{e}");
        std::fs::write(ckpt.join(STATE), named("a/b")).unwrap();
        assert!(run_name(&legacy, &taken).unwrap_err().to_string().contains("not a run name"));

        std::fs::write(out.join(RUN_NAME), "a/b\n").unwrap();
        let e = run_name(&out, &taken).unwrap_err().to_string();
        assert!(e.contains("run-name") && e.contains("not a run name"), "{e}");
    }

    /// A name is taken by a run of that id or by rows under it, not by a longer name.
    #[test]
    fn a_name_is_taken_by_its_rows_too() {
        let ids = ["rl-out-2", "rl-x/heldout", "sft-1"];
        assert!(name_taken(ids.into_iter(), "rl-out-2"));
        assert!(name_taken(ids.into_iter(), "rl-x"), "only its heldout rows are left");
        assert!(!name_taken(ids.into_iter(), "rl-out"), "rl-out-2 is another run");
    }

    /// 100 s in, steps of 30 s: the next would end at 130.
    #[test]
    fn the_clock_stops_a_step_that_would_not_fit() {
        assert!(out_of_time(120, ago(100), Some(30.0)));
        assert!(!out_of_time(140, ago(100), Some(30.0)));
        assert!(!out_of_time(0, ago(100), Some(30.0)), "0: no limit");
        // No step timed yet (a first heldout pass took the time): half the limit.
        assert!(out_of_time(180, ago(100), None));
        assert!(!out_of_time(220, ago(100), None));
    }

    /// Run 19's first slice: a 263 s first step, then nothing timed. Half of it lets the
    /// 32 s steps after it run; once they are timed, they alone count.
    #[test]
    fn the_first_step_s_one_time_costs_do_not_stand_for_the_next() {
        assert_eq!(next_step_estimate(None, &[], None), None);
        assert_eq!(next_step_estimate(None, &[], Some(33.0)), Some(33.0));
        assert_eq!(next_step_estimate(Some(263.0), &[], None), Some(131.5));
        assert_eq!(next_step_estimate(Some(159.0), &[], Some(33.0)), Some(33.0));
        assert_eq!(next_step_estimate(Some(20.0), &[], Some(33.0)), Some(10.0));
        assert_eq!(next_step_estimate(Some(159.0), &[], Some(263.0)), Some(79.5));
        assert_eq!(next_step_estimate(Some(263.0), &[30.0, 34.0], Some(263.0)), Some(32.0));
        // 290 s in, a 500 s slice: the next step is started on that estimate.
        assert!(!out_of_time(500, ago(290), next_step_estimate(Some(263.0), &[], None)));
    }

    /// A pass is taken to last as long as the latest one's slowest set.
    #[test]
    fn the_latest_pass_gives_a_pass_estimate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heldout.jsonl");
        assert_eq!(last_pass_s(&path), None, "no file: no estimate");
        for (step, set, wall_s) in
            [(0, "a", 300.0), (0, "b", 350.0), (9, "a", 140.0), (9, "b", 150.0)]
        {
            let h = HeldoutMetrics { step, set: set.into(), wall_s, ..Default::default() };
            append_jsonl(&path, &h).unwrap();
        }
        assert_eq!(last_pass_s(&path), Some(150.0));
    }

    /// The earlier invocations' steps, as `metrics.jsonl` holds them.
    #[test]
    fn earlier_steps_give_the_estimate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.jsonl");
        assert_eq!(earlier_step_median(&path), None, "no file");
        let line = |s: u64, t: f64| {
            serde_json::to_string(&StepMetrics { step: s, interval_s: t, ..Default::default() })
                .unwrap()
        };
        std::fs::write(&path, [line(1, 100.0), line(2, 40.0)].join("\n") + "\n").unwrap();
        assert_eq!(earlier_step_median(&path), Some(40.0), "the lower median: each began slow");
        let three = [line(1, 263.0), line(2, 32.0), line(3, 30.0)].join("\n") + "\n";
        std::fs::write(&path, three).unwrap();
        assert_eq!(earlier_step_median(&path), Some(32.0));
    }

    fn held(step: u64, set: &str, max_tokens: u32, temperature: f64) -> HeldoutMetrics {
        HeldoutMetrics {
            step,
            set: set.into(),
            problems: 3,
            samples: 2,
            max_tokens,
            temperature,
            seed: 1,
            policy: "p@1".into(),
            tasks: "t".into(),
            ..Default::default()
        }
    }

    fn lines(hs: &[HeldoutMetrics]) -> String {
        hs.iter().map(|h| serde_json::to_string(h).unwrap() + "\n").collect()
    }

    /// A heldout pass is written when every set has a record of that step played as
    /// planned; a pass measured again first drops that step's old lines.
    #[test]
    fn a_written_heldout_pass_is_recognised_and_replaced_by_step() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heldout.jsonl");
        let want = [held(0, "a", 32, 0.5), held(0, "b", 64, 0.5)];
        assert!(!heldout_written(&path, &want), "no file");
        let all = [held(0, "a", 32, 0.5), held(0, "b", 64, 0.5), held(4, "a", 32, 0.5)];
        std::fs::write(&path, lines(&all)).unwrap();
        assert!(heldout_written(&path, &want));
        assert!(!heldout_written(&path, &[held(4, "a", 32, 0.5), held(4, "b", 64, 0.5)]));
        // Other settings than planned: not the pass asked for.
        std::fs::write(&path, lines(&[held(0, "a", 32, 0.5), held(0, "b", 32, 0.5)])).unwrap();
        assert!(!heldout_written(&path, &want), "b's own cap is 64");
        let other = HeldoutMetrics { policy: "p@2".into(), ..held(0, "a", 32, 0.5) };
        std::fs::write(&path, lines(&[other, held(0, "b", 64, 0.5)])).unwrap();
        assert!(!heldout_written(&path, &want), "another starting policy");
        std::fs::write(&path, lines(&all)).unwrap();
        drop_step(&path, 0).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), lines(&all[2..]));
    }

    /// An earlier run's step-0 figures stand in only when every set was played the same
    /// way; otherwise the error names the set and what differs.
    #[test]
    fn a_baseline_is_taken_only_when_played_the_same_way() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("earlier.jsonl");
        let want = [held(0, "a", 32, 0.5), held(0, "b", 64, 0.5)];
        let played = [
            HeldoutMetrics { pass_at_1: 0.25, ..held(0, "a", 32, 0.5) },
            HeldoutMetrics { pass_at_1: 0.5, ..held(0, "b", 64, 0.5) },
            HeldoutMetrics { pass_at_1: 0.75, ..held(6, "a", 32, 0.5) },
        ];
        std::fs::write(&path, lines(&played)).unwrap();
        let got = from_baseline(&path, &want).unwrap();
        assert_eq!(got.iter().map(|h| h.pass_at_1).collect::<Vec<_>>(), [0.25, 0.5], "step 0's");
        assert!(got.iter().all(|h| h.reused_from.as_deref() == Some(path.to_str().unwrap())));
        let timed = [HeldoutMetrics { timed: true, ..held(0, "a", 32, 0.5) }, want[1].clone()];
        let e = from_baseline(&path, &timed).unwrap_err().to_string();
        assert!(e.contains("set a was played otherwise: timed false, this run true"), "{e}");
        let e = from_baseline(&path, &[held(0, "c", 32, 0.5)]).unwrap_err().to_string();
        assert!(e.contains("no step-0 figures of set c"), "{e}");
        let e = from_baseline(&dir.path().join("none.jsonl"), &want).unwrap_err().to_string();
        assert!(e.contains("none.jsonl"), "{e}");
    }

    /// Tasks whose key ends in `s` reward their samples unequally (signal); the others
    /// reward all samples alike. Counts the episodes in flight at once.
    struct Signal {
        keys: Vec<String>,
        live: std::sync::atomic::AtomicUsize,
        most: std::sync::atomic::AtomicUsize,
    }

    impl Environment for Signal {
        fn keys(&self) -> Vec<String> {
            self.keys.clone()
        }

        fn play<'a>(&'a self, _: &'a dyn Backend, play: Play) -> BoxFuture<'a, Episode> {
            use std::sync::atomic::Ordering::SeqCst;
            Box::pin(async move {
                let now = self.live.fetch_add(1, SeqCst) + 1;
                self.most.fetch_max(now, SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                self.live.fetch_sub(1, SeqCst);
                let signal = self.keys[play.task].ends_with('s');
                let reward = if signal && play.sample == 0 { 1.0 } else { 0.0 };
                Episode {
                    id: play.id,
                    turns: vec![tritonforge_agent::Turn { reward, ..Default::default() }],
                    ..Episode::default()
                }
            })
        }
    }

    struct NoModel;

    impl Backend for NoModel {
        fn describe(&self) -> String {
            "none".into()
        }

        fn complete<'a>(
            &'a self,
            _: &'a [tritonforge_agent::ChatMessage],
            _: &'a Sampling,
        ) -> BoxFuture<'a, Result<tritonforge_agent::Completion, tritonforge_agent::BackendError>>
        {
            Box::pin(async {
                Err(tritonforge_agent::BackendError::Unreachable {
                    url: "none".into(),
                    reason: "no model".into(),
                })
            })
        }
    }

    impl Generator for NoModel {
        fn backend(&self) -> &dyn Backend {
            self
        }

        fn refresh<'a>(&'a self, _: &'a Path, _: &'a str) -> BoxFuture<'a, Result<(), String>> {
            Box::pin(async { Ok(()) })
        }

        fn needs_weights_on_disk(&self) -> bool {
            false
        }
    }

    fn producer(extra: &str, keys: &[&str]) -> (Producer, Arc<Signal>) {
        let cfg: RlConfig = toml::from_str(&format!(
            "[model]\npath = \"m\"\n[data]\ntrain = [{{ suite = \"t\" }}]\n\
             [rollout]\nproblems = 2\nsamples = 4\nturns = 1\nparallel = 64\n{extra}\n\
             [output]\ndir = \"o\"\n"
        ))
        .unwrap();
        let env = Arc::new(Signal {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            live: 0.into(),
            most: 0.into(),
        });
        let pool = Pool {
            entries: keys
                .iter()
                .map(|k| crate::pool::Entry { key: k.to_string(), source: 0 })
                .collect(),
            source_weights: vec![1.0],
            curriculum: Default::default(),
            state: Default::default(),
        };
        let p = Producer {
            cfg,
            env: env.clone(),
            generator: Arc::new(NoModel),
            timeline: Arc::new(Timeline::new()),
            pool,
            run: "r".into(),
            reward_gamma: 0.4,
        };
        (p, env)
    }

    /// Oversampled problems are played in the first round, together with the batch's, so
    /// the groups with no signal are replaced without a second round; every group with
    /// signal is kept. Without it, the same pool needs fill rounds.
    #[tokio::test]
    async fn oversampling_replaces_groups_without_signal_in_one_round() {
        let keys = ["a", "b", "c", "d", "e", "f", "g", "1s", "2s", "3s"];
        let (mut plain, env) = producer("fill_rounds = 6", &keys);
        let r = plain.rollout(0, 0).await;
        let kept = r.groups.iter().filter(|g| g.advantages.is_some()).count();
        assert!(
            r.fill_rounds >= 1,
            "two of ten have signal: a first round of two rarely finds both"
        );
        assert_eq!(kept, 2, "filled to the batch: {}", r.drawn);
        assert_eq!(env.most.load(std::sync::atomic::Ordering::SeqCst), 8, "a round is 2 × 4");

        let (mut over, env) = producer("fill_rounds = 6\noversample = 8", &keys);
        let r = over.rollout(0, 0).await;
        assert_eq!(r.fill_rounds, 0, "every problem was drawn in the first round");
        assert_eq!(r.drawn, 10);
        let kept: Vec<bool> = r.groups.iter().map(|g| g.advantages.is_some()).collect();
        assert_eq!(kept.iter().filter(|k| **k).count(), 3, "all three with signal kept");
        assert_eq!(env.most.load(std::sync::atomic::Ordering::SeqCst), 40, "played at once");
        // The same draw as without oversampling, then more.
        let (mut again, _) = producer("fill_rounds = 6\noversample = 8", &keys);
        assert_eq!(
            again
                .rollout(0, 0)
                .await
                .groups
                .iter()
                .map(|g| g.episodes[0].id.clone())
                .collect::<Vec<_>>(),
            r.groups.iter().map(|g| g.episodes[0].id.clone()).collect::<Vec<_>>(),
            "seeded"
        );
    }
}

//! Where episodes come from. The real environment plays a suite problem through the
//! agent's episode runner (prompt, completion, code, evaluation, feedback, up to T turns),
//! so RL trains on exactly what `tritonforge run` plays; tests put a toy environment in
//! its place. Every generation and evaluation is timed on a shared timeline, from which
//! a step's time split and the policy's idle share are computed.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tritonforge_agent::episode::{run_episode, EpisodeConfig};
use tritonforge_agent::{
    Backend, BackendError, ChatMessage, Completion, Episode, Prompts, Sampling,
};
use tritonforge_eval::EvalService;
use tritonforge_protocol::EvalConfig;
use tritonforge_suite::Problem;

pub use tritonforge_eval::BoxFuture;

/// What an episode is asked to play.
#[derive(Debug, Clone)]
pub struct Play {
    /// The task's index in the environment.
    pub task: usize,
    pub sample: u32,
    /// The episode's id (run/problem/sample, with the step).
    pub id: String,
    pub run: String,
    pub sampling: Sampling,
}

/// A set of tasks episodes can be played on.
pub trait Environment: Send + Sync {
    /// Tasks by key (`source/name`), in a fixed order.
    fn keys(&self) -> Vec<String>;
    /// Play one episode through `backend`. Failures of the backend or the evaluator end
    /// the episode with `error` set; they are recorded, never a crash of the run.
    fn play<'a>(&'a self, backend: &'a dyn Backend, play: Play) -> BoxFuture<'a, Episode>;
}

/// Intervals of activity, by kind, since the timeline was made.
#[derive(Debug, Default)]
pub struct Timeline {
    spans: Mutex<Vec<(Activity, f64, f64)>>,
    origin: Option<Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// A completion in flight at the policy.
    Generate,
    /// A candidate in the evaluator.
    Evaluate,
    /// The trainer scoring or stepping.
    Train,
}

impl Timeline {
    pub fn new() -> Timeline {
        Timeline { spans: Mutex::new(Vec::new()), origin: Some(Instant::now()) }
    }

    pub fn now(&self) -> f64 {
        self.origin.map_or(0.0, |o| o.elapsed().as_secs_f64())
    }

    pub fn record(&self, what: Activity, start: f64, end: f64) {
        if let Ok(mut s) = self.spans.lock() {
            s.push((what, start, end));
        }
    }

    /// Seconds within `[from, to]` covered by at least one span of the kinds `of`.
    pub fn covered(&self, of: &[Activity], from: f64, to: f64) -> f64 {
        let Ok(spans) = self.spans.lock() else { return 0.0 };
        let mut v: Vec<(f64, f64)> = spans
            .iter()
            .filter(|(a, _, _)| of.contains(a))
            .map(|&(_, s, e)| (s.max(from), e.min(to)))
            .filter(|(s, e)| e > s)
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (mut total, mut end) = (0.0, f64::NEG_INFINITY);
        for (s, e) in v {
            if s > end {
                total += e - s;
                end = e;
            } else if e > end {
                total += e - end;
                end = e;
            }
        }
        total
    }

    /// Forget spans that ended before `t` (the timeline of a long run stays small).
    pub fn forget_before(&self, t: f64) {
        if let Ok(mut s) = self.spans.lock() {
            s.retain(|&(_, _, e)| e >= t);
        }
    }
}

/// A backend whose requests are recorded on a timeline.
pub struct TimedBackend<'a> {
    pub inner: &'a dyn Backend,
    pub timeline: &'a Timeline,
}

impl Backend for TimedBackend<'_> {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn complete<'b>(
        &'b self,
        messages: &'b [ChatMessage],
        sampling: &'b Sampling,
    ) -> BoxFuture<'b, Result<Completion, BackendError>> {
        Box::pin(async move {
            let start = self.timeline.now();
            let out = self.inner.complete(messages, sampling).await;
            self.timeline.record(Activity::Generate, start, self.timeline.now());
            out
        })
    }
}

/// An evaluator whose evaluations are recorded on a timeline.
pub struct TimedEval {
    pub inner: Arc<dyn EvalService>,
    pub timeline: Arc<Timeline>,
}

impl EvalService for TimedEval {
    fn device(&self) -> tritonforge_protocol::DeviceKind {
        self.inner.device()
    }

    fn environment(&self) -> &tritonforge_protocol::EnvInfo {
        self.inner.environment()
    }

    fn evaluate<'a>(
        &'a self,
        problem: &'a Problem,
        candidate: &'a tritonforge_suite::Candidate,
        config: &'a EvalConfig,
    ) -> BoxFuture<'a, Result<tritonforge_eval::Evaluation, tritonforge_eval::EvalError>> {
        Box::pin(async move {
            let start = self.timeline.now();
            let out = self.inner.evaluate(problem, candidate, config).await;
            self.timeline.record(Activity::Evaluate, start, self.timeline.now());
            out
        })
    }

    fn prepare<'a>(
        &'a self,
        problem: &'a Problem,
        config: &'a EvalConfig,
    ) -> BoxFuture<'a, Result<(), tritonforge_eval::EvalError>> {
        self.inner.prepare(problem, config)
    }

    fn check_problem<'a>(
        &'a self,
        problem: &'a Problem,
        overrides: std::collections::BTreeMap<String, serde_json::Value>,
        budget: std::time::Duration,
    ) -> BoxFuture<'a, Result<tritonforge_protocol::ProblemReport, tritonforge_eval::EvalError>>
    {
        self.inner.check_problem(problem, overrides, budget)
    }

    fn abort_all(&self) {
        self.inner.abort_all()
    }
}

/// One problem of a suite, ready to evaluate.
#[derive(Debug, Clone)]
pub struct Task {
    pub key: String,
    pub problem: Problem,
    pub config: EvalConfig,
}

/// Suite problems, played through the agent's runner and the evaluator.
pub struct SuiteEnv {
    pub tasks: Vec<Task>,
    pub evaluator: Arc<dyn EvalService>,
    pub prompts: Arc<Prompts>,
    /// Turns, target speedup, reward, the prompt's target (the sampling is per play).
    pub episode: EpisodeConfig,
}

impl Environment for SuiteEnv {
    fn keys(&self) -> Vec<String> {
        self.tasks.iter().map(|t| t.key.clone()).collect()
    }

    fn play<'a>(&'a self, backend: &'a dyn Backend, play: Play) -> BoxFuture<'a, Episode> {
        Box::pin(async move {
            let task = &self.tasks[play.task];
            let cfg = EpisodeConfig { sampling: play.sampling.clone(), ..self.episode.clone() };
            let played = run_episode(
                backend,
                &*self.evaluator,
                &self.prompts,
                &task.problem,
                &task.config,
                &cfg,
                &play.run,
                play.sample,
            )
            .await;
            let mut ep = played.unwrap_or_else(|e| Episode {
                problem: task.problem.name.clone(),
                problem_path: task.problem.path.display().to_string(),
                sample: play.sample,
                run: play.run.clone(),
                backend: backend.describe(),
                error: Some(e.to_string()),
                ..Episode::default()
            });
            ep.id = play.id;
            ep
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covered_time_is_the_union_of_spans() {
        let t = Timeline::new();
        t.record(Activity::Generate, 0.0, 2.0);
        t.record(Activity::Generate, 1.0, 3.0);
        t.record(Activity::Train, 5.0, 6.0);
        t.record(Activity::Evaluate, 2.5, 5.5);
        assert!((t.covered(&[Activity::Generate], 0.0, 10.0) - 3.0).abs() < 1e-12);
        assert!((t.covered(&[Activity::Generate, Activity::Train], 0.0, 10.0) - 4.0).abs() < 1e-12);
        assert!((t.covered(&[Activity::Generate], 1.5, 2.5) - 1.0).abs() < 1e-12);
        assert!((t.covered(&[Activity::Evaluate, Activity::Train], 0.0, 10.0) - 3.5).abs() < 1e-12);
        t.forget_before(4.0);
        assert_eq!(t.covered(&[Activity::Generate], 0.0, 10.0), 0.0);
    }
}

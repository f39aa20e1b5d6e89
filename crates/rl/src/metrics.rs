//! What a step reports, and where it is kept.

use serde::{Deserialize, Serialize};
use tritonforge_agent::{Episode, TurnOutcome, TurnTimes};
use tritonforge_protocol::{DeviceUse, EngineUse};

/// One RL step, as `metrics.jsonl` and the store keep it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    pub step: u64,
    /// Steps completed when this batch's generation started, and its age when trained.
    pub generated_at: u64,
    pub staleness: u64,
    /// Per turn reward over every played turn of every kept-or-skipped group.
    pub reward_mean: f64,
    pub reward_std: f64,
    /// Mean return of the first turn (the episode's discounted total).
    pub return_mean: f64,
    /// Share of episodes solved by turn t (cumulative), t = 0..T.
    pub pass_by_turn: Vec<f64>,
    /// Share of turns whose candidate compiled (any verdict past compilation).
    pub compile_rate: f64,
    /// Which reward terms could pay: `compile+correct+speed`, or without timing (CPU mode)
    /// `compile+correct (no timing)`.
    pub reward_terms: String,
    pub groups_drawn: usize,
    pub groups_kept: usize,
    /// Groups whose rewards were all equal (no signal).
    pub groups_skipped: usize,
    pub fill_rounds: u32,
    pub episodes: usize,
    /// Episodes cut short by a backend or evaluator failure (recorded, not trained on
    /// when they have no turn).
    pub episodes_failed: usize,
    /// The first few distinct reasons episodes failed (what to fix).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    pub mean_abs_advantage: f64,
    pub sequences: usize,
    pub merged_turns: usize,
    pub too_long_turns: usize,
    /// Turns cut at their token cap and trained on as context only (`loss.mask_truncated`).
    #[serde(default)]
    pub masked_turns: usize,
    pub generated_tokens: u64,
    pub trained_tokens: u64,
    pub target_tokens: u64,
    pub updates: usize,
    pub loss: f64,
    pub policy_loss: f64,
    pub kl: Option<f64>,
    pub entropy: f64,
    pub clip_fraction: f64,
    pub ratio_mean: f64,
    pub ratio_max: f64,
    pub tis_capped: f64,
    pub grad_norm: f64,
    pub lr: f64,
    /// Wall time of the batch's rollout (generation and evaluation, overlapped).
    pub rollout_s: f64,
    /// Time with a completion in flight / a candidate in the evaluator, within the rollout.
    pub generate_s: f64,
    pub evaluate_s: f64,
    /// The learner's time: proximal and reference scoring, and the updates.
    pub score_s: f64,
    pub train_s: f64,
    /// From the earlier of the previous step's end and this step's rollout start, to the
    /// end of this update: one batch's whole latency. With `max_staleness` 1 the rollout
    /// overlaps the previous step, so these add up to more than the run's wall time.
    pub step_s: f64,
    /// From the end of the previous step to the end of this one (for an invocation's
    /// first step, from its start): the run's pace, what a step costs in wall time.
    #[serde(default)]
    pub interval_s: f64,
    /// Generated tokens per second of rollout wall time.
    pub tokens_per_s: f64,
    /// External engines: seconds to write this step's weights and load them into the
    /// engines, after the update and before the next batch may start (`None`: colocated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engines_refresh_s: Option<f64>,
    /// The weight versions the batch's completions report having been generated with,
    /// where the engine says (SGLang): with `max_staleness` 1 a batch started on one
    /// version can finish on the next (requests in flight across a refresh).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub weight_versions: std::collections::BTreeMap<String, usize>,
    /// Share of `step_s` during which the policy (generator or trainer) had nothing in
    /// flight, as the host sees it.
    pub policy_idle: f64,
    /// Shares of `score_s + train_s` during which a completion was in flight (the
    /// learner's request waited behind generation in a colocated worker) and during
    /// which a candidate was in the evaluator (on the same GPU when evaluated locally).
    #[serde(default)]
    pub learner_with_generation: f64,
    #[serde(default)]
    pub learner_with_evaluation: f64,
    /// The policy worker's own account since the previous update (`None` when it gives
    /// none, e.g. external engines): seconds in generation, in training, refreshing the
    /// generation copy, and the share of its wall time it waited for work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerShare>,
    /// The same rollouts by source, in `data.train` order (sources drawn this step).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_source: Vec<SourceStep>,
    /// The slowest episode's chain of turns (what the rollout waited for last) and the
    /// mean chain, split into generation and evaluation and the evaluation's waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowest: Option<ChainTimes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_chain: Option<ChainTimes>,
}

/// One episode's turns end to end: generation (each completion's latency), then the
/// evaluation of its candidate, turn after turn. A multi-turn rollout ends with its
/// slowest chain, so this says which of the two, and which wait within the evaluator,
/// a shorter step must cut.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChainTimes {
    /// The episode's id (empty for a mean).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub episode: String,
    pub turns: f64,
    pub generate_s: f64,
    /// The part of `generate_s` its requests waited before the model server took them
    /// (colocated: behind the learner), where the server says (`Completion::engine_ms`).
    #[serde(default)]
    pub generate_wait_s: f64,
    /// The turns' evaluation times added up (`evaluate_s` and the waits within it),
    /// written inline as the turns' own `times` are.
    #[serde(flatten)]
    pub eval: TurnTimes,
    /// Each turn's outcome, in order (empty for a mean).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outcomes: Vec<String>,
}

impl ChainTimes {
    pub fn of(ep: &Episode) -> ChainTimes {
        let mut c = ChainTimes {
            episode: ep.id.clone(),
            turns: ep.turns.len() as f64,
            outcomes: ep.turns.iter().map(|t| t.outcome.to_string()).collect(),
            ..Default::default()
        };
        for t in &ep.turns {
            c.generate_s += t.completion.latency_ms / 1000.0;
            if let Some(engine) = t.completion.engine_ms {
                c.generate_wait_s += (t.completion.latency_ms - engine).max(0.0) / 1000.0;
            }
            c.eval.add(&t.times);
        }
        c
    }

    pub fn total_s(&self) -> f64 {
        self.generate_s + self.eval.evaluate_s
    }

    /// The slowest chain and the mean chain of `episodes` (`None` when there are none).
    pub fn of_step<'a>(
        episodes: impl IntoIterator<Item = &'a Episode>,
    ) -> Option<(ChainTimes, ChainTimes)> {
        let chains: Vec<ChainTimes> = episodes.into_iter().map(ChainTimes::of).collect();
        let slowest = chains.iter().max_by(|a, b| a.total_s().total_cmp(&b.total_s()))?.clone();
        let n = chains.len() as f64;
        let mut sum = ChainTimes::default();
        for c in &chains {
            sum.turns += c.turns;
            sum.generate_s += c.generate_s;
            sum.generate_wait_s += c.generate_wait_s;
            sum.eval.add(&c.eval);
        }
        let mean_chain = ChainTimes {
            turns: sum.turns / n,
            generate_s: sum.generate_s / n,
            generate_wait_s: sum.generate_wait_s / n,
            eval: sum.eval.scaled(1.0 / n),
            ..ChainTimes::default()
        };
        Some((slowest, mean_chain))
    }
}

/// One source's share of a step's rollouts (`data.train` sources by name): a mixed pool's
/// average hides a source the policy is getting worse at, or one whose answers the
/// completion cap cuts short.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceStep {
    pub source: String,
    pub groups: usize,
    pub episodes: usize,
    /// Mean reward of its turns.
    pub reward_mean: f64,
    /// Episodes correct at the first turn, and by the last.
    pub solved_first: f64,
    pub solved: f64,
    /// Turns with no candidate to evaluate (no code, no `ModelNew`, ...).
    pub no_code: f64,
    /// Completions that stopped at the cap (`finish_reason` "length").
    pub truncated: f64,
}

impl SourceStep {
    /// The statistics of `episodes`, played in `groups` groups of source `source`.
    pub fn of(source: String, groups: usize, episodes: &[&Episode]) -> SourceStep {
        let turns: Vec<&tritonforge_agent::Turn> = episodes.iter().flat_map(|e| &e.turns).collect();
        let nt = turns.len().max(1) as f64;
        let ne = episodes.len().max(1) as f64;
        let share = |f: &dyn Fn(&tritonforge_agent::Turn) -> bool| {
            turns.iter().filter(|t| f(t)).count() as f64 / nt
        };
        SourceStep {
            source,
            groups,
            episodes: episodes.len(),
            reward_mean: turns.iter().map(|t| t.reward).sum::<f64>() / nt,
            solved_first: episodes
                .iter()
                .filter(|e| e.turns.first().is_some_and(|t| t.outcome.is_correct()))
                .count() as f64
                / ne,
            solved: episodes.iter().filter(|e| e.solved()).count() as f64 / ne,
            no_code: share(&|t| matches!(t.outcome, TurnOutcome::NotExtracted(_))),
            truncated: share(&|t| t.completion.finish_reason.as_deref() == Some("length")),
        }
    }
}

/// The worker's time over one step (differences of [`DeviceUse`] totals).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerShare {
    pub wall_s: f64,
    pub generate_s: f64,
    pub train_s: f64,
    pub refresh_s: f64,
    /// 1 - (generate + train + refresh) / wall: an upper bound on the device's idle share.
    pub idle: f64,
    /// The GPU's idle share from NVML utilisation (`None` on a CPU or without NVML).
    pub gpu_idle: Option<f64>,
    /// Graphs `torch.compile` built during the step (`None`: the worker did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graphs_compiled: Option<u64>,
    /// The CUDA allocator's retries during the step (cache freed, device synchronised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_retries: Option<u64>,
    /// The engine during the step (`None`: the worker did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineShare>,
}

/// The engine over one step: whether generation was slow because its decode steps were
/// slow, because each carried few rows, or because it computed rows with no request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineShare {
    pub decode_steps: u64,
    /// Rows with a request per decode step, on average.
    pub rows_per_step: f64,
    /// The share of the rows computed that had no request: the batch bucket covers every
    /// slot up to the highest busy one.
    pub idle_rows: f64,
    /// The worker's generation time per decode step, prefills included (ms).
    pub ms_per_step: f64,
    /// Prompt tokens run through the model, and those taken from cached prefixes.
    pub prefill_tokens: u64,
    pub reused_tokens: u64,
    /// Running rows moved down into free slots (`Engine._compact`): what keeping the
    /// rows computed near the running ones cost in copies.
    #[serde(default)]
    pub moved_rows: u64,
    /// The device's time per decode step, the decode alone (ms): against `ms_per_step`,
    /// what the rest of generation (prefill, host, learner slices) costs a step.
    #[serde(default)]
    pub decode_ms_per_step: f64,
    /// The device's time in prefill forwards over the step (s).
    #[serde(default)]
    pub prefill_s: f64,
    /// Prefill forwards over the step: an eager forward costs about the same for one row
    /// as for several, so `prefill_s` follows this more than `prefill_tokens`.
    #[serde(default)]
    pub prefill_forwards: u64,
    /// Tokens the prefill forwards computed, padding included.
    #[serde(default)]
    pub prefill_padded: u64,
    /// Prefill shapes captured as CUDA graphs during the step: 0 over a whole run with
    /// prefill graphs on means every forward ran eagerly.
    #[serde(default)]
    pub prefill_graphs: u64,
}

impl EngineShare {
    fn between(prev: Option<&EngineUse>, now: &EngineUse, generate_s: f64) -> EngineShare {
        let zero = EngineUse::default();
        let p = prev.unwrap_or(&zero);
        let d = |n: u64, p: u64| n.saturating_sub(p);
        let steps = d(now.decode_steps, p.decode_steps);
        let rows = d(now.decode_rows, p.decode_rows);
        let width = d(now.decode_width, p.decode_width);
        let per = |x: f64| if steps > 0 { x / steps as f64 } else { 0.0 };
        EngineShare {
            decode_steps: steps,
            rows_per_step: per(rows as f64),
            idle_rows: if width > 0 { 1.0 - rows as f64 / width as f64 } else { 0.0 },
            ms_per_step: per(1000.0 * generate_s),
            prefill_tokens: d(now.prefill_tokens, p.prefill_tokens),
            reused_tokens: d(now.reused_tokens, p.reused_tokens),
            moved_rows: d(now.moved_rows, p.moved_rows),
            decode_ms_per_step: per((now.decode_ms - p.decode_ms).max(0.0)),
            prefill_s: (now.prefill_ms - p.prefill_ms).max(0.0) / 1000.0,
            prefill_forwards: d(now.prefill_forwards, p.prefill_forwards),
            prefill_padded: d(now.prefill_padded, p.prefill_padded),
            prefill_graphs: d(now.prefill_graphs, p.prefill_graphs),
        }
    }
}

impl WorkerShare {
    /// The step between two totals (`prev`: the previous update's, or `None` from the
    /// worker's start).
    pub fn between(prev: Option<&DeviceUse>, now: &DeviceUse) -> WorkerShare {
        let zero = DeviceUse {
            wall_s: 0.0,
            generate_s: 0.0,
            train_s: 0.0,
            refresh_s: 0.0,
            gpu_busy_s: now.gpu_busy_s.map(|_| 0.0),
            gpu_sampled_s: now.gpu_sampled_s.map(|_| 0.0),
            graphs_compiled: now.graphs_compiled.map(|_| 0),
            alloc_retries: now.alloc_retries.map(|_| 0),
            engine: None,
        };
        let p = prev.unwrap_or(&zero);
        let wall_s = (now.wall_s - p.wall_s).max(0.0);
        let generate_s = (now.generate_s - p.generate_s).max(0.0);
        let train_s = (now.train_s - p.train_s).max(0.0);
        let refresh_s = (now.refresh_s - p.refresh_s).max(0.0);
        let busy = generate_s + train_s + refresh_s;
        let idle = if wall_s > 0.0 { (1.0 - busy / wall_s).clamp(0.0, 1.0) } else { 0.0 };
        let gpu_idle = match (now.gpu_busy_s, now.gpu_sampled_s, p.gpu_busy_s, p.gpu_sampled_s) {
            (Some(b), Some(s), Some(pb), Some(ps)) if s - ps > 0.0 => {
                Some((1.0 - (b - pb) / (s - ps)).clamp(0.0, 1.0))
            }
            _ => None,
        };
        let since = |n: Option<u64>, p: Option<u64>| n.map(|n| n.saturating_sub(p.unwrap_or(0)));
        WorkerShare {
            wall_s,
            generate_s,
            train_s,
            refresh_s,
            idle,
            gpu_idle,
            graphs_compiled: since(now.graphs_compiled, p.graphs_compiled),
            alloc_retries: since(now.alloc_retries, p.alloc_retries),
            engine: now
                .engine
                .as_ref()
                .map(|e| EngineShare::between(p.engine.as_ref(), e, generate_s)),
        }
    }
}

/// A heldout measurement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldoutMetrics {
    /// Steps completed when it was measured.
    pub step: u64,
    pub set: String,
    pub problems: usize,
    pub samples: u32,
    /// The completion cap its turns had (`schedule.heldout_max_tokens`): figures taken at
    /// different caps are not comparable (0 in files written before it was recorded).
    #[serde(default)]
    pub max_tokens: u32,
    /// Sampling temperature of its turns (0: greedy; files written before it was recorded
    /// were greedy).
    #[serde(default)]
    pub temperature: f64,
    /// Turns its episodes could play (0 in files written before it was recorded).
    #[serde(default)]
    pub turns: u32,
    /// The sampling seed, whether its correct candidates were timed, the starting
    /// policy (`run`'s label: the bundled model's names its adapter's hash) and a digest
    /// of the set's problem keys: with the fields above, what makes two passes the same
    /// measurement (empty in files written before they were recorded).
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub timed: bool,
    #[serde(default)]
    pub policy: String,
    #[serde(default)]
    pub tasks: String,
    /// Correct at the first turn.
    pub pass_at_1: f64,
    /// Correct by the last turn.
    pub solved: f64,
    pub compile_rate: f64,
    pub wall_s: f64,
    /// Per problem (by name), how many of its samples were correct at the first turn:
    /// which problems a change of pass@1 came from (empty in files written before it was
    /// recorded, such as run 11's step-0 baseline).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub by_problem: std::collections::BTreeMap<String, u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// The earlier run's `heldout.jsonl` these figures were taken from
    /// (`schedule.heldout_baseline`) instead of being played.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<String>,
    /// Episodes an earlier invocation played before its clock cut this pass short (kept in
    /// the store, not played again); `wall_s` is then this invocation's part alone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reused_episodes: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl HeldoutMetrics {
    /// The first way `self` was not played as `want` says (`None`: the same measurement).
    pub fn differs_from(&self, want: &HeldoutMetrics) -> Option<String> {
        let fields = [
            ("step", self.step.to_string(), want.step.to_string()),
            ("set", self.set.clone(), want.set.clone()),
            ("policy", self.policy.clone(), want.policy.clone()),
            ("problems", self.problems.to_string(), want.problems.to_string()),
            ("tasks", self.tasks.clone(), want.tasks.clone()),
            ("samples", self.samples.to_string(), want.samples.to_string()),
            ("turns", self.turns.to_string(), want.turns.to_string()),
            ("max_tokens", self.max_tokens.to_string(), want.max_tokens.to_string()),
            ("temperature", format!("{:.4}", self.temperature), format!("{:.4}", want.temperature)),
            ("seed", self.seed.to_string(), want.seed.to_string()),
            ("timed", self.timed.to_string(), want.timed.to_string()),
        ];
        fields
            .into_iter()
            .find(|(_, have, wanted)| have != wanted)
            .map(|(name, have, wanted)| format!("{name} {have}, this run {wanted}"))
    }
}

/// A digest of a set's problem keys (FNV-1a, hex): the same set, problem for problem.
pub fn tasks_digest(keys: &[String]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in keys.join("\n").bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(wall: f64, generate: f64, train: f64, gpu: Option<(f64, f64)>) -> DeviceUse {
        DeviceUse {
            wall_s: wall,
            generate_s: generate,
            train_s: train,
            refresh_s: 0.5,
            gpu_busy_s: gpu.map(|g| g.0),
            gpu_sampled_s: gpu.map(|g| g.1),
            graphs_compiled: gpu.map(|g| g.0 as u64),
            alloc_retries: None,
            engine: None,
        }
    }

    fn turn(outcome: TurnOutcome, reward: f64, finish: &str) -> tritonforge_agent::Turn {
        let mut t = tritonforge_agent::Turn { outcome, reward, ..Default::default() };
        t.completion.finish_reason = Some(finish.into());
        t
    }

    /// A turn generated for `gen_ms` and evaluated for `eval_s`, of which `waits` were
    /// spent waiting for a process, a lease, alone, for a place and for the problem.
    fn timed(
        outcome: TurnOutcome,
        gen_ms: f64,
        eval_s: f64,
        waits: [f64; 5],
    ) -> tritonforge_agent::Turn {
        let mut t = turn(outcome, 0.0, "stop");
        t.completion.latency_ms = gen_ms;
        let [start, lease, excl, queue, prepare] = waits;
        t.times = tritonforge_agent::TurnTimes {
            evaluate_s: eval_s,
            start_wait_s: start,
            lease_wait_s: lease,
            exclusive_s: excl,
            queue_wait_s: queue,
            prepare_s: prepare,
        };
        t
    }

    /// The slowest chain is the episode with the most generation plus evaluation, not the
    /// most turns; the mean chain averages every episode, untimed turns counting zero.
    #[test]
    fn chains_add_each_turns_generation_and_evaluation() {
        use tritonforge_protocol::Status;
        let long = Episode {
            id: "a".into(),
            turns: vec![
                timed(Status::CompileError.into(), 2000.0, 1.0, [0.5, 0.0, 0.0, 0.25, 0.0]),
                timed(Status::Correct.into(), 1000.0, 9.0, [4.0, 2.0, 0.5, 1.0, 1.5]),
            ],
            ..Default::default()
        };
        let many = Episode {
            id: "b".into(),
            turns: vec![
                timed(Status::Incorrect.into(), 1000.0, 1.0, [0.0, 0.0, 0.0, 0.5, 0.0]),
                timed(Status::Incorrect.into(), 1000.0, 1.0, [0.0, 0.0, 0.0, 0.5, 0.0]),
                timed(TurnOutcome::default(), 500.0, 0.0, [0.0; 5]),
            ],
            ..Default::default()
        };
        // The server took the second turn's request after 600 of its 1,000 ms (the first
        // turn's server said nothing: no wait counted).
        let mut long = long;
        long.turns[1].completion.engine_ms = Some(400.0);
        let (slowest, mean) = ChainTimes::of_step([&long, &many]).unwrap();
        assert_eq!(slowest.episode, "a");
        assert!((slowest.generate_wait_s - 0.6).abs() < 1e-12);
        assert!((mean.generate_wait_s - 0.3).abs() < 1e-12);
        assert_eq!(slowest.turns, 2.0);
        assert_eq!(slowest.outcomes, ["compile_error", "correct"]);
        assert!((slowest.generate_s - 3.0).abs() < 1e-12);
        assert!((slowest.eval.evaluate_s - 10.0).abs() < 1e-12);
        assert!((slowest.eval.start_wait_s - 4.5).abs() < 1e-12);
        assert!((slowest.eval.lease_wait_s - 2.0).abs() < 1e-12);
        assert!((slowest.eval.exclusive_s - 0.5).abs() < 1e-12);
        assert!((slowest.eval.queue_wait_s - 1.25).abs() < 1e-12);
        assert!((slowest.eval.prepare_s - 1.5).abs() < 1e-12);
        assert_eq!(mean.episode, "");
        assert!((mean.turns - 2.5).abs() < 1e-12);
        assert!((mean.generate_s - 2.75).abs() < 1e-12);
        assert!((mean.eval.evaluate_s - 6.0).abs() < 1e-12);
        assert!((mean.eval.queue_wait_s - 1.125).abs() < 1e-12);
        assert!((mean.eval.prepare_s - 0.75).abs() < 1e-12);
        assert!(ChainTimes::of_step(std::iter::empty::<&Episode>()).is_none());
    }

    /// A source's figures by hand: one episode cut at the cap with no code, then right;
    /// one right at once.
    #[test]
    fn a_source_step_counts_its_own_episodes() {
        use tritonforge_agent::NotExtracted;
        use tritonforge_protocol::Status;
        let cut = Episode {
            turns: vec![
                turn(NotExtracted::NoCode.into(), 0.0, "length"),
                turn(Status::Correct.into(), 0.8, "stop"),
            ],
            ..Default::default()
        };
        let right = Episode {
            turns: vec![turn(Status::Correct.into(), 0.9, "stop")],
            ..Default::default()
        };
        let s = SourceStep::of("suite-l2".into(), 1, &[&cut, &right]);
        assert_eq!((s.source.as_str(), s.groups, s.episodes), ("suite-l2", 1, 2));
        assert!((s.reward_mean - 1.7 / 3.0).abs() < 1e-12, "{s:?}");
        assert_eq!((s.solved_first, s.solved), (0.5, 1.0));
        assert!((s.no_code - 1.0 / 3.0).abs() < 1e-12 && (s.truncated - 1.0 / 3.0).abs() < 1e-12);
        // No episodes: zeros, not NaN.
        let none = SourceStep::of("synth".into(), 0, &[]);
        assert_eq!((none.reward_mean, none.solved, none.no_code), (0.0, 0.0, 0.0));
    }

    #[test]
    fn worker_share_is_the_difference_of_totals() {
        let first = totals(40.0, 20.0, 10.0, Some((24.0, 40.0)));
        // From the worker's start: 30.5 of 40 s busy; the GPU busy 24 of 40 s sampled.
        let s = WorkerShare::between(None, &first);
        assert!((s.idle - 9.5 / 40.0).abs() < 1e-12);
        assert!((s.gpu_idle.unwrap_or(-1.0) - 0.4).abs() < 1e-12);
        // The next step: 20 s more wall, 12 generating, 6 training, no refresh; the GPU
        // busy 15 of 19 s sampled.
        let second = totals(60.0, 32.0, 16.0, Some((39.0, 59.0)));
        let s = WorkerShare::between(Some(&first), &second);
        assert_eq!((s.wall_s, s.generate_s, s.train_s, s.refresh_s), (20.0, 12.0, 6.0, 0.0));
        assert!((s.idle - 0.1).abs() < 1e-12);
        assert!((s.gpu_idle.unwrap_or(-1.0) - 4.0 / 19.0).abs() < 1e-12);
        // No NVML: no GPU share, never a guess.
        let cpu = WorkerShare::between(None, &totals(10.0, 5.0, 5.0, None));
        assert_eq!(cpu.gpu_idle, None);
        // Counters are differences too: 39 graphs built by the second total, 24 by the
        // first; a worker that gives none gets none.
        assert_eq!(s.graphs_compiled, Some(15));
        assert_eq!(s.alloc_retries, None);
        assert_eq!(cpu.graphs_compiled, None);
        assert_eq!(s.engine, None);
    }

    #[test]
    fn engine_share_is_per_decode_step_over_the_step() {
        let counts = |steps, rows, width, prefill| EngineUse {
            decode_steps: steps,
            decode_rows: rows,
            decode_width: width,
            prefill_tokens: prefill,
            reused_tokens: 2 * prefill,
            prefill_forwards: steps / 100,
            moved_rows: steps / 10,
            // 2.5 ms of device time per decode step, 0.4 s of prefill per 1,000 tokens.
            decode_ms: 2.5 * steps as f64,
            prefill_ms: 0.4 * prefill as f64,
            prefill_padded: prefill + prefill / 4,
            prefill_graphs: steps / 200,
        };
        let mut first = totals(40.0, 20.0, 10.0, None);
        first.engine = Some(counts(1000, 50_000, 64_000, 9_000));
        let mut second = totals(60.0, 32.0, 16.0, None);
        // 12 s of generation over 400 decode steps of 30 rows each, 64 computed each.
        second.engine = Some(counts(1400, 62_000, 89_600, 10_000));
        let e = WorkerShare::between(Some(&first), &second).engine.unwrap_or_default();
        assert_eq!(
            (e.decode_steps, e.prefill_tokens, e.reused_tokens, e.moved_rows, e.prefill_forwards),
            (400, 1_000, 2_000, 40, 4)
        );
        assert!((e.rows_per_step - 30.0).abs() < 1e-12);
        assert!((e.idle_rows - (1.0 - 30.0 / 64.0)).abs() < 1e-12);
        assert!((e.ms_per_step - 30.0).abs() < 1e-12);
        assert!((e.decode_ms_per_step - 2.5).abs() < 1e-9);
        assert!((e.prefill_s - 0.4).abs() < 1e-9);
        assert_eq!((e.prefill_padded, e.prefill_graphs), (1_250, 2));
        // From the worker's start, and a step with no decode step at all.
        let e = WorkerShare::between(None, &first).engine.unwrap_or_default();
        assert_eq!(e.decode_steps, 1000);
        assert!((e.ms_per_step - 20.0).abs() < 1e-12);
        let e = WorkerShare::between(Some(&first), &first).engine.unwrap_or_default();
        assert_eq!(
            (e.decode_steps, e.rows_per_step, e.idle_rows, e.ms_per_step),
            (0, 0.0, 0.0, 0.0)
        );
    }
}

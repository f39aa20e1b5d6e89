//! What a step reports, and where it is kept.

use serde::{Deserialize, Serialize};

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
    /// From the end of the previous step's update to the end of this one.
    pub step_s: f64,
    /// Generated tokens per second of rollout wall time.
    pub tokens_per_s: f64,
    /// Share of `step_s` during which the policy (generator or trainer) had nothing in
    /// flight: the GPU's idle share when they share it.
    pub policy_idle: f64,
}

/// A heldout measurement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldoutMetrics {
    /// Steps completed when it was measured.
    pub step: u64,
    pub set: String,
    pub problems: usize,
    pub samples: u32,
    /// Correct at the first turn.
    pub pass_at_1: f64,
    /// Correct by the last turn.
    pub solved: f64,
    pub compile_rate: f64,
    pub wall_s: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

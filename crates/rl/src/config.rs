//! `rl.toml`: what `tritonforge train rl` trains, on what, and how. Unknown keys are
//! errors (a misspelt setting must not silently train with its default). Defaults follow
//! TritonForge's recipe where it is sound (8 samples, 3 turns, γ = 0.4, clip 0.2/0.28,
//! lr 1e-6, no KL) and depart where it is not (per-turn returns, no reward filter, the
//! whole compiler and mismatch feedback, evaluation as wide as the pool allows).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tritonforge_agent::{RewardConfig, RewardPreset};
use tritonforge_protocol::{Attention, Compile, Precision};

use crate::advantage::Estimator;
use crate::pool::Curriculum;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlConfig {
    pub model: ModelCfg,
    pub data: DataCfg,
    #[serde(default)]
    pub rollout: RolloutCfg,
    #[serde(default)]
    pub reward: RewardCfg,
    #[serde(default)]
    pub advantage: AdvantageCfg,
    #[serde(default)]
    pub loss: LossCfg,
    #[serde(default)]
    pub optim: OptimCfg,
    #[serde(default)]
    pub schedule: ScheduleCfg,
    #[serde(default)]
    pub generation: GenerationCfg,
    #[serde(default)]
    pub learner: LearnerCfg,
    pub output: OutputCfg,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCfg {
    /// The starting policy: `bundled` (tritonforge-smollm2), `smollm2`, a Hugging Face
    /// model directory, a LoRA adapter directory (merged into its base), or a `.gguf` file.
    pub path: String,
    /// Train a fresh adapter on top of the starting policy (its reference for the KL is
    /// then the starting policy itself, with the adapter switched off); absent: all weights.
    pub lora: Option<LoraCfg>,
    #[serde(default = "auto_dtype")]
    pub dtype: Precision,
    #[serde(default = "auto_attention")]
    pub attention: Attention,
    #[serde(default = "auto_compile")]
    pub compile: Compile,
    #[serde(default)]
    pub gradient_checkpointing: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoraCfg {
    pub rank: u32,
    pub alpha: f64,
    /// 0 by default: dropout would make the ratio of a token to itself differ from 1.
    pub dropout: f64,
    pub target_modules: Vec<String>,
}

impl Default for LoraCfg {
    fn default() -> Self {
        LoraCfg {
            rank: 16,
            alpha: 32.0,
            dropout: 0.0,
            target_modules: [
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

/// A set of problems: a suite directory and which of its problems.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceCfg {
    pub suite: PathBuf,
    /// A split of the manifest (`train`, `heldout`) [default: train].
    #[serde(default = "train_split")]
    pub split: String,
    /// Only this level.
    pub level: Option<u8>,
    /// Share of draws [default: 1].
    #[serde(default = "one_f")]
    pub weight: f64,
    /// The name reports use [default: the suite's directory name, split and level].
    pub name: Option<String>,
    /// Completion cap of this source's rollout turns [default: `rollout.max_tokens`]: a
    /// level-2 answer takes 400 to 1,300 tokens where a level-1 one fits in 512, and a
    /// source whose answers are cut short rewards only the short ones.
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataCfg {
    pub train: Vec<SourceCfg>,
    /// Sets whose pass@1 is measured before training, every `heldout_every` steps and at
    /// the end.
    #[serde(default)]
    pub heldout: Vec<SourceCfg>,
    #[serde(default)]
    pub curriculum: Curriculum,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutCfg {
    /// Problems per step (groups).
    pub problems: usize,
    /// Samples per problem (`G`).
    pub samples: u32,
    /// Turns per episode at most (`T`).
    pub turns: u32,
    pub max_tokens: u32,
    /// 1.0 by default: the sampled distribution is then the model's own. At another
    /// temperature the learner trains softmax(logits / temperature), the distribution
    /// sampled from, against the generator's sampling log-probabilities.
    pub temperature: f32,
    /// Must stay 1.0: the learner cannot score a nucleus-truncated distribution.
    pub top_p: f32,
    /// An episode stops early once correct and at least this fast.
    pub target_speedup: f64,
    /// Dynamic sampling: rounds of further draws to replace groups with no signal.
    pub fill_rounds: u32,
    /// Problems drawn beyond `problems` in the first round and played with it, so that
    /// groups with no signal are usually replaced without a further round: a fill round
    /// is a second chain of turns, and each turn waits for its evaluations, so it about
    /// doubles a rollout's wall time. Every group with signal is trained on, so a step
    /// may train on more than `problems` groups.
    pub oversample: usize,
    /// Episodes played at once.
    pub parallel: usize,
    /// Longest training sequence, in tokens (a longer turn is dropped and counted).
    pub seq_len: usize,
}

impl RolloutCfg {
    /// Which log-probabilities the loss compares against: at temperature 1 the model's
    /// own (every backend gives them), else the sampling distribution's.
    pub fn behaviour(&self) -> crate::layout::Behaviour {
        if self.temperature == 1.0 {
            crate::layout::Behaviour::Model
        } else {
            crate::layout::Behaviour::Sampled
        }
    }
}

impl Default for RolloutCfg {
    fn default() -> Self {
        RolloutCfg {
            problems: 8,
            samples: 8,
            turns: 3,
            max_tokens: 1024,
            temperature: 1.0,
            top_p: 1.0,
            target_speedup: 1.0,
            fill_rounds: 2,
            oversample: 0,
            parallel: 64,
            seq_len: 8192,
        }
    }
}

/// A preset, then any of [`RewardConfig`]'s fields to override it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct RewardCfg {
    pub preset: RewardPreset,
    #[serde(flatten)]
    pub overrides: toml::Table,
}

impl RewardCfg {
    /// The preset with the overrides applied; an unknown or mistyped field is named.
    pub fn resolve(&self) -> Result<RewardConfig, String> {
        let base = toml::Table::try_from(self.preset.config()).map_err(|e| e.to_string())?;
        let mut merged = base;
        for (k, v) in &self.overrides {
            if !merged.contains_key(k) {
                let known: Vec<&str> = merged.keys().map(String::as_str).collect();
                return Err(format!(
                    "reward.{k}: unknown setting (known: preset, {})",
                    known.join(", ")
                ));
            }
            merged.insert(k.clone(), v.clone());
        }
        toml::Value::Table(merged).try_into().map_err(|e: toml::de::Error| format!("reward: {e}"))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AdvantageCfg {
    pub estimator: Estimator,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LossCfg {
    pub clip_low: f64,
    pub clip_high: f64,
    /// KL penalty to the starting policy (k3); 0: none.
    pub kl_coef: f64,
    /// Measure the KL to the starting policy (the step's `kl`) even without a penalty:
    /// one more scoring pass a step. The per-step clip fraction cannot show drift
    /// across steps (run 17, docs/rl.md); this does. Implied by `kl_coef > 0`.
    pub measure_kl: bool,
    /// Turns whose completion stopped at its token cap get no loss (they stay in their
    /// sequence as context): a third of the training turns were cut in runs 11–17, and a
    /// cut answer's zero reward teaches brevity rather than kernels (run 17, docs/rl.md;
    /// "overlong filtering" in the RL literature). Their rewards still count in the
    /// group's baseline.
    pub mask_truncated: bool,
    pub entropy_coef: f64,
    /// Truncated importance weight cap for stale or numerically different generators
    /// (0: none).
    pub tis_cap: f64,
    /// Recompute the log-probabilities of the trainer's weights before the first update
    /// of each batch, and take the ratio against them (decoupled PPO). Off: against the
    /// generator's log-probabilities directly.
    pub proximal: bool,
}

impl LossCfg {
    /// Whether each step scores the starting policy: for a KL penalty or to measure it.
    pub fn scores_reference(&self) -> bool {
        self.kl_coef > 0.0 || self.measure_kl
    }
}

impl Default for LossCfg {
    fn default() -> Self {
        LossCfg {
            clip_low: 0.2,
            clip_high: 0.28,
            kl_coef: 0.0,
            measure_kl: false,
            mask_truncated: false,
            entropy_coef: 0.0,
            tis_cap: 2.0,
            proximal: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimCfg {
    pub lr: f64,
    /// Decayed to by cosine over the run [default: lr, constant].
    pub min_lr: Option<f64>,
    pub warmup_steps: u64,
    pub weight_decay: f64,
    /// 0: no clipping.
    pub grad_clip: f64,
    /// Optimizer steps per rollout batch.
    pub updates: usize,
    /// Padded tokens per micro-batch.
    pub micro_tokens: usize,
    pub seed: u64,
}

impl Default for OptimCfg {
    fn default() -> Self {
        OptimCfg {
            lr: 1e-6,
            min_lr: None,
            warmup_steps: 0,
            weight_decay: 0.0,
            grad_clip: 1.0,
            updates: 1,
            micro_tokens: 16384,
            seed: 0,
        }
    }
}

/// How one heldout set is played.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeldoutPlan {
    pub samples: u32,
    pub turns: u32,
    pub max_tokens: u32,
    pub temperature: f32,
    pub top_p: f32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScheduleCfg {
    /// RL steps (rollout batches) in all.
    pub steps: u64,
    /// How many updates old a batch may be when trained (0: fully synchronous).
    pub max_staleness: u64,
    /// Write a checkpoint every this many steps (and at the end).
    pub save_every: u64,
    /// Measure the heldout sets every this many steps (0: before and after only).
    pub heldout_every: u64,
    /// Samples per heldout problem (pass@1 is their mean).
    pub heldout_samples: u32,
    /// Sampling temperature of heldout turns [default: greedy with one sample, else
    /// `rollout.temperature`]. `run` samples at 0.7 (top-p 0.95): set these to compare
    /// with its figures. Twenty problems played greedily move in steps of 5 points, so
    /// several samples measure a change of a few points more surely.
    pub heldout_temperature: Option<f32>,
    /// Top-p of heldout turns [default: `rollout.top_p`].
    pub heldout_top_p: Option<f32>,
    /// Time heldout candidates on a GPU [default: false]. Heldout reports correctness
    /// (pass@1, solved, compiled), never a speedup, and timing its correct candidates one
    /// at a time took most of a heldout pass in run 5 (docs/rl.md). Untimed, a correct
    /// answer ends its episode as in CPU mode.
    pub heldout_timing: bool,
    /// Completion cap of heldout turns (0: `rollout.max_tokens`). Rollouts may be kept
    /// short for speed while heldout is measured at `run`'s cap: a level-2 answer needs
    /// 400 to 1,300 tokens, so a 512-token cap scores level 2 at 0% whatever the model.
    pub heldout_max_tokens: u32,
    /// Turns of a heldout episode (0: `rollout.turns`). pass@1 is decided by the first
    /// turn alone; at 1, a pass plays no later turns, which most episodes reach (75% in
    /// run 6) and which cost more generation and evaluation than the first. `solved`
    /// then equals pass@1.
    pub heldout_turns: u32,
    /// Stop after this many steps in this invocation (0: no limit): a run longer than
    /// one sitting checkpoints and resumes.
    pub max_steps_now: u64,
    /// Start no step in this invocation once this many seconds have passed, or when the
    /// step would likely end past them (0: no limit). A heldout pass after a step plays
    /// until then, its episodes stored as they end, and the next invocation plays the
    /// rest (without a store: a pass that would end past them, by the latest pass's
    /// length, is not started). The run checkpoints where it stops and the next
    /// invocation resumes there: a device command with a hard time limit ends cleanly
    /// instead of losing the step in flight.
    pub max_seconds_now: u64,
    /// A `heldout.jsonl` of an earlier run from the same starting policy: its step-0
    /// figures stand for this run's instead of being played again (a first pass took 455
    /// of a 600 s device command in run 6, docs/rl.md). Taken only when every set was
    /// played exactly as this run would play it (policy, seed, timing, samples, turns, cap,
    /// temperature, problems); otherwise the run stops and says what differs.
    pub heldout_baseline: Option<PathBuf>,
    /// Resume from a checkpoint written under another recipe (model, training data,
    /// rollout, reward, advantage, loss, optimizer, staleness). Off: such a resume is an
    /// error naming what changed, since a slice that silently trains otherwise makes the
    /// run's figures describe neither recipe (run 17, docs/rl.md). On: the run goes on
    /// and its `ready` event lists the changes.
    pub allow_recipe_change: bool,
}

impl ScheduleCfg {
    /// Temperature and top-p of heldout turns.
    pub fn heldout_sampling(&self, rollout: &RolloutCfg) -> (f32, f32) {
        let samples = self.heldout_samples.max(1);
        let temperature =
            self.heldout_temperature.unwrap_or(if samples > 1 { rollout.temperature } else { 0.0 });
        (temperature, self.heldout_top_p.unwrap_or(rollout.top_p))
    }

    /// Samples, turns, completion cap, temperature and top-p of heldout set `i` (`data.heldout`
    /// order): a source's own `max_tokens` overrides `heldout_max_tokens`.
    pub fn heldout_plan(&self, data: &DataCfg, rollout: &RolloutCfg, i: usize) -> HeldoutPlan {
        let (temperature, top_p) = self.heldout_sampling(rollout);
        HeldoutPlan {
            samples: self.heldout_samples.max(1),
            turns: self.heldout_turns(rollout),
            max_tokens: data
                .heldout
                .get(i)
                .and_then(|s| s.max_tokens)
                .unwrap_or_else(|| self.heldout_tokens(rollout)),
            temperature,
            top_p,
        }
    }

    /// The turns of a heldout episode.
    pub fn heldout_turns(&self, rollout: &RolloutCfg) -> u32 {
        if self.heldout_turns == 0 {
            rollout.turns
        } else {
            self.heldout_turns
        }
    }

    /// The completion cap of heldout turns.
    pub fn heldout_tokens(&self, rollout: &RolloutCfg) -> u32 {
        if self.heldout_max_tokens == 0 {
            rollout.max_tokens
        } else {
            self.heldout_max_tokens
        }
    }
}

impl Default for ScheduleCfg {
    fn default() -> Self {
        ScheduleCfg {
            steps: 30,
            max_staleness: 1,
            save_every: 5,
            heldout_every: 0,
            heldout_samples: 1,
            heldout_temperature: None,
            heldout_top_p: None,
            heldout_timing: false,
            heldout_max_tokens: 0,
            heldout_turns: 0,
            max_steps_now: 0,
            max_seconds_now: 0,
            heldout_baseline: None,
            allow_recipe_change: false,
        }
    }
}

/// Where completions come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
pub enum GenerationCfg {
    /// The training worker generates from the weights it trains (one process, one GPU).
    #[default]
    Colocated,
    /// SGLang servers (native `/generate`, token ids in and out), told to load each new
    /// checkpoint from disk (`/update_weights_from_disk`): disaggregated.
    Sglang {
        urls: Vec<String>,
        /// The served model's tokenizer directory.
        tokenizer: PathBuf,
        /// Seconds a request may take.
        #[serde(default = "request_timeout")]
        timeout_s: f64,
    },
    /// vLLM servers started with `VLLM_SERVER_DEV_MODE=1` (`/v1/completions`, token ids
    /// in and out), told to reload each new checkpoint from disk (`/collective_rpc`
    /// `reload_weights`): disaggregated.
    Vllm {
        urls: Vec<String>,
        /// The served model's tokenizer directory.
        tokenizer: PathBuf,
        /// The served model's name, sent with each request [default: none, the one served].
        model: Option<String>,
        /// Seconds a request may take.
        #[serde(default = "request_timeout")]
        timeout_s: f64,
    },
}

impl GenerationCfg {
    /// The external engines' URLs and tokenizer; `None` when colocated.
    pub fn external(&self) -> Option<(&[String], &Path)> {
        match self {
            GenerationCfg::Colocated => None,
            GenerationCfg::Sglang { urls, tokenizer, .. }
            | GenerationCfg::Vllm { urls, tokenizer, .. } => Some((urls, tokenizer)),
        }
    }

    /// What the config and errors call this kind.
    pub fn kind(&self) -> &'static str {
        match self {
            GenerationCfg::Colocated => "colocated",
            GenerationCfg::Sglang { .. } => "sglang",
            GenerationCfg::Vllm { .. } => "vllm",
        }
    }
}

/// Where the weights are trained: the policy worker, in one process (`procs = 1`, the
/// default), or under `torchrun` on several ranks (FSDP2, one per GPU), which only trains:
/// generation then comes from external engines (`[generation] kind = "sglang"` or `"vllm"`), refreshed
/// from the weights rank 0 writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LearnerCfg {
    /// Processes training together (one per GPU) [default: 1].
    pub procs: u32,
    /// Arguments for `torchrun` in place of `--standalone` (several nodes: `--nnodes`,
    /// `--node-rank`, `--rdzv-endpoint`, ...) [default: none].
    pub torchrun: Vec<String>,
}

impl Default for LearnerCfg {
    fn default() -> Self {
        LearnerCfg { procs: 1, torchrun: Vec::new() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputCfg {
    pub dir: PathBuf,
}

fn auto_dtype() -> Precision {
    Precision::Auto
}
fn auto_attention() -> Attention {
    Attention::Auto
}
fn auto_compile() -> Compile {
    Compile::Auto
}
fn train_split() -> String {
    "train".into()
}
fn one_f() -> f64 {
    1.0
}
fn request_timeout() -> f64 {
    600.0
}

impl RlConfig {
    /// Read and check `path`; every error names the file.
    pub fn load(path: &Path) -> Result<RlConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let cfg: RlConfig =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        cfg.check().map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(cfg)
    }

    /// Settings no run can use, named by their keys.
    pub fn check(&self) -> Result<(), String> {
        let r = &self.rollout;
        let l = &self.loss;
        let o = &self.optim;
        let bad = |k: &str, why: &str| Err(format!("{k}: {why}"));
        if self.data.train.is_empty() {
            return bad("data.train", "no problem source");
        }
        for (i, s) in self.data.train.iter().chain(&self.data.heldout).enumerate() {
            if s.max_tokens == Some(0) {
                return bad(
                    &format!("data source {i} ({})", s.suite.display()),
                    "max_tokens must be at least 1",
                );
            }
            if !(s.weight.is_finite() && s.weight > 0.0) {
                return bad(
                    &format!("data source {i} ({})", s.suite.display()),
                    "weight must be positive",
                );
            }
        }
        if r.problems == 0 {
            return bad("rollout.problems", "must be at least 1");
        }
        if r.samples < 2 {
            return bad("rollout.samples", "a group needs at least 2 samples to have a baseline");
        }
        if r.turns == 0 || r.max_tokens == 0 || r.parallel == 0 || r.seq_len < 16 {
            return bad(
                "rollout",
                "turns, max_tokens and parallel must be at least 1, seq_len at least 16",
            );
        }
        // Greedy groups are eight copies of one answer (no signal), and the learner
        // scores softmax(logits / temperature): it must be positive. Below top-p 1 the
        // sampled distribution is one the learner does not score.
        if !(r.temperature > 0.0 && r.top_p == 1.0) {
            return bad(
                "rollout",
                "temperature must be > 0 and top_p 1.0 (the learner trains the distribution \
                 sampled from: softmax(logits / temperature), unfiltered)",
            );
        }
        if !(l.clip_low >= 0.0 && l.clip_low < 1.0 && l.clip_high >= 0.0) {
            return bad("loss", "clip_low must be in [0, 1) and clip_high ≥ 0");
        }
        if l.kl_coef < 0.0 || l.entropy_coef < 0.0 || !(l.tis_cap == 0.0 || l.tis_cap >= 1.0) {
            return bad("loss", "kl_coef and entropy_coef must be ≥ 0, tis_cap 0 or ≥ 1");
        }
        if !(o.lr > 0.0 && o.lr.is_finite()) || o.min_lr.is_some_and(|m| m < 0.0 || m > o.lr) {
            return bad("optim", "lr must be positive and min_lr in [0, lr]");
        }
        if o.updates == 0 || o.micro_tokens < r.seq_len.min(1024) {
            return bad(
                "optim",
                "updates must be ≥ 1 and micro_tokens at least min(seq_len, 1024)",
            );
        }
        let (t, p) = self.schedule.heldout_sampling(r);
        if !(t >= 0.0 && p > 0.0 && p <= 1.0) {
            return bad("schedule", "heldout_temperature must be ≥ 0 and heldout_top_p in (0, 1]");
        }
        if self.schedule.steps == 0 || self.schedule.save_every == 0 {
            return bad("schedule", "steps and save_every must be at least 1");
        }
        let procs = self.learner.procs;
        if procs == 0 {
            return bad("learner.procs", "must be at least 1");
        }
        if procs == 1 && !self.learner.torchrun.is_empty() {
            return bad("learner.torchrun", "only used with learner.procs > 1");
        }
        if procs > 1 {
            if self.model.lora.is_some() {
                return bad(
                    &format!("learner.procs = {procs} with model.lora"),
                    "LoRA on several ranks is not supported yet: train all weights (drop model.lora) or set learner.procs = 1",
                );
            }
            if self.generation == GenerationCfg::Colocated {
                return bad(
                    &format!("learner.procs = {procs} with generation.kind = \"colocated\""),
                    "a learner on several ranks only trains; generate on external engines ([generation] kind = \"sglang\" or \"vllm\", urls, tokenizer) or set learner.procs = 1",
                );
            }
            if l.scores_reference() {
                return bad(
                    &format!("learner.procs = {procs} with loss.kl_coef or loss.measure_kl"),
                    "the reference policy is not scored on several ranks yet: set loss.kl_coef = 0 and loss.measure_kl = false, or learner.procs = 1",
                );
            }
        }
        if let Some((urls, _)) = self.generation.external() {
            if urls.is_empty() {
                return bad(
                    "generation.urls",
                    &format!("no {} server named", self.generation.kind()),
                );
            }
            if let Some(u) =
                urls.iter().find(|u| !u.starts_with("http://") && !u.starts_with("https://"))
            {
                return bad("generation.urls", &format!("{u:?} is not an http:// or https:// URL"));
            }
            // Found at the first step's layout otherwise, after a whole rollout.
            if r.temperature != 1.0 {
                return bad(
                    &format!(
                        "rollout.temperature = {} with generation.kind = \"{}\"",
                        r.temperature,
                        self.generation.kind()
                    ),
                    "external engines return the model's own log-probabilities, not the \
                     tempered distribution's that training below temperature 1 needs: set \
                     rollout.temperature = 1.0 or generate colocated",
                );
            }
        }
        self.reward.resolve()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str =
        "[model]\npath = \"m\"\n[data]\ntrain = [{ suite = \"bench\" }]\n[output]\ndir = \"out\"\n";

    #[test]
    fn defaults_follow_the_recipe() {
        let c: RlConfig = toml::from_str(MIN).unwrap();
        c.check().unwrap();
        assert_eq!((c.rollout.samples, c.rollout.turns), (8, 3));
        assert_eq!((c.loss.clip_low, c.loss.clip_high, c.loss.kl_coef), (0.2, 0.28, 0.0));
        assert_eq!(c.optim.lr, 1e-6);
        assert_eq!(c.schedule.max_staleness, 1);
        // Heldout reports correctness only: its candidates are not timed.
        assert!(!c.schedule.heldout_timing);
        let r = c.reward.resolve().unwrap();
        assert_eq!(r.gamma, 0.4);
        assert_eq!(c.data.train[0].split, "train");
        assert_eq!(c.generation, GenerationCfg::Colocated);
        assert_eq!(c.learner, LearnerCfg { procs: 1, torchrun: Vec::new() });
        assert_eq!(c.schedule.heldout_tokens(&c.rollout), c.rollout.max_tokens);
    }

    /// Heldout turns may take a longer cap than rollouts (level 2 needs `run`'s 1,024).
    #[test]
    fn heldout_takes_its_own_completion_cap() {
        let text =
            format!("{MIN}[rollout]\nmax_tokens = 512\n[schedule]\nheldout_max_tokens = 1024\n");
        let c: RlConfig = toml::from_str(&text).unwrap();
        c.check().unwrap();
        assert_eq!((c.rollout.max_tokens, c.schedule.heldout_tokens(&c.rollout)), (512, 1024));
    }

    /// Heldout episodes play the rollouts' turns unless given their own.
    #[test]
    fn heldout_takes_its_own_turns() {
        let c: RlConfig = toml::from_str(MIN).unwrap();
        assert_eq!(c.schedule.heldout_plan(&c.data, &c.rollout, 0).turns, c.rollout.turns);
        let text = format!("{MIN}[schedule]\nheldout_turns = 1\n");
        let c: RlConfig = toml::from_str(&text).unwrap();
        c.check().unwrap();
        assert_eq!((c.rollout.turns, c.schedule.heldout_turns(&c.rollout)), (3, 1));
    }

    /// Heldout sampling: greedy for one sample, the rollout's for several, or its own
    /// (`run`'s 0.7 / 0.95); an impossible value is named.
    #[test]
    fn heldout_sampling_defaults_and_overrides() {
        let c: RlConfig = toml::from_str(MIN).unwrap();
        assert_eq!(c.schedule.heldout_sampling(&c.rollout), (0.0, 1.0));
        let several = format!("{MIN}[schedule]\nheldout_samples = 4\n");
        let c: RlConfig = toml::from_str(&several).unwrap();
        assert_eq!(c.schedule.heldout_sampling(&c.rollout), (1.0, 1.0));
        let own = format!("{several}heldout_temperature = 0.7\nheldout_top_p = 0.95\n");
        let c: RlConfig = toml::from_str(&own).unwrap();
        c.check().unwrap();
        assert_eq!(c.schedule.heldout_sampling(&c.rollout), (0.7, 0.95));
        let bad: RlConfig = toml::from_str(&format!("{several}heldout_top_p = 1.5\n")).unwrap();
        let e = bad.check().unwrap_err().to_string();
        assert!(e.contains("heldout_top_p"), "{e}");
    }

    /// A source's own completion cap of 0 is named by its source.
    #[test]
    fn a_source_cap_of_zero_is_named() {
        let text = MIN.replace("{ suite = \"bench\" }", "{ suite = \"bench\", max_tokens = 0 }");
        let c: RlConfig = toml::from_str(&text).unwrap();
        let e = c.check().unwrap_err().to_string();
        assert!(e.contains("data source 0 (bench)") && e.contains("max_tokens"), "{e}");
    }

    /// A learner on several ranks only trains: it needs external engines, full weights
    /// and no reference scoring; each combination it cannot run is named by its keys.
    #[test]
    fn a_learner_on_several_ranks_needs_external_engines_and_full_weights() {
        let sglang = "[generation]\nkind = \"sglang\"\nurls = [\"http://e\"]\ntokenizer = \"t\"\n";
        let ranks = "[learner]\nprocs = 2\ntorchrun = [\"--nnodes=1\"]\n";
        let c: RlConfig = toml::from_str(&format!("{MIN}{sglang}{ranks}")).unwrap();
        c.check().unwrap();
        assert_eq!(c.learner.procs, 2);
        assert_eq!(c.learner.torchrun, ["--nnodes=1"]);
        let lora = "[model.lora]\nrank = 4\n";
        let full = MIN.replace("[data]", &format!("{lora}[data]"));
        for (text, keys, why) in [
            (
                format!("{MIN}[learner]\nprocs = 2\n"),
                "learner.procs = 2 with generation.kind",
                "sglang",
            ),
            (
                format!("{full}{sglang}[learner]\nprocs = 2\n"),
                "learner.procs = 2 with model.lora",
                "LoRA",
            ),
            (
                format!("{MIN}{sglang}[learner]\nprocs = 2\n[loss]\nkl_coef = 0.1\n"),
                "learner.procs = 2 with loss.kl_coef",
                "kl_coef = 0",
            ),
            (
                format!("{MIN}{sglang}[learner]\nprocs = 2\n[loss]\nmeasure_kl = true\n"),
                "learner.procs = 2 with loss.kl_coef or loss.measure_kl",
                "measure_kl = false",
            ),
            (format!("{MIN}[learner]\nprocs = 0\n"), "learner.procs", "at least 1"),
            (
                format!("{MIN}[learner]\ntorchrun = [\"--nnodes=2\"]\n"),
                "learner.torchrun",
                "procs > 1",
            ),
        ] {
            let c: RlConfig = toml::from_str(&text).unwrap();
            let e = c.check().unwrap_err();
            assert!(e.starts_with(keys) && e.contains(why), "{text}: {e}");
        }
        let e = toml::from_str::<RlConfig>(&format!("{MIN}[learner]\ngpus = 2\n")).unwrap_err();
        assert!(e.to_string().contains("gpus"), "{e}");
    }

    /// vLLM engines are configured like SGLang's, with an optional served name; an empty
    /// list, a URL without a scheme, LoRA training and a rollout temperature other than 1
    /// are named.
    #[test]
    fn vllm_engines_are_selected_by_kind() {
        let vllm = "[generation]\nkind = \"vllm\"\nurls = [\"http://g1:8000\", \"http://g2:8000\"]\ntokenizer = \"t\"\nmodel = \"policy\"\n";
        let c: RlConfig = toml::from_str(&format!("{MIN}{vllm}[learner]\nprocs = 2\n")).unwrap();
        c.check().unwrap();
        let GenerationCfg::Vllm { urls, model, timeout_s, .. } = &c.generation else {
            panic!("{:?}", c.generation)
        };
        assert_eq!((urls.len(), model.as_deref(), *timeout_s), (2, Some("policy"), 600.0));
        assert_eq!(c.generation.kind(), "vllm");
        let lora = MIN.replace("[data]", "[model.lora]\nrank = 4\n[data]");
        // An adapter is loaded into the engines by name beside their base model.
        toml::from_str::<RlConfig>(&format!("{lora}{vllm}")).unwrap().check().unwrap();
        let no_urls = vllm.replace("\"http://g1:8000\", \"http://g2:8000\"", "");
        for (text, key, why) in [
            (format!("{MIN}{no_urls}"), "generation.urls", "no vllm server"),
            (format!("{MIN}{}", vllm.replace("http://g1", "g1")), "generation.urls", "\"g1:8000\""),
            // Their log-probabilities are the untempered model's.
            (
                format!("{MIN}[rollout]\ntemperature = 0.7\n{vllm}"),
                "rollout.temperature = 0.7 with generation.kind = \"vllm\"",
                "colocated",
            ),
        ] {
            let c: RlConfig = toml::from_str(&text).unwrap();
            let e = c.check().unwrap_err();
            assert!(e.starts_with(key) && e.contains(why), "{text}: {e}");
        }
        let e = toml::from_str::<RlConfig>(&format!("{MIN}{}", vllm.replace("vllm", "tgi")))
            .unwrap_err();
        assert!(e.to_string().contains("tgi"), "{e}");
    }

    #[test]
    fn reward_presets_take_overrides_and_name_unknown_keys() {
        let c: RlConfig =
            toml::from_str(&format!("{MIN}[reward]\npreset = \"tritonforge\"\ngamma = 0.5\n"))
                .unwrap();
        let r = c.reward.resolve().unwrap();
        assert_eq!((r.compiled, r.correct, r.gamma), (0.1, 0.3, 0.5));
        let c: RlConfig = toml::from_str(&format!("{MIN}[reward]\ngamm = 0.5\n")).unwrap();
        let e = c.check().unwrap_err();
        assert!(e.contains("reward.gamm"), "{e}");
        let c: RlConfig = toml::from_str(&format!("{MIN}[reward]\ngamma = \"x\"\n")).unwrap();
        assert!(c.check().is_err());
    }

    /// The shipped recipe loads and passes the checks.
    #[test]
    fn the_bundled_recipe_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/rl/bundled.toml");
        let c = RlConfig::load(&path).unwrap();
        assert_eq!(c.model.path, "bundled");
        assert!(c.model.lora.is_some() && c.data.train.len() == 3);
        // The suite's levels 1 and 2 only: the builtin train split holds whole models too.
        let levels: Vec<Option<u8>> = c.data.train.iter().map(|s| s.level).collect();
        assert_eq!(levels, [Some(1), Some(2), None]);
        // Heldout measures pass@1 with the first turn alone.
        assert_eq!((c.rollout.turns, c.schedule.heldout_turns(&c.rollout)), (3, 1));
        // Enough samples that the goal's 5 points stand out of the noise (docs/rl.md, run 10).
        assert_eq!(c.schedule.heldout_samples, 16);
    }

    #[test]
    fn bad_settings_are_named() {
        for (extra, key) in [
            ("[rollout]\nsamples = 1\n", "rollout.samples"),
            ("[loss]\nclip_low = 1.5\n", "loss"),
            ("[optim]\nlr = 0\n", "optim"),
            // Greedy groups carry no signal; a nucleus the learner cannot score.
            ("[rollout]\ntemperature = 0.0\n", "rollout"),
            ("[rollout]\ntemperature = 0.7\ntop_p = 0.95\n", "rollout"),
            ("[schedule]\nsteps = 0\n", "schedule"),
            ("[generation]\nkind = \"sglang\"\nurls = []\ntokenizer = \"t\"\n", "generation.urls"),
        ] {
            let c: RlConfig = toml::from_str(&format!("{MIN}{extra}")).unwrap();
            let e = c.check().unwrap_err();
            assert!(e.starts_with(key), "{extra}: {e}");
        }
        let e = toml::from_str::<RlConfig>(&format!("{MIN}[rollout]\nsampels = 4\n")).unwrap_err();
        assert!(e.to_string().contains("sampels"), "{e}");
    }
}

//! The policy worker's training protocol: set up a model with its optimizer, step it over
//! micro-batches, measure a loss, write checkpoints.

use serde::{Deserialize, Serialize};

closed_set! {
    /// The precision the policy trains in.
    pub enum Precision("train dtype") {
        /// `mixed` on a GPU, `fp32` on a CPU.
        Auto = "auto",
        /// fp32 weights and optimizer state, bf16 compute under autocast: an AdamW step of
        /// 1e-5 is below half a bf16 ulp for most weights, so bf16 weights lose updates.
        Mixed = "mixed",
        /// bf16 weights: half the memory, for throughput runs and very large models.
        Bf16 = "bf16",
        Fp32 = "fp32",
    }
}

closed_set! {
    /// The attention implementation asked of the worker.
    pub enum Attention("train attention") {
        /// `varlen` where it works (a GPU, 16-bit compute), else `sdpa`.
        Auto = "auto",
        /// Flash attention over packed rows, without padding.
        Varlen = "varlen",
        /// transformers' own implementations.
        Sdpa = "sdpa",
        FlexAttention = "flex_attention",
        Eager = "eager",
    }
}

closed_set! {
    /// Whether the worker runs the decoder layers and the loss under `torch.compile`.
    pub enum Compile("train compile") {
        /// On a GPU only.
        Auto = "auto",
        On = "on",
        Off = "off",
    }
}

closed_set! {
    /// The dtype the worker keeps the weights in, as torch names it (`torch.` dropped).
    pub enum WeightDtype("weight dtype") {
        Float32 = "float32",
        Bfloat16 = "bfloat16",
    }
}

/// How the policy worker trains: the model, what is trained, the optimizer and schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSetup {
    /// A Hugging Face model directory (a config alone: random weights), a `.gguf` file,
    /// or `smollm2`.
    pub model: String,
    /// A checkpoint of ours to resume from: its weights (or adapter), optimizer, schedule
    /// and random state.
    pub resume: Option<String>,
    pub lora: Option<LoraSetup>,
    pub lr: f64,
    pub min_lr: f64,
    pub warmup_steps: u64,
    pub total_steps: u64,
    pub weight_decay: f64,
    /// Gradient-norm clip; 0 turns clipping off (the norm is still reported).
    pub grad_clip: f64,
    pub gradient_checkpointing: bool,
    pub dtype: Precision,
    pub seed: u64,
    pub attention: Attention,
    /// `torch.compile` of the decoder layers and the loss.
    pub compile: Compile,
    /// The plan puts one conversation in each row, rows of like length together
    /// (`group_by_length`): the worker may then attend over the padded rows as they are
    /// (cuDNN on a GPU) instead of joining them.
    #[serde(default)]
    pub one_per_row: bool,
}

/// Low-rank adapters instead of full fine-tuning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraSetup {
    pub rank: u32,
    pub alpha: f64,
    pub dropout: f64,
    pub target_modules: Vec<String>,
}

/// What the worker loaded: sizes for the FLOP count, and where it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainInfo {
    pub parameters: u64,
    pub trainable: u64,
    /// Parameters of the output projection (counted per loss token, not per token).
    pub head_parameters: u64,
    pub vocab_size: u64,
    pub layers: u32,
    /// Width of the attention (heads × head size), for the attention FLOPs.
    pub attention_width: u32,
    /// The dtype of the weights (and optimizer state).
    pub dtype: WeightDtype,
    /// A torch device string; open, not a closed set: it names the rank's device
    /// (`cuda:1`), and the host only prints it.
    pub device: String,
    /// Processes training together (FSDP ranks); 1 on one device.
    pub world_size: u32,
    pub gpu_name: Option<String>,
    /// The step the schedule stands at (0, or the resumed checkpoint's step).
    pub step: u64,
    /// Whether the decoder layers and the loss run under `torch.compile`.
    pub compiled: bool,
    /// The attention the worker settled on, and for rows of one conversation each which
    /// kernel passed its check (e.g. `tritonforge_varlen, rows: cudnn (...)`).
    #[serde(default)]
    pub attention: String,
}

/// Rows of token ids, each with its loss mask and position ids (positions restart at 0
/// where a packed conversation starts, which also keeps attention inside it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MicroBatch {
    pub input_ids: Vec<Vec<u32>>,
    /// 1 where the token is a target of the loss (an assistant token).
    pub loss_mask: Vec<Vec<u8>>,
    pub position_ids: Vec<Vec<u32>>,
    /// Real tokens at the start of each row; the rest is padding, which a worker with
    /// variable-length attention drops instead of computing on it.
    pub lengths: Vec<u32>,
}

/// One optimizer step's micro-batches (gradient accumulation), or an evaluation's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainBatch {
    pub micro: Vec<MicroBatch>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepStats {
    /// The schedule's step after this one (unchanged by an evaluation).
    pub step: u64,
    /// Mean loss per target token over the whole batch.
    pub loss: f64,
    pub loss_tokens: u64,
    pub tokens: u64,
    /// Gradient norm before clipping; `None` for an evaluation.
    pub grad_norm: Option<f64>,
    /// The learning rate this step used.
    pub lr: f64,
    pub elapsed_ms: f64,
    /// Peak accelerator memory during the step (`None` on a CPU).
    pub memory_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaveJob {
    pub dir: String,
    /// LoRA: write the merged model (loadable anywhere) instead of the adapter alone.
    pub merge_lora: bool,
    /// Also write the optimizer, schedule and random state (to resume from).
    pub trainer_state: bool,
}

/// Reinforcement learning: one micro-batch of rows with, per target token, what the
/// PPO loss needs. Every per-token list of a row holds one value per target token of that
/// row, in order: position `t` of the row with `loss_mask[t] == 1` and `t > 0` (position
/// `t - 1` predicts token `t`), the same tokens the SFT loss scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlMicroBatch {
    pub rows: MicroBatch,
    /// The advantage of each target token (the advantage of the turn it belongs to).
    pub advantages: Vec<Vec<f32>>,
    /// Each token's log-probability under the policy that generated it, at the loss's
    /// temperature (the generator's own at 1.0).
    pub behaviour: Vec<Vec<f32>>,
    /// Log-probabilities under the trainer's weights before this rollout batch's first
    /// update (from `score`). With them the PPO ratio is taken against these and the
    /// generator's staleness and numerics are corrected by a truncated importance weight
    /// `min(exp(proximal - behaviour), tis_cap)`; without them, against `behaviour`.
    pub proximal: Option<Vec<Vec<f32>>>,
    /// Log-probabilities under the starting policy, for the KL penalty (k3 estimator).
    pub reference: Option<Vec<Vec<f32>>>,
}

/// The PPO-clip loss's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlLoss {
    /// The ratio is clipped to `[1 - clip_low, 1 + clip_high]`.
    pub clip_low: f64,
    pub clip_high: f64,
    /// Weight of the KL penalty to the reference (0: none, and no reference is needed).
    pub kl_coef: f64,
    /// Weight of the entropy bonus (0: none).
    pub entropy_coef: f64,
    /// Cap of the truncated importance weight (0: no correction).
    pub tis_cap: f64,
    /// The loss is a sum over target tokens divided by this: every target token of the
    /// optimizer step weighs the same, whatever its micro-batch or sequence length.
    pub loss_tokens: u64,
    /// The rollout's sampling temperature: the policy trained is softmax(logits /
    /// temperature), the distribution the tokens were drawn from (1.0: the model's own).
    #[serde(default = "untempered")]
    pub temperature: f64,
}

fn untempered() -> f64 {
    1.0
}

/// One optimizer step of PPO-clip over these micro-batches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlBatch {
    pub micro: Vec<RlMicroBatch>,
    pub loss: RlLoss,
}

/// What an RL step did. Means are over the step's target tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlStats {
    /// The schedule's step after this one.
    pub step: u64,
    /// The whole loss (policy + KL - entropy), per target token.
    pub loss: f64,
    pub policy_loss: f64,
    /// Mean k3 KL to the reference; `None` without a reference.
    pub kl: Option<f64>,
    /// Mean entropy of the policy at the target tokens.
    pub entropy: f64,
    /// Share of tokens whose ratio was clipped (their gradient is zero).
    pub clip_fraction: f64,
    /// Mean and largest ratio `exp(logp - old)`.
    pub ratio_mean: f64,
    pub ratio_max: f64,
    /// Share of tokens whose importance weight hit `tis_cap` (0 without correction).
    pub tis_capped: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    pub lr: f64,
    pub loss_tokens: u64,
    pub tokens: u64,
    pub elapsed_ms: f64,
    pub memory_bytes: Option<u64>,
    /// The worker's time so far, for the step's time split and idle share.
    #[serde(default)]
    pub device: Option<DeviceUse>,
}

/// The policy worker's time, cumulative since it started: the host takes differences
/// between steps. The worker's view (seconds inside generation and training; the rest it
/// waited) and, on a GPU with NVML, the device's (utilisation integrated over time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceUse {
    pub wall_s: f64,
    pub generate_s: f64,
    pub train_s: f64,
    /// Writing the trained weights into the generation copy (colocated).
    pub refresh_s: f64,
    /// Seconds of kernel activity, of `gpu_sampled_s` seconds sampled.
    pub gpu_busy_s: Option<f64>,
    pub gpu_sampled_s: Option<f64>,
    /// Graphs `torch.compile` has built in this process (dynamo's `unique_graphs`): a
    /// count that keeps rising means recompiles for new shapes.
    #[serde(default)]
    pub graphs_compiled: Option<u64>,
    /// Times the CUDA caching allocator freed its cache and retried an allocation (each
    /// one a device-wide synchronisation): memory pressure shows here.
    #[serde(default)]
    pub alloc_retries: Option<u64>,
    /// The engine's counts (absent from workers that predate them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineUse>,
}

/// The policy worker's engine counts, cumulative since it started over every engine it
/// made: they say why generation took the time it did (few rows a decode step, rows
/// computed for nothing, prompt tokens prefilled).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineUse {
    pub decode_steps: u64,
    /// Rows with a request, summed over decode steps.
    pub decode_rows: u64,
    /// Rows computed (the batch bucket, which covers the highest busy slot), summed over
    /// decode steps.
    pub decode_width: u64,
    /// Prompt tokens run through the model, and those taken from cached prefixes instead.
    pub prefill_tokens: u64,
    pub reused_tokens: u64,
    pub prefill_forwards: u64,
    /// Running rows moved down into free slots before a decode step, so that the step
    /// computes the bucket their number needs (absent from workers that predate it).
    #[serde(default)]
    pub moved_rows: u64,
    /// The device's time in decode steps and in prefill forwards (ms; CUDA events, so the
    /// rest of the worker's generation time is the host's and the learner's).
    #[serde(default)]
    pub decode_ms: f64,
    #[serde(default)]
    pub prefill_ms: f64,
    /// Tokens the prefill forwards computed, padding included (their bucketed shapes with
    /// prefill graphs on, else every row padded to the wave's longest): against
    /// `prefill_tokens`, what the padding cost.
    #[serde(default)]
    pub prefill_padded: u64,
    /// Prefill shapes captured as CUDA graphs. Why: a run must show whether its prefill
    /// ran from graphs at all (a failed capture falls back to eager for good).
    #[serde(default)]
    pub prefill_graphs: u64,
}

/// Log-probabilities of the target tokens, no update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreJob {
    pub batch: TrainBatch,
    /// Score under the starting policy (LoRA: the adapter disabled; full weights: a frozen
    /// copy kept from setup) instead of the current one.
    pub reference: bool,
    /// Log-probabilities of softmax(logits / temperature): the rollout's sampling
    /// distribution, which the loss's ratio must compare like with like.
    #[serde(default = "untempered")]
    pub temperature: f64,
}

/// The answer to `score`: per micro-batch, per row, one log-probability per target token
/// (the order of [`RlMicroBatch`]'s lists).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scores {
    pub logprobs: Vec<Vec<Vec<f32>>>,
    pub elapsed_ms: f64,
}

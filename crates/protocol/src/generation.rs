//! The policy worker's generation protocol: a chat to complete and its completion, with
//! exact token ids (what reinforcement learning needs).

use serde::{Deserialize, Serialize};

/// One chat message for the embedded policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatTurn {
    pub role: String,
    pub content: String,
}

/// A chat to complete, with sampling parameters (`temperature` 0: greedy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateJob {
    pub messages: Vec<ChatTurn>,
    pub temperature: f64,
    pub top_p: f64,
    pub max_tokens: u32,
    pub seed: Option<u64>,
    /// Sample among the `top_k` most likely tokens only (`None` or 0: no limit).
    #[serde(default)]
    pub top_k: Option<u32>,
    /// Token ids that end the completion besides the model's end-of-sequence tokens
    /// (at most 8).
    #[serde(default)]
    pub stop_token_ids: Option<Vec<u32>>,
}

/// A completion from the embedded policy: the prompt exactly as tokenised (chat template
/// applied), the completion's token ids and each one's log-probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generated {
    pub text: String,
    pub prompt_ids: Vec<u32>,
    pub token_ids: Vec<u32>,
    /// Each token's log-probability under the model's own distribution (untempered,
    /// unfiltered): what a trainer recomputes.
    pub logprobs: Vec<f64>,
    /// `stop` (end-of-sequence token) or `length`.
    pub finish_reason: String,
    /// Each token's log-probability under the distribution it was drawn from
    /// (temperature, top-k and top-p applied; 0 for greedy decoding), where the worker's
    /// engine gives it.
    #[serde(default)]
    pub sampling_logprobs: Option<Vec<f64>>,
}

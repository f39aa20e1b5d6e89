//! What is said to a policy and what it answers, as recorded in every turn.

use serde::{Deserialize, Serialize};

/// One chat message as sent to the policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// Training data only: `Some(0)` on an assistant turn kept as context, not as a target
    /// (a planted or failed attempt before the fix), as in OpenAI's fine-tuning format.
    /// Absent everywhere else, and never sent to a policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u8>,
}

impl ChatMessage {
    pub fn new(role: &str, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role: role.to_string(), content: content.into(), weight: None }
    }

    /// This message as context a trainer must not learn to say (weight 0).
    pub fn as_context(mut self) -> ChatMessage {
        self.weight = Some(0);
        self
    }
}

/// One completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Completion {
    pub text: String,
    /// Exact completion token ids, when the backend returns them.
    pub token_ids: Option<Vec<u32>>,
    /// Log-probability of each completion token, when the backend returns them.
    pub logprobs: Option<Vec<f32>>,
    /// Each token's log-probability under the distribution it was drawn from (temperature
    /// and top-p applied), where the backend gives it (the embedded worker): what training
    /// at a temperature other than 1 needs as its behaviour log-probabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_logprobs: Option<Vec<f32>>,
    /// Exact prompt token ids (the rendered chat), when the backend tokenised it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_ids: Option<Vec<u32>>,
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
    pub finish_reason: Option<String>,
    /// Wall time of the request, retries included.
    pub latency_ms: f64,
    /// The model server's own time for it, from taking it into its batch to its last
    /// token, where it says (the embedded policy worker): `latency_ms` less this is the
    /// time it waited, e.g. behind a colocated learner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_ms: Option<f64>,
    /// Attempts it took (1 when the first succeeded).
    pub attempts: u32,
    /// The weights it was generated with, where the server says (SGLang's
    /// `meta_info.weight_version`): RL checks it against the versions it loaded, so that
    /// an engine restarted from other weights is not trained on as the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_version: Option<String>,
}

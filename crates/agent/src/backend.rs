//! Where completions come from. Every backend answers a chat with text and, where it
//! can, the exact completion token ids and their log-probabilities (what RL trains on,
//! with no re-tokenisation between generation and training).

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

// The chat message and the completion are part of the episode record, so they live in
// `tritonforge-episode` (below the evaluator); here they keep their old paths.
pub use tritonforge_episode::{ChatMessage, Completion};

/// Sampling parameters, passed through to the backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub temperature: f32,
    pub top_p: f32,
    pub max_tokens: u32,
    /// Per-request seed where the backend honours one.
    pub seed: Option<u64>,
    /// The LoRA adapter a server holding several should answer with, by the name it was
    /// loaded under (SGLang's `lora_path`, vLLM's `model`); `None`: the served model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling { temperature: 0.7, top_p: 0.95, max_tokens: 4096, seed: None, adapter: None }
    }
}

/// Why a backend gave no completion. Each names the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{url}: unreachable ({reason})")]
    Unreachable { url: String, reason: String },
    #[error("{url}: no answer within {secs:.0} s")]
    Timeout { url: String, secs: f64 },
    #[error("{url}: the server refused the API key (HTTP {status}): {body}")]
    Auth { url: String, status: u16, body: String },
    #[error("{url}: HTTP {status}: {body}")]
    Http { url: String, status: u16, body: String },
    #[error("{url}: malformed reply: {reason}")]
    Protocol { url: String, reason: String },
    /// The request could not be built (a tokenizer or chat template that does not load
    /// or render): nothing was sent.
    #[error("{url}: {reason}")]
    Setup { url: String, reason: String },
    /// A completion made with other weights than those the engine was last given: it
    /// restarted from its original ones, or something else refreshed it.
    #[error(
        "{url}: generated with weights `{found}`, expected {expected} (was the engine \
         restarted, or refreshed by someone else?)"
    )]
    WrongWeights { url: String, found: String, expected: String },
}

impl BackendError {
    /// Worth another attempt: the server may recover (overload, restart, network).
    pub fn retryable(&self) -> bool {
        match self {
            BackendError::Unreachable { .. } | BackendError::Timeout { .. } => true,
            BackendError::Http { status, .. } => *status == 429 || *status >= 500,
            BackendError::Auth { .. }
            | BackendError::Protocol { .. }
            | BackendError::Setup { .. }
            | BackendError::WrongWeights { .. } => false,
        }
    }
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A policy: chat in, completion out.
pub trait Backend: Send + Sync {
    /// Names the backend and model in records and reports.
    fn describe(&self) -> String;
    fn complete<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        sampling: &'a Sampling,
    ) -> BoxFuture<'a, Result<Completion, BackendError>>;
}

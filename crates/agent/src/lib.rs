//! The agent: policy backends, prompts, code extraction, multi-turn refinement and
//! rewards. A library that never prints; `tritonforge run` is its thin front end.

pub mod backend;
pub mod bundled;
pub mod embedded;
pub mod episode;
pub mod extract;
pub mod html;
pub mod http;
pub mod metrics;
pub mod openai;
pub mod prompts;
pub mod reward;
pub mod runner;
pub mod sglang;
pub mod vllm;

pub use backend::{Backend, BackendError, ChatMessage, Completion, Sampling};
pub use episode::{
    run_episode, Episode, EpisodeConfig, NotExtracted, Turn, TurnOutcome, TurnTimes,
};
pub use prompts::{Prompts, Target};
pub use reward::{RewardConfig, RewardPreset, SpeedTerm};
pub use runner::{BackendSpec, RunEvent, RunResult, RunSpec};

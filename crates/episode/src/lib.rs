//! The record of an episode and the words that drive it: chat messages, completions,
//! turns and their outcomes, episodes, and the prompt templates that render the task and
//! the feedback.
//!
//! Why a crate of its own: these are plain data and text, but they used to live in
//! `tritonforge-agent`, which sits on top of the evaluator. The data pipeline reads
//! stored episodes and renders prompts without ever evaluating a candidate, so it had to
//! build the whole evaluator to get at a few structs. Here they depend on the protocol
//! (for the evaluator's verdict, [`tritonforge_protocol::Status`]) and nothing else;
//! the agent re-exports everything at its old paths.

pub mod episode;
pub mod message;
pub mod prompts;

pub use episode::{Episode, NotExtracted, Turn, TurnOutcome, TurnTimes};
pub use message::{ChatMessage, Completion};
pub use prompts::{Attempt, PromptError, Prompts, Target};

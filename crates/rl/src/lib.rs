//! Multi-turn reinforcement learning (GRPO) over episodes rewarded by the evaluator.
//!
//! One step: draw problems from the pool, play `G` samples × up to `T` turns of each
//! through the generator and the environment (the evaluator judges each completion the
//! moment it ends), compute per-turn returns and group advantages, skip groups with no
//! signal (and draw more to fill the batch), lay the turns out as token sequences with
//! the generator's exact ids, and take PPO-clip steps in the learner. Rollouts of the next
//! step may be generated while this one trains, up to `max_staleness` steps ahead.
//! Metrics go to the store and `metrics.jsonl`, checkpoints to `checkpoints/`, and a run
//! stopped anywhere resumes from its last checkpoint. The crate never prints.

pub mod advantage;
pub mod batch;
pub mod config;
pub mod engines;
pub mod env;
pub mod layout;
pub mod metrics;
pub mod pool;
pub mod recipe;
pub mod refresh;
pub mod rng;
pub mod setup;
pub mod staleness;

pub mod run;

pub use config::RlConfig;
pub use env::{Activity, Environment, Play, SuiteEnv, Task, Timeline};
pub use metrics::{HeldoutMetrics, StepMetrics};
pub use run::{
    conclude, train, Generator, HeldoutSet, Learner, Parts, RlEvent, RlSummary, Standing,
};

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RlError {
    #[error("{0}")]
    Config(String),
    /// The learner (the policy worker training) refused or failed a request.
    #[error("trainer: {0}")]
    Learner(String),
    /// The generator could not be refreshed with new weights.
    #[error("generator: {0}")]
    Generator(String),
    #[error(transparent)]
    Layout(#[from] layout::LayoutError),
    #[error("{path}: {reason}")]
    Output { path: PathBuf, reason: String },
    #[error("resume {path}: {reason}")]
    Resume { path: PathBuf, reason: String },
    #[error(transparent)]
    Store(#[from] tritonforge_store::StoreError),
    #[error("{0}")]
    Schedule(String),
}

//! Prompts as template files: moved to `tritonforge-episode` (the data pipeline renders
//! them without the evaluator); re-exported here so `tritonforge_agent::prompts::*` keeps
//! its meaning.

pub use tritonforge_episode::prompts::*;

//! Stand-ins shared by the RL loop's integration tests: a policy that never generates
//! and a learner that counts its set-ups (each one a policy worker started in `train rl`),
//! saves empty checkpoints and refuses to score or step (the tests' environments give no
//! signal, so none must be asked for).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tritonforge_agent::{Backend, BackendError, ChatMessage, Completion, Sampling};
use tritonforge_protocol::{
    RlBatch, RlStats, SaveJob, ScoreJob, Scores, TrainInfo, TrainSetup, WeightDtype,
};
use tritonforge_rl::env::BoxFuture;
use tritonforge_rl::{Environment, Generator, Learner, Parts, RlConfig, Timeline};

pub struct Idle;

impl Backend for Idle {
    fn describe(&self) -> String {
        "idle".into()
    }

    fn complete<'a>(
        &'a self,
        _messages: &'a [ChatMessage],
        _sampling: &'a Sampling,
    ) -> BoxFuture<'a, Result<Completion, BackendError>> {
        Box::pin(async { Ok(Completion::default()) })
    }
}

impl Generator for Idle {
    fn backend(&self) -> &dyn Backend {
        self
    }

    fn refresh<'a>(&'a self, _: &'a Path, _: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    fn needs_weights_on_disk(&self) -> bool {
        false
    }
}

/// Counts its set-ups (each one is a worker started); saves an empty checkpoint.
#[derive(Default)]
pub struct Counted {
    setups: AtomicUsize,
}

impl Learner for Counted {
    fn setup(&self, _setup: TrainSetup) -> BoxFuture<'_, Result<TrainInfo, String>> {
        self.setups.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            Ok(TrainInfo {
                parameters: 1,
                trainable: 1,
                head_parameters: 0,
                vocab_size: 8,
                layers: 1,
                attention_width: 1,
                dtype: WeightDtype::Float32,
                device: "cpu".into(),
                world_size: 1,
                gpu_name: None,
                step: 0,
                compiled: false,
                attention: String::new(),
            })
        })
    }

    fn score(&self, _job: ScoreJob) -> BoxFuture<'_, Result<Scores, String>> {
        Box::pin(async { Err("no step has signal: nothing is scored".to_string()) })
    }

    fn step(&self, _batch: RlBatch) -> BoxFuture<'_, Result<RlStats, String>> {
        Box::pin(async { Err("no step has signal: nothing is trained".to_string()) })
    }

    fn save(&self, job: SaveJob) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            std::fs::create_dir_all(&job.dir).map_err(|e| e.to_string())?;
            Ok(0)
        })
    }
}

impl Counted {
    /// How many times the learner was set up.
    pub fn setups(&self) -> usize {
        self.setups.load(Ordering::SeqCst)
    }
}

/// A config from its TOML text, checked as `train rl` checks it.
pub fn config(text: &str) -> RlConfig {
    let cfg: RlConfig = toml::from_str(text).unwrap();
    cfg.check().unwrap();
    cfg
}

/// The run `rl-toy`'s parts: these environments, the idle policy and `learner`.
pub fn parts(
    cfg: &RlConfig,
    env: Arc<dyn Environment>,
    heldout: Vec<(String, Arc<dyn Environment>)>,
    learner: Arc<Counted>,
) -> Parts {
    Parts {
        env,
        heldout,
        generator: Arc::new(Idle),
        learner,
        setup: tritonforge_rl::setup::train_setup(cfg, "none"),
        pad_id: 0,
        policy: "none".into(),
        timeline: Arc::new(Timeline::new()),
        timed: false,
        run: "rl-toy".into(),
        tokenizer_dir: None,
        evaluation: serde_json::Value::Null,
    }
}

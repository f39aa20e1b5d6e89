//! Reinforcement learning on the CPU with the real policy worker: a tiny randomly
//! initialised Llama model (`configs/models/tiny-llama`, SmolLM2's tokenizer) trained by
//! `tritonforge-rl`'s loop, colocated (it generates from the weights it trains).
//! - A toy environment pays for completion tokens of a marker set: the marker's share
//!   rises over a few steps (the whole path: rollouts, advantages, layouts, `score`,
//!   `rl_step`, the engine generating from the new weights).
//! - A run stopped after two steps and resumed takes the same steps as one that ran
//!   through.
//! - `tritonforge train rl` on the built-in suite: metrics, heldout, checkpoints, and a
//!   checkpoint `run --model` evaluates; bad configs, a model without a chat template
//!   and an unreachable evaluation server are named.
//! - Disaggregated: a mock SGLang engine refreshed from the learner's weights after every
//!   step, with the learner in one process and on two ranks (`torchrun`, gloo).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tritonforge_agent::embedded::{EmbeddedBackend, EmbeddedConfig};
use tritonforge_agent::{Backend, ChatMessage, Episode, Turn, TurnOutcome};
use tritonforge_protocol::{DeviceKind, Status};
use tritonforge_rl::engines::{Colocated, WorkerLearner};
use tritonforge_rl::env::BoxFuture;
use tritonforge_rl::{Environment, Learner, Parts, Play, RlConfig, RlEvent, StepMetrics, Timeline};

mod common;
use common::*;

/// A completion token pays when its id is a multiple of this.
const MARK: u32 = 4;

/// The tiny model's config with the tokenizer beside it: a model directory the worker
/// loads (random weights, seeded). `init`: the weights' initial scale, when not the
/// config's 0.02 (whose next-token distribution is uniform over 49,152 tokens: at 0.5 it
/// has about 4 nats of entropy, so the same tokens recur and a policy can learn which of
/// them pay).
fn tiny_model(dir: &Path, init: Option<f64>) -> PathBuf {
    let m = dir.join("tiny");
    std::fs::create_dir_all(&m).unwrap();
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("configs/models/tiny-llama/config.json")).unwrap(),
    )
    .unwrap();
    if let Some(r) = init {
        config["initializer_range"] = r.into();
    }
    std::fs::write(m.join("config.json"), config.to_string()).unwrap();
    for f in std::fs::read_dir(exported_tokenizer()).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), m.join(f.file_name())).unwrap();
    }
    m
}

/// One-turn episodes of one token (a bandit per task); the reward is 1 when the token is
/// of the marker set (ids that are multiples of `MARK`).
struct Toy {
    tasks: usize,
}

impl Environment for Toy {
    fn keys(&self) -> Vec<String> {
        (0..self.tasks).map(|i| format!("toy/t{i}")).collect()
    }

    fn play<'a>(&'a self, backend: &'a dyn Backend, play: Play) -> BoxFuture<'a, Episode> {
        Box::pin(async move {
            let messages = vec![
                ChatMessage::new("system", "Answer."),
                ChatMessage::new("user", format!("Task number {}.", play.task)),
            ];
            let mut ep = Episode {
                id: play.id.clone(),
                run: play.run.clone(),
                sample: play.sample,
                ..Episode::default()
            };
            match backend.complete(&messages, &play.sampling).await {
                Err(e) => ep.error = Some(e.to_string()),
                Ok(c) => {
                    let ids = c.token_ids.clone().unwrap_or_default();
                    let hits = ids.iter().filter(|&&i| i % MARK == 0).count();
                    let reward = hits as f64 / ids.len().max(1) as f64;
                    let outcome = if reward >= 0.5 { Status::Correct } else { Status::Incorrect };
                    ep.turns.push(Turn {
                        turn: 0,
                        messages,
                        completion: c,
                        outcome: TurnOutcome::Evaluated(outcome),
                        reward,
                        ..Turn::default()
                    });
                }
            }
            ep
        })
    }
}

fn toy_config(out: &Path, model: &Path, steps: u64, lr: f64, extra: &str) -> RlConfig {
    let text = format!(
        r#"
[model]
path = "{model}"
dtype = "fp32"
attention = "sdpa"
compile = "off"
[data]
train = [{{ suite = "toy" }}]
[rollout]
problems = 4
samples = 8
turns = 1
max_tokens = 1
parallel = 32
[optim]
lr = {lr}
seed = 11
[loss]
clip_high = 0.28
[schedule]
steps = {steps}
max_staleness = 0
save_every = 2
{extra}
[output]
dir = "{out}"
"#,
        model = model.display(),
        out = out.display()
    );
    let cfg: RlConfig = toml::from_str(&text).unwrap();
    cfg.check().unwrap();
    cfg
}

/// Run the loop with the toy environment and a fresh colocated worker; the metrics.
fn toy_run(cfg: &RlConfig, model: &Path) -> Vec<StepMetrics> {
    toy_run_with(cfg, model, |learner| learner)
}

/// `toy_run` with the worker's learner seen through `wrap`.
fn toy_run_with(
    cfg: &RlConfig,
    model: &Path,
    wrap: impl FnOnce(Arc<dyn Learner>) -> Arc<dyn Learner>,
) -> Vec<StepMetrics> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let policy = Arc::new(EmbeddedBackend::new(EmbeddedConfig {
            python: venv().join("bin/python"),
            worker_path: repo().join("python"),
            model: model.display().to_string(),
            label: "tiny".into(),
            device: DeviceKind::Cpu,
            startup_timeout: Duration::from_secs(300),
            request_timeout: Duration::from_secs(300),
            max_batch: 32,
            train: true,
        }));
        let parts = Parts {
            env: Arc::new(Toy { tasks: 6 }),
            heldout: Vec::new(),
            generator: Arc::new(Colocated(policy.clone())),
            learner: wrap(Arc::new(WorkerLearner { policy, timeout: Duration::from_secs(600) })),
            setup: tritonforge_rl::setup::train_setup(cfg, &model.display().to_string()),
            pad_id: 0,
            policy: "tiny".into(),
            timeline: Arc::new(Timeline::new()),
            timed: false,
            run: "toy".into(),
            tokenizer_dir: Some(model.to_path_buf()),
            evaluation: serde_json::Value::Null,
        };
        let mut steps = Vec::new();
        let mut sink = |e: RlEvent| {
            if let RlEvent::Step(m) = e {
                steps.push(*m);
            }
        };
        tritonforge_rl::train(cfg, parts, None, &mut sink).await.unwrap();
        steps
    })
}

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_rewarded_behaviour_increases() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path(), Some(0.5));
    let mut cfg = toy_config(&dir.path().join("out"), &model, 8, 0.01, "");
    cfg.loss.measure_kl = true; // measured, not a penalty: the same updates
    let steps = toy_run(&cfg, &model);
    assert_eq!(steps.len(), 8);
    // The KL to the start, measured every trained step; the policy moved away from it.
    let kls: Vec<f64> = steps.iter().filter(|s| s.updates > 0).map(|s| s.kl.unwrap()).collect();
    assert!(kls.iter().all(|k| *k >= 0.0) && kls.last().is_some_and(|k| *k > 1e-4), "{kls:?}");
    let first = (steps[0].reward_mean + steps[1].reward_mean) / 2.0;
    let last = (steps[6].reward_mean + steps[7].reward_mean) / 2.0;
    assert!(
        last > first + 0.25,
        "marker share {first:.3} -> {last:.3}: {:?}",
        steps.iter().map(|s| s.reward_mean).collect::<Vec<_>>()
    );
    assert!(steps[0].updates == 1 && steps[1].updates == 1, "the first steps train");
    for s in &steps {
        assert_eq!(s.staleness, 0);
        assert_eq!(s.groups_drawn, s.groups_kept + s.groups_skipped);
        assert_eq!(s.reward_terms, "compile+correct (no timing: CPU mode)");
        if s.updates == 0 {
            // Dynamic sampling: groups with equal rewards (here: all solved) were skipped,
            // more were drawn, and none had signal either.
            assert!(s.groups_kept == 0 && s.fill_rounds >= 1 && s.groups_drawn > 4, "{s:?}");
            continue;
        }
        assert!(s.target_tokens > 0 && s.grad_norm > 0.0 && s.entropy > 0.0, "{s:?}");
        // The one update's ratio against the proximal log-probs is exactly 1.
        assert!((s.ratio_mean - 1.0).abs() < 1e-3, "{s:?}");
        // The worker's own account of the step: it generated and trained; no GPU, so no
        // GPU share (never a guess).
        let w = s.worker.as_ref().expect("the colocated worker reports its time");
        assert!(w.wall_s > 0.0 && w.generate_s > 0.0 && w.train_s > 0.0, "{w:?}");
        assert!(w.generate_s + w.train_s + w.refresh_s <= w.wall_s + 1e-6, "{w:?}");
        assert!((0.0..=1.0).contains(&w.idle) && w.gpu_idle.is_none(), "{w:?}");
        // Nor a CUDA allocator to count retries of.
        assert_eq!(w.alloc_retries, None, "{w:?}");
        // Shares of the learner's time, never more than all of it.
        for share in [s.learner_with_generation, s.learner_with_evaluation] {
            assert!((0.0..=1.0).contains(&share), "{share}");
        }
    }
    // Checkpoints every two steps, the marker naming the last.
    let out = dir.path().join("out");
    assert_eq!(std::fs::read_to_string(out.join("LATEST")).unwrap().trim(), "step-000008");
    assert!(out.join("checkpoints/step-000004/rl_state.json").is_file());
    assert_eq!(jsonl(&out.join("metrics.jsonl")).len(), 8);
}

/// A learner that notes the temperature of every score and update it is asked for and,
/// before each update, how far the update's behaviour log-probabilities are from the
/// untempered model's (scored at temperature 1 on the update's rows); then passes them on.
struct Noting {
    inner: Arc<dyn Learner>,
    seen: std::sync::Mutex<Vec<(&'static str, f64)>>,
    /// Per update: the mean |behaviour - untempered score| over its tokens.
    from_untempered: std::sync::Mutex<Vec<f64>>,
}

impl Learner for Noting {
    fn setup(
        &self,
        setup: tritonforge_protocol::TrainSetup,
    ) -> BoxFuture<'_, Result<tritonforge_protocol::TrainInfo, String>> {
        self.inner.setup(setup)
    }
    fn score(
        &self,
        job: tritonforge_protocol::ScoreJob,
    ) -> BoxFuture<'_, Result<tritonforge_protocol::Scores, String>> {
        self.seen.lock().unwrap().push(("score", job.temperature));
        self.inner.score(job)
    }
    fn step(
        &self,
        batch: tritonforge_protocol::RlBatch,
    ) -> BoxFuture<'_, Result<tritonforge_protocol::RlStats, String>> {
        self.seen.lock().unwrap().push(("step", batch.loss.temperature));
        Box::pin(async move {
            let job = tritonforge_protocol::ScoreJob {
                batch: tritonforge_protocol::TrainBatch {
                    micro: batch.micro.iter().map(|m| m.rows.clone()).collect(),
                },
                reference: false,
                temperature: 1.0,
            };
            let plain = self.inner.score(job).await?.logprobs;
            let behaviour = batch.micro.iter().flat_map(|m| m.behaviour.iter().flatten());
            let diffs: Vec<f64> = behaviour
                .zip(plain.iter().flatten().flatten())
                .map(|(b, p)| f64::from((b - p).abs()))
                .collect();
            let mean = diffs.iter().sum::<f64>() / diffs.len().max(1) as f64;
            self.from_untempered.lock().unwrap().push(mean);
            self.inner.step(batch).await
        })
    }
    fn save(&self, job: tritonforge_protocol::SaveJob) -> BoxFuture<'_, Result<u64, String>> {
        self.inner.save(job)
    }
}

/// Sampled at temperature 0.5, the learner trains softmax(logits / 0.5) against the
/// generator's sampling log-probabilities. Every score (the reference's too) and update
/// is asked at 0.5; the behaviour log-probabilities are not the untempered model's; and
/// with the ratio taken against them directly (no proximal scores) the first update's
/// ratios are 1, so the learner's tempered scores are of the distribution they describe.
#[test]
fn a_tempered_rollout_trains_the_distribution_it_sampled() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path(), Some(0.5));
    let mut cfg = toy_config(&dir.path().join("out"), &model, 2, 0.01, "");
    cfg.rollout.temperature = 0.5;
    cfg.loss.proximal = false;
    cfg.loss.measure_kl = true;
    cfg.check().unwrap();
    let noting = Arc::new(std::sync::OnceLock::<Arc<Noting>>::new());
    let keep = noting.clone();
    let steps = toy_run_with(&cfg, &model, move |inner| {
        let n = Arc::new(Noting {
            inner,
            seen: Default::default(),
            from_untempered: Default::default(),
        });
        let _ = keep.set(n.clone());
        n
    });
    let first = steps.iter().find(|s| s.updates > 0).expect("a step with signal");
    assert!((first.ratio_mean - 1.0).abs() < 1e-3 && first.ratio_max < 1.0 + 1e-3, "{first:?}");
    let noted = noting.get().expect("the learner was made");
    let seen = noted.seen.lock().unwrap().clone();
    assert!(
        seen.iter().any(|(k, _)| *k == "score")
            && seen.iter().any(|(k, _)| *k == "step")
            && seen.iter().all(|(_, t)| (*t - 0.5).abs() < 1e-6),
        "{seen:?}"
    );
    let apart = noted.from_untempered.lock().unwrap().clone();
    assert!(!apart.is_empty() && apart.iter().all(|d| *d > 1e-2), "{apart:?}");
}

/// `loss.mask_truncated`: the toy's one-token answers stop at their cap unless they are
/// the end token, so turns are masked in every step that keeps a group, and a step whose
/// every kept turn was cut trains on nothing.
#[test]
fn turns_cut_at_the_cap_are_masked_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path(), Some(0.5));
    let mut cfg = toy_config(&dir.path().join("out"), &model, 2, 0.002, "");
    cfg.loss.mask_truncated = true;
    let steps = toy_run(&cfg, &model);
    assert_eq!(steps.len(), 2);
    for s in steps.iter().filter(|s| s.groups_kept > 0) {
        assert!(s.masked_turns > 0, "{s:?}");
        assert!(s.masked_turns <= s.groups_kept * 8, "{s:?}");
        if s.sequences == 0 {
            assert_eq!(s.updates, 0, "nothing left to train: {s:?}");
        }
    }
}

/// Stopped after two steps and resumed, a run takes the same steps as one that ran
/// through: the same problems, the same completions, the same losses.
#[test]
fn a_resumed_run_takes_the_same_steps() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path(), Some(0.5));
    let through = toy_config(&dir.path().join("a"), &model, 4, 0.002, "");
    let a = toy_run(&through, &model);
    let part = toy_config(&dir.path().join("b"), &model, 4, 0.002, "max_steps_now = 2");
    let b1 = toy_run(&part, &model);
    assert_eq!(b1.len(), 2);
    let b2 = toy_run(&part, &model);
    assert_eq!(b2.len(), 2, "the second invocation resumes at step 3");
    let b: Vec<StepMetrics> = b1.into_iter().chain(b2).collect();
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.step, y.step);
        assert_eq!(x.generated_tokens, y.generated_tokens, "step {}", x.step);
        assert!((x.reward_mean - y.reward_mean).abs() < 1e-9, "step {}: {x:?} vs {y:?}", x.step);
        assert_eq!(x.updates, y.updates, "step {}", x.step);
        assert!(x.kl.is_none() && y.kl.is_none(), "no KL asked for, none measured");
        // The loss of one update is ~0 (ratio 1, advantages of mean 0); the gradient is not.
        let (g, h) = (x.grad_norm, y.grad_norm);
        assert!((g - h).abs() <= 1e-3 * g.max(1e-6), "step {}: grad norm {g} vs {h}", x.step);
    }
    let lines = jsonl(&dir.path().join("b/metrics.jsonl"));
    assert_eq!(
        lines.iter().map(|l| l["step"].as_u64().unwrap()).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    // Stopped by the clock instead: each invocation takes at least one step and stops
    // before a step that would end past one second (the worker's set-up alone takes
    // longer), checkpointing where it stopped even between `save_every` marks; the
    // invocations together take the same steps.
    let timed = toy_config(&dir.path().join("c"), &model, 4, 0.002, "max_seconds_now = 1");
    let mut c: Vec<StepMetrics> = Vec::new();
    let mut taken = Vec::new();
    while c.len() < 4 && taken.len() < 4 {
        let part = toy_run(&timed, &model);
        taken.push(part.len());
        let latest = std::fs::read_to_string(dir.path().join("c/LATEST")).unwrap();
        assert_eq!(latest.trim(), format!("step-{:06}", c.len() + part.len()), "{taken:?}");
        c.extend(part);
    }
    assert!(taken.len() > 1 && taken.iter().all(|&n| n >= 1), "steps per invocation: {taken:?}");
    for (x, y) in a.iter().zip(&c) {
        assert_eq!((x.step, x.generated_tokens), (y.step, y.generated_tokens));
        assert!((x.reward_mean - y.reward_mean).abs() < 1e-9, "step {}", x.step);
    }
}

/// Random weights written into the model directory (seeded): a base model an adapter
/// checkpoint can name and load.
fn with_weights(model: &Path) {
    let code = "import sys, torch\nfrom transformers import AutoConfig, AutoModelForCausalLM\n\
torch.manual_seed(3)\nm = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(sys.argv[1]))\n\
m.save_pretrained(sys.argv[1])\n";
    let out = std::process::Command::new(venv().join("bin/python"))
        .args(["-c", code])
        .arg(model)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn suite_config(out: &Path, model: &Path, extra: &str) -> String {
    format!(
        r#"
[model]
path = "{model}"
dtype = "fp32"
attention = "sdpa"
compile = "off"
[model.lora]
rank = 4
alpha = 8.0
target_modules = ["q_proj", "v_proj"]
[data]
train = [{{ suite = "builtin", level = 1 }}]
heldout = [{{ suite = "builtin", split = "heldout", level = 2, name = "l2-heldout" }}]
[rollout]
problems = 2
samples = 2
turns = 2
max_tokens = 8
parallel = 8
fill_rounds = 1
[schedule]
steps = 2
save_every = 1
{extra}
[output]
dir = "{out}"
"#,
        model = model.display(),
        out = out.display()
    )
}

/// `train rl --json` on the CPU: the process's output and the events on its stdout.
fn train_rl(state: &Path, cfg: &Path) -> (std::process::Output, Vec<Value>) {
    let o = run(tf(state).args(["--device", "cpu", "train", "rl", "--json", "--config"]).arg(cfg));
    let events = text(&o.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    (o, events)
}

fn event_kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["event"].as_str().unwrap_or("?")).collect()
}

/// The real binary on the built-in suite with the real evaluator (CPU mode). The random
/// model writes no code, so every reward is equal: both steps say so and train nothing,
/// while the heldout set, the metrics, the store and the checkpoints are all kept, and a
/// checkpoint's adapter is a model `run --model` plays.
/// Named to sort first: libtest starts a binary's tests in name order, and this one, the
/// longest (nine invocations, seven of them starting the worker), would otherwise start
/// last and run alone at the end.
#[test]
fn a_colocated_train_rl_on_the_suite_keeps_metrics_checkpoints_and_heldout() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let model = tiny_model(dir.path(), None);
    with_weights(&model);
    let out = dir.path().join("out");
    let cfg = dir.path().join("rl.toml");
    // Two heldout sets, played together, two samples each at their own temperature.
    let two_sets = suite_config(
        &out,
        &model,
        "heldout_max_tokens = 12\nheldout_samples = 2\nheldout_temperature = 0.5\nheldout_turns = 1",
    )
    .replace(
        "heldout = [",
        "heldout = [{ suite = \"builtin\", split = \"heldout\", level = 1, name = \"l1-heldout\" }, ",
    )
    // The training source's own completion cap, under the rollouts' 8.
    .replace("level = 1 }]", "level = 1, max_tokens = 6, name = \"l1\" }]");
    std::fs::write(&cfg, two_sets).unwrap();
    let (o, events) = train_rl(&state, &cfg);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(
        event_kinds(&events),
        ["ready", "heldout", "heldout", "step", "saved", "step", "saved", "heldout", "heldout"],
        "{err}"
    );
    let sets: Vec<&str> =
        events[1..3].iter().map(|e| e["heldout"]["set"].as_str().unwrap()).collect();
    assert_eq!(sets, ["l1-heldout", "l2-heldout"], "in the config's order");
    let held = &events[2]["heldout"];
    assert_eq!(held["step"].as_u64(), Some(0));
    assert_eq!(held["problems"], 20);
    assert_eq!(held["max_tokens"], 12, "heldout at its own cap, rollouts at 8: {held}");
    assert_eq!((held["samples"].as_u64(), held["temperature"].as_f64()), (Some(2), Some(0.5)));
    assert_eq!(held["turns"], 1, "heldout plays its own turns, rollouts 2: {held}");
    // Per problem, the samples right at the first turn: every problem named, and they
    // add up to pass@1.
    let by = held["by_problem"].as_object().expect("by_problem");
    assert_eq!(by.len(), 20, "{held}");
    let right: u64 = by.values().map(|v| v.as_u64().unwrap()).sum();
    assert!(by.values().all(|v| v.as_u64().unwrap() <= 2), "{held}");
    assert!((right as f64 / 40.0 - held["pass_at_1"].as_f64().unwrap()).abs() < 1e-9, "{held}");
    for e in events.iter().filter(|e| e["event"] == "step") {
        let m = &e["metrics"];
        assert_eq!(m["updates"], 0, "no signal, no update: {m}");
        assert_eq!(m["groups_kept"], 0);
        assert_eq!(m["groups_skipped"], m["groups_drawn"]);
        assert_eq!(m["fill_rounds"], 1, "one further draw to find signal: {m}");
        assert_eq!(m["reward_terms"], "compile+correct (no timing: CPU mode)");
        assert_eq!(m["pass_by_turn"].as_array().unwrap().len(), 2);
        // One source: its share is the whole step, each turn within its own cap.
        let src = &m["by_source"][0];
        assert_eq!((src["source"].as_str(), &src["episodes"]), (Some("l1"), &m["episodes"]));
        let episodes = m["episodes"].as_u64().unwrap();
        let tokens = m["generated_tokens"].as_u64().unwrap();
        assert!(tokens > 0 && tokens <= episodes * 2 * 6, "{tokens} tokens: {m}");
        // The slowest chain of turns is one of the step's episodes, at least the mean.
        let (slow, mean) = (&m["slowest"], &m["mean_chain"]);
        let total =
            |c: &Value| c["generate_s"].as_f64().unwrap() + c["evaluate_s"].as_f64().unwrap();
        assert!(slow["episode"].as_str().is_some_and(|s| !s.is_empty()), "{slow}");
        assert!(slow["generate_s"].as_f64().unwrap() > 0.0, "{slow}");
        assert!(total(slow) >= total(mean) && total(mean) > 0.0, "{slow} {mean}");
        // The pace (end to end) never exceeds the batch's latency, which may start earlier.
        let (pace, latency) = (m["interval_s"].as_f64().unwrap(), m["step_s"].as_f64().unwrap());
        assert!(pace > 0.0 && pace <= latency + 1e-9, "interval {pace} s, step {latency} s");
    }
    assert_eq!(jsonl(&out.join("metrics.jsonl")).len(), 2);
    assert_eq!(jsonl(&out.join("heldout.jsonl")).len(), 4);
    // The evaluator's pool makes its scratch directory as it starts (checked for below).
    assert!(state.join("scratch").is_dir());
    // The run's row for the dashboard: named after the output directory, its config, done.
    let db = rusqlite::Connection::open(state.join("tritonforge.sqlite")).unwrap();
    let (id, kind, status, settings): (String, String, String, String) = db
        .query_row("SELECT id, kind, status, settings FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap();
    assert_eq!((id.as_str(), kind.as_str(), status.as_str()), ("rl-out", "rl", "done"));
    let settings: Value = serde_json::from_str(&settings).unwrap();
    assert_eq!(settings["schedule"]["steps"], 2, "{settings}");
    // Heldout episodes are stored apart from the rollouts': 2 sets × 20 problems × 2
    // samples, at steps 0 and 2.
    let held: i64 = db
        .query_row("SELECT COUNT(*) FROM episodes WHERE run = 'rl-out/heldout'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(held, 160);
    // One turn each for heldout; the rollouts went on to their second.
    let most_turns = |run: &str| -> usize {
        let mut q = db.prepare("SELECT episode FROM episodes WHERE run = ?1").unwrap();
        let eps: Vec<String> =
            q.query_map([run], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
        eps.iter()
            .map(|e| serde_json::from_str::<Value>(e).unwrap()["turns"].as_array().unwrap().len())
            .max()
            .unwrap_or(0)
    };
    assert_eq!((most_turns("rl-out/heldout"), most_turns("rl-out")), (1, 2));
    drop(db);
    assert_eq!(std::fs::read_to_string(out.join("LATEST")).unwrap().trim(), "step-000002");
    // The name is recorded beside the checkpoints: a resume keeps it.
    assert_eq!(std::fs::read_to_string(out.join("run-name")).unwrap().trim(), "rl-out");
    let adapter = out.join("checkpoints/step-000002/adapter");
    let acfg: Value = serde_json::from_str(
        &std::fs::read_to_string(adapter.join("adapter_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(acfg["base_model_name_or_path"].as_str().map(PathBuf::from), Some(model.clone()));
    // Run again: the run is complete, nothing more is done and nothing is started: no
    // policy worker (its `ready` event), no evaluator pool (its scratch directory, in a
    // state directory of its own here).
    let fresh = dir.path().join("state-complete");
    let (o, again) = train_rl(&fresh, &cfg);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(event_kinds(&again), ["complete"], "{err}");
    assert_eq!((&again[0]["step"], &again[0]["steps"]), (&Value::from(2), &Value::from(2)));
    assert!(err.contains("done: 2 of 2 steps; latest checkpoint:"), "{err}");
    assert!(!fresh.join("scratch").exists(), "the evaluator's pool started: {err}");
    // The checkpoint records what paid its candidates: the flags, the device, untimed.
    let state_json: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("checkpoints/step-000002/rl_state.json")).unwrap(),
    )
    .unwrap();
    let evaluation = &state_json["recipe"]["evaluation"];
    assert_eq!(
        (&evaluation["device"], &evaluation["timed"]),
        (&Value::from("cpu"), &Value::from(false))
    );
    assert_eq!(evaluation["trials"], 5, "{evaluation}");
    assert!(evaluation.get("timing").is_none(), "no timing on a CPU: {evaluation}");
    assert!(evaluation["guard"].as_str().is_some_and(|g| g.starts_with("rules ")), "{evaluation}");
    assert_eq!(state_json["run"], "rl-out");
    // Longer, but evaluated with other flags: refused before anything starts, by name.
    let longer = dir.path().join("rl-longer.toml");
    let base = std::fs::read_to_string(&cfg).unwrap();
    assert!(base.contains("steps = 2"));
    std::fs::write(&longer, base.replace("steps = 2", "steps = 3")).unwrap();
    let other_flags = dir.path().join("state-other-flags");
    let o = run(tf(&other_flags)
        .args(["--device", "cpu", "train", "rl", "--json", "--trials", "3", "--config"])
        .arg(&longer));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("evaluation.trials: 5 → 3"), "{err}");
    assert!(!other_flags.join("scratch").exists(), "the evaluator's pool started: {err}");
    // The checkpoint plays.
    let played = run(tf(&state)
        .args([
            "--device",
            "cpu",
            "run",
            "--json",
            "--turns",
            "1",
            "--max-tokens",
            "8",
            "--limit",
            "1",
            "--set",
            "quick",
            "--model",
        ])
        .arg(&adapter));
    assert_eq!(played.status.code(), Some(0), "{}\n{}", text(&played.stderr), text(&played.stdout));
    let report: Value = serde_json::from_str(text(&played.stdout).trim()).unwrap();
    assert!(report["policy"].as_str().unwrap().contains("adapter"), "{report}");
    // A stop before the first checkpoint (the checkpoints gone): the run starts over,
    // but step 0's heldout pass, written with the same settings, is not played again.
    std::fs::remove_dir_all(out.join("checkpoints")).unwrap();
    std::fs::remove_file(out.join("LATEST")).unwrap();
    let (o, over) = train_rl(&state, &cfg);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        event_kinds(&over),
        ["ready", "step", "saved", "step", "saved", "heldout", "heldout"]
    );
    let steps: Vec<u64> =
        jsonl(&out.join("heldout.jsonl")).iter().map(|h| h["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [0, 0, 2, 2], "step 0 kept once, step 2 measured again");
    // Another run from the same policy takes step 0's figures from this one's file
    // instead of playing them; played otherwise (three samples), it stops at once.
    let base_text = std::fs::read_to_string(&cfg).unwrap();
    // In the same store, under a directory also named `out`: a run of its own name.
    let other = dir.path().join("other").join("out");
    let reuse =
        base_text.replace(&out.display().to_string(), &other.display().to_string()).replace(
            "[schedule]",
            &format!(
                "[schedule]\nmax_steps_now = 1\nheldout_baseline = \"{}\"",
                out.join("heldout.jsonl").display()
            ),
        );
    let cfg2 = dir.path().join("rl2.toml");
    std::fs::write(&cfg2, &reuse).unwrap();
    let db = rusqlite::Connection::open(state.join("tritonforge.sqlite")).unwrap();
    // Each run's episodes, whole (an overwrite keeps their number).
    let episodes = |db: &rusqlite::Connection, run: &str| -> (i64, String) {
        db.query_row(
            "SELECT COUNT(*), COALESCE(GROUP_CONCAT(id || episode), '') \
             FROM (SELECT id, episode FROM episodes WHERE run = ?1 ORDER BY id)",
            [run],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    };
    let before = episodes(&db, "rl-out");
    assert!(before.0 > 0 && episodes(&db, "rl-out-2").0 == 0);
    drop(db);
    let (o, ev) = train_rl(&state, &cfg2);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(event_kinds(&ev), ["ready", "heldout", "heldout", "step", "saved"]);
    assert_eq!(std::fs::read_to_string(other.join("run-name")).unwrap().trim(), "rl-out-2");
    let db = rusqlite::Connection::open(state.join("tritonforge.sqlite")).unwrap();
    assert!(episodes(&db, "rl-out") == before, "the first run's episodes kept whole");
    assert!(episodes(&db, "rl-out-2").0 > 0, "the second run's under its own name");
    drop(db);
    let first = jsonl(&out.join("heldout.jsonl"));
    for (e, h) in ev[1..3].iter().zip(&first) {
        assert_eq!(
            e["heldout"]["reused_from"].as_str(),
            Some(out.join("heldout.jsonl").to_str().unwrap())
        );
        assert_eq!(
            (&e["heldout"]["set"], &e["heldout"]["pass_at_1"]),
            (&h["set"], &h["pass_at_1"])
        );
        assert_eq!(e["heldout"]["policy"].as_str(), Some(model.to_str().unwrap()), "the label");
    }
    std::fs::remove_dir_all(&other).unwrap();
    std::fs::write(&cfg2, reuse.replace("heldout_samples = 2", "heldout_samples = 3")).unwrap();
    // Named before anything starts: no worker, no pool.
    let fresh = dir.path().join("state-baseline");
    let (o, ev) = train_rl(&fresh, &cfg2);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("heldout_baseline") && err.contains("samples 2, this run 3"), "{err}");
    assert!(ev.is_empty(), "{ev:?}");
    assert!(!fresh.join("scratch").exists(), "the evaluator's pool started: {err}");
    assert!(!other.join("run-name").exists(), "a refused run reserves no name");
    assert!(
        !other.join("heldout.jsonl").exists() || jsonl(&other.join("heldout.jsonl")).is_empty()
    );
    // A heldout pass that used up the invocation's clock (over half of it, no step timed
    // yet): no step is started after it, where the device's limit would only kill it.
    std::fs::remove_dir_all(out.join("checkpoints")).unwrap();
    std::fs::remove_file(out.join("LATEST")).unwrap();
    std::fs::remove_file(out.join("heldout.jsonl")).unwrap();
    std::fs::remove_file(out.join("metrics.jsonl")).unwrap();
    let text_cfg = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text_cfg.replace("[schedule]", "[schedule]\nmax_seconds_now = 1"))
        .unwrap();
    let (o, late) = train_rl(&state, &cfg);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(event_kinds(&late), ["ready", "heldout", "heldout"], "{late:?}");
    assert_eq!(jsonl(&out.join("heldout.jsonl")).len(), 2, "kept for the next invocation");
    // With one step to take: the first step of an invocation runs, but the clock is past
    // its limit when the last step's pass is due, so the invocation stops at the step's
    // checkpoint, says the pass is left (not a finished run), and the next plays it first.
    let one = std::fs::read_to_string(&cfg).unwrap().replace("steps = 2", "steps = 1");
    std::fs::write(&cfg, one).unwrap();
    let (o, first) = train_rl(&state, &cfg);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        event_kinds(&first),
        ["ready", "step", "saved", "heldout_cut"],
        "no pass, and the event says it is left: {first:?}"
    );
    let cut = first.iter().find(|e| e["event"] == "heldout_cut").unwrap();
    assert_eq!((cut["step"].as_u64(), cut["played"].as_u64()), (Some(1), Some(0)), "{cut}");
    let err = text(&o.stderr);
    assert!(
        err.contains("done: 1 of 1 steps (its heldout pass at step 1 is not finished)"),
        "{err}"
    );
    assert_eq!(jsonl(&out.join("heldout.jsonl")).len(), 2);
    let (o, pass) = train_rl(&state, &cfg);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(event_kinds(&pass), ["ready", "heldout", "heldout"], "{pass:?}");
    let steps: Vec<u64> =
        jsonl(&out.join("heldout.jsonl")).iter().map(|h| h["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [0, 0, 1, 1]);
}

#[test]
fn bad_configs_and_unreachable_servers_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let model = tiny_model(dir.path(), None);
    let out = dir.path().join("out");
    let cfg = dir.path().join("rl.toml");
    let fewer = suite_config(&out, &model, "").replace("samples = 2", "samples = 1");
    for (text_cfg, needle) in [
        (fewer, "rollout.samples"),
        (suite_config(&out, &model, "[loss]\nclip_lo = 0.1\n"), "clip_lo"),
        (suite_config(&out, &model, "[reward]\npreset = \"nobody\"\n"), "nobody"),
        // Several ranks only train, and not LoRA yet.
        (suite_config(&out, &model, "[learner]\nprocs = 2\n"), "learner.procs = 2 with model.lora"),
        (
            suite_config(&out, &model, "[learner]\nprocs = 2\n")
                .replace("[model.lora]\nrank = 4\nalpha = 8.0\n", "")
                .replace("target_modules = [\"q_proj\", \"v_proj\"]\n", ""),
            "learner.procs = 2 with generation.kind = \"colocated\"",
        ),
    ] {
        std::fs::write(&cfg, &text_cfg).unwrap();
        let o = run(tf(&state).args(["--device", "cpu", "train", "rl", "--config"]).arg(&cfg));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{needle}: {err}");
        assert!(err.contains(needle) && err.contains("rl.toml"), "{needle}: {err}");
    }
    std::fs::write(&cfg, suite_config(&out, &model, "")).unwrap();
    let o = run(tf(&state)
        .args(["--device", "cpu", "--eval-server", "http://127.0.0.1:9", "train", "rl", "--config"])
        .arg(&cfg));
    let err = text(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("127.0.0.1:9"), "{err}");
    assert!(!out.join("LATEST").exists());
}

/// A model without a chat template is refused before anything starts (no worker, no
/// evaluator), by name: colocated, the worker would render every prompt with it; with
/// external engines, their `generation.tokenizer` must have one.
#[test]
fn a_model_without_a_chat_template_is_named_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let model = tiny_model(dir.path(), None);
    for f in ["chat_template.jinja", "chat_template.json"] {
        let _ = std::fs::remove_file(model.join(f));
    }
    let tc = model.join("tokenizer_config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&tc).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("chat_template");
    std::fs::write(&tc, config.to_string()).unwrap();
    let out = dir.path().join("out");
    let cfg = dir.path().join("rl.toml");
    let sglang = format!(
        "[generation]\nkind = \"sglang\"\nurls = [\"http://127.0.0.1:9\"]\ntokenizer = \"{}\"\n",
        model.display()
    );
    let full = suite_config(&out, &model, "")
        .replace("[model.lora]\nrank = 4\nalpha = 8.0\n", "")
        .replace("target_modules = [\"q_proj\", \"v_proj\"]\n", "");
    for (text_cfg, key) in
        [(suite_config(&out, &model, ""), "model.path"), (full + &sglang, "generation.tokenizer")]
    {
        std::fs::write(&cfg, text_cfg).unwrap();
        let started = std::time::Instant::now();
        let o = run(tf(&state).args(["--device", "cpu", "train", "rl", "--config"]).arg(&cfg));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(key) && err.contains("no chat template"), "{err}");
        assert!(err.contains(&model.display().to_string()), "the model is named: {err}");
        assert!(!err.contains("Traceback") && err.lines().count() <= 3, "{err}");
        assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
        assert!(!out.exists(), "nothing was started or written");
    }
}

/// The mock engine, speaking SGLang's or vLLM's API (generation and weight refresh) as
/// their servers do: per prompt, the first request gets a code answer and the second
/// none, so every group of two has unequal rewards. A load records the directory with a
/// digest of the weights found there (a directory without weights is refused, as the
/// engines do, with a message of their shape); every control call is recorded in order,
/// and the engine reports the weight version it was last given, on its own route and
/// (SGLang) with every completion, where the version of each is recorded too.
#[derive(Clone)]
struct Engine {
    tokenizer: Arc<tritonforge_chat::ChatTokenizer>,
    seen: Arc<std::sync::Mutex<std::collections::HashMap<Vec<u32>, usize>>>,
    loads: Arc<std::sync::Mutex<Vec<(String, u64)>>>,
    calls: Arc<std::sync::Mutex<Vec<String>>>,
    version: Arc<std::sync::Mutex<String>>,
    /// When set, loads after the first N (the number given) fail with this message.
    fail: Arc<std::sync::Mutex<Option<(usize, String)>>>,
    /// The version each completion was generated with, in order.
    generated: Arc<std::sync::Mutex<Vec<String>>>,
    /// When set, completions claim this version whatever was loaded (weights changed
    /// behind the trainer's back).
    claim: Arc<std::sync::Mutex<Option<String>>>,
    /// LoRA adapters held: name, path, digest of its weights.
    adapters: Arc<std::sync::Mutex<Vec<(String, String, u64)>>>,
    /// Every adapter load, in order: name, path, digest.
    adapter_loads: Arc<std::sync::Mutex<Vec<(String, String, u64)>>>,
}

type EngineState = axum::extract::State<Engine>;
type Json = axum::Json<Value>;

impl Engine {
    fn new() -> Engine {
        Engine {
            tokenizer: Arc::new(
                tritonforge_chat::ChatTokenizer::from_dir(&exported_tokenizer()).unwrap(),
            ),
            seen: Default::default(),
            loads: Default::default(),
            calls: Default::default(),
            version: Arc::new(std::sync::Mutex::new("default".into())),
            fail: Default::default(),
            generated: Default::default(),
            claim: Default::default(),
            adapters: Default::default(),
            adapter_loads: Default::default(),
        }
    }

    fn record(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }

    /// The answer's ids (ending with `<|im_end|>`) to `input`.
    fn answer(&self, input: &[u32]) -> Vec<u32> {
        let n = {
            let mut seen = self.seen.lock().unwrap();
            let n = seen.entry(input.to_vec()).or_default();
            *n += 1;
            *n
        };
        let text = if n % 2 == 1 {
            "```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n```"
        } else {
            "I cannot help with that."
        };
        let mut out = self.tokenizer.encode(text).unwrap();
        out.push(self.tokenizer.token_id("<|im_end|>").unwrap());
        out
    }

    /// Loads `dir` when it holds weights; `Err` with an engine's message otherwise.
    fn load(&self, dir: &str) -> Result<(), String> {
        let weights = Path::new(dir).join("model.safetensors");
        self.loads.lock().unwrap().push((dir.to_string(), digest(&weights)));
        if let Some((allowed, m)) = self.fail.lock().unwrap().as_mut() {
            if *allowed == 0 {
                return Err(m.clone());
            }
            *allowed -= 1;
        }
        if weights.is_file() {
            Ok(())
        } else {
            Err(format!("Cannot find any model weights with `{dir}`"))
        }
    }

    fn weight_version(&self) -> Json {
        axum::Json(serde_json::json!({"weight_version": self.version.lock().unwrap().clone()}))
    }

    /// `GET /v1/models`, as both servers answer it: the base, then each adapter with its
    /// `parent` and its path as `root`.
    fn models(&self) -> Json {
        let mut data = vec![
            serde_json::json!({"id": "tiny", "object": "model", "root": "/models/tiny", "parent": null}),
        ];
        for (name, path, _) in self.adapters.lock().unwrap().iter() {
            data.push(
                serde_json::json!({"id": name, "object": "model", "root": path, "parent": "tiny"}),
            );
        }
        axum::Json(serde_json::json!({"object": "list", "data": data}))
    }

    /// Loads an adapter (`Err`: the message, as the engines word it).
    fn load_adapter(&self, b: &Value) -> Result<(), String> {
        let (name, path) = (b["lora_name"].as_str().unwrap(), b["lora_path"].as_str().unwrap());
        self.record(format!("load_lora_adapter {name}"));
        let weights = Path::new(path).join("adapter_model.safetensors");
        if !weights.is_file() {
            return Err(format!("Loading lora {name} failed: No adapter found for {path}"));
        }
        let mut held = self.adapters.lock().unwrap();
        if held.iter().any(|a| a.0 == name) {
            return Err(format!("The lora adapter '{name}' has already been loaded."));
        }
        let a = (name.to_string(), path.to_string(), digest(&weights));
        self.adapter_loads.lock().unwrap().push(a.clone());
        held.push(a);
        Ok(())
    }

    fn unload_adapter(&self, b: &Value) -> Result<(), String> {
        let name = b["lora_name"].as_str().unwrap();
        self.record(format!("unload_lora_adapter {name}"));
        let mut held = self.adapters.lock().unwrap();
        let before = held.len();
        held.retain(|a| a.0 != name);
        if held.len() == before {
            return Err(format!("LoRA with name {name} does not exist."));
        }
        Ok(())
    }

    /// A request naming `adapter` (`Err`: it is not loaded, as the engines refuse it).
    fn check_adapter(&self, adapter: Option<&str>) -> Result<(), String> {
        match adapter {
            Some(a) if !self.adapters.lock().unwrap().iter().any(|h| h.0 == a) => {
                Err(format!("Got LoRA adapter that has never been loaded: {a}"))
            }
            _ => Ok(()),
        }
    }

    /// The version a completion made now reports (and records).
    fn generated_with(&self) -> String {
        let v = self
            .claim
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| self.version.lock().unwrap().clone());
        self.generated.lock().unwrap().push(v.clone());
        v
    }

    fn sglang(&self) -> axum::Router {
        use axum::routing::{get, post};
        axum::Router::new()
            .route("/generate", post(sglang_generate))
            .route(
                "/pause_generation",
                post(|axum::extract::State(e): EngineState, axum::Json(b): Json| async move {
                    e.record(format!("pause_generation {}", b["mode"]));
                    axum::Json(serde_json::json!({"message": "Generation paused successfully.", "status": "ok"}))
                }),
            )
            .route(
                "/update_weights_from_disk",
                post(|axum::extract::State(e): EngineState, axum::Json(b): Json| async move {
                    let dir = b["model_path"].as_str().unwrap_or_default();
                    let version = b["weight_version"].as_str().unwrap_or_default();
                    e.record(format!("update_weights_from_disk {version}"));
                    let (status, body) = match e.load(dir) {
                        Ok(()) => {
                            *e.version.lock().unwrap() = version.to_string();
                            (200, serde_json::json!({"success": true, "message": "Succeeded to update model weights.", "num_paused_requests": 0}))
                        }
                        Err(m) => (400, serde_json::json!({"success": false, "message": m, "num_paused_requests": 0})),
                    };
                    (axum::http::StatusCode::from_u16(status).unwrap(), axum::Json(body))
                }),
            )
            .route(
                "/continue_generation",
                post(|axum::extract::State(e): EngineState, axum::Json(_): Json| async move {
                    e.record("continue_generation".into());
                    axum::Json(serde_json::json!({"message": "Generation continued successfully.", "status": "ok"}))
                }),
            )
            .route(
                "/get_weight_version",
                get(|axum::extract::State(e): EngineState| async move {
                    e.record("get_weight_version".into());
                    e.weight_version()
                }),
            )
            .route("/v1/models", get(|axum::extract::State(e): EngineState| async move { e.models() }))
            .route(
                "/load_lora_adapter",
                post(|axum::extract::State(e): EngineState, axum::Json(b): Json| async move {
                    sglang_lora_answer(&e, e.load_adapter(&b))
                }),
            )
            .route(
                "/unload_lora_adapter",
                post(|axum::extract::State(e): EngineState, axum::Json(b): Json| async move {
                    sglang_lora_answer(&e, e.unload_adapter(&b))
                }),
            )
            .with_state(self.clone())
    }

    fn vllm(&self) -> axum::Router {
        use axum::routing::{get, post};
        axum::Router::new()
            .route("/v1/completions", post(vllm_completions))
            .route(
                "/pause",
                post(|axum::extract::State(e): EngineState, q: axum::extract::RawQuery| async move {
                    e.record(format!("pause {}", q.0.unwrap_or_default()));
                    axum::Json(serde_json::json!({"status": "paused"}))
                }),
            )
            .route(
                "/collective_rpc",
                post(|axum::extract::State(e): EngineState, axum::Json(b): Json| async move {
                    e.record(format!("collective_rpc {}", b["method"].as_str().unwrap_or("?")));
                    match e.load(b["kwargs"]["weights_path"].as_str().unwrap_or_default()) {
                        Ok(()) => (axum::http::StatusCode::OK, axum::Json(serde_json::json!({"results": [null]}))),
                        Err(m) => (
                            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                            axum::Json(serde_json::json!({"error": {"message": m, "type": "InternalServerError", "param": null, "code": 500}})),
                        ),
                    }
                }),
            )
            .route(
                "/update_weight_version",
                post(|axum::extract::State(e): EngineState, axum::Json(b): Json| async move {
                    let v = b["new_version"].as_str().unwrap_or_default().to_string();
                    e.record(format!("update_weight_version {v}"));
                    *e.version.lock().unwrap() = v.clone();
                    axum::Json(serde_json::json!({"success": true, "new_version": v}))
                }),
            )
            .route(
                "/resume",
                post(|axum::extract::State(e): EngineState| async move {
                    e.record("resume".into());
                    axum::Json(serde_json::json!({"status": "resumed"}))
                }),
            )
            .route(
                "/weight_info",
                get(|axum::extract::State(e): EngineState| async move {
                    e.record("weight_info".into());
                    e.weight_version()
                }),
            )
            .route("/v1/models", get(|axum::extract::State(e): EngineState| async move { e.models() }))
            .route(
                "/v1/load_lora_adapter",
                post(|axum::extract::State(e): EngineState, axum::Json(b): Json| async move {
                    let done = format!("Success: LoRA adapter '{}' added successfully.", b["lora_name"]);
                    vllm_lora_answer(e.load_adapter(&b), done)
                }),
            )
            .route(
                "/v1/unload_lora_adapter",
                post(|axum::extract::State(e): EngineState, axum::Json(b): Json| async move {
                    let done = format!("Success: LoRA adapter '{}' removed successfully.", b["lora_name"]);
                    vllm_lora_answer(e.unload_adapter(&b), done)
                }),
            )
            .with_state(self.clone())
    }
}

/// SGLang's answer to an adapter load or unload: `{"success", "error_message",
/// "loaded_adapters"}`, HTTP 400 on failure.
fn sglang_lora_answer(e: &Engine, r: Result<(), String>) -> (axum::http::StatusCode, Json) {
    let held: serde_json::Map<String, Value> = e
        .adapters
        .lock()
        .unwrap()
        .iter()
        .map(|a| (a.0.clone(), Value::String(a.1.clone())))
        .collect();
    let (status, ok, msg) = match r {
        Ok(()) => (200, true, String::new()),
        Err(m) => (400, false, m),
    };
    let body = serde_json::json!({"success": ok, "error_message": msg, "loaded_adapters": held});
    (axum::http::StatusCode::from_u16(status).unwrap(), axum::Json(body))
}

/// vLLM's: a text on success, `{"error": {...}}` with HTTP 400 otherwise.
fn vllm_lora_answer(r: Result<(), String>, done: String) -> axum::response::Response {
    use axum::response::IntoResponse;
    match r {
        Ok(()) => (axum::http::StatusCode::OK, done).into_response(),
        Err(m) => (
            axum::http::StatusCode::BAD_REQUEST,
            axum::Json(serde_json::json!({"error": {"message": m, "type": "BadRequestError", "param": null, "code": 400}})),
        )
            .into_response(),
    }
}

/// A digest of a weights file (0: none there).
fn digest(path: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let Ok(bytes) = std::fs::read(path) else { return 0 };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// SGLang's `/generate`: `input_ids` in (and the adapter's name as `lora_path`);
/// `output_ids` and `meta_info` out.
async fn sglang_generate(
    axum::extract::State(e): EngineState,
    axum::Json(body): Json,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let adapter = body["lora_path"].as_str();
    if let Err(m) = e.check_adapter(adapter) {
        let body = serde_json::json!({"error": {"message": m}});
        return (axum::http::StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    }
    // The reply's `weight_version` is the base model's, whatever the adapter.
    let version = match adapter {
        Some(a) => {
            e.generated.lock().unwrap().push(format!("adapter {a}"));
            e.version.lock().unwrap().clone()
        }
        None => e.generated_with(),
    };
    sglang_reply(&e, &body, version).into_response()
}

fn sglang_reply(e: &Engine, body: &Value, version: String) -> Json {
    let input = ids(&body["input_ids"]);
    let out = e.answer(&input);
    let lps: Vec<Value> = out.iter().map(|id| serde_json::json!([-30.0, id, null])).collect();
    axum::Json(serde_json::json!({
        "text": e.tokenizer.decode(&out, true).unwrap(), "output_ids": out,
        "meta_info": {"prompt_tokens": input.len(), "completion_tokens": out.len(),
                      "finish_reason": {"type": "stop", "matched": out.last()},
                      "weight_version": version,
                      "output_token_logprobs": lps}
    }))
}

/// vLLM's `/v1/completions` with the prompt as ids, `return_token_ids` and `logprobs: 0`;
/// an adapter is asked for by its name as `model`.
async fn vllm_completions(
    axum::extract::State(e): EngineState,
    axum::Json(body): Json,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    assert_eq!(body["return_token_ids"], true, "{body}");
    assert_eq!(body["logprobs"], 0, "{body}");
    let adapter = body["model"].as_str().filter(|m| m.contains("-step-"));
    if let Err(m) = e.check_adapter(adapter) {
        let body = serde_json::json!({"error": {"message": format!("The model `{}` does not exist. ({m})", adapter.unwrap_or_default()),
            "type": "NotFoundError", "param": "model", "code": 404}});
        return (axum::http::StatusCode::NOT_FOUND, axum::Json(body)).into_response();
    }
    match adapter {
        Some(a) => e.generated.lock().unwrap().push(format!("adapter {a}")),
        None => {
            e.generated_with();
        }
    }
    vllm_reply(&e, &body).into_response()
}

fn vllm_reply(e: &Engine, body: &Value) -> Json {
    let input = ids(&body["prompt"]);
    let out = e.answer(&input);
    let text = e.tokenizer.decode(&out, true).unwrap();
    let lps: Vec<f64> = out.iter().map(|_| -30.0).collect();
    axum::Json(serde_json::json!({
        "id": "cmpl-mock", "object": "text_completion", "created": 0, "model": "tiny",
        "choices": [{"index": 0, "text": text, "finish_reason": "stop", "stop_reason": null,
                     "prompt_token_ids": input, "token_ids": out,
                     "logprobs": {"text_offset": [], "token_logprobs": lps,
                                  "tokens": [], "top_logprobs": []}}],
        "usage": {"prompt_tokens": input.len(), "completion_tokens": out.len(),
                  "total_tokens": input.len() + out.len()}
    }))
}

/// Disaggregated: generation on a (mock) SGLang engine refreshed from the trainer's
/// weights on disk after every step, evaluation on a real `tritonforge serve` on
/// loopback, training in the policy worker (full weights): first in one process, then on
/// two ranks under `torchrun` (`[learner] procs = 2`, FSDP2 over gloo), whose rank 0
/// writes the weights the engine loads.
#[test]
fn the_disaggregated_path_refreshes_the_engine_and_evaluates_on_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let model = tiny_model(dir.path(), None);
    let engine = Engine::new();
    let url = format!("http://{}", serve_on_loopback(engine.sglang()));
    let server = serve(&dir.path().join("server-state"), &["--device", "cpu"]);
    let cfg = dir.path().join("rl.toml");
    let config = |out: &Path, extra: &str, generation: &str| {
        suite_config(out, &model, extra)
        .replace("[model.lora]\nrank = 4\nalpha = 8.0\ntarget_modules = [\"q_proj\", \"v_proj\"]\n", "")
        .replace("heldout = [{ suite = \"builtin\", split = \"heldout\", level = 2, name = \"l2-heldout\" }]\n", "")
        .replace("turns = 2", "turns = 1")
        + generation
    };
    let engines = |kind: &str, url: &str| {
        format!(
            "[generation]\nkind = \"{kind}\"\nurls = [\"{url}\"]\ntokenizer = \"{}\"\n",
            exported_tokenizer().display()
        )
    };
    // The learner's world size and the steps of one run of the binary (each checked).
    let train = |text_cfg: String| -> (Value, Vec<Value>, String) {
        std::fs::write(&cfg, text_cfg).unwrap();
        let o = run(tf(&state)
            .args([
                "--device",
                "cpu",
                "--eval-server",
                &server.url,
                "train",
                "rl",
                "--json",
                "--config",
            ])
            .arg(&cfg));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{err}\n{}", server.log());
        let events: Vec<Value> =
            text(&o.stdout).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect();
        let world = events[0]["info"]["world_size"].clone();
        let steps: Vec<Value> =
            events.iter().filter(|e| e["event"] == "step").map(|e| e["metrics"].clone()).collect();
        assert_eq!(steps.len(), 2, "{err}");
        for m in &steps {
            assert_eq!(m["groups_kept"], 2, "one code answer and one refusal per group: {m}");
            assert!(m["updates"].as_u64().unwrap() >= 1, "{m}");
            // The engine's log-probs (all -30) say its tokens were far less likely than
            // the trainer finds them: the importance weight hits its cap.
            assert!(m["tis_capped"].as_f64().unwrap() > 0.0, "{m}");
        }
        (world, steps, err)
    };
    let out = dir.path().join("out");
    let (world, steps, _) = train(config(&out, "", &engines("sglang", &url)));
    assert_eq!(world, 1);
    let weights = out.join("weights").display().to_string();
    let loads = std::mem::take(&mut *engine.loads.lock().unwrap());
    assert_eq!(
        loads.iter().map(|l| l.0.clone()).collect::<Vec<_>>(),
        vec![weights.clone(), weights.clone(), weights.clone()],
        "loaded before the first generation, and refreshed after each step"
    );
    // Paused around each load, told the step as its version, and asked for it after.
    let refresh = |v: &str| {
        [
            "pause_generation \"retract\"".to_string(),
            format!("update_weights_from_disk {v}"),
            "continue_generation".into(),
            "get_weight_version".into(),
        ]
    };
    let calls = std::mem::take(&mut *engine.calls.lock().unwrap());
    // Versions carry the run's name (rl-out): two runs sharing an engine are told apart.
    assert_eq!(
        calls,
        [refresh("rl-out-step-0"), refresh("rl-out-step-1"), refresh("rl-out-step-2")].concat()
    );
    // Nothing was generated from the engine's own start-up weights, and each step says
    // which versions its completions came from and what its refresh took.
    let generated = std::mem::take(&mut *engine.generated.lock().unwrap());
    assert!(!generated.is_empty() && !generated.contains(&"default".to_string()), "{generated:?}");
    for m in &steps {
        assert!(m["engines_refresh_s"].as_f64().unwrap() > 0.0, "{m}");
        let versions = m["weight_versions"].as_object().unwrap();
        assert!(versions.keys().all(|v| v.starts_with("rl-out-step-")), "{m}");
        assert!(versions.values().map(|n| n.as_u64().unwrap()).sum::<u64>() > 0, "{m}");
    }

    // The engine restarts from its original weights, and the run is resumed for a third
    // step: the checkpoint's weights are loaded into it before it generates anything.
    *engine.version.lock().unwrap() = "default".into();
    let text_cfg = config(&out, "", &engines("sglang", &url)).replace("steps = 2", "steps = 3");
    std::fs::write(&cfg, text_cfg).unwrap();
    let o = run(tf(&state)
        .args([
            "--device",
            "cpu",
            "--eval-server",
            &server.url,
            "train",
            "rl",
            "--json",
            "--config",
        ])
        .arg(&cfg));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let events: Vec<Value> =
        text(&o.stdout).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect();
    assert_eq!(events[0]["start"], 2, "{events:?}");
    assert!(events[0]["engines_refresh_s"].as_f64().unwrap() > 0.0, "{events:?}");
    let calls = std::mem::take(&mut *engine.calls.lock().unwrap());
    assert_eq!(calls, [refresh("rl-out-step-2"), refresh("rl-out-step-3")].concat());
    let loads = std::mem::take(&mut *engine.loads.lock().unwrap());
    assert_eq!(
        loads[0].1,
        digest(&out.join("checkpoints/step-000002/model.safetensors")),
        "the resumed engine loaded the checkpoint's weights"
    );
    let generated = std::mem::take(&mut *engine.generated.lock().unwrap());
    assert!(!generated.is_empty(), "the third step generated");
    assert!(generated.iter().all(|v| v == "rl-out-step-2"), "{generated:?}");

    // Completions that say they came from other weights than those loaded (an engine
    // refreshed behind the trainer's back) stop the run before it trains on or reports
    // anything generated, naming the engine and both versions.
    *engine.claim.lock().unwrap() = Some("default".into());
    let out_claim = dir.path().join("claim");
    let text_cfg =
        config(&out_claim, "", &engines("sglang", &url)).replace("steps = 2", "steps = 1");
    std::fs::write(&cfg, text_cfg).unwrap();
    let o = run(tf(&state)
        .args([
            "--device",
            "cpu",
            "--eval-server",
            &server.url,
            "train",
            "rl",
            "--json",
            "--config",
        ])
        .arg(&cfg));
    *engine.claim.lock().unwrap() = None;
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    let line = err.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    assert!(
        line.contains(&url) && line.contains("`default`") && line.contains("rl-claim-step-0"),
        "{err}"
    );
    assert!(
        !text(&o.stdout).contains("\"event\":\"step\""),
        "no step reported: {}",
        text(&o.stdout)
    );
    assert!(!out_claim.join("checkpoints/step-000001").exists(), "nothing trained");
    engine.loads.lock().unwrap().clear();
    engine.calls.lock().unwrap().clear();
    engine.generated.lock().unwrap().clear();
    // The server evaluated the code answers (one per problem drawn; repeats are its cache
    // hits), and the client kept none locally.
    let count = |state: &Path| -> i64 {
        let db = rusqlite::Connection::open(state.join("tritonforge.sqlite")).unwrap();
        db.query_row("SELECT count(*) FROM evaluations", [], |r| r.get(0)).unwrap_or(0)
    };
    assert!(count(&dir.path().join("server-state")) >= 2, "{}", server.log());
    assert_eq!(count(&state), 0, "evaluations went to the server");

    // The learner on two ranks: the same steps, a whole checkpoint each step, and the
    // engine refreshed after each with the weights rank 0 wrote.
    let out = dir.path().join("ranks");
    let (world, steps, err) =
        train(config(&out, "[learner]\nprocs = 2\n", &engines("sglang", &url)));
    let log = std::fs::read_to_string(out.join("learner.log")).unwrap_or_default();
    assert_eq!(world, 2, "{err}\n{log}");
    for m in &steps {
        assert!(m["grad_norm"].as_f64().unwrap() > 0.0, "{m}\n{err}\n{log}");
    }
    assert_eq!(std::fs::read_to_string(out.join("LATEST")).unwrap().trim(), "step-000002");
    let last = out.join("checkpoints/step-000002");
    for f in ["model.safetensors", "config.json", "trainer_state.pt", "rl_state.json"] {
        assert!(last.join(f).is_file(), "{f} missing from {}: {log}", last.display());
    }
    let weights = out.join("weights").display().to_string();
    let loads = engine.loads.lock().unwrap().clone();
    assert_eq!(
        loads.iter().map(|l| l.0.clone()).collect::<Vec<_>>(),
        vec![weights.clone(), weights.clone(), weights],
        "loaded at the start, and refreshed after each step"
    );
    assert_ne!(loads[1].1, loads[2].1, "the third load has the second step's weights");
    assert_eq!(
        loads[2].1,
        digest(&last.join("model.safetensors")),
        "the engine loaded what the checkpoint of the same step holds"
    );

    // vLLM: the same run on a mock vLLM server, its completions asked with the prompt's
    // ids, and each step's weights reloaded between a pause and a resume.
    let vllm = Engine::new();
    let vllm_url = format!("http://{}", serve_on_loopback(vllm.vllm()));
    let out = dir.path().join("vllm");
    let (world, _, err) = train(config(&out, "", &engines("vllm", &vllm_url)));
    assert_eq!(world, 1, "{err}");
    let weights = out.join("weights").display().to_string();
    let loads = vllm.loads.lock().unwrap().clone();
    assert_eq!(
        loads.iter().map(|l| l.0.clone()).collect::<Vec<_>>(),
        vec![weights.clone(), weights.clone(), weights]
    );
    let refresh = |v: &str| {
        [
            "pause mode=wait".to_string(),
            "collective_rpc reload_weights".into(),
            format!("update_weight_version {v}"),
            "resume".into(),
            "weight_info".into(),
        ]
    };
    assert_eq!(
        *vllm.calls.lock().unwrap(),
        [refresh("rl-vllm-step-0"), refresh("rl-vllm-step-1"), refresh("rl-vllm-step-2")].concat()
    );
    assert!(vllm.seen.lock().unwrap().len() >= 2, "the engine generated the rollouts");

    // An engine that fails to load stops the run after the first step, with its URL and
    // its own message; the step's metrics are kept, and the step is checkpointed although
    // its turn to be saved had not come.
    let msg = "RuntimeError: CUDA out of memory while loading model.layers.0";
    *vllm.fail.lock().unwrap() = Some((1, msg.into()));
    let out = dir.path().join("vllm-fails");
    let text_cfg =
        config(&out, "", &engines("vllm", &vllm_url)).replace("save_every = 1", "save_every = 5");
    std::fs::write(&cfg, text_cfg).unwrap();
    let o = run(tf(&state)
        .args(["--device", "cpu", "--eval-server", &server.url, "train", "rl", "--config"])
        .arg(&cfg));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    let line = err.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    assert!(
        line.contains(&vllm_url) && line.contains("did not load") && line.contains(msg),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(out.join("metrics.jsonl")).unwrap().lines().count(), 1);
    assert_eq!(std::fs::read_to_string(out.join("LATEST")).unwrap().trim(), "step-000001");
    let calls = vllm.calls.lock().unwrap().clone();
    assert_eq!(
        calls.last().map(String::as_str),
        Some("collective_rpc reload_weights"),
        "not resumed"
    );

    // One that cannot load the starting weights stops the run before anything is
    // generated, the same way.
    *vllm.fail.lock().unwrap() = Some((0, msg.into()));
    let generated = vllm.generated.lock().unwrap().len();
    let out = dir.path().join("vllm-fails-at-start");
    std::fs::write(&cfg, config(&out, "", &engines("vllm", &vllm_url))).unwrap();
    let o = run(tf(&state)
        .args(["--device", "cpu", "--eval-server", &server.url, "train", "rl", "--config"])
        .arg(&cfg));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    let line = err.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    assert!(line.contains(&vllm_url) && line.contains(msg), "{err}");
    assert_eq!(vllm.generated.lock().unwrap().len(), generated, "nothing generated");
    assert!(
        !out.join("metrics.jsonl").exists()
            || std::fs::read_to_string(out.join("metrics.jsonl")).unwrap().is_empty()
    );
}

/// A LoRA run on external engines: each step's adapter is loaded into the engine under
/// its own name beside the base model (no pause), every request names the latest one
/// loaded, the run's older adapters are unloaded and their directories removed but the
/// last few, and the adapter the engine holds last is the one the step's checkpoint
/// holds. On a mock SGLang engine (the name as `lora_path`), then a mock vLLM server (as
/// `model`).
#[test]
fn a_lora_run_loads_each_steps_adapter_into_the_engines_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let model = tiny_model(dir.path(), None);
    let server = serve(&dir.path().join("server-state"), &["--device", "cpu"]);
    let cfg = dir.path().join("rl.toml");
    for kind in ["sglang", "vllm"] {
        let engine = Engine::new();
        let app = if kind == "sglang" { engine.sglang() } else { engine.vllm() };
        let url = format!("http://{}", serve_on_loopback(app));
        let out = dir.path().join(kind);
        let text_cfg = suite_config(&out, &model, "")
            .replace("heldout = [{ suite = \"builtin\", split = \"heldout\", level = 2, name = \"l2-heldout\" }]\n", "")
            .replace("turns = 2", "turns = 1")
            .replace("steps = 2", "steps = 3")
            + &format!(
                "[generation]\nkind = \"{kind}\"\nurls = [\"{url}\"]\ntokenizer = \"{}\"\n",
                exported_tokenizer().display()
            );
        std::fs::write(&cfg, text_cfg).unwrap();
        let o = run(tf(&state)
            .args([
                "--device",
                "cpu",
                "--eval-server",
                &server.url,
                "train",
                "rl",
                "--json",
                "--config",
            ])
            .arg(&cfg));
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{kind}: {err}\n{}", server.log());
        let steps: Vec<Value> = text(&o.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["event"] == "step")
            .map(|e| e["metrics"].clone())
            .collect();
        assert_eq!(steps.len(), 3, "{err}");
        for m in &steps {
            assert_eq!(m["groups_kept"], 2, "{kind}: {m}");
            assert_eq!(m["episodes_failed"], 0, "{kind}: {m}");
            let versions = m["weight_versions"].as_object().unwrap();
            let name = format!("rl-{kind}-step-");
            assert!(!versions.is_empty() && versions.keys().all(|v| v.starts_with(&name)), "{m}");
        }
        // Loaded at the start and after each step, under the step's name, from the
        // adapter the learner wrote for it; no pause, no full-weight load.
        let version = |n: u64| format!("rl-{kind}-step-{n}");
        let adapter =
            |n: u64| out.join(format!("adapters/{}/adapter", version(n))).display().to_string();
        let loads = engine.adapter_loads.lock().unwrap().clone();
        assert_eq!(
            loads.iter().map(|l| (l.0.clone(), l.1.clone())).collect::<Vec<_>>(),
            (0..=3).map(|n| (version(n), adapter(n))).collect::<Vec<_>>(),
            "{kind}"
        );
        let calls = engine.calls.lock().unwrap().clone();
        assert!(
            !calls.iter().any(|c| c.contains("pause")
                || c.contains("update_weights")
                || c.contains("collective_rpc")),
            "{calls:?}"
        );
        assert!(engine.loads.lock().unwrap().is_empty());
        // Every request named an adapter loaded at the time (the engine refuses others).
        // With staleness 1 the second batch is played while the first trains: step-0
        // made two batches, step-1 the third.
        let generated = engine.generated.lock().unwrap().clone();
        assert!(
            generated.iter().all(|g| g.starts_with(&format!("adapter rl-{kind}-step-"))),
            "{generated:?}"
        );
        for n in 0..2 {
            assert!(
                generated.contains(&format!("adapter {}", version(n))),
                "{kind}: {generated:?}"
            );
        }
        // The run's older adapters are unloaded, and their directories removed but the
        // last three.
        let held: Vec<String> =
            engine.adapters.lock().unwrap().iter().map(|a| a.0.clone()).collect();
        assert_eq!(held, [version(2), version(3)], "{kind}");
        let mut dirs: Vec<String> = std::fs::read_dir(out.join("adapters"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        dirs.sort();
        assert_eq!(dirs, [version(1), version(2), version(3)], "{kind}");
        assert_eq!(
            loads[3].2,
            digest(&out.join("checkpoints/step-000003/adapter/adapter_model.safetensors")),
            "{kind}: the engine's last adapter is the checkpoint's"
        );
        assert_ne!(loads[2].2, loads[3].2, "{kind}: each step's adapter is new");
    }
}

//! What `train` settles before its learner starts (the policy worker: 10–20 s on a small
//! machine, plus the evaluator's pool in `train rl`): a run whose steps are done and
//! whose last heldout pass is written ends with [`RlEvent::Complete`], and a checkpoint
//! that does not read or a `heldout_baseline` that cannot stand in is an error; in
//! neither case is the learner set up. The learner here counts its set-ups; the
//! environment rewards every sample alike, so no step trains.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use tritonforge_agent::{Backend, Episode, Turn};
use tritonforge_protocol::Status;
use tritonforge_rl::env::BoxFuture;
use tritonforge_rl::{Environment, HeldoutSet, Parts, Play, RlConfig, RlError, RlEvent, Standing};

mod common;
use common::Counted;

/// One-turn episodes, every one rewarded alike (no signal: no step trains).
struct Even {
    prefix: &'static str,
}

impl Environment for Even {
    fn keys(&self) -> Vec<String> {
        (0..2).map(|i| format!("{}/t{i}", self.prefix)).collect()
    }

    fn play<'a>(&'a self, _backend: &'a dyn Backend, play: Play) -> BoxFuture<'a, Episode> {
        Box::pin(async move {
            Episode {
                id: play.id,
                run: play.run,
                sample: play.sample,
                turns: vec![Turn {
                    outcome: tritonforge_agent::TurnOutcome::Evaluated(Status::Incorrect),
                    reward: 0.3,
                    ..Turn::default()
                }],
                ..Episode::default()
            }
        })
    }
}

fn config(out: &Path, extra: &str) -> RlConfig {
    let text = format!(
        r#"
[model]
path = "none"
[data]
train = [{{ suite = "toy" }}]
heldout = [{{ suite = "held", name = "held" }}]
[rollout]
problems = 2
samples = 2
turns = 1
max_tokens = 4
parallel = 4
fill_rounds = 0
[schedule]
steps = 2
save_every = 1
{extra}
[output]
dir = "{}"
"#,
        out.display()
    );
    common::config(&text)
}

fn parts(cfg: &RlConfig, learner: &Arc<Counted>) -> Parts {
    let held: Arc<dyn Environment> = Arc::new(Even { prefix: "held" });
    common::parts(
        cfg,
        Arc::new(Even { prefix: "toy" }),
        vec![("held".into(), held)],
        learner.clone(),
    )
}

/// `train` once; the events' kinds, or its error.
fn train(cfg: &RlConfig, learner: &Arc<Counted>) -> Result<Vec<String>, RlError> {
    train_evaluated(cfg, learner, &Value::Null)
}

/// `train` once with the evaluator's settings `evaluation` ([`Parts::evaluation`]).
fn train_evaluated(
    cfg: &RlConfig,
    learner: &Arc<Counted>,
    evaluation: &Value,
) -> Result<Vec<String>, RlError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut kinds = Vec::new();
    let parts = Parts { evaluation: evaluation.clone(), ..parts(cfg, learner) };
    rt.block_on(tritonforge_rl::train(cfg, parts, None, &mut |e| {
        kinds.push(match e {
            RlEvent::Ready { recipe_changes, .. } if recipe_changes.is_empty() => "ready".into(),
            RlEvent::Ready { recipe_changes, .. } => {
                format!("ready: {}", recipe_changes.join("; "))
            }
            RlEvent::Heldout(h) => format!("heldout {}", h.step),
            RlEvent::Step(m) => format!("step {}", m.step),
            RlEvent::Saved { step, .. } => format!("saved {step}"),
            RlEvent::Complete { step, steps, .. } => format!("complete {step}/{steps}"),
            RlEvent::HeldoutCut { step, .. } => format!("cut {step}"),
        });
    }))?;
    Ok(kinds)
}

fn standing(cfg: &RlConfig) -> Result<Standing, RlError> {
    standing_evaluated(cfg, &Value::Null)
}

fn standing_evaluated(cfg: &RlConfig, evaluation: &Value) -> Result<Standing, RlError> {
    let held = HeldoutSet { name: "held".into(), keys: Even { prefix: "held" }.keys() };
    Standing::read(cfg, &[held], false, "none", evaluation)
}

/// A run whose steps are done and whose final heldout pass is written starts nothing,
/// again and again; without that pass written, it is played (the learner started).
#[test]
fn a_complete_run_starts_no_learner() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let cfg = config(&out, "");
    let learner = Arc::new(Counted::default());
    assert!(!standing(&cfg).unwrap().complete, "nothing done yet");
    let first = train(&cfg, &learner).unwrap();
    assert_eq!(first.first().map(String::as_str), Some("ready"));
    assert_eq!(first.last().map(String::as_str), Some("heldout 2"), "{first:?}");
    assert_eq!(learner.setups(), 1);

    let s = standing(&cfg).unwrap();
    assert!(s.complete && s.start == 2, "{s:?}");
    assert_eq!(s.checkpoint, Some(out.join("checkpoints/step-000002")));
    for _ in 0..2 {
        assert_eq!(train(&cfg, &learner).unwrap(), ["complete 2/2"]);
        assert_eq!(learner.setups(), 1, "a complete run sets up no learner");
    }

    // The final pass cut short (its lines gone): not complete; the pass is played.
    let heldout = out.join("heldout.jsonl");
    let text = std::fs::read_to_string(&heldout).unwrap();
    let step_of = |l: &str| serde_json::from_str::<serde_json::Value>(l).unwrap()["step"].as_u64();
    let kept: String =
        text.lines().filter(|l| step_of(l) == Some(0)).map(|l| l.to_string() + "\n").collect();
    assert_ne!(kept, text);
    std::fs::write(&heldout, kept).unwrap();
    assert!(!standing(&cfg).unwrap().complete);
    assert_eq!(train(&cfg, &learner).unwrap(), ["ready", "heldout 2"]);
    assert_eq!(learner.setups(), 2);
    // More steps configured: not complete either.
    let mut longer = cfg.clone();
    longer.schedule.steps = 3;
    assert!(!standing(&longer).unwrap().complete);
}

/// A `heldout_baseline` that is missing, unreadable as figures, or played otherwise, and a
/// checkpoint whose state does not read, are errors before the learner is set up.
#[test]
fn a_bad_baseline_or_checkpoint_is_named_before_the_learner_starts() {
    let dir = tempfile::tempdir().unwrap();
    let learner = Arc::new(Counted::default());
    let missing = dir.path().join("missing.jsonl");
    let garbage = dir.path().join("garbage.jsonl");
    std::fs::write(&garbage, "not json\n{\"step\": \"zero\"}\n").unwrap();
    // A real step-0 pass of this config, then the same config sampling three times.
    let earlier = dir.path().join("earlier");
    train(&config(&earlier, "max_steps_now = 1"), &learner).unwrap();
    let played = earlier.join("heldout.jsonl");
    let setups_before = learner.setups();
    for (baseline, extra, needle) in [
        (&missing, "", "missing.jsonl"),
        (&garbage, "", "no step-0 figures of set held"),
        (&played, "heldout_samples = 3\n", "samples 1, this run 3"),
    ] {
        let extra = format!("{extra}heldout_baseline = \"{}\"", baseline.display());
        let cfg = config(&dir.path().join("out"), &extra);
        let e = standing(&cfg).unwrap_err().to_string();
        assert!(e.contains("schedule.heldout_baseline") && e.contains(needle), "{e}");
        let e = train(&cfg, &learner).unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
        assert_eq!(learner.setups(), setups_before, "{needle}: no learner set up");
    }
    // The same figures, played the same way: taken, no error.
    let cfg = config(
        &dir.path().join("reuse"),
        &format!("max_steps_now = 1\nheldout_baseline = \"{}\"", played.display()),
    );
    assert_eq!(train(&cfg, &learner).unwrap()[..2], ["ready", "heldout 0"]);

    // A checkpoint marker naming a state that does not read.
    let out = dir.path().join("broken");
    std::fs::create_dir_all(out.join("checkpoints/step-000001")).unwrap();
    std::fs::write(out.join("LATEST"), "step-000001").unwrap();
    std::fs::write(out.join("checkpoints/step-000001/rl_state.json"), "{").unwrap();
    let cfg = config(&out, "");
    assert!(matches!(standing(&cfg), Err(RlError::Resume { .. })));
    let before = learner.setups();
    assert!(matches!(train(&cfg, &learner), Err(RlError::Resume { .. })));
    assert_eq!(learner.setups(), before);
}

/// A resume under a config that trains otherwise (here another learning rate) is an
/// error naming the change before the learner starts; one that only runs longer or
/// measures otherwise is not; with `allow_recipe_change` the change goes on, and the
/// `ready` event says what changed.
#[test]
fn a_resume_that_would_train_otherwise_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let learner = Arc::new(Counted::default());
    let slice = |extra: &str, steps: u64| {
        let mut c = config(&out, &format!("max_steps_now = 1\n{extra}"));
        c.schedule.steps = steps;
        c
    };
    let first = slice("", 3);
    assert_eq!(train(&first, &learner).unwrap()[..3], ["ready", "heldout 0", "step 1"]);
    let setups = learner.setups();

    // Longer, in another slice length, measured with more samples: the same recipe.
    let same = slice("max_seconds_now = 500\nheldout_samples = 2", 4);
    assert!(standing(&same).unwrap().recipe_changes.is_empty());

    let mut other = slice("", 3);
    other.optim.lr = 5e-5;
    let e = standing(&other).unwrap_err();
    assert!(matches!(e, RlError::Resume { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("optim.lr: ") && text.contains("→ 0.00005"), "{text}");
    assert!(text.contains("rl_state.json") && text.contains("allow_recipe_change"), "{text}");
    assert!(train(&other, &learner).is_err());
    assert_eq!(learner.setups(), setups, "refused before the learner starts");

    other.schedule.allow_recipe_change = true;
    let kinds = train(&other, &learner).unwrap();
    assert!(
        kinds[0].starts_with("ready: optim.lr: ") && kinds[0].ends_with("→ 0.00005"),
        "{kinds:?}"
    );
    assert!(kinds.contains(&"step 2".to_string()), "{kinds:?}");
    // The checkpoint now records the new recipe: resuming under it changes nothing.
    other.schedule.allow_recipe_change = false;
    assert!(standing(&other).unwrap().recipe_changes.is_empty());
}

/// The evaluator's settings are recipe: a slice evaluated with another timing budget
/// (runs 22 and 23: 100 ms, then 400 ms when a later command lost its flags) is refused,
/// naming the setting, unless allowed (the next checkpoint then records the new ones); a
/// caller with none to record, a complete run and a checkpoint written before they were
/// recorded are not refused.
#[test]
fn a_resume_evaluated_otherwise_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let learner = Arc::new(Counted::default());
    let cfg = config(&out, "max_steps_now = 1");
    let evaluated = |ms: u32| json!({"budget_ms": 60000, "timing": {"budget_ms": ms}});
    let kinds = train_evaluated(&cfg, &learner, &evaluated(100)).unwrap();
    assert!(kinds.contains(&"step 1".to_string()), "{kinds:?}");
    let setups = learner.setups();

    assert!(standing_evaluated(&cfg, &evaluated(100)).unwrap().recipe_changes.is_empty());
    let e = standing_evaluated(&cfg, &evaluated(400)).unwrap_err();
    assert!(matches!(e, RlError::Resume { .. }), "{e}");
    assert!(e.to_string().contains("evaluation.timing.budget_ms: 100 → 400"), "{e}");
    assert!(train_evaluated(&cfg, &learner, &evaluated(400)).is_err());
    assert_eq!(learner.setups(), setups, "refused before the learner starts");
    assert!(standing(&cfg).unwrap().recipe_changes.is_empty(), "none to record: not compared");

    // Allowed: step 2 is paid the new way, and its checkpoint says so.
    let mut allowed = cfg.clone();
    allowed.schedule.allow_recipe_change = true;
    let kinds = train_evaluated(&allowed, &learner, &evaluated(400)).unwrap();
    assert_eq!(kinds[0], "ready: evaluation.timing.budget_ms: 100 → 400", "{kinds:?}");
    assert!(kinds.contains(&"step 2".to_string()), "{kinds:?}");
    let state = out.join("checkpoints/step-000002/rl_state.json");
    let read =
        || -> Value { serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap() };
    assert_eq!(read()["recipe"]["evaluation"]["timing"]["budget_ms"], 400);
    // Complete (2 of 2 steps, the last pass written): nothing to refuse.
    let s = standing_evaluated(&cfg, &evaluated(100)).unwrap();
    assert!(s.complete, "{s:?}");

    // A checkpoint whose recipe has no evaluator settings (written before they were
    // recorded) resumes whatever they are now.
    let mut longer = cfg.clone();
    longer.schedule.steps = 3;
    assert!(standing_evaluated(&longer, &evaluated(100)).is_err());
    let mut v = read();
    v["recipe"].as_object_mut().unwrap().remove("evaluation");
    std::fs::write(&state, v.to_string()).unwrap();
    assert!(standing_evaluated(&longer, &evaluated(100)).unwrap().recipe_changes.is_empty());
}

/// A caller with no evaluator settings to record (`Null`) keeps those the checkpoint
/// recorded: a later resume with other settings is still compared against them.
#[test]
fn a_resume_without_evaluator_settings_keeps_the_recorded_ones() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let learner = Arc::new(Counted::default());
    let cfg = config(&out, "max_steps_now = 1");
    let evaluated = json!({"timing": {"budget_ms": 100}});
    assert!(train_evaluated(&cfg, &learner, &evaluated).unwrap().contains(&"step 1".into()));
    assert!(train(&cfg, &learner).unwrap().contains(&"step 2".into()));
    let state = out.join("checkpoints/step-000002/rl_state.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(state).unwrap()).unwrap();
    assert_eq!(v["recipe"]["evaluation"], evaluated, "{v}");
}

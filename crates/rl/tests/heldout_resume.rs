//! A heldout pass after a step that the invocation's clock (`schedule.max_seconds_now`)
//! cuts short keeps what it played: each episode is stored as it ends, the invocation
//! stops with [`RlEvent::HeldoutCut`] and nothing in `heldout.jsonl`, and the next
//! invocation plays only the rest, its figures counting both parts. A pass played under
//! other settings reuses nothing. Over a real SQLite store; in the pass after step 1 the
//! heldout environment's last problem never ends while `hang` is set, and its episodes
//! are correct while `right` is.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tritonforge_agent::{Backend, Episode, Turn, TurnOutcome};
use tritonforge_protocol::Status;
use tritonforge_rl::env::BoxFuture;
use tritonforge_rl::{Environment, Play, RlConfig, RlEvent, RlSummary};
use tritonforge_store::Store;

mod common;
use common::Counted;

#[derive(Default)]
struct Held {
    hang: AtomicBool,
    /// Problem 3 after step 1 takes longer than the clock's limit, then ends.
    slow: AtomicBool,
    right: AtomicBool,
    plays: AtomicUsize,
}

struct HeldEnv(Arc<Held>);

impl Environment for HeldEnv {
    fn keys(&self) -> Vec<String> {
        (0..4).map(|i| format!("held/t{i}")).collect()
    }

    fn play<'a>(&'a self, _backend: &'a dyn Backend, play: Play) -> BoxFuture<'a, Episode> {
        Box::pin(async move {
            let after_step_1 = play.id.contains("/heldout-000001/");
            if play.task == 3 && after_step_1 && self.0.hang.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            if play.task == 3 && after_step_1 && self.0.slow.load(Ordering::SeqCst) {
                tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
            }
            self.0.plays.fetch_add(1, Ordering::SeqCst);
            let status = if self.0.right.load(Ordering::SeqCst) {
                Status::Correct
            } else {
                Status::Incorrect
            };
            one_turn(play, status)
        })
    }
}

/// Training episodes all rewarded alike: no step trains (the stand-in learner refuses to).
struct Even;

impl Environment for Even {
    fn keys(&self) -> Vec<String> {
        (0..2).map(|i| format!("toy/t{i}")).collect()
    }

    fn play<'a>(&'a self, _backend: &'a dyn Backend, play: Play) -> BoxFuture<'a, Episode> {
        Box::pin(async move { one_turn(play, Status::Incorrect) })
    }
}

fn one_turn(play: Play, status: Status) -> Episode {
    Episode {
        id: play.id,
        run: play.run,
        problem: format!("p{}", play.task),
        sample: play.sample,
        turns: vec![Turn {
            outcome: TurnOutcome::Evaluated(status),
            reward: 0.3,
            ..Turn::default()
        }],
        ..Episode::default()
    }
}

fn config(out: &Path, schedule: &str) -> RlConfig {
    common::config(&format!(
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
parallel = 8
fill_rounds = 0
[schedule]
steps = 1
save_every = 1
heldout_samples = 2
{schedule}
[output]
dir = "{}"
"#,
        out.display()
    ))
}

/// One invocation of `train`: its summary and its events, named.
fn train(cfg: &RlConfig, held: &Arc<Held>, store: Option<&Store>) -> (RlSummary, Vec<String>) {
    let env: Arc<dyn Environment> = Arc::new(HeldEnv(held.clone()));
    let learner = Arc::new(Counted::default());
    let parts = common::parts(cfg, Arc::new(Even), vec![("held".into(), env)], learner.clone());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut kinds = Vec::new();
    let summary = rt
        .block_on(tritonforge_rl::train(cfg, parts, store, &mut |e| {
            kinds.push(match e {
                RlEvent::HeldoutCut { step, played, total } => {
                    format!("cut {step}: {played}/{total}")
                }
                RlEvent::Heldout(h) => {
                    format!("heldout {}: {} ({} reused)", h.step, h.pass_at_1, h.reused_episodes)
                }
                RlEvent::Step(m) => format!("step {}", m.step),
                RlEvent::Saved { step, .. } => format!("saved {step}"),
                RlEvent::Ready { .. } => "ready".into(),
                RlEvent::Complete { .. } => "complete".into(),
            });
        }))
        .unwrap();
    // One learner set up an invocation, none for a complete run.
    assert_eq!(learner.setups(), usize::from(kinds != ["complete"]));
    (summary, kinds)
}

fn written(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("heldout.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The clock of a cut invocation: long enough that step 1 is started after step 0's pass
/// (under half of it gone), short enough for a test.
const LIMIT: &str = "max_seconds_now = 2";

/// The first invocation: step 0's pass (4 problems × 2 samples, all correct; the first
/// thing an invocation does is never cut), step 1, and its pass cut by the clock while
/// problem 3 hangs: 6 of 8 episodes stored, nothing written for step 1.
fn cut_first(out: &Path, held: &Arc<Held>, store: &Store) {
    held.hang.store(true, Ordering::SeqCst);
    held.right.store(true, Ordering::SeqCst);
    let (summary, kinds) = train(&config(out, LIMIT), held, Some(store));
    assert_eq!(kinds, ["ready", "heldout 0: 1 (0 reused)", "step 1", "saved 1", "cut 1: 6/8"]);
    assert_eq!((summary.steps_done, summary.heldout_cut), (1, Some(1)));
    assert_eq!(written(out).len(), 1, "step 0's figures alone: a cut pass writes none");
    assert_eq!(store.episodes_under("rl-toy/heldout-000001/").unwrap().len(), 6);
    assert_eq!(held.plays.swap(0, Ordering::SeqCst), 8 + 6);
    held.hang.store(false, Ordering::SeqCst);
    held.right.store(false, Ordering::SeqCst);
}

#[test]
fn a_cut_heldout_pass_is_resumed_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let store = Store::open(&dir.path().join("s.sqlite")).unwrap();
    let held = Arc::new(Held::default());
    cut_first(&out, &held, &store);

    // Resumed from step 1's checkpoint (no limit now: the clock is not part of what the
    // pass measures): only problem 3's two samples are played, and pass@1 counts the six
    // kept (correct) with the two new (incorrect).
    let (summary, kinds) = train(&config(&out, ""), &held, Some(&store));
    assert_eq!(kinds, ["ready", "heldout 1: 0.75 (6 reused)"]);
    assert_eq!(held.plays.load(Ordering::SeqCst), 2);
    assert_eq!((summary.steps_done, summary.heldout_cut), (1, None));
    let lines = written(&out);
    assert_eq!(lines.len(), 2);
    assert_eq!((lines[1]["step"].as_u64(), lines[1]["pass_at_1"].as_f64()), (Some(1), Some(0.75)));
    assert_eq!(lines[1]["by_problem"]["p3"], 0);
    assert_eq!(lines[1]["by_problem"]["p0"], 2);
    assert!(!out.join("heldout-pass.json").exists(), "no pass in progress");
    assert_eq!(store.episodes_under("rl-toy/heldout-000001/").unwrap().len(), 8);
    // Complete now: nothing is played again.
    let (_, kinds) = train(&config(&out, ""), &held, Some(&store));
    assert_eq!(kinds, ["complete"]);
}

#[test]
fn a_pass_resumed_under_other_settings_plays_everything_again() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let store = Store::open(&dir.path().join("s.sqlite")).unwrap();
    let held = Arc::new(Held::default());
    cut_first(&out, &held, &store);

    // Another cap: the six episodes of the cut pass are not this measurement's.
    let (_, kinds) = train(&config(&out, "heldout_max_tokens = 8"), &held, Some(&store));
    assert_eq!(kinds, ["ready", "heldout 1: 0 (0 reused)"]);
    assert_eq!(held.plays.load(Ordering::SeqCst), 8);
    assert_eq!(written(&out)[1]["max_tokens"], 8);
}

/// Two runs of the same name (`train rl` names a run after its output directory's last
/// component) sharing a store: the second plays the same step's pass whole, and the
/// first, resumed, reuses none of the second's episodes (they carry another attempt).
#[test]
fn another_runs_episodes_under_the_same_name_are_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.sqlite")).unwrap();
    let (a, b) = (dir.path().join("a/out"), dir.path().join("b/out"));
    let held = Arc::new(Held::default());
    cut_first(&a, &held, &store);
    let (_, kinds) = train(&config(&b, ""), &held, Some(&store));
    assert_eq!(kinds[4], "heldout 1: 0 (0 reused)", "{kinds:?}");
    assert_eq!(store.episodes_under("rl-toy/heldout-000001/").unwrap().len(), 8);
    held.plays.store(0, Ordering::SeqCst);
    held.right.store(true, Ordering::SeqCst);
    let (_, kinds) = train(&config(&a, ""), &held, Some(&store));
    assert_eq!(kinds, ["ready", "heldout 1: 1 (0 reused)"]);
    assert_eq!(held.plays.load(Ordering::SeqCst), 8);
}

/// Without a store nothing of a cut pass would be kept, so a pass after a step is not cut:
/// it runs past the limit to its end and is written.
#[test]
fn without_a_store_a_pass_runs_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let held = Arc::new(Held::default());
    held.slow.store(true, Ordering::SeqCst);
    let (summary, kinds) = train(&config(&out, LIMIT), &held, None);
    assert_eq!(
        kinds,
        ["ready", "heldout 0: 0 (0 reused)", "step 1", "saved 1", "heldout 1: 0 (0 reused)"]
    );
    assert_eq!(summary.heldout_cut, None);
    assert_eq!(written(&out).len(), 2);
}

//! What the RL loop leaves in the store for the dashboard, over a real SQLite file: every
//! evaluation its episodes name (training and heldout) linked to the run, so the
//! evaluation browser's run filter finds them, and the heldout measurements as metric
//! rows `heldout:<set>` by step (what the curves page charts). The environment, learner
//! and generator are stand-ins (`common`): the evaluator and the policy are not what is
//! tested here.

use std::path::Path;
use std::sync::Arc;

use tritonforge_agent::{Backend, Episode, Turn};
use tritonforge_protocol::Status;
use tritonforge_rl::env::BoxFuture;
use tritonforge_rl::{Environment, Play, RlConfig, RlEvent};
use tritonforge_store::{RunKind, Store};

mod common;
use common::Counted;

/// One-turn episodes whose every reward is equal (so no step trains: the learner is never
/// asked to score or step); each turn names an evaluation record after its episode, except
/// the turns of task 0, whose code was not extracted (no record).
struct Fixed {
    tasks: usize,
    prefix: &'static str,
}

impl Environment for Fixed {
    fn keys(&self) -> Vec<String> {
        (0..self.tasks).map(|i| format!("{}/t{i}", self.prefix)).collect()
    }

    fn play<'a>(&'a self, _backend: &'a dyn Backend, play: Play) -> BoxFuture<'a, Episode> {
        Box::pin(async move {
            let record = (play.task != 0).then(|| format!("rec:{}", play.id));
            Episode {
                id: play.id.clone(),
                run: play.run.clone(),
                problem: format!("p{}", play.task),
                sample: play.sample,
                turns: vec![Turn {
                    turn: 0,
                    outcome: tritonforge_agent::TurnOutcome::Evaluated(Status::Incorrect),
                    reward: 0.3,
                    record,
                    ..Turn::default()
                }],
                ..Episode::default()
            }
        })
    }
}

fn config(out: &Path) -> RlConfig {
    let text = format!(
        r#"
[model]
path = "none"
[data]
train = [{{ suite = "toy" }}]
[rollout]
problems = 3
samples = 2
turns = 1
max_tokens = 4
parallel = 4
fill_rounds = 0
[schedule]
steps = 2
save_every = 2
[output]
dir = "{}"
"#,
        out.display()
    );
    common::config(&text)
}

#[test]
fn the_runs_evaluations_are_linked_and_heldout_rows_are_stored_by_step() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir.path().join("out"));
    let path = dir.path().join("s.sqlite");
    let store = Store::open(&path).unwrap();
    store.begin_run("rl-toy", RunKind::Rl, "{}").unwrap();
    let learner = Arc::new(Counted::default());
    let held: Arc<dyn Environment> = Arc::new(Fixed { tasks: 2, prefix: "held" });
    let parts = common::parts(
        &cfg,
        Arc::new(Fixed { tasks: 3, prefix: "toy" }),
        vec![("toy-held".into(), held)],
        learner.clone(),
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut steps = 0;
    let summary = rt
        .block_on(tritonforge_rl::train(&cfg, parts, Some(&store), &mut |e| {
            if let RlEvent::Step(m) = e {
                assert_eq!(m.updates, 0, "equal rewards: no signal, no update");
                steps += 1;
            }
        }))
        .unwrap();
    assert_eq!((summary.steps_done, steps), (2, 2));
    assert_eq!(learner.setups(), 1, "one run, one learner set up");
    drop(store);

    // What the dashboard reads, through a read-only handle as it does.
    let store = Store::open_read_only(&path).unwrap();
    // Per step, 3 tasks × 2 samples, of which task 0's 2 name no record: 4 linked; per
    // heldout (steps 0 and 2), 2 tasks × 1 sample, task 0 without a record: 1 linked.
    let run = store.runs().unwrap().into_iter().find(|r| r.id == "rl-toy").unwrap();
    assert_eq!(run.kind, RunKind::Rl);
    assert_eq!(run.evaluations, 2 * 4 + 2, "{run:?}");
    // The evaluator writes the records; two of them here, one of a training turn and one
    // of a heldout turn. The evaluation browser's run filter finds both under the run.
    drop(store);
    let db = rusqlite::Connection::open(&path).unwrap();
    let keys = ["rec:rl-toy/step-000001/toy/t2/1", "rec:rl-toy/heldout-000002/held/t1/0"];
    for (i, key) in keys.iter().enumerate() {
        db.execute(
            "INSERT INTO evaluations (key, problem, candidate, candidate_sha256, status,
             created_at, record) VALUES (?1, 'p', 'c', 's', 'incorrect', ?2, '{}')",
            rusqlite::params![key, i as i64],
        )
        .unwrap();
    }
    drop(db);
    let store = Store::open_read_only(&path).unwrap();
    let linked = store
        .evaluations_page(&tritonforge_store::EvalFilter {
            run: Some("rl-toy".into()),
            limit: 500,
            ..Default::default()
        })
        .unwrap();
    let mut found: Vec<&str> = linked.items.iter().map(|e| e.key.as_str()).collect();
    found.sort();
    assert_eq!(found, [keys[1], keys[0]]);
    assert_eq!(store.evaluation_json(keys[1]).unwrap().unwrap().1, ["rl-toy"]);
    // Heldout: one row per set and measurement, at the step it was taken.
    let held: Vec<(u64, String)> = store
        .train_metrics("rl-toy")
        .unwrap()
        .into_iter()
        .filter(|(_, split, _)| split.starts_with("heldout:"))
        .map(|(step, split, _)| (step, split))
        .collect();
    assert_eq!(held, [(0, "heldout:toy-held".to_string()), (2, "heldout:toy-held".to_string())]);
    let last = store.last_metrics_by_split("rl-toy", "heldout:").unwrap();
    let m: serde_json::Value = serde_json::from_str(&last[0].metric).unwrap();
    assert_eq!((m["set"].as_str(), m["problems"].as_u64()), (Some("toy-held"), Some(2)));
    assert_eq!(m["pass_at_1"], 0.0);
}

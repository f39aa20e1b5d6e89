//! Places go costliest first, through the real Python worker in CPU mode: with the only
//! place held, a candidate that arrives later but is expected to cost more (an unseen
//! problem's candidate is estimated by its length) runs before an earlier, cheaper one.

use std::time::Duration;

use tritonforge_eval::{Evaluator, Pool, PoolConfig};
use tritonforge_protocol::{EvalConfig, EvalRecord, Status};
use tritonforge_suite::{Candidate, Problem};

mod common;
use common::{fixture, spec};

fn config() -> EvalConfig {
    EvalConfig { trials: 3, budget_ms: 60_000, ..EvalConfig::default() }
}

async fn evaluate(ev: &Evaluator, p: &Problem, c: &Candidate) -> EvalRecord {
    let cfg = config();
    let done = tokio::time::timeout(Duration::from_secs(300), ev.evaluate(p, c, &cfg)).await;
    done.expect("finished in time").expect("evaluation").record
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_longer_candidate_arriving_later_takes_the_freed_place_first() {
    let state = tempfile::tempdir().unwrap();
    let cfg = PoolConfig { workers: 1, spares: 1, ..PoolConfig::default() };
    let pool = Pool::start(spec(state.path()), cfg).await.expect("pool");
    let ev = std::sync::Arc::new(Evaluator::new(pool, None, "test".into()));
    let problem = Problem::load(&fixture("problems/relu_small.py")).unwrap();
    // The blocker's problem is another one: once it has answered, its own problem counts
    // as seen, and that must not make the two waiters' estimates equal.
    let other = state.path().join("relu_wide.py");
    std::fs::write(&other, problem.source.replace("DIM = 1000", "DIM = 2000")).unwrap();
    let other = Problem::load(&other).unwrap();
    let blocker = Candidate::load(&fixture("candidates/sleepy_relu.py")).unwrap();
    let short = Candidate::load(&fixture("candidates/relu_ok.py")).unwrap();
    let long = Candidate {
        name: "relu_ok_long".into(),
        source: format!(
            "{}\n{}",
            short.source,
            "# padding that makes it look costly\n".repeat(200)
        ),
        ..short.clone()
    };

    let spawn = |p: &Problem, c: Candidate| {
        let (ev, p) = (ev.clone(), p.clone());
        tokio::spawn(async move { evaluate(&ev, &p, &c).await })
    };
    let blocking = spawn(&other, blocker);
    // The blocker holds the only place (its forwards sleep 0.9 s in all) before the
    // others ask for it.
    while ev.pool().in_flight().iter().sum::<usize>() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let early_short = spawn(&problem, short);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let late_long = spawn(&problem, long);

    let (b, s, l) = (blocking.await.unwrap(), early_short.await.unwrap(), late_long.await.unwrap());
    for r in [&b, &s, &l] {
        assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
    }
    assert!(
        l.queue_wait_ms < s.queue_wait_ms,
        "the longer candidate waited {:.0} ms, the earlier shorter one {:.0} ms",
        l.queue_wait_ms,
        s.queue_wait_ms
    );
    // The short one waited for the blocker's remainder and the whole of the long one.
    assert!(s.queue_wait_ms > l.queue_wait_ms + l.wall_ms * 0.5, "{s:?}");
}

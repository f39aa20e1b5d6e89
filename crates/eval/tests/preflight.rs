//! The preflight, driven through the real Python worker in CPU mode (`Preflight::Always`;
//! on a GPU it is on by default): a candidate whose import fails gets exactly the verdict
//! the full evaluation gives it, from a process that ran nothing else; one that imports
//! is evaluated as usual; a preflight that hangs or reaches a device decides nothing.

use std::time::Duration;

use tritonforge_eval::{Evaluator, Pool, PoolConfig, Preflight};
use tritonforge_protocol::{EvalConfig, EvalRecord, PreflightFound, Stage, Status};
use tritonforge_suite::{Candidate, Problem};

mod common;
use common::{fixture, spec};

async fn evaluator(state: &std::path::Path, preflight: Preflight) -> Evaluator {
    let cfg = PoolConfig { workers: 2, spares: 1, preflight, ..PoolConfig::default() };
    let pool = Pool::start(spec(state), cfg).await.expect("pool");
    Evaluator::new(pool, None, "test".into())
}

async fn eval(ev: &Evaluator, candidate: &str, budget_ms: u64) -> EvalRecord {
    let problem = Problem::load(&fixture("problems/relu_small.py")).unwrap();
    let candidate = Candidate::load(&fixture(&format!("candidates/{candidate}"))).unwrap();
    let config = EvalConfig { trials: 2, budget_ms, ..EvalConfig::default() };
    tokio::time::timeout(Duration::from_secs(180), ev.evaluate(&problem, &candidate, &config))
        .await
        .expect("in time")
        .expect("evaluation")
        .record
}

fn found(r: &EvalRecord) -> PreflightFound {
    r.preflight.as_ref().unwrap_or_else(|| panic!("no preflight in {r:#?}")).found
}

// One test, so that the device-file setting below reaches no other test's workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_failures_are_decided_before_any_process_is_taken() {
    // The preflight's device files, for a machine without a GPU: a candidate that opens
    // /dev/zero while importing "reached the device".
    std::env::set_var("TRITONFORGE_PREFLIGHT_DEVICE_FILES", "/dev/zero");
    let state = tempfile::tempdir().unwrap();
    let off = evaluator(&state.path().join("off"), Preflight::Off).await;
    assert!(!off.pool().preflights());
    let ev = evaluator(&state.path().join("on"), Preflight::Always).await;
    assert!(ev.pool().preflights());

    // The import's failures: the preflight's verdict is the full evaluation's, word for
    // word, and no started process was waited for.
    for candidate in ["syntax_error.py", "no_model_new.py", "raises.py"] {
        let plain = eval(&off, candidate, 60_000).await;
        assert!(plain.preflight.is_none(), "{candidate}: {:?}", plain.preflight);
        let r = eval(&ev, candidate, 60_000).await;
        if plain.verdict.stage != Stage::Import {
            // A candidate failing later is evaluated in full, as before.
            assert_eq!(found(&r), PreflightFound::Passed, "{candidate}");
            assert_eq!(r.verdict.status, plain.verdict.status, "{candidate}");
            continue;
        }
        assert_eq!(plain.verdict.status, Status::CompileError, "{candidate}");
        assert_eq!(found(&r), PreflightFound::Failed, "{candidate}: {:?}", r.preflight);
        assert_eq!(r.verdict.status, plain.verdict.status, "{candidate}");
        assert_eq!(r.verdict.stage, Stage::Import, "{candidate}");
        assert_eq!(r.verdict.message, plain.verdict.message, "{candidate}");
        assert_eq!(r.start_wait_ms, 0.0, "{candidate}");
        assert!(r.executor_ms.is_some(), "{candidate}");
        let p = r.preflight.as_ref().unwrap();
        assert!(p.wall_ms > 0.0 && r.wall_ms >= p.wall_ms, "{p:?} {}", r.wall_ms);
    }
    let r = eval(&ev, "no_model_new.py", 60_000).await;
    assert!(r.verdict.message.contains("ModelNew"), "{}", r.verdict.message);

    // An honest candidate passes the preflight and is evaluated in full.
    let r = eval(&ev, "relu_ok.py", 60_000).await;
    assert_eq!(found(&r), PreflightFound::Passed);
    assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
    assert!(!r.verdict.trials.is_empty());

    // An import that reached the device decides nothing: the full evaluation gives the
    // verdict (the same failure, found again).
    let r = eval(&ev, "opens_device_then_fails.py", 60_000).await;
    let p = r.preflight.clone().unwrap();
    assert_eq!(p.found, PreflightFound::Inconclusive, "{p:?}");
    assert!(p.reason.as_deref().unwrap_or("").contains("reached the GPU"), "{p:?}");
    assert_eq!(r.verdict.status, Status::CompileError, "{}", r.verdict.message);
    assert!(r.verdict.message.contains("not what I expected"), "{}", r.verdict.message);

    // An import that never ends: the preflight gives up (inconclusive, never a verdict),
    // and the full evaluation times the candidate out under its own budget.
    let r = eval(&ev, "hangs_on_import.py", 3_000).await;
    let p = r.preflight.clone().unwrap();
    assert_eq!(p.found, PreflightFound::Inconclusive, "{p:?}");
    assert!(p.reason.as_deref().unwrap_or("").contains("no answer"), "{p:?}");
    assert_eq!(r.verdict.status, Status::Timeout, "{}", r.verdict.message);
}

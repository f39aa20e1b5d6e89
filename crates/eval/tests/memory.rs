//! Memory-aware admission, out-of-memory retries and problems too big for the device,
//! through the real Python worker in CPU mode. A configured capacity
//! (`PoolConfig::device_memory_bytes`) stands in for a GPU's: needs are then counted from
//! tensor sizes, and admission runs exactly as it does on a GPU.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tritonforge_eval::{AdmissionEvent, EvalError, Evaluator, JobKind, Measured, Pool, PoolConfig};
use tritonforge_protocol::{EvalConfig, EvalRecord, LeaseKind, MemoryMethod, Status};
use tritonforge_store::Store;
use tritonforge_suite::{Candidate, Problem};

mod common;
use common::{fixture, spec};

async fn evaluator(state: &Path, capacity: Option<u64>, store: Option<&Path>) -> Evaluator {
    let cfg = PoolConfig {
        workers: 2,
        spares: 2,
        device_memory_bytes: capacity,
        ..PoolConfig::default()
    };
    let pool = Pool::start(spec(state), cfg).await.expect("pool");
    Evaluator::new(pool, store.map(|p| Store::open(p).expect("store")), "test".into())
}

fn config() -> EvalConfig {
    EvalConfig { trials: 3, budget_ms: 60_000, ..EvalConfig::default() }
}

/// Two ReLU problems of different sizes (the fixture, and one with twice its `DIM`).
fn two_problems(dir: &Path) -> (Problem, Problem) {
    let small = Problem::load(&fixture("problems/relu_small.py")).unwrap();
    let wide: PathBuf = dir.join("relu_wide.py");
    std::fs::write(&wide, small.source.replace("DIM = 1000", "DIM = 2000")).unwrap();
    (small, Problem::load(&wide).unwrap())
}

fn sleepy() -> Candidate {
    Candidate::load(&fixture("candidates/sleepy_relu.py")).unwrap()
}

async fn both(ev: &Evaluator, a: &Problem, b: &Problem) -> (EvalRecord, EvalRecord) {
    let (c, cfg) = (sleepy(), config());
    let (x, y) = tokio::time::timeout(Duration::from_secs(300), async {
        tokio::join!(ev.evaluate(a, &c, &cfg), ev.evaluate(b, &c, &cfg))
    })
    .await
    .expect("both finished");
    (x.expect("evaluation").record, y.expect("evaluation").record)
}

/// The admissions of `kind` once `n` of them have given their memory back: a job's memory
/// goes back once its process is gone, which may be just after its answer.
async fn admitted(ev: &Evaluator, kind: JobKind, n: usize) -> Vec<AdmissionEvent> {
    let of_kind = || -> Vec<AdmissionEvent> {
        ev.pool().admission_events().into_iter().filter(|e| e.kind == kind).collect()
    };
    for _ in 0..100 {
        if of_kind().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    of_kind()
}

async fn evaluations(ev: &Evaluator, n: usize) -> Vec<AdmissionEvent> {
    admitted(ev, JobKind::Evaluate, n).await
}

fn overlap(a: &AdmissionEvent, b: &AdmissionEvent) -> bool {
    a.admitted < b.released && b.admitted < a.released
}

fn need(ev: &Measured) -> u64 {
    match ev {
        Measured::Need(n) => n.correctness_bytes,
        other => panic!("not measured: {other:?}"),
    }
}

/// With room for both, two problems run side by side; with room for either but not both,
/// the second is admitted only once the first has given its memory back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_runs_two_problems_at_once_only_when_both_fit() {
    let dir = tempfile::tempdir().unwrap();
    let (small, wide) = two_problems(dir.path());

    let roomy = evaluator(&dir.path().join("a"), Some(1 << 40), None).await;
    let (r1, r2) = both(&roomy, &small, &wide).await;
    for r in [&r1, &r2] {
        assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
        let m = r.memory.as_ref().expect("memory use");
        assert_eq!(m.capacity_bytes, Some(1 << 40));
        assert!(!m.retried_alone);
    }
    let (a, b) = (need(&roomy.memory_need(&small, &config()).await.unwrap()), {
        need(&roomy.memory_need(&wide, &config()).await.unwrap())
    });
    // Counted from tensor sizes: the wide problem's inputs and outputs are twice as large.
    assert!(b > a, "{a} {b}");
    assert_eq!(r1.memory.as_ref().unwrap().need_bytes, Some(a));
    let ran = evaluations(&roomy, 2).await;
    assert_eq!(ran.len(), 2, "{ran:#?}");
    assert!(overlap(&ran[0], &ran[1]), "with room for both they overlap: {ran:#?}");
    // Each problem was measured once, in a process of its own.
    assert_eq!(admitted(&roomy, JobKind::MeasureMemory, 2).await.len(), 2);

    // Room for the larger one (90% of the capacity is given out), not for both.
    let capacity = ((b + a / 2) as f64 / 0.9) as u64;
    let tight = evaluator(&dir.path().join("b"), Some(capacity), None).await;
    let (r1, r2) = both(&tight, &small, &wide).await;
    for r in [&r1, &r2] {
        assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
    }
    let ran = evaluations(&tight, 2).await;
    assert_eq!(ran.len(), 2, "{ran:#?}");
    assert!(!overlap(&ran[0], &ran[1]), "together they exceed the device: {ran:#?}");
    let waited: Vec<f64> =
        [&r1, &r2].iter().map(|r| r.memory.as_ref().unwrap().admission_wait_ms).collect();
    assert!(waited.iter().any(|w| *w > 300.0), "one waited for the other's memory: {waited:?}");
}

/// Memory running out while drawing inputs (the problem's own code) under a shared cap is
/// not the problem's error nor the candidate's: the evaluation runs again alone with the
/// cap lifted, and the record says so. Measuring the problem was retried the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_drawing_inputs_while_sharing_is_evaluated_again_alone() {
    let dir = tempfile::tempdir().unwrap();
    let ev = evaluator(dir.path(), Some(1 << 40), None).await;
    let problem = Problem::load(&fixture("problems/inputs_need_half_the_device.py")).unwrap();
    let relu = Candidate::load(&fixture("candidates/relu_ok.py")).unwrap();
    let r = ev.evaluate(&problem, &relu, &config()).await.expect("a verdict").record;
    assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
    assert!(r.verdict.message.contains("evaluated again alone"), "{}", r.verdict.message);
    let m = r.memory.as_ref().expect("memory use");
    assert!(m.retried_alone, "{m:?}");
    assert_eq!(m.cap_fraction, Some(0.9));
    // Measured shared (ran out), then alone; evaluated shared (ran out), then alone.
    let measured = admitted(&ev, JobKind::MeasureMemory, 2).await;
    let evaluated = evaluations(&ev, 2).await;
    assert_eq!((measured.len(), evaluated.len()), (2, 2), "{measured:#?} {evaluated:#?}");
    // Alone, a job is charged everything the pool gives out.
    let usable = ev.pool().memory_budget().unwrap().usable();
    assert_eq!(measured[1].bytes, usable, "{measured:#?}");
    assert_eq!(evaluated[1].bytes, usable, "{evaluated:#?}");
    let alone = ev.pool().lease_events().iter().filter(|e| e.kind == LeaseKind::Exclusive).count();
    assert_eq!(alone, 2, "one whole-life hold for each run alone");
}

/// A problem that needs more than the device can give one candidate is bad input, named
/// with its sizes, before any candidate runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_problem_too_big_for_the_device_is_a_problem_error_naming_the_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let ev = evaluator(dir.path(), Some(64 << 10), None).await;
    let problem = Problem::load(&fixture("problems/relu_small.py")).unwrap();
    let relu = Candidate::load(&fixture("candidates/relu_ok.py")).unwrap();
    let err = ev.evaluate(&problem, &relu, &config()).await.expect_err("too big");
    let text = err.to_string();
    assert!(matches!(err, EvalError::Problem { .. }), "{text}");
    for part in ["relu_small.py", "needs", "inputs 15.6 KiB", "at most 57.6 KiB", "64.0 KiB in all"]
    {
        assert!(text.contains(part), "{part:?} missing from {text}");
    }
    assert!(evaluations(&ev, 0).await.is_empty(), "no candidate ran");
}

/// Measured once per problem and shapes, then read from the store: by a later evaluator
/// too, and from `suite validate`'s problem check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_need_is_measured_once_and_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store.sqlite");
    let (small, wide) = two_problems(dir.path());
    async fn measures(ev: &Evaluator) -> usize {
        // A measurement's memory goes back just after its answer, when its process is gone.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let events = ev.pool().admission_events();
        events.iter().filter(|e| e.kind == JobKind::MeasureMemory).count()
    }
    let first = evaluator(&dir.path().join("a"), Some(1 << 40), Some(&store)).await;
    let n = first.memory_need(&small, &config()).await.unwrap();
    assert!(matches!(&n, Measured::Need(m) if m.method == MemoryMethod::TensorSizes), "{n:?}");
    assert_eq!(first.memory_need(&small, &config()).await.unwrap(), n);
    assert_eq!(measures(&first).await, 1);
    // The problem check measures its shape as it goes; nothing is measured after it.
    let report = first.check_problem(&wide, Default::default(), Duration::from_secs(60)).await;
    assert!(report.unwrap().memory.is_some());
    assert!(matches!(first.memory_need(&wide, &config()).await.unwrap(), Measured::Need(_)));
    assert_eq!(measures(&first).await, 1);
    drop(first);

    let later = evaluator(&dir.path().join("b"), Some(1 << 40), Some(&store)).await;
    assert_eq!(later.memory_need(&small, &config()).await.unwrap(), n);
    assert!(matches!(later.memory_need(&wide, &config()).await.unwrap(), Measured::Need(_)));
    assert_eq!(measures(&later).await, 0, "both read from the store");

    // Without a capacity (CPU mode) nothing is measured.
    let plain = evaluator(&dir.path().join("c"), None, None).await;
    assert_eq!(plain.memory_need(&small, &config()).await.unwrap(), Measured::Skipped);
}

/// A problem prepared ahead (as an episode does while its first completion is generated)
/// has its need measured then: its first candidate waits for no measurement. One not
/// prepared makes its first candidate wait for it, and the record says how long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_problem_s_first_candidate_waits_for_no_measurement() {
    let dir = tempfile::tempdir().unwrap();
    let (small, wide) = two_problems(dir.path());
    let ev = evaluator(&dir.path().join("s"), Some(1 << 40), None).await;
    // A measurement's admission is logged once its process is gone, just after its answer.
    let unprepared = ev.evaluate(&small, &sleepy(), &config()).await.expect("evaluation").record;
    assert_eq!(unprepared.verdict.status, Status::Correct, "{}", unprepared.verdict.message);
    // A measurement is a job in a process of its own: milliseconds at least.
    assert!(unprepared.prepare_ms >= 2.0, "waited for a measurement: {}", unprepared.prepare_ms);
    assert_eq!(admitted(&ev, JobKind::MeasureMemory, 1).await.len(), 1);

    ev.prepare(&wide, &config()).await.expect("prepared");
    assert_eq!(
        admitted(&ev, JobKind::MeasureMemory, 2).await.len(),
        2,
        "prepare measured the need"
    );
    let prepared = ev.evaluate(&wide, &sleepy(), &config()).await.expect("evaluation").record;
    assert_eq!(prepared.verdict.status, Status::Correct, "{}", prepared.verdict.message);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(admitted(&ev, JobKind::MeasureMemory, 2).await.len(), 2, "not measured again");
    assert!(
        prepared.prepare_ms * 5.0 < unprepared.prepare_ms,
        "a lookup, not a measurement: {} ms against {} ms",
        prepared.prepare_ms,
        unprepared.prepare_ms
    );
}

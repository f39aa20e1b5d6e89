//! A candidate that launched on another stream in a process with fewer hardware queues
//! than the driver's 8 cannot be checked for work left running at return (the late-write
//! check's copy waits behind it on the shared queue): the worker says so, and the host
//! evaluates it again in a process started with 8.
//!
//! Streams need a GPU, so the real worker is copied with one line of stand-in: on the CPU,
//! a candidate carrying the marker below counts as one that launched on another stream.
//! Everything else is real: the worker reads the queues its process was given, its verdict
//! crosses the protocol, and the host starts the second process.

use std::path::Path;

use tritonforge_eval::{Evaluator, Pool, PoolConfig, WorkerSpec};
use tritonforge_protocol::{EvalConfig, Status};
use tritonforge_suite::{Candidate, Problem};

mod common;
use common::{fixture, spec};

const MARKER: &str = "# stand-in: launches on another stream";

/// The real worker with `call_candidate` wrapped: after a watched call of a marked
/// candidate, a process with few hardware queues answers as it does on a GPU.
fn stand_in(state: &Path, dir: &Path) -> WorkerSpec {
    let real = spec(state);
    let copy = dir.join("worker");
    copy_dir(&real.worker_path, &copy);
    let executor = copy.join("tritonforge_worker/executor.py");
    let mut text = std::fs::read_to_string(&executor).unwrap();
    text.push_str(&format!(
        r#"

_real_call_candidate = call_candidate


def call_candidate(cx, model, inputs, where, done, share=False):  # noqa: F811 - the stand-in
    out = _real_call_candidate(cx, model, inputs, where, done, share)
    if {MARKER:?} in Path(cx.candidate_path).read_text() and few_hardware_queues():
        raise _Fail(verdict(cx, "runtime_error", "provenance", f"{{where}}: one queue", done,
                            needs_hardware_queues=True))
    return out
"#
    ));
    std::fs::write(&executor, text).unwrap();
    WorkerSpec { worker_path: copy, ..real }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

async fn evaluate(cuda_connections: Option<u32>, marked: bool) -> tritonforge_protocol::EvalRecord {
    let state = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(state.path(), dir.path());
    let cfg = PoolConfig { workers: 1, spares: 1, cuda_connections, ..PoolConfig::default() };
    let ev = Evaluator::new(Pool::start(worker, cfg).await.expect("pool"), None, "test".into());
    let problem = Problem::load(&fixture("problems/relu_small.py")).unwrap();
    let mut candidate = Candidate::load(&fixture("candidates/relu_ok.py")).unwrap();
    if marked {
        candidate.source = format!("{MARKER}\n{}", candidate.source);
    }
    let config = EvalConfig { trials: 2, budget_ms: 120_000, ..EvalConfig::default() };
    ev.evaluate(&problem, &candidate, &config).await.expect("evaluation").record
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_on_another_stream_is_evaluated_again_with_the_drivers_queues() {
    // One queue (the default): the first process cannot check it, the second (8) can.
    let record = evaluate(Some(1), true).await;
    assert_eq!(record.verdict.status, Status::Correct, "{}", record.verdict.message);
    assert!(!record.verdict.needs_hardware_queues);
    assert!(
        record.verdict.message.contains("evaluated again in a process with the driver's 8"),
        "{}",
        record.verdict.message
    );
    // Already 8 queues: checked where it ran, nothing to say.
    let record = evaluate(Some(8), true).await;
    assert_eq!(record.verdict.status, Status::Correct, "{}", record.verdict.message);
    assert!(!record.verdict.message.contains("evaluated again"), "{}", record.verdict.message);
    // A candidate on one stream is checked in its pooled process, one queue or not.
    let record = evaluate(Some(1), false).await;
    assert_eq!(record.verdict.status, Status::Correct, "{}", record.verdict.message);
    assert!(!record.verdict.message.contains("evaluated again"), "{}", record.verdict.message);
}

//! A candidate that launched on another stream in a process with fewer hardware queues
//! than the driver's 8 cannot be checked for work left running at return (the late-write
//! check's copy waits behind it on the shared queue): the worker says so, and the host
//! evaluates it again in a process started with 8.
//!
//! Streams need a GPU, so the real worker is copied with a few lines of stand-in: on the
//! CPU, a candidate carrying the marker below counts as one that launched on another
//! stream, and the context reads the queues as on a GPU (before the candidate's import).
//! Everything else is real: the worker reads the queues its process was given, its verdict
//! crosses the protocol, and the host starts the second process.

use std::path::Path;

use tritonforge_eval::{Evaluator, Pool, PoolConfig, WorkerSpec};
use tritonforge_protocol::{EvalConfig, Status};
use tritonforge_suite::{Candidate, Problem};

mod common;
use common::{fixture, spec};

const MARKER: &str = "# stand-in: launches on another stream";
/// A worker the candidate has fooled into saying "too few queues" whatever it was given.
const FOOLED: &str = "# stand-in: the worker always finds too few queues";

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

_real_new_context = new_context
_real_call_candidate = call_candidate


def new_context(job, workdir, lease=None):  # noqa: F811 - the stand-in
    cx = _real_new_context(job, workdir, lease)
    cx.few_queues = few_hardware_queues()
    return cx


def call_candidate(cx, model, inputs, where, done, share=False):  # noqa: F811 - the stand-in
    out = _real_call_candidate(cx, model, inputs, where, done, share)
    source = Path(cx.candidate_path).read_text()
    if {FOOLED:?} in source:
        cx.few_queues = True
    if {MARKER:?} in source:
        unchecked_streams(cx, where, done)
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

async fn evaluate(cuda_connections: Option<u32>, header: &str) -> tritonforge_protocol::EvalRecord {
    let state = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let worker = stand_in(state.path(), dir.path());
    let cfg = PoolConfig { workers: 1, spares: 1, cuda_connections, ..PoolConfig::default() };
    let ev = Evaluator::new(Pool::start(worker, cfg).await.expect("pool"), None, "test".into());
    let problem = Problem::load(&fixture("problems/relu_small.py")).unwrap();
    let mut candidate = Candidate::load(&fixture("candidates/relu_ok.py")).unwrap();
    candidate.source = format!("{header}\n{}", candidate.source);
    let config = EvalConfig { trials: 2, budget_ms: 120_000, ..EvalConfig::default() };
    ev.evaluate(&problem, &candidate, &config).await.expect("evaluation").record
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_on_another_stream_is_evaluated_again_with_the_drivers_queues() {
    // One queue (the default): the first process cannot check it, the second (8) can,
    // holding the device's memory alone.
    let record = evaluate(Some(1), MARKER).await;
    assert_eq!(record.verdict.status, Status::Correct, "{}", record.verdict.message);
    assert!(!record.verdict.needs_hardware_queues);
    assert!(
        record.verdict.message.contains("evaluated again alone in a process with 8"),
        "{}",
        record.verdict.message
    );
    let memory = record.memory.as_ref().expect("memory");
    assert_eq!(memory.cap_fraction, Some(0.9), "{memory:?}");
    // Rewriting the variable at import changes nothing: the worker read it before.
    let rewrites = format!("{MARKER}\nimport os\nos.environ['CUDA_DEVICE_MAX_CONNECTIONS'] = '8'");
    let record = evaluate(Some(1), &rewrites).await;
    assert!(record.verdict.message.contains("evaluated again alone"), "{}", record.verdict.message);
    // Already 8 queues: checked where it ran, nothing to say.
    let record = evaluate(Some(8), MARKER).await;
    assert_eq!(record.verdict.status, Status::Correct, "{}", record.verdict.message);
    assert!(!record.verdict.message.contains("evaluated again"), "{}", record.verdict.message);
    // A candidate on one stream is checked in its pooled process, one queue or not.
    let record = evaluate(Some(1), "").await;
    assert_eq!(record.verdict.status, Status::Correct, "{}", record.verdict.message);
    assert!(!record.verdict.message.contains("evaluated again"), "{}", record.verdict.message);
    // A worker that says "too few queues" with the driver's 8 was fooled by its candidate.
    let record = evaluate(Some(1), &format!("{MARKER}\n{FOOLED}")).await;
    assert_eq!(record.verdict.status, Status::Rejected, "{}", record.verdict.message);
    assert!(record.verdict.message.contains("[runtime-patched]"), "{}", record.verdict.message);
}

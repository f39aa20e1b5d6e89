//! The queue's life: a request resolved into an exact job, stored, dispatched to the
//! evaluator, finished; waiting for a job; draining on shutdown.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tritonforge_api::{JobView, SourceSpec, Submitted};
use tritonforge_protocol::EvalConfig;
use tritonforge_store::{Added, Job, JobState, NewJob, StoreError};
use tritonforge_suite::{Candidate, Problem, ProblemMeta};

use crate::{api_state, AppState};

/// A job as stored and run: everything the evaluator needs, resolved at submission.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Resolved {
    pub problem_name: String,
    pub problem_path: String,
    pub problem_source: String,
    pub meta: Option<MetaLite>,
    pub candidate_name: String,
    #[serde(default)]
    pub candidate_path: Option<String>,
    pub candidate_source: String,
    pub config: EvalConfig,
}

/// The part of a suite problem's manifest entry a job keeps (its level and mixed-kernel
/// policy decide the runtime rules; the tolerance is already in `config`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct MetaLite {
    pub id: Option<String>,
    pub level: Option<u32>,
    /// Jobs queued before policies existed have none: the level's default applies.
    #[serde(default)]
    pub policy: Option<tritonforge_suite::MixedPolicy>,
}

impl Resolved {
    pub fn new(problem: &Problem, candidate: &Candidate, config: EvalConfig) -> Resolved {
        Resolved {
            problem_name: problem.name.clone(),
            problem_path: problem.path.display().to_string(),
            problem_source: problem.source.clone(),
            meta: Some(MetaLite {
                id: problem.meta.id.clone(),
                level: problem.meta.level,
                policy: problem.meta.policy,
            }),
            candidate_name: candidate.name.clone(),
            candidate_path: Some(candidate.path.display().to_string()),
            candidate_source: candidate.source.clone(),
            config,
        }
    }

    pub fn pair(&self) -> (Problem, Candidate) {
        let meta = self.meta.clone().unwrap_or_default();
        let problem = Problem {
            name: self.problem_name.clone(),
            path: PathBuf::from(&self.problem_path),
            source: self.problem_source.clone(),
            meta: ProblemMeta {
                id: meta.id,
                level: meta.level,
                policy: meta.policy,
                ..ProblemMeta::default()
            },
        };
        let candidate = Candidate {
            name: self.candidate_name.clone(),
            path: PathBuf::from(
                self.candidate_path
                    .clone()
                    .unwrap_or_else(|| format!("{}.py", self.candidate_name)),
            ),
            source: self.candidate_source.clone(),
        };
        (problem, candidate)
    }
}

/// A problem given inline, as the evaluator takes it.
pub(crate) fn inline_problem(spec: &SourceSpec, default: &str) -> Problem {
    let name = spec.name.clone().unwrap_or_else(|| default.to_string());
    Problem {
        path: spec
            .path
            .as_ref()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(format!("{name}.py"))),
        name,
        source: spec.source.clone(),
        meta: ProblemMeta::default(),
    }
}

pub(crate) fn inline_candidate(spec: &SourceSpec, default: &str) -> Candidate {
    let name = spec.name.clone().unwrap_or_else(|| default.to_string());
    let path = spec
        .path
        .as_ref()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("{name}.py")));
    Candidate { path, name, source: spec.source.clone() }
}

static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A fresh job id: time, process and a counter (unique across restarts of one store).
fn new_id() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("ev-{:x}-{:x}-{n}", tritonforge_store::now_ms(), std::process::id())
}

/// Store resolved jobs (one transaction) and wake the dispatcher. `reuse_identical`: an
/// identical earlier job that did not fail is returned instead (the compatible `/eval`).
pub(crate) fn submit(
    state: &AppState,
    client: &str,
    jobs: Vec<(Resolved, Option<String>)>,
    reuse_identical: bool,
) -> Result<Vec<Submitted>, StoreError> {
    let mut rows = Vec::with_capacity(jobs.len());
    for (r, idem) in jobs {
        let (p, c) = r.pair();
        let hash = state.evaluator.key(&p, &c, &r.config);
        rows.push(NewJob {
            id: new_id(),
            client: client.to_string(),
            idempotency_key: idem,
            request_hash: hash,
            request: serde_json::to_string(&r).unwrap_or_default(),
            problem: r.problem_name.clone(),
            candidate: r.candidate_name.clone(),
        });
    }
    let added = state.queue()?.add_jobs(&rows, reuse_identical)?;
    let mut out = Vec::with_capacity(added.len());
    for a in added {
        match a {
            Added::New(id) => {
                state.metrics.accepted.fetch_add(1, Ordering::Relaxed);
                out.push(Submitted {
                    id,
                    state: tritonforge_api::JobState::Queued,
                    existing: false,
                })
            }
            Added::Existing(id, s) => {
                state.metrics.deduplicated.fetch_add(1, Ordering::Relaxed);
                out.push(Submitted { id, state: api_state(s), existing: true })
            }
        }
    }
    state.wake.notify_one();
    Ok(out)
}

/// A stored job as the API shows it, its record read from the store once done.
pub(crate) fn view(state: &AppState, job: Job, with_record: bool) -> Result<JobView, StoreError> {
    let record = match (&job.record_key, with_record) {
        (Some(k), true) => state.queue()?.get(k)?,
        _ => None,
    };
    Ok(JobView {
        id: job.id,
        state: api_state(job.state),
        client: job.client,
        problem: job.problem,
        candidate: job.candidate,
        created_ms: job.created_ms,
        started_ms: job.started_ms,
        finished_ms: job.finished_ms,
        attempts: job.attempts,
        cached: job.cached,
        error: job.error,
        record,
    })
}

/// Wait until job `id` is final, at most `wait`; `None` when there is no such job. Ends
/// early when the server drains and the job went back to the queue.
pub(crate) async fn wait_final(
    state: &AppState,
    id: &str,
    wait: Duration,
) -> Result<Option<Job>, StoreError> {
    let deadline = Instant::now() + wait;
    let mut rx = state.finished.subscribe();
    loop {
        let Some(job) = state.queue()?.job(id)? else { return Ok(None) };
        let left = deadline.saturating_duration_since(Instant::now());
        if job.state.is_final()
            || left.is_zero()
            || (state.draining() && job.state == JobState::Queued)
        {
            return Ok(Some(job));
        }
        // Re-read on our id, on a lagged channel, and at least every second.
        let step = left.min(Duration::from_secs(1));
        let _ = tokio::time::timeout(step, async {
            loop {
                match rx.recv().await {
                    Ok(done) if done == id => break,
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
        })
        .await;
    }
}

/// Feed queued jobs to the evaluator while it has room; stop when draining.
pub(crate) async fn dispatch(state: Arc<AppState>) {
    let width = state.cfg.concurrency.unwrap_or(state.evaluator.pool().capacity() * 2).max(1);
    let permits = Arc::new(Semaphore::new(width));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else { return };
        let notified = state.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if state.draining() {
            return;
        }
        let claimed = state.queue().and_then(|q| q.claim_job());
        match claimed {
            Ok(Some(job)) => {
                let st = state.clone();
                let id = job.id.clone();
                let mut running = state.running.lock().unwrap_or_else(|p| p.into_inner());
                let handle = tokio::spawn(async move {
                    run_job(&st, job).await;
                    drop(permit);
                });
                running.insert(id, handle.abort_handle());
            }
            Ok(None) => {
                drop(permit);
                let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
            }
            Err(e) => {
                drop(permit);
                state.metrics.store_errors.fetch_add(1, Ordering::Relaxed);
                eprintln_store(&e);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// The server never prints from the library but for this: a store failure in the
/// background loop has nowhere else to go (it is also counted in `/metrics`).
fn eprintln_store(e: &StoreError) {
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("tritonforge serve: job queue: {e}\n").as_bytes(),
    );
}

async fn run_job(state: &AppState, job: Job) {
    let queued_ms = job.started_ms.unwrap_or(job.created_ms) - job.created_ms;
    state.metrics.observe_stage("queue", queued_ms as f64);
    let started = Instant::now();
    let outcome = match serde_json::from_str::<Resolved>(&job.request) {
        Err(e) => Err(format!("the stored request does not parse: {e}")),
        Ok(r) => {
            let (p, c) = r.pair();
            state.evaluator.evaluate(&p, &c, &r.config).await.map_err(|e| e.to_string())
        }
    };
    let finished = match &outcome {
        Ok(ev) => {
            state.metrics.finished(&ev.record, ev.cached, started.elapsed());
            state.queue().and_then(|q| {
                q.finish_job(&job.id, JobState::Done, Some(&ev.record.key), None, ev.cached)
            })
        }
        Err(msg) => {
            state.metrics.failed.fetch_add(1, Ordering::Relaxed);
            state
                .queue()
                .and_then(|q| q.finish_job(&job.id, JobState::Failed, None, Some(msg), false))
        }
    };
    if let Err(e) = finished {
        state.metrics.store_errors.fetch_add(1, Ordering::Relaxed);
        eprintln_store(&e);
    }
    state.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&job.id);
    let _ = state.finished.send(job.id);
}

/// Cancel a job: a queued one never runs, a running one's process is stopped.
pub(crate) fn cancel(state: &AppState, id: &str) -> Result<Option<JobState>, StoreError> {
    let after = state.queue()?.cancel_job(id)?;
    if after == Some(JobState::Cancelled) {
        if let Some(h) = state.running.lock().unwrap_or_else(|p| p.into_inner()).remove(id) {
            h.abort();
        }
        state.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
        let _ = state.finished.send(id.to_string());
    }
    Ok(after)
}

/// Shutdown: wait for running jobs up to the grace period, then stop the rest and put
/// them back in the queue for the next server (waiters hear of it and answer 503).
pub(crate) async fn drain(state: &AppState) -> Result<(), StoreError> {
    let deadline = Instant::now() + state.cfg.grace;
    while Instant::now() < deadline {
        if state.running.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left: Vec<(String, tokio::task::AbortHandle)> =
        state.running.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
    for (_, h) in &left {
        h.abort();
    }
    state.queue()?.requeue_running()?;
    for (id, _) in left {
        let _ = state.finished.send(id);
    }
    Ok(())
}

//! The native API: submit (one or a batch), fetch or long-poll, list, cancel, stream
//! results as server-sent events, server info, problem checks.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream};
use futures_util::StreamExt;
use serde::Deserialize;
use tritonforge_api::{
    valid_name, BatchRequest, BatchSubmitted, EvalOptions, JobList, ProblemCheckRequest,
    ServerInfo, SourceSpec, SubmitRequest, IDEMPOTENCY_HEADER,
};
use tritonforge_eval::{EvalSettings, ShapeCheck};
use tritonforge_protocol::EvalConfig;
use tritonforge_store::{JobFilter, JobState};
use tritonforge_suite::Problem;

use crate::http::{client_of, parse, HttpError, Peer};
use crate::jobs::{self, inline_candidate, inline_problem, Resolved};
use crate::AppState;

/// Check a source given inline: its name and size.
fn check_source(state: &AppState, s: &SourceSpec, field: &str) -> Result<(), HttpError> {
    if let Some(n) = &s.name {
        if !valid_name(n) {
            return Err(HttpError::field(
                format!("{field}.name"),
                format!("`{n}` is not a file stem (letters, digits, `_`, `-`, `.`; at most 128)"),
            ));
        }
    }
    if let Some(p) = &s.path {
        let file = std::path::Path::new(p).file_name().and_then(|f| f.to_str()).unwrap_or("");
        if p.len() > 4096 || !valid_name(file) {
            return Err(HttpError::field(
                format!("{field}.path"),
                "its last part must be a file name (letters, digits, `_`, `-`, `.`)",
            ));
        }
    }
    let max = state.cfg.limits.max_source_bytes;
    if s.source.len() > max {
        return Err(HttpError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            ..HttpError::field(
                format!("{field}.source"),
                format!("{} bytes is more than the {max} a source may have", s.source.len()),
            )
        });
    }
    if s.source.trim().is_empty() {
        return Err(HttpError::field(format!("{field}.source"), "the source is empty"));
    }
    Ok(())
}

/// `eval`'s flags as settings, each wrong value named.
pub(crate) fn settings(o: &EvalOptions, f: &str) -> Result<EvalSettings, HttpError> {
    let mut s = EvalSettings::default();
    if let Some(x) = o.trials {
        s.trials = x;
    }
    if let Some(x) = o.seed {
        s.seed = x;
    }
    s.variant = o.variant.clone();
    if let Some(x) = &o.shape_check {
        s.shape_check = if x == "off" { ShapeCheck::Off } else { ShapeCheck::Variant(x.clone()) };
    }
    if let Some(x) = o.budget_ms {
        s.budget = Duration::from_millis(x);
    }
    let t = &mut s.timing;
    t.enabled = o.timing.unwrap_or(t.enabled);
    t.budget_ms = o.timing_budget_ms.unwrap_or(t.budget_ms);
    t.speedup_cap = o.speedup_cap.unwrap_or(t.speedup_cap);
    t.profile = o.profile.unwrap_or(t.profile);
    t.compile_baseline = o.compile_baseline.unwrap_or(t.compile_baseline);
    s.check().map_err(|m| HttpError::field(format!("{f}options"), m))?;
    Ok(s)
}

fn check_config(c: &EvalConfig, f: &str) -> Result<(), HttpError> {
    let bad = |k: &str, m: &str| Err(HttpError::field(format!("{f}config.{k}"), m.to_string()));
    if c.trials == 0 {
        return bad("trials", "must be positive");
    }
    if c.budget_ms == 0 {
        return bad("budget_ms", "must be positive");
    }
    if c.timing_budget_ms == 0 {
        return bad("timing_budget_ms", "must be positive");
    }
    if c.speedup_cap.is_nan() || c.speedup_cap <= 1.0 {
        return bad("speedup_cap", "must be above 1");
    }
    Ok(())
}

/// A request as the job it becomes; `f` prefixes field names (`evaluations[3].`).
pub(crate) fn resolve(state: &AppState, r: &SubmitRequest, f: &str) -> Result<Resolved, HttpError> {
    let mut problem: Problem = match (&r.problem, &r.problem_id) {
        (Some(_), Some(_)) => {
            return Err(HttpError::field(
                format!("{f}problem_id"),
                "give `problem` or `problem_id`, not both",
            ))
        }
        (None, None) => {
            return Err(HttpError::field(
                format!("{f}problem"),
                "missing: give `problem` (source) or `problem_id`",
            ))
        }
        (Some(p), None) => {
            check_source(state, p, &format!("{f}problem"))?;
            inline_problem(p, "problem")
        }
        (None, Some(id)) => {
            let Some(suite) = &state.suite else {
                return Err(HttpError::field(
                    format!("{f}problem_id"),
                    "this server has no suite; send the problem's source",
                ));
            };
            let Some(entry) = suite.find(id) else {
                return Err(HttpError::field(
                    format!("{f}problem_id"),
                    format!("no problem `{id}` in the server's suite"),
                ));
            };
            Problem::load_with(&entry.problem_path, Some(&suite.manifest))
                .map_err(|e| HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        }
    };
    if let Some(t) = r.tolerance {
        if !(t.atol >= 0.0 && t.rtol >= 0.0) {
            return Err(HttpError::field(
                format!("{f}tolerance"),
                "atol and rtol must be non-negative numbers",
            ));
        }
        problem.meta.atol = Some(t.atol);
        problem.meta.rtol = Some(t.rtol);
    }
    check_source(state, &r.candidate, &format!("{f}candidate"))?;
    let candidate = inline_candidate(&r.candidate, "candidate");
    let config = match &r.config {
        Some(c) => {
            check_config(c, f)?;
            c.clone()
        }
        None => settings(&r.options, f)?
            .config(&problem, state.evaluator.device())
            .map_err(|e| HttpError::field(format!("{f}options"), e.to_string()))?,
    };
    Ok(Resolved::new(&problem, &candidate, config))
}

/// Refuse work the queue or this client has no room for (429 with Retry-After).
pub(crate) fn admit(state: &AppState, client: &str, n: usize) -> Result<(), HttpError> {
    if state.draining() {
        return Err(HttpError::unavailable(
            "the server is shutting down; try another or retry later",
        ));
    }
    let q = state.queue()?;
    let queued = q.job_counts()?.iter().find(|c| c.0 == JobState::Queued).map(|c| c.1).unwrap_or(0);
    let lim = &state.cfg.limits;
    // Retry-After: roughly the seconds the work ahead takes at one evaluation per slot per second.
    let slots = state.evaluator.pool().capacity().max(1) as u64;
    if queued + n as u64 > lim.max_queue {
        return Err(HttpError::busy(
            format!("the queue is full ({queued} waiting, limit {})", lim.max_queue),
            queued / slots,
        ));
    }
    let open = q.open_jobs_of(client)?;
    if open + n as u64 > lim.per_client {
        return Err(HttpError::busy(
            format!(
                "client `{client}` has {open} unfinished evaluations (limit {})",
                lim.per_client
            ),
            open / slots,
        ));
    }
    Ok(())
}

fn idempotency(headers: &HeaderMap, body: &Option<String>) -> Option<String> {
    body.clone().or_else(|| {
        headers.get(IDEMPOTENCY_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string)
    })
}

pub(crate) async fn submit_one(
    State(state): State<Arc<AppState>>,
    peer: Peer,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, HttpError> {
    let req: SubmitRequest = parse(&state, body).await?;
    let client = client_of(&headers, peer.0);
    let resolved = resolve(&state, &req, "")?;
    admit(&state, &client, 1)?;
    let idem = idempotency(&headers, &req.idempotency_key);
    let mut out = jobs::submit(&state, &client, vec![(resolved, idem)], false)?;
    let s = out.pop().ok_or_else(|| HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, "no job"))?;
    Ok((StatusCode::ACCEPTED, Json(s)).into_response())
}

pub(crate) async fn submit_batch(
    State(state): State<Arc<AppState>>,
    peer: Peer,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, HttpError> {
    let req: BatchRequest = parse(&state, body).await?;
    let client = client_of(&headers, peer.0);
    let max = state.cfg.limits.max_batch;
    if req.evaluations.is_empty() || req.evaluations.len() > max {
        return Err(HttpError::field("evaluations", format!("give 1 to {max} evaluations")));
    }
    let mut jobs_in = Vec::with_capacity(req.evaluations.len());
    for (i, r) in req.evaluations.iter().enumerate() {
        let resolved = resolve(&state, r, &format!("evaluations[{i}]."))?;
        jobs_in.push((resolved, r.idempotency_key.clone()));
    }
    admit(&state, &client, jobs_in.len())?;
    let jobs = jobs::submit(&state, &client, jobs_in, false)?;
    Ok((StatusCode::ACCEPTED, Json(BatchSubmitted { jobs })).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetQuery {
    /// Long poll: wait up to this many seconds for the job to end.
    wait: Option<f64>,
}

pub(crate) async fn get_one(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    q: Result<Query<GetQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, HttpError> {
    let q = q.map_err(|e| HttpError::field("wait", e.body_text()))?;
    let wait = q.wait.unwrap_or(0.0);
    if !(0.0..=state.cfg.limits.max_wait_s as f64).contains(&wait) {
        return Err(HttpError::field(
            "wait",
            format!("seconds from 0 to {}", state.cfg.limits.max_wait_s),
        ));
    }
    let job = jobs::wait_final(&state, &id, Duration::from_secs_f64(wait)).await?;
    let Some(job) = job else {
        return Err(HttpError::new(StatusCode::NOT_FOUND, format!("no evaluation `{id}`")));
    };
    Ok(Json(jobs::view(&state, job, true)?).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    state: Option<String>,
    client: Option<String>,
    problem: Option<String>,
    before: Option<i64>,
    limit: Option<u32>,
    /// Include each finished job's record (default false: listings stay small).
    records: Option<bool>,
}

pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, HttpError> {
    let Query(q) = q.map_err(|e| HttpError::field("query", e.body_text()))?;
    let st = match q.state.as_deref() {
        None => None,
        Some(s) => Some(JobState::parse(s).ok_or_else(|| {
            HttpError::field(
                "state",
                format!("`{s}` is not one of queued, running, done, failed, cancelled"),
            )
        })?),
    };
    let filter = JobFilter {
        state: st,
        client: q.client,
        problem: q.problem,
        before_seq: q.before,
        limit: q.limit.unwrap_or(100).clamp(1, 1000),
    };
    let rows = state.queue()?.list_jobs(&filter)?;
    let with = q.records.unwrap_or(false);
    let evaluations =
        rows.into_iter().map(|j| jobs::view(&state, j, with)).collect::<Result<Vec<_>, _>>()?;
    Ok(Json(JobList { evaluations }).into_response())
}

pub(crate) async fn cancel(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    match jobs::cancel(&state, &id)? {
        None => Err(HttpError::new(StatusCode::NOT_FOUND, format!("no evaluation `{id}`"))),
        Some(_) => {
            let job = state.queue()?.job(&id)?;
            let job = job.ok_or_else(|| HttpError::new(StatusCode::NOT_FOUND, id.clone()))?;
            Ok(Json(jobs::view(&state, job, true)?).into_response())
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// Comma-separated job ids; the stream ends once all are final. Without: every job
    /// that ends from now on, until the client leaves.
    ids: Option<String>,
}

/// Server-sent events: one `done` event (the job, with its record) per finished job.
pub(crate) async fn events(
    State(state): State<Arc<AppState>>,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, HttpError> {
    let Query(q) = q.map_err(|e| HttpError::field("ids", e.body_text()))?;
    let wanted: Option<HashSet<String>> =
        q.ids.map(|s| s.split(',').filter(|x| !x.is_empty()).map(str::to_string).collect());
    let rx = state.finished.subscribe();
    // Jobs already final are sent first.
    let mut first = Vec::new();
    let mut pending = wanted.clone().unwrap_or_default();
    if let Some(w) = &wanted {
        for id in w {
            match state.queue()?.job(id)? {
                None => return Err(HttpError::field("ids", format!("no evaluation `{id}`"))),
                Some(j) if j.state.is_final() => {
                    pending.remove(id);
                    first.push(j);
                }
                Some(_) => {}
            }
        }
    }
    let firsts = first
        .into_iter()
        .filter_map(|j| jobs::view(&state, j, true).ok())
        .map(|v| Ok(event(&v)))
        .collect::<Vec<_>>();
    let follow = wanted.is_none() || !pending.is_empty();
    let st = state.clone();
    let closing = state.closing.subscribe();
    let live = stream::unfold((rx, pending, follow), move |(mut rx, mut pending, follow)| {
        let st = st.clone();
        let mut closing = closing.clone();
        async move {
            if !follow {
                return None;
            }
            loop {
                // The server stopping ends the stream (every job it will finish is done).
                let id = tokio::select! {
                    got = rx.recv() => match got {
                        Ok(id) => id,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(_) => return None,
                    },
                    _ = closing.wait_for(|c| *c) => return None,
                };
                let filtered = !pending.is_empty();
                if filtered && !pending.contains(&id) {
                    continue;
                }
                let Ok(Some(job)) = st.queue().and_then(|q| q.job(&id)) else { continue };
                if !job.state.is_final() {
                    continue;
                }
                pending.remove(&id);
                let more = !filtered || !pending.is_empty();
                let Ok(v) = jobs::view(&st, job, true) else { continue };
                return Some((Ok(event(&v)), (rx, pending, more)));
            }
        }
    });
    Ok(Sse::new(stream::iter(firsts).chain(live)).keep_alive(KeepAlive::default()))
}

fn event(v: &tritonforge_api::JobView) -> Event {
    Event::default()
        .event("done")
        .id(v.id.clone())
        .json_data(v)
        .unwrap_or_else(|_| Event::default())
}

pub(crate) async fn info(State(state): State<Arc<AppState>>) -> Result<Response, HttpError> {
    let counts = state.queue()?.job_counts()?;
    let of = |s| counts.iter().find(|c| c.0 == s).map(|c| c.1).unwrap_or(0);
    Ok(Json(ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        device: state.evaluator.device(),
        environment: state.evaluator.environment().clone(),
        capacity: state.evaluator.pool().capacity(),
        queued: of(JobState::Queued),
        running: of(JobState::Running),
        draining: state.draining(),
    })
    .into_response())
}

/// Problem checks run at once (not queued): suite validation through a server.
pub(crate) async fn check_problem(
    State(state): State<Arc<AppState>>,
    body: Body,
) -> Result<Response, HttpError> {
    let req: ProblemCheckRequest = parse(&state, body).await?;
    check_source(&state, &req.problem, "problem")?;
    if req.budget_ms == 0 || req.budget_ms > 3_600_000 {
        return Err(HttpError::field("budget_ms", "from 1 ms to one hour"));
    }
    if state.draining() {
        return Err(HttpError::unavailable("the server is shutting down"));
    }
    let mut p = inline_problem(&req.problem, "problem");
    if let Some(t) = req.tolerance {
        p.meta.atol = Some(t.atol);
        p.meta.rtol = Some(t.rtol);
    }
    let report = state
        .evaluator
        .check_problem(&p, req.overrides, Duration::from_millis(req.budget_ms))
        .await
        .map_err(|e| HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Json(report).into_response())
}

//! The `/dash` JSON API the pages read. Every query parameter is checked: an unknown or
//! malformed one is a 422 naming it.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form, Json};
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};
use tritonforge_protocol::Status;
use tritonforge_store::{
    Cursor, EpisodeFilter, EpisodeRow, EvalFilter, EvalRow, JobState, MetricRow, QueueRow, RunKind,
    RunRow, StoreError,
};

use crate::access::{Access, Client};
use crate::Dashboard;

/// An error reply: `{"detail": ..., "field": ...}`, as the evaluator's API answers.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub detail: String,
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> ApiError {
        ApiError { status, detail: detail.into(), field: None }
    }

    /// A 422 about one query parameter.
    pub fn param(field: &str, detail: impl Into<String>) -> ApiError {
        ApiError {
            field: Some(field.to_string()),
            ..ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
        }
    }

    pub fn internal(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, detail)
    }

    fn not_found(what: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, what)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::internal(format!("the store failed: {e}"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"detail": self.detail});
        if let Some(f) = self.field {
            body["field"] = json!(f);
        }
        (self.status, Json(body)).into_response()
    }
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::not_found("Not Found")
}

type Q = Result<Query<HashMap<String, String>>, QueryRejection>;

/// The query string, with every parameter's name checked against `allowed`.
struct Params(HashMap<String, String>);

impl Params {
    fn of(q: Q, allowed: &[&str]) -> Result<Params, ApiError> {
        let Query(map) = q.map_err(|e| ApiError::param("query", e.body_text()))?;
        if let Some(bad) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ApiError::param(
                bad,
                format!("unknown parameter `{bad}` (known: {})", allowed.join(", ")),
            ));
        }
        Ok(Params(map))
    }

    /// A non-empty text value.
    fn text(&self, name: &str) -> Option<String> {
        self.0.get(name).filter(|v| !v.is_empty()).cloned()
    }

    fn int(&self, name: &str) -> Result<Option<i64>, ApiError> {
        self.text(name)
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    ApiError::param(name, format!("`{name}` must be an integer, not {v:?}"))
                })
            })
            .transpose()
    }

    fn limit(&self) -> Result<u32, ApiError> {
        match self.int("limit")? {
            None => Ok(50),
            Some(n @ 1..=500) => Ok(n as u32),
            Some(n) => Err(ApiError::param("limit", format!("`limit` must be 1 to 500, not {n}"))),
        }
    }

    fn cursor(&self) -> Result<Option<Cursor>, ApiError> {
        self.text("before")
            .map(|v| {
                Cursor::decode(&v).ok_or_else(|| {
                    ApiError::param(
                        "before",
                        format!(
                            "`before` must be a cursor TIME:KEY from a page's `next`, not {v:?}"
                        ),
                    )
                })
            })
            .transpose()
    }
}

pub(crate) async fn info(State(d): State<Arc<Dashboard>>, q: Q) -> Result<Json<Value>, ApiError> {
    Params::of(q, &[])?;
    let (stats, jobs) = d.read(|s| Ok((s.stats()?, s.job_counts()?))).await?;
    let queue: serde_json::Map<String, Value> =
        jobs.into_iter().map(|(state, n)| (state.as_str().to_string(), json!(n))).collect();
    let by_status: serde_json::Map<String, Value> =
        stats.by_status.into_iter().map(|(s, n)| (s, json!(n))).collect();
    Ok(Json(json!({
        "mode": d.mode.as_str(),
        "version": env!("CARGO_PKG_VERSION"),
        "store": d.store_path.file_name().map(|f| f.to_string_lossy().to_string()),
        "read_only": true,
        "suite": d.suite.is_some(),
        "evaluations": stats.evaluations,
        "by_status": by_status,
        "queue": queue,
        "statuses": Status::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
    })))
}

fn parse_json(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok()).unwrap_or(Value::Null)
}

/// The figures a run is judged by, from what the store holds of it.
fn headline(s: &tritonforge_store::Store, run: &RunRow) -> Result<Value, StoreError> {
    let pick = |m: &MetricRow, keys: &[&str]| -> Value {
        let v = parse_json(Some(&m.metric));
        let mut out = json!({"step": m.step});
        for k in keys {
            if let Some(x) = v.get(*k) {
                out[*k] = x.clone();
            }
        }
        out
    };
    Ok(match run.kind {
        RunKind::Sft => json!({
            "train": s.last_metric(&run.id, "train")?
                .map(|m| pick(&m, &["loss", "lr", "grad_norm", "tokens_per_s", "mfu"])),
            "validation": s.last_metric(&run.id, "validation")?.map(|m| pick(&m, &["loss"])),
        }),
        RunKind::Rl => json!({
            "rl": s.last_metric(&run.id, "rl")?.map(|m| pick(
                &m,
                &["reward_mean", "return_mean", "pass_by_turn", "compile_rate", "kl", "entropy", "tokens_per_s"],
            )),
            "episodes": episode_figures(s, &run.id)?,
            "heldout": s.last_metrics_by_split(&run.id, "heldout:")?.iter().map(|m| {
                let mut h = pick(m, &["set", "pass_at_1", "solved", "compile_rate", "problems"]);
                h["split"] = json!(m.split);
                h
            }).collect::<Vec<_>>(),
        }),
        RunKind::Agent => json!({"episodes": episode_figures(s, &run.id)?}),
        RunKind::Eval => {
            let counts = s.run_status_counts(&run.id)?;
            let map: serde_json::Map<String, Value> =
                counts.into_iter().map(|(k, n)| (k, json!(n))).collect();
            json!({"by_status": map})
        }
    })
}

fn episode_figures(s: &tritonforge_store::Store, run: &str) -> Result<Value, StoreError> {
    let (n, solved, ret) = s.run_episode_counts(run)?;
    Ok(json!({"episodes": n, "solved": solved, "mean_return": ret}))
}

fn run_json(run: &RunRow, headline: Value) -> Value {
    json!({
        "id": run.id,
        "kind": run.kind.as_str(),
        "status": run.status.as_str(),
        "settings": parse_json(run.settings.as_deref()),
        "summary": parse_json(run.summary.as_deref()),
        "started_at": run.started_at,
        "updated_at": run.updated_at,
        "finished_at": run.finished_at,
        "evaluations": run.evaluations,
        "episodes": run.episodes,
        "metrics": run.metrics,
        "headline": headline,
    })
}

pub(crate) async fn runs(State(d): State<Arc<Dashboard>>, q: Q) -> Result<Json<Value>, ApiError> {
    let p = Params::of(q, &["kind"])?;
    let kind = p
        .text("kind")
        .map(|k| {
            RunKind::parse(&k).ok_or_else(|| {
                ApiError::param("kind", format!("`kind` must be eval, agent, sft or rl, not {k:?}"))
            })
        })
        .transpose()?;
    let out = d
        .read(move |s| {
            let mut out = Vec::new();
            for run in s.runs()?.into_iter().filter(|r| kind.is_none_or(|k| r.kind == k)) {
                let h = headline(s, &run)?;
                out.push(run_json(&run, h));
            }
            Ok(out)
        })
        .await?;
    Ok(Json(json!({"runs": out})))
}

fn metric_json(m: &MetricRow) -> Value {
    json!({"step": m.step, "split": m.split, "t": m.created_at, "m": parse_json(Some(&m.metric))})
}

pub(crate) async fn run_metrics(
    State(d): State<Arc<Dashboard>>,
    Path(id): Path<String>,
    q: Q,
) -> Result<Json<Value>, ApiError> {
    let p = Params::of(q, &["after_step"])?;
    let after = match p.int("after_step")? {
        Some(n) if n < 0 => {
            return Err(ApiError::param("after_step", "`after_step` must be 0 or more"))
        }
        n => n.map(|n| n as u64),
    };
    let id2 = id.clone();
    let rows = d.read(move |s| s.metrics_after(&id2, after)).await?;
    Ok(Json(json!({"run": id, "rows": rows.iter().map(metric_json).collect::<Vec<_>>()})))
}

/// Per run, how far a live stream has sent: the last step, and the splits sent at it
/// (a validation row can land after the train row of the same step).
struct Sent {
    run: String,
    step: Option<u64>,
    splits: HashSet<String>,
}

/// `GET /dash/stream?runs=a,b`: server-sent events. First every stored metric of each
/// run, then new ones as the trainers write them (`event: metrics`, data
/// `{"run", "rows": [...]}`), polling the store since trainers write from other processes.
pub(crate) async fn stream(
    State(d): State<Arc<Dashboard>>,
    q: Q,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let p = Params::of(q, &["runs"])?;
    let runs: Vec<String> = p
        .text("runs")
        .ok_or_else(|| ApiError::param("runs", "`runs` must name at least one run (runs=a,b)"))?
        .split(',')
        .filter(|r| !r.is_empty())
        .map(str::to_string)
        .collect();
    if runs.len() > 16 {
        return Err(ApiError::param("runs", "`runs` may name at most 16 runs"));
    }
    let sent: Vec<Sent> =
        runs.into_iter().map(|run| Sent { run, step: None, splits: HashSet::new() }).collect();
    let poll = d.poll;
    let s = stream::unfold((d, sent, true), move |(d, mut sent, first)| async move {
        if !first {
            tokio::select! {
                _ = tokio::time::sleep(poll) => {}
                _ = d.closed() => return None,
            }
        }
        let mut events = Vec::new();
        for entry in sent.iter_mut() {
            let run = entry.run.clone();
            let after = entry.step.and_then(|s| s.checked_sub(1));
            let rows = match d.read(move |s| s.metrics_after(&run, after)).await {
                Ok(rows) => rows,
                Err(e) => {
                    events.push(Ok(Event::default().event("error").data(e.detail)));
                    continue;
                }
            };
            let fresh: Vec<Value> = rows
                .iter()
                .filter(|m| {
                    !(Some(m.step) < entry.step
                        || Some(m.step) == entry.step && entry.splits.contains(&m.split))
                })
                .map(metric_json)
                .collect();
            for m in &rows {
                if Some(m.step) > entry.step {
                    entry.step = Some(m.step);
                    entry.splits.clear();
                }
                if Some(m.step) == entry.step {
                    entry.splits.insert(m.split.clone());
                }
            }
            if !fresh.is_empty() || first {
                let data = json!({"run": entry.run, "rows": fresh}).to_string();
                events.push(Ok(Event::default().event("metrics").data(data)));
            }
        }
        Some((stream::iter(events), (d, sent, false)))
    });
    use futures_util::StreamExt;
    Ok(Sse::new(s.flatten()).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

fn job_json(j: &QueueRow) -> Value {
    json!({
        "id": j.id, "problem": j.problem, "candidate": j.candidate, "client": j.client,
        "state": j.state.as_str(), "attempts": j.attempts, "cached": j.cached,
        "record": j.record_key, "error": j.error, "created_ms": j.created_ms,
        "started_ms": j.started_ms, "finished_ms": j.finished_ms,
    })
}

/// How many jobs that ended the queue page shows.
const RECENT_JOBS: u32 = 20;

/// `GET /dash/queue`: the evaluation server's own queue as its store holds it: counts by
/// state, the running jobs, the queued ones in the order they will run (each at most
/// `limit`), and the last jobs that ended. Never the requests themselves (sources), and
/// nothing of the server's token, which the store does not hold. `now_ms` is the
/// server's clock, so the page's ages do not depend on the browser's.
pub(crate) async fn queue(State(d): State<Arc<Dashboard>>, q: Q) -> Result<Json<Value>, ApiError> {
    let p = Params::of(q, &["limit"])?;
    let limit = p.limit()?;
    let (counts, running, queued, recent) = d
        .read(move |s| {
            Ok((
                s.job_counts()?,
                s.jobs_in_state(JobState::Running, limit)?,
                s.jobs_in_state(JobState::Queued, limit)?,
                s.recent_finished_jobs(RECENT_JOBS)?,
            ))
        })
        .await?;
    let counts: serde_json::Map<String, Value> = JobState::ALL
        .iter()
        .map(|st| {
            let n = counts.iter().find(|(c, _)| c == st).map_or(0, |(_, n)| *n);
            (st.as_str().to_string(), json!(n))
        })
        .collect();
    let list = |jobs: &[QueueRow]| jobs.iter().map(job_json).collect::<Vec<_>>();
    Ok(Json(json!({
        "mode": d.mode.as_str(),
        "now_ms": tritonforge_store::now_ms(),
        "counts": counts,
        "running": list(&running),
        "queued": list(&queued),
        "recent": list(&recent),
        "limit": limit,
    })))
}

fn eval_row_json(e: &EvalRow) -> Value {
    json!({
        "key": e.key, "problem": e.problem, "candidate": e.candidate, "status": e.status,
        "created_at": e.created_at, "speedup": e.speedup, "stage": e.stage, "message": e.message,
    })
}

pub(crate) async fn evaluations(
    State(d): State<Arc<Dashboard>>,
    q: Q,
) -> Result<Json<Value>, ApiError> {
    let p = Params::of(q, &["problem", "status", "run", "since", "until", "before", "limit"])?;
    let status = p.text("status");
    if let Some(s) = &status {
        if !Status::ALL.iter().any(|x| x.as_str() == s) {
            let known: Vec<&str> = Status::ALL.iter().map(|x| x.as_str()).collect();
            return Err(ApiError::param(
                "status",
                format!("`status` must be one of {}, not {s:?}", known.join(", ")),
            ));
        }
    }
    let filter = EvalFilter {
        problem: p.text("problem"),
        status,
        run: p.text("run"),
        since: p.int("since")?,
        until: p.int("until")?,
        before: p.cursor()?,
        limit: p.limit()?,
    };
    let page = d.read(move |s| s.evaluations_page(&filter)).await?;
    Ok(Json(json!({
        "items": page.items.iter().map(eval_row_json).collect::<Vec<_>>(),
        "next": page.next.map(|c| c.encode()),
    })))
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

pub(crate) async fn evaluation(
    State(d): State<Arc<Dashboard>>,
    Path(key): Path<String>,
    q: Q,
) -> Result<Json<Value>, ApiError> {
    Params::of(q, &[])?;
    let k = key.clone();
    let found = d
        .read(move |s| {
            let Some((text, runs)) = s.evaluation_json(&k)? else { return Ok(None) };
            let record: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let sha = |who: &str| record[who]["sha256"].as_str().unwrap_or("").to_string();
            let problem = s.source(&sha("problem"))?;
            let candidate = s.source(&sha("candidate"))?;
            Ok(Some((record, runs, problem, candidate)))
        })
        .await?;
    let Some((record, runs, mut problem_src, candidate_src)) = found else {
        return Err(ApiError::not_found(format!("no evaluation `{key}`")));
    };
    let mut problem_origin = problem_src.as_ref().map(|_| "store");
    // Records written before sources were kept: the suite's file, if it is the same file.
    if problem_src.is_none() {
        let name = record["problem"]["name"].as_str().unwrap_or("");
        let sha = record["problem"]["sha256"].as_str().unwrap_or("");
        if let Some(entry) = d.suite.as_ref().and_then(|s| s.find(name)) {
            if let Ok(text) = std::fs::read_to_string(&entry.problem_path) {
                if sha256_hex(&text) == sha {
                    problem_src = Some(text);
                    problem_origin = Some("suite");
                }
            }
        }
    }
    Ok(Json(json!({
        "record": record,
        "runs": runs,
        "problem_source": problem_src,
        "problem_source_from": problem_origin,
        "candidate_source": candidate_src,
    })))
}

fn episode_row_json(e: &EpisodeRow) -> Value {
    json!({
        "id": e.id, "run": e.run, "problem": e.problem, "sample": e.sample,
        "created_at": e.created_at, "outcome": e.outcome, "turns": e.turns, "return": e.ret,
        "best_speedup": e.best_speedup,
    })
}

pub(crate) async fn episodes(
    State(d): State<Arc<Dashboard>>,
    q: Q,
) -> Result<Json<Value>, ApiError> {
    let p = Params::of(q, &["run", "problem", "before", "limit"])?;
    let filter = EpisodeFilter {
        run: p.text("run"),
        problem: p.text("problem"),
        before: p.cursor()?,
        limit: p.limit()?,
    };
    let page = d.read(move |s| s.episodes_page(&filter)).await?;
    Ok(Json(json!({
        "items": page.items.iter().map(episode_row_json).collect::<Vec<_>>(),
        "next": page.next.map(|c| c.encode()),
    })))
}

/// Token ids and log-probs are for training, not reading: a page gets their counts.
fn slim_episode(mut ep: Value) -> Value {
    if let Some(turns) = ep.get_mut("turns").and_then(Value::as_array_mut) {
        for t in turns {
            if let Some(c) = t.get_mut("completion").and_then(Value::as_object_mut) {
                for k in ["token_ids", "logprobs", "prompt_ids"] {
                    if let Some(n) = c.remove(k).and_then(|v| v.as_array().map(Vec::len)) {
                        c.insert(format!("{k}_count"), json!(n));
                    }
                }
            }
        }
    }
    ep
}

pub(crate) async fn episode(
    State(d): State<Arc<Dashboard>>,
    Path(id): Path<String>,
    q: Q,
) -> Result<Json<Value>, ApiError> {
    Params::of(q, &[])?;
    let i = id.clone();
    let text = d.read(move |s| s.episode_json(&i)).await?;
    let Some(text) = text else {
        return Err(ApiError::not_found(format!("no episode `{id}`")));
    };
    let ep: Value = serde_json::from_str(&text)
        .map_err(|e| ApiError::internal(format!("episode `{id}` is unreadable: {e}")))?;
    Ok(Json(slim_episode(ep)))
}

pub(crate) async fn suite(State(d): State<Arc<Dashboard>>, q: Q) -> Result<Json<Value>, ApiError> {
    Params::of(q, &[])?;
    let summaries = d.read(|s| s.problem_summaries()).await?;
    let mut by_name: HashMap<String, tritonforge_store::ProblemSummary> =
        summaries.into_iter().map(|s| (s.problem.clone(), s)).collect();
    let status = |s: Option<&tritonforge_store::ProblemSummary>| match s {
        Some(s) if s.correct > 0 => "solved",
        Some(_) => "attempted",
        None => "unseen",
    };
    let mut problems = Vec::new();
    if let Some(suite) = &d.suite {
        for e in &suite.entries {
            let s = by_name.remove(e.name());
            problems.push(json!({
                "key": e.key, "id": e.id(), "name": e.name(), "level": e.meta.level,
                "family": e.meta.family, "split": e.meta.split, "difficulty": e.meta.difficulty,
                "reference_solution": e.solution_path.is_some(),
                "evaluations": s.as_ref().map(|s| s.evaluations).unwrap_or(0),
                "correct": s.as_ref().map(|s| s.correct).unwrap_or(0),
                "best_speedup": s.as_ref().and_then(|s| s.best_speedup),
                "status": status(s.as_ref()),
            }));
        }
    }
    // Problems evaluated but not in the suite (inline problems, other suites).
    let mut others: Vec<_> = by_name.into_values().collect();
    others.sort_by(|a, b| a.problem.cmp(&b.problem));
    let others: Vec<Value> = others
        .iter()
        .map(|s| {
            json!({"name": s.problem, "evaluations": s.evaluations, "correct": s.correct,
                   "best_speedup": s.best_speedup, "status": status(Some(s))})
        })
        .collect();
    Ok(Json(json!({"suite": d.suite.is_some(), "problems": problems, "others": others})))
}

#[derive(serde::Deserialize)]
pub(crate) struct Login {
    token: String,
}

/// `POST /dash/login` (a form with `token`): on the right token, the session cookie and
/// a redirect to the dashboard. The cookie is HttpOnly (scripts cannot read it) and
/// SameSite=Strict (other sites' pages do not send it). A wrong token counts against the
/// client's address; a locked-out address is answered 429 before its token is looked at.
pub(crate) async fn login(
    Extension(access): Extension<Arc<Access>>,
    Extension(client): Extension<Client>,
    form: Result<Form<Login>, axum::extract::rejection::FormRejection>,
) -> Response {
    let form = match form {
        Ok(Form(form)) => form,
        Err(rejection) => {
            let detail = format!("send the form field `token` ({})", rejection.body_text());
            return ApiError { status: rejection.status(), detail, field: Some("token".into()) }
                .into_response();
        }
    };
    let Some(token) = access.token() else {
        return redirect_home(None);
    };
    if let Some(wait) = access.blocked(client.0) {
        let secs = crate::access::wait_secs(wait);
        let note = format!("Too many wrong tokens from this address: try again in {secs} s.");
        let page = axum::response::Html(crate::assets::login_html(Some(&note)));
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, HeaderValue::from(secs))],
            page,
        )
            .into_response();
    }
    if !crate::access::constant_time_eq(form.token.trim().as_bytes(), token.as_bytes()) {
        access.failed(client.0);
        let page = crate::assets::login_html(Some("That is not the server's token."));
        return (StatusCode::UNAUTHORIZED, axum::response::Html(page)).into_response();
    }
    let cookie = format!(
        "{}={}; HttpOnly; SameSite=Strict; Path=/",
        crate::COOKIE,
        crate::session_value(token)
    );
    redirect_home(Some(cookie))
}

fn redirect_home(cookie: Option<String>) -> Response {
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    if let Some(c) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        r.headers_mut().insert(header::SET_COOKIE, c);
    }
    r
}

//! The KernelBench-style endpoints: `POST /eval` (synchronous, answered from the store
//! when it repeats an earlier request exactly), `/health`, `/gpu_status`, `/backend_info`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use tritonforge_api::compat::{self, EvalRequest, BACKENDS};
use tritonforge_api::{EvalOptions, SourceSpec, SubmitRequest};
use tritonforge_store::JobState;

use crate::http::{client_of, parse_bytes, read, HttpError, Peer};
use crate::jobs;
use crate::v1::{admit, resolve};
use crate::AppState;

/// How long `/eval` holds a request open, at most (their server's limit is 600 s per
/// evaluation; ours waits for the queue too).
const EVAL_WAIT: Duration = Duration::from_secs(3600);

fn fastapi(mut e: HttpError) -> HttpError {
    if e.status == StatusCode::UNPROCESSABLE_ENTITY {
        let missing = e.detail.starts_with("missing field");
        e.fastapi = Some(if missing { "missing" } else { "value_error" });
        if missing {
            e.detail = "Field required".into();
        }
    }
    if e.status == StatusCode::BAD_REQUEST && e.detail.contains("not valid JSON") {
        e.status = StatusCode::UNPROCESSABLE_ENTITY;
        e.fastapi = Some("json_invalid");
    }
    e
}

pub(crate) async fn eval(
    State(state): State<Arc<AppState>>,
    peer: Peer,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, HttpError> {
    let bytes = read(&state, body).await?;
    let req: EvalRequest = parse_bytes(&bytes).map_err(fastapi)?;
    if !BACKENDS.contains(&req.backend.as_str()) {
        return Err(fastapi(HttpError::field(
            "backend",
            format!("`{}` is not one of cuda, triton", req.backend),
        )));
    }
    let native = SubmitRequest {
        problem: Some(SourceSpec {
            name: Some("original_model".into()),
            source: req.original_model_src,
            path: None,
        }),
        problem_id: None,
        candidate: SourceSpec {
            name: Some("custom_model".into()),
            source: req.custom_model_src,
            path: None,
        },
        options: EvalOptions {
            trials: Some(req.num_correct_trials),
            seed: Some(req.seed_num),
            timing: Some(req.measure_performance),
            ..EvalOptions::default()
        },
        config: None,
        tolerance: None,
        idempotency_key: None,
    };
    let resolved = resolve(&state, &native, "").map_err(|mut e| {
        // Name their fields, not ours.
        e.field = e.field.map(|f| {
            f.replace("problem.source", "original_model_src")
                .replace("candidate.source", "custom_model_src")
                .replace("options", "num_correct_trials")
        });
        fastapi(e)
    })?;
    let client = client_of(&headers, peer.0);
    admit(&state, &client, 1)?;
    let submitted = match jobs::submit(&state, &client, vec![(resolved.clone(), None)], true) {
        Ok(s) => s,
        Err(e) => return Err(e.into()),
    };
    let Some(s) = submitted.first() else {
        return Err(HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, "no job was created"));
    };
    let Some(job) = jobs::wait_final(&state, &s.id, EVAL_WAIT).await? else {
        return Err(HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("job {} vanished", s.id),
        ));
    };
    match job.state {
        JobState::Done => {}
        JobState::Failed => {
            return Err(HttpError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                job.error.unwrap_or_else(|| "the evaluator failed".into()),
            ))
        }
        JobState::Cancelled => {
            return Err(HttpError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("evaluation {} was cancelled", job.id),
            ))
        }
        JobState::Queued | JobState::Running => {
            return Err(HttpError::unavailable(format!(
                "evaluation {} did not end (the server is shutting down); it stays queued",
                job.id
            )))
        }
    }
    let cached = job.cached || s.existing;
    let view = jobs::view(&state, job, true)?;
    let Some(record) = view.record else {
        return Err(HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the record is missing from the store",
        ));
    };
    Ok(Json(compat::response(&record, &view.id, cached)).into_response())
}

fn snapshot(state: &AppState) -> compat::State<'_> {
    let pool = state.evaluator.pool();
    compat::State {
        env: state.evaluator.environment(),
        running: pool.in_flight().into_iter().map(|n| n as u64).collect(),
        capacity_per_device: pool.per_device(),
        crashes: vec![state.metrics.processes_replaced.load(std::sync::atomic::Ordering::Relaxed)],
        admitted_bytes: pool.admitted_bytes(),
        draining: state.draining(),
    }
}

pub(crate) async fn health(State(state): State<Arc<AppState>>) -> Response {
    let code = if state.draining() { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    (code, Json(compat::health(&snapshot(&state)))).into_response()
}

pub(crate) async fn gpu_status(State(state): State<Arc<AppState>>) -> Response {
    Json(compat::gpu_status(&snapshot(&state))).into_response()
}

pub(crate) async fn backend_info(State(state): State<Arc<AppState>>) -> Response {
    Json(compat::backend_info(&snapshot(&state))).into_response()
}

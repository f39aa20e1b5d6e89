//! Routing, the bearer token, client identity, bodies read within limits and parsed with
//! the failing field named, and errors as `{"detail": ...}`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::json;
use tritonforge_api::{ApiError, CLIENT_HEADER};
use tritonforge_store::StoreError;

use crate::{compat, v1, AppState};

/// An error reply.
#[derive(Debug)]
pub(crate) struct HttpError {
    pub status: StatusCode,
    pub detail: String,
    pub field: Option<String>,
    pub retry_after: Option<u64>,
    /// FastAPI's validation shape (`/eval`): `{"detail": [{"type", "loc", "msg"}]}`.
    pub fastapi: Option<&'static str>,
}

impl HttpError {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> HttpError {
        HttpError { status, detail: detail.into(), field: None, retry_after: None, fastapi: None }
    }

    /// A 422 about one request field.
    pub fn field(field: impl Into<String>, detail: impl Into<String>) -> HttpError {
        HttpError {
            field: Some(field.into()),
            ..HttpError::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
        }
    }

    pub fn busy(detail: impl Into<String>, retry_after: u64) -> HttpError {
        HttpError {
            retry_after: Some(retry_after.max(1)),
            ..HttpError::new(StatusCode::TOO_MANY_REQUESTS, detail)
        }
    }

    pub fn unavailable(detail: impl Into<String>) -> HttpError {
        HttpError {
            retry_after: Some(5),
            ..HttpError::new(StatusCode::SERVICE_UNAVAILABLE, detail)
        }
    }
}

impl From<StoreError> for HttpError {
    fn from(e: StoreError) -> HttpError {
        HttpError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("the server's store failed: {e}"))
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let body = match (self.fastapi, &self.field) {
            (Some(kind), Some(f)) => {
                let loc: Vec<serde_json::Value> =
                    std::iter::once(json!("body")).chain(f.split('.').map(|p| json!(p))).collect();
                json!({"detail": [{"type": kind, "loc": loc, "msg": self.detail}]})
            }
            _ => serde_json::to_value(ApiError { detail: self.detail, field: self.field })
                .unwrap_or_default(),
        };
        let mut r = (self.status, Json(body)).into_response();
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        r
    }
}

/// Read a body within the byte limit and parse it as `T`, naming the field that fails.
pub(crate) async fn parse<T: DeserializeOwned>(
    state: &AppState,
    body: Body,
) -> Result<T, HttpError> {
    let bytes = read(state, body).await?;
    parse_bytes(&bytes)
}

pub(crate) async fn read(state: &AppState, body: Body) -> Result<Bytes, HttpError> {
    let limit = state.cfg.limits.max_body_bytes;
    axum::body::to_bytes(body, limit).await.map_err(|_| HttpError {
        field: Some("body".into()),
        ..HttpError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than {limit} bytes"),
        )
    })
}

pub(crate) fn parse_bytes<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, HttpError> {
    let text = std::str::from_utf8(bytes).map_err(|e| HttpError {
        field: Some("body".into()),
        ..HttpError::new(
            StatusCode::BAD_REQUEST,
            format!("the body is not UTF-8 (byte {} is invalid)", e.valid_up_to()),
        )
    })?;
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return HttpError {
                field: Some("body".into()),
                ..HttpError::new(
                    StatusCode::BAD_REQUEST,
                    format!("the body is not valid JSON: {inner}"),
                )
            };
        }
        let msg = inner.to_string();
        // A missing or unknown field is reported at its parent; name the field itself.
        let named = msg.split("missing field `").nth(1).and_then(|r| r.split('`').next());
        let field = match (named, path.as_str()) {
            (Some(f), "." | "") => f.to_string(),
            (Some(f), p) => format!("{p}.{f}"),
            (None, p) => p.to_string(),
        };
        HttpError::field(field, msg)
    })
}

/// Who is asking: the client header, else the peer's address.
pub(crate) fn client_of(headers: &HeaderMap, peer: SocketAddr) -> String {
    headers
        .get(CLIENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_string)
        .unwrap_or_else(|| peer.ip().to_string())
}

/// Every request carries the bearer token when the server has one, except the
/// dashboard's page shell and login form; the dashboard's session cookie stands in for
/// the token on reads only (`GET`), so nothing that changes state is open to it. Wrong
/// tokens are limited per client address (429 past the limit): one check, the
/// dashboard's, for both servers.
async fn auth(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let r = tritonforge_dashboard::guard(state.access.clone(), req, next).await;
    if r.status().is_client_error() || r.status().is_server_error() {
        state.metrics.refused(r.status().as_u16());
    }
    r
}

async fn not_found() -> HttpError {
    HttpError::new(StatusCode::NOT_FOUND, "Not Found")
}

async fn method_not_allowed() -> HttpError {
    HttpError::new(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}

async fn metrics(State(state): State<Arc<AppState>>) -> Result<Response, HttpError> {
    let counts = state.queue()?.job_counts()?;
    let of = |s| counts.iter().find(|c| c.0 == s).map(|c| c.1).unwrap_or(0);
    let gauges = crate::metrics::Gauges {
        queued: of(tritonforge_store::JobState::Queued),
        running: of(tritonforge_store::JobState::Running),
        in_flight: state.evaluator.pool().in_flight(),
        draining: state.draining(),
        uptime_s: state.started.elapsed().as_secs_f64(),
    };
    let text = state.metrics.render(&gauges);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

pub(crate) fn router(
    state: Arc<AppState>,
    dashboard: Arc<tritonforge_dashboard::Dashboard>,
) -> Router {
    let v1 = Router::new()
        .route("/evaluations", post(v1::submit_one).get(v1::list))
        .route("/evaluations/batch", post(v1::submit_batch))
        .route("/evaluations/{id}", get(v1::get_one).delete(v1::cancel))
        .route("/events", get(v1::events))
        .route("/info", get(v1::info))
        .route("/problem-checks", post(v1::check_problem));
    Router::new()
        .nest(tritonforge_api::V1, v1)
        .route("/eval", post(compat::eval))
        .route("/health", get(compat::health))
        .route("/gpu_status", get(compat::gpu_status))
        .route("/backend_info", get(compat::backend_info))
        .route("/metrics", get(metrics))
        .with_state(state.clone())
        // The dashboard at `/`: its UI, assets and read-only `/dash` API.
        .merge(tritonforge_dashboard::with_access(
            tritonforge_dashboard::router(dashboard),
            state.access.clone(),
        ))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        // Bodies are read by `read` with the configured limit; this only stops axum's own
        // default (2 MiB) from applying first.
        .layer(axum::extract::DefaultBodyLimit::disable())
}

/// `ConnectInfo` for handlers (re-exported so they name one type).
pub(crate) type Peer = ConnectInfo<SocketAddr>;

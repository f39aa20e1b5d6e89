//! The dashboard: a small web UI over the workspace store, served by `tritonforge serve`
//! at `/` and alone by `tritonforge dashboard`. Every asset is compiled into the binary
//! (no CDN, nothing fetched at run time); the JSON API under `/dash` only reads, through
//! a read-only SQLite connection, and pages every list on an index.
//!
//! Access: with no token (loopback only) anyone who can connect may read. With a token,
//! a request needs `Authorization: Bearer <token>` or the session cookie that
//! `POST /dash/login` sets; the cookie holds a hash of the token, never the token, and
//! grants reads only: whatever changes state (the evaluator's API) needs the bearer
//! header itself, which a page on another site cannot send.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tritonforge_store::{Store, StoreError};
use tritonforge_suite::Suite;

mod api;
mod assets;

pub use api::ApiError;

#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("serving HTTP: {0}")]
    Serve(#[source] std::io::Error),
    #[error(
        "{0} is not a loopback address: serving beyond this machine needs a bearer token (--token-file)"
    )]
    NeedsToken(SocketAddr),
}

/// Which program serves the dashboard (the UI says so, and hides nothing else by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Inside `tritonforge serve`, beside the evaluator's API.
    Serve,
    /// `tritonforge dashboard`: the UI over a store, nothing else.
    Standalone,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Serve => "serve",
            Mode::Standalone => "dashboard",
        }
    }
}

/// What the dashboard's handlers share.
pub struct Dashboard {
    store: Mutex<Store>,
    store_path: PathBuf,
    suite: Option<Suite>,
    mode: Mode,
    /// How often a live stream looks for new metrics (a trainer writes from another process).
    poll: Duration,
    /// Set when the server stops: live streams end, so a graceful shutdown does not wait
    /// on a browser tab left open.
    closing: tokio::sync::watch::Sender<bool>,
}

impl Dashboard {
    /// Read `store_path` (which must exist at the current schema) through a read-only
    /// connection; `suite`, when given, fills the suite page.
    pub fn open(
        store_path: &Path,
        suite: Option<Suite>,
        mode: Mode,
    ) -> Result<Dashboard, DashboardError> {
        let store = Store::open_read_only(store_path)?;
        Ok(Dashboard {
            store: Mutex::new(store),
            store_path: store_path.to_owned(),
            suite,
            mode,
            poll: Duration::from_secs(1),
            closing: tokio::sync::watch::Sender::new(false),
        })
    }

    /// End every live stream (the server is stopping).
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Resolves once [`Dashboard::close`] was called.
    async fn closed(&self) {
        let mut rx = self.closing.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Poll for live metrics this often (tests shorten it).
    pub fn with_poll(mut self, poll: Duration) -> Dashboard {
        self.poll = poll;
        self
    }

    /// Run a store query off the async threads.
    async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            // One statement per call cannot leave SQLite half-done: a poisoned lock is usable.
            let store = me.store.lock().unwrap_or_else(|p| p.into_inner());
            f(&store)
        })
        .await
        .map_err(|e| ApiError::internal(format!("a store query stopped: {e}")))?
        .map_err(ApiError::from)
    }
}

/// The dashboard's routes (UI, assets, `/dash` API), without access control: the caller
/// wraps them in [`require_access`] (or its own equivalent) and adds a fallback.
pub fn router(dash: Arc<Dashboard>) -> Router {
    Router::new()
        .route("/", get(assets::index))
        .route("/assets/{name}", get(assets::asset))
        .route("/dash/login", get(assets::login_page).post(api::login))
        .route("/dash/info", get(api::info))
        .route("/dash/runs", get(api::runs))
        .route("/dash/runs/{id}/metrics", get(api::run_metrics))
        .route("/dash/stream", get(api::stream))
        .route("/dash/evaluations", get(api::evaluations))
        .route("/dash/evaluations/{key}", get(api::evaluation))
        .route("/dash/episodes", get(api::episodes))
        .route("/dash/episodes/{id}", get(api::episode))
        .route("/dash/suite", get(api::suite))
        // The only body the dashboard reads is the login form.
        .layer(axum::extract::DefaultBodyLimit::max(16 * 1024))
        .with_state(dash)
}

/// Paths anyone may fetch: the page shell and its assets carry no data, and the login
/// form must be reachable to log in.
pub fn is_public(method: &Method, path: &str) -> bool {
    (method == Method::GET || method == Method::HEAD)
        && (path == "/" || path.starts_with("/assets/") || path == "/dash/login")
        || (method == Method::POST && path == "/dash/login")
}

/// The session cookie's name.
pub const COOKIE: &str = "tritonforge_session";

/// What the session cookie holds for `token`: a hash, so the cookie never reveals it.
pub fn session_value(token: &str) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(b"tritonforge dashboard session\n");
    h.update(token.as_bytes());
    hex::encode(h.finalize())
}

/// Whether the request carries the session cookie for `token`. It grants reads only.
pub fn session_grants(method: &Method, headers: &HeaderMap, token: &str) -> bool {
    if method != Method::GET && method != Method::HEAD {
        return false;
    }
    let want = session_value(token);
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .any(|(k, v)| k == COOKIE && constant_time_eq(v.as_bytes(), want.as_bytes()))
}

/// Whether the request carries `Authorization: Bearer <token>`.
pub fn bearer_grants(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token the login form checks, kept in the router's extensions.
#[derive(Clone)]
pub(crate) struct Token(pub Option<Arc<str>>);

/// Middleware for the standalone dashboard: with a token, everything but the public
/// paths needs the bearer header or the session cookie.
pub async fn require_access(
    State(token): State<Option<Arc<str>>>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(token) = token.as_deref() {
        let ok = is_public(req.method(), req.uri().path())
            || bearer_grants(req.headers(), token)
            || session_grants(req.method(), req.headers(), token);
        if !ok {
            return unauthorized();
        }
    }
    next.run(req).await
}

/// The 401 every refused request gets.
pub fn unauthorized() -> Response {
    let mut r = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "a bearer token is required (Authorization: Bearer <token>, or log in at /dash/login)",
    )
    .into_response();
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// Give the routes the token the login form compares with.
pub fn with_token(router: Router, token: Option<&str>) -> Router {
    router.layer(axum::Extension(Token(token.map(Arc::from))))
}

/// A standalone dashboard server (`tritonforge dashboard`).
pub struct DashboardServer {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<Result<(), DashboardError>>,
    stop: Arc<tokio::sync::Notify>,
    dash: Arc<Dashboard>,
}

impl DashboardServer {
    /// Bind and serve `dash`; beyond loopback a token is required.
    pub async fn start(
        dash: Dashboard,
        bind: SocketAddr,
        token: Option<String>,
    ) -> Result<DashboardServer, DashboardError> {
        if !bind.ip().is_loopback() && token.is_none() {
            return Err(DashboardError::NeedsToken(bind));
        }
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|source| DashboardError::Bind { addr: bind, source })?;
        let addr = listener.local_addr().map_err(DashboardError::Serve)?;
        let token: Option<Arc<str>> = token.map(Arc::from);
        let dash = Arc::new(dash);
        let app = with_token(router(dash.clone()), token.as_deref())
            .fallback(api::not_found)
            .layer(middleware::from_fn_with_state(token, require_access));
        let stop = Arc::new(tokio::sync::Notify::new());
        let stop2 = stop.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop2.notified().await })
                .await
                .map_err(DashboardError::Serve)
        });
        Ok(DashboardServer { addr, task, stop, dash })
    }

    /// Stop serving (open live streams are closed).
    pub async fn shutdown(self) -> Result<(), DashboardError> {
        self.dash.close();
        self.stop.notify_one();
        self.task.abort();
        match self.task.await {
            Ok(r) => r,
            Err(e) if e.is_cancelled() => Ok(()),
            Err(e) => Err(DashboardError::Serve(std::io::Error::other(e.to_string()))),
        }
    }
}

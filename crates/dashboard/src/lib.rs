//! The dashboard: a small web UI over the workspace store, served by `tritonforge serve`
//! at `/` and alone by `tritonforge dashboard`. Every asset is compiled into the binary
//! (no CDN, nothing fetched at run time); the JSON API under `/dash` only reads, through
//! a read-only SQLite connection, and pages every list on an index.
//!
//! Access ([`access`]): with no token (loopback only) anyone who can connect may read.
//! With a token, a request needs `Authorization: Bearer <token>` or the session cookie
//! that `POST /dash/login` sets; the cookie holds a hash of the token, never the token,
//! and grants reads only: whatever changes state (the evaluator's API) needs the bearer
//! header itself, which a page on another site cannot send. Wrong tokens are limited
//! per client address.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use tritonforge_store::{Store, StoreError};
use tritonforge_suite::Suite;

pub mod access;
mod api;
mod assets;

pub use access::{
    bearer_grants, guard, is_public, session_grants, session_value, unauthorized, Access, Limit,
    COOKIE,
};
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
/// gives them [`with_access`], wraps them in [`guard`] and adds a fallback.
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
        .route("/dash/queue", get(api::queue))
        // The only body the dashboard reads is the login form.
        .layer(axum::extract::DefaultBodyLimit::max(16 * 1024))
        .with_state(dash)
}

/// Give the routes the access check's state (the login form compares with its token and
/// counts its failures).
pub fn with_access(router: Router, access: Arc<Access>) -> Router {
    router.layer(axum::Extension(access))
}

/// Middleware for the standalone dashboard: [`access::guard`] with its state.
async fn require_access(State(access): State<Arc<Access>>, req: Request, next: Next) -> Response {
    access::guard(access, req, next).await
}

/// A standalone dashboard server (`tritonforge dashboard`).
pub struct DashboardServer {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<Result<(), DashboardError>>,
    stop: Arc<tokio::sync::Notify>,
    dash: Arc<Dashboard>,
}

impl DashboardServer {
    /// Bind and serve `dash`; beyond loopback a token is required. Wrong tokens are
    /// limited per client address as [`Limit::default`] says.
    pub async fn start(
        dash: Dashboard,
        bind: SocketAddr,
        token: Option<String>,
    ) -> Result<DashboardServer, DashboardError> {
        DashboardServer::start_with(dash, bind, Access::new(token.as_deref())).await
    }

    /// [`DashboardServer::start`] with the access check given (its token and limit).
    pub async fn start_with(
        dash: Dashboard,
        bind: SocketAddr,
        access: Access,
    ) -> Result<DashboardServer, DashboardError> {
        if !bind.ip().is_loopback() && access.token().is_none() {
            return Err(DashboardError::NeedsToken(bind));
        }
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|source| DashboardError::Bind { addr: bind, source })?;
        let addr = listener.local_addr().map_err(DashboardError::Serve)?;
        let access = Arc::new(access);
        let dash = Arc::new(dash);
        let app = with_access(router(dash.clone()), access.clone())
            .fallback(api::not_found)
            .layer(middleware::from_fn_with_state(access, require_access))
            // The peer's address: failed tokens are counted per client.
            .into_make_service_with_connect_info::<SocketAddr>();
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

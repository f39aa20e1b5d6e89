//! `tritonforge serve`: one warm evaluator pool and its store behind HTTP.
//!
//! Every accepted evaluation is a row of the store's job queue before the reply leaves,
//! and a dispatcher feeds queued jobs to the evaluator as the pool has room. A restart
//! re-queues what was running; the evaluation cache answers any that had ended, so an
//! accepted job is never lost and never evaluated twice. The native API lives under
//! `/v1`, the KernelBench-style one at `/eval`, `/health`, `/gpu_status`, `/backend_info`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, Notify};
use tokio::task::AbortHandle;
use tritonforge_eval::Evaluator;
use tritonforge_store::{JobState, Store, StoreError};
use tritonforge_suite::Suite;

mod compat;
mod http;
mod jobs;
mod metrics;
mod v1;

pub use metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Dashboard(#[from] tritonforge_dashboard::DashboardError),
    #[error("serving HTTP: {0}")]
    Serve(#[source] std::io::Error),
    #[error(
        "{0} is not a loopback address: serving beyond this machine needs a bearer token (--token-file)"
    )]
    NeedsToken(SocketAddr),
}

/// What a request may ask of the server.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
    /// Largest problem or candidate source, bytes.
    pub max_source_bytes: usize,
    /// Queued jobs beyond which submissions get 429.
    pub max_queue: u64,
    /// Unfinished jobs one client may have.
    pub per_client: u64,
    /// Evaluations in one batch request.
    pub max_batch: usize,
    /// Longest long poll, seconds.
    pub max_wait_s: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 8 << 20,
            max_source_bytes: 1 << 20,
            max_queue: 10_000,
            per_client: 2_000,
            max_batch: 1_000,
            max_wait_s: 600,
        }
    }
}

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub bind: SocketAddr,
    /// Bearer token every request must carry; required off loopback.
    pub token: Option<String>,
    pub limits: Limits,
    /// Evaluations handed to the evaluator at once [default: twice the pool's capacity,
    /// so compilation of the next ones overlaps the running ones].
    pub concurrency: Option<usize>,
    /// How long SIGTERM waits for running evaluations before putting them back in the queue.
    pub grace: Duration,
}

/// Shared by every handler and the dispatcher.
pub(crate) struct AppState {
    pub evaluator: Arc<Evaluator>,
    /// The queue's own connection to the store file (the evaluator holds another).
    pub queue: Mutex<Store>,
    pub suite: Option<Suite>,
    pub cfg: ServeConfig,
    /// New work was queued.
    pub wake: Notify,
    /// Ids of jobs that just reached a final state.
    pub finished: broadcast::Sender<String>,
    /// Running jobs' tasks, to cancel them.
    pub running: Mutex<HashMap<String, AbortHandle>>,
    pub metrics: Metrics,
    /// The token check and its count of wrong tokens per client address.
    pub access: Arc<tritonforge_dashboard::Access>,
    pub draining: AtomicBool,
    /// Set once the queue is drained: event streams end, so the graceful stop does not
    /// wait on a client that keeps one open.
    pub closing: tokio::sync::watch::Sender<bool>,
    pub started: Instant,
}

impl AppState {
    pub fn queue(&self) -> Result<std::sync::MutexGuard<'_, Store>, StoreError> {
        // A panic while holding the lock cannot leave SQLite half-written (each call is
        // one statement or transaction), so a poisoned lock is still usable.
        Ok(self.queue.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
}

/// A started server: its address, and a handle to stop it.
pub struct Server {
    pub addr: SocketAddr,
    state: Arc<AppState>,
    task: tokio::task::JoinHandle<Result<(), ServerError>>,
    stop: Arc<Notify>,
    dispatcher: tokio::task::JoinHandle<()>,
    /// Its live streams end when the server stops.
    dashboard: Arc<tritonforge_dashboard::Dashboard>,
}

impl Server {
    /// Bind, re-queue what a previous server left running, and start serving.
    pub async fn start(
        evaluator: Arc<Evaluator>,
        store_path: &std::path::Path,
        suite: Option<Suite>,
        cfg: ServeConfig,
    ) -> Result<Server, ServerError> {
        if !cfg.bind.ip().is_loopback() && cfg.token.is_none() {
            return Err(ServerError::NeedsToken(cfg.bind));
        }
        let store = Store::open(store_path)?;
        let requeued = store.requeue_running()?;
        let listener = tokio::net::TcpListener::bind(cfg.bind)
            .await
            .map_err(|source| ServerError::Bind { addr: cfg.bind, source })?;
        let addr = listener.local_addr().map_err(ServerError::Serve)?;
        let dashboard = tritonforge_dashboard::Dashboard::open(
            store_path,
            suite.clone(),
            tritonforge_dashboard::Mode::Serve,
        )?;
        let (finished, _) = broadcast::channel(4096);
        let access = Arc::new(tritonforge_dashboard::Access::new(cfg.token.as_deref()));
        let state = Arc::new(AppState {
            evaluator,
            access,
            queue: Mutex::new(store),
            suite,
            cfg,
            wake: Notify::new(),
            finished,
            running: Mutex::default(),
            metrics: Metrics::default(),
            draining: AtomicBool::new(false),
            closing: tokio::sync::watch::Sender::new(false),
            started: Instant::now(),
        });
        state.metrics.requeued.store(requeued as u64, Ordering::Relaxed);
        let stop = Arc::new(Notify::new());
        let dashboard = Arc::new(dashboard);
        let app = http::router(state.clone(), dashboard.clone());
        let dispatcher = tokio::spawn(jobs::dispatch(state.clone()));
        let stop2 = stop.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
                .with_graceful_shutdown(async move { stop2.notified().await })
                .await
                .map_err(ServerError::Serve)
        });
        Ok(Server { addr, state, task, stop, dispatcher, dashboard })
    }

    /// Stop accepting work, let running evaluations finish within the grace period, put
    /// the rest back in the queue (waiting clients hear 503), then close the listener.
    pub async fn shutdown(self) -> Result<(), ServerError> {
        self.state.draining.store(true, Ordering::SeqCst);
        self.dashboard.close();
        self.state.wake.notify_waiters();
        let _ = self.dispatcher.await;
        jobs::drain(&self.state).await?;
        self.state.closing.send_replace(true);
        self.stop.notify_one();
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(ServerError::Serve(std::io::Error::other(e.to_string()))),
        }
    }

    /// Jobs requeued at start (a previous server's unfinished work).
    pub fn requeued(&self) -> u64 {
        self.state.metrics.requeued.load(Ordering::Relaxed)
    }
}

pub(crate) fn api_state(s: JobState) -> tritonforge_api::JobState {
    use tritonforge_api::JobState as A;
    match s {
        JobState::Queued => A::Queued,
        JobState::Running => A::Running,
        JobState::Done => A::Done,
        JobState::Failed => A::Failed,
        JobState::Cancelled => A::Cancelled,
    }
}

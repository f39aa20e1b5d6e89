//! Talking to one or several `tritonforge serve` instances as if they were one evaluator.
//!
//! Shaped after a serving router: each server has a circuit breaker (after
//! `breaker_failures` failures in a row it is skipped for `breaker_cooldown`, then tried
//! again with one request); each evaluation goes to the healthy server with the fewest
//! evaluations outstanding from this client; a failure (connection, 5xx, 429, a server
//! that dies mid-evaluation) is retried on another server with the same idempotency key,
//! so a server that did accept it answers with the same job. A request the server refuses
//! as malformed (4xx) is not retried. [`RemoteEvaluator`] puts this behind the same
//! [`EvalService`] trait as the local pool.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tritonforge_api::{
    ApiError, JobState, JobView, ProblemCheckRequest, ServerInfo, SourceSpec, SubmitRequest,
    Submitted, CLIENT_HEADER,
};
use tritonforge_eval::{BoxFuture, EvalError, EvalService, Evaluation};
use tritonforge_protocol::{DeviceKind, EnvInfo, EvalConfig, ProblemReport};
use tritonforge_suite::{Candidate, Problem};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no evaluation server was given")]
    NoServers,
    #[error("`{0}` is not an http:// or https:// URL")]
    BadUrl(String),
    #[error("no evaluation server is healthy: {}", .0.iter().map(|(s, e)| format!("{s}: {e}")).collect::<Vec<_>>().join("; "))]
    NoneHealthy(Vec<(String, String)>),
    #[error("{server} refused the request ({status}): {detail}")]
    Refused { server: String, status: u16, detail: String },
    #[error("{server}: evaluation {id} failed: {detail}")]
    JobFailed { server: String, id: String, detail: String },
    #[error("servers disagree on the device: {0} runs on {1:?}, {2} on {3:?}")]
    Disagree(String, DeviceKind, String, DeviceKind),
}

/// How the client talks to its servers.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Base URLs (`http://host:18188`).
    pub servers: Vec<String>,
    pub token: Option<String>,
    /// Names this client to the servers (their per-client limits and listings).
    pub client_id: String,
    /// Tries after the first, over the healthy servers.
    pub retries: u32,
    pub breaker_failures: u32,
    pub breaker_cooldown: Duration,
    /// Timeout of one HTTP request other than a long poll.
    pub request_timeout: Duration,
    /// Each long poll's length.
    pub poll_wait: Duration,
}

impl ClientConfig {
    pub fn new(servers: Vec<String>) -> ClientConfig {
        ClientConfig {
            servers,
            token: None,
            client_id: format!("tritonforge-{}", std::process::id()),
            retries: 4,
            breaker_failures: 3,
            breaker_cooldown: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            poll_wait: Duration::from_secs(20),
        }
    }
}

#[derive(Debug, Default)]
struct Breaker {
    failures: u32,
    open_until: Option<Instant>,
}

struct Server {
    base: String,
    breaker: Mutex<Breaker>,
    outstanding: AtomicUsize,
}

/// One failed try, and whether another server may do better.
enum TryError {
    /// The server or the way to it failed: count it against the breaker, try another.
    Server(String),
    /// The server is busy (429, 503): try another, without blaming it.
    Busy(String),
    /// The request itself is wrong, or the evaluator failed on it: stop.
    Final(ClientError),
}

/// The servers, their health, and the choice between them.
pub struct Balancer {
    servers: Vec<Server>,
    http: reqwest::Client,
    cfg: ClientConfig,
}

impl Balancer {
    pub fn new(cfg: ClientConfig) -> Result<Balancer, ClientError> {
        if cfg.servers.is_empty() {
            return Err(ClientError::NoServers);
        }
        let mut servers = Vec::new();
        for s in &cfg.servers {
            let base = s.trim_end_matches('/').to_string();
            if !(base.starts_with("http://") || base.starts_with("https://")) {
                return Err(ClientError::BadUrl(s.clone()));
            }
            servers.push(Server {
                base,
                breaker: Mutex::default(),
                outstanding: AtomicUsize::new(0),
            });
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| ClientError::BadUrl(e.to_string()))?;
        Ok(Balancer { servers, http, cfg })
    }

    pub fn servers(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.base.clone()).collect()
    }

    /// Ask every server for its info; the healthy ones must agree on the device.
    pub async fn check(&self) -> Result<ServerInfo, ClientError> {
        let mut first: Option<(String, ServerInfo)> = None;
        let mut errors = Vec::new();
        for (i, s) in self.servers.iter().enumerate() {
            match self.get::<ServerInfo>(i, "/v1/info", self.cfg.request_timeout).await {
                Ok(info) => {
                    self.mark(i, true);
                    if let Some((name, f)) = &first {
                        if f.device != info.device {
                            return Err(ClientError::Disagree(
                                name.clone(),
                                f.device,
                                s.base.clone(),
                                info.device,
                            ));
                        }
                    } else {
                        first = Some((s.base.clone(), info));
                    }
                }
                Err(TryError::Final(e)) => return Err(e),
                Err(TryError::Server(e) | TryError::Busy(e)) => {
                    self.mark(i, false);
                    errors.push((s.base.clone(), e));
                }
            }
        }
        first.map(|f| f.1).ok_or(ClientError::NoneHealthy(errors))
    }

    /// The healthy server with the fewest of our evaluations outstanding, not in `skip`.
    fn pick(&self, skip: &[usize]) -> Option<usize> {
        let now = Instant::now();
        self.servers
            .iter()
            .enumerate()
            .filter(|(i, _)| !skip.contains(i))
            .filter(|(_, s)| {
                let b = s.breaker.lock().unwrap_or_else(|p| p.into_inner());
                b.open_until.is_none_or(|t| t <= now)
            })
            .min_by_key(|(_, s)| s.outstanding.load(Ordering::Relaxed))
            .map(|(i, _)| i)
    }

    fn mark(&self, i: usize, ok: bool) {
        let mut b = self.servers[i].breaker.lock().unwrap_or_else(|p| p.into_inner());
        if ok {
            *b = Breaker::default();
        } else {
            b.failures += 1;
            if b.failures >= self.cfg.breaker_failures || b.open_until.is_some() {
                b.open_until = Some(Instant::now() + self.cfg.breaker_cooldown);
            }
        }
    }

    fn request(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let rb = rb.header(CLIENT_HEADER, &self.cfg.client_id);
        match &self.cfg.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    async fn reply<T: DeserializeOwned>(
        &self,
        i: usize,
        r: reqwest::Response,
    ) -> Result<T, TryError> {
        let server = self.servers[i].base.clone();
        let status = r.status();
        if status.is_success() {
            return r
                .json::<T>()
                .await
                .map_err(|e| TryError::Server(format!("unreadable reply: {e}")));
        }
        let detail = r
            .json::<ApiError>()
            .await
            .map(|e| match e.field {
                Some(f) => format!("{} (field `{f}`)", e.detail),
                None => e.detail,
            })
            .unwrap_or_else(|_| status.to_string());
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            return Err(TryError::Busy(format!("{status}: {detail}")));
        }
        if status.is_server_error() {
            return Err(TryError::Server(format!("{status}: {detail}")));
        }
        Err(TryError::Final(ClientError::Refused { server, status: status.as_u16(), detail }))
    }

    async fn get<T: DeserializeOwned>(
        &self,
        i: usize,
        path: &str,
        timeout: Duration,
    ) -> Result<T, TryError> {
        let url = format!("{}{path}", self.servers[i].base);
        let r = self.request(self.http.get(url)).timeout(timeout).send().await;
        let r = r.map_err(|e| TryError::Server(e.to_string()))?;
        self.reply(i, r).await
    }

    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        i: usize,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<T, TryError> {
        let url = format!("{}{path}", self.servers[i].base);
        let r = self.request(self.http.post(url)).json(body).timeout(timeout).send().await;
        let r = r.map_err(|e| TryError::Server(e.to_string()))?;
        self.reply(i, r).await
    }

    /// Submit to server `i` and long-poll until the job ends.
    async fn run_on(&self, i: usize, req: &SubmitRequest) -> Result<JobView, TryError> {
        let s: Submitted = self.post(i, "/v1/evaluations", req, self.cfg.request_timeout).await?;
        let wait = self.cfg.poll_wait;
        let path = format!("/v1/evaluations/{}?wait={}", s.id, wait.as_secs_f64());
        loop {
            let v: JobView = self.get(i, &path, wait + self.cfg.request_timeout).await?;
            match v.state {
                JobState::Done => return Ok(v),
                JobState::Failed => {
                    // The evaluator on that server failed (not the candidate): another may not.
                    return Err(TryError::Server(format!(
                        "evaluation {} failed: {}",
                        v.id,
                        v.error.unwrap_or_default()
                    )));
                }
                JobState::Cancelled => {
                    return Err(TryError::Final(ClientError::JobFailed {
                        server: self.servers[i].base.clone(),
                        id: v.id,
                        detail: "it was cancelled".into(),
                    }))
                }
                JobState::Queued | JobState::Running => {}
            }
        }
    }

    /// Evaluate on the best server, retrying elsewhere on failure. `req` should carry an
    /// idempotency key, so a retry on a server that accepted it finds the same job.
    pub async fn evaluate(&self, req: &SubmitRequest) -> Result<JobView, ClientError> {
        self.with_retries(|i| self.run_on(i, req)).await
    }

    /// Validate a problem on the best server.
    pub async fn check_problem(
        &self,
        req: &ProblemCheckRequest,
    ) -> Result<ProblemReport, ClientError> {
        let timeout = Duration::from_millis(req.budget_ms) + self.cfg.request_timeout * 2;
        self.with_retries(|i| self.post(i, "/v1/problem-checks", req, timeout)).await
    }

    async fn with_retries<'a, T, F, Fut>(&'a self, mut f: F) -> Result<T, ClientError>
    where
        F: FnMut(usize) -> Fut,
        Fut: std::future::Future<Output = Result<T, TryError>> + 'a,
    {
        let mut errors: Vec<(String, String)> = Vec::new();
        let mut skip = Vec::new();
        for attempt in 0..=self.cfg.retries {
            let i = match self.pick(&skip) {
                Some(i) => i,
                None if !skip.is_empty() => {
                    // Every server was tried once: back off and try them all again.
                    skip.clear();
                    tokio::time::sleep(backoff(attempt)).await;
                    match self.pick(&skip) {
                        Some(i) => i,
                        None => break,
                    }
                }
                None => break,
            };
            self.servers[i].outstanding.fetch_add(1, Ordering::Relaxed);
            let r = f(i).await;
            self.servers[i].outstanding.fetch_sub(1, Ordering::Relaxed);
            match r {
                Ok(v) => {
                    self.mark(i, true);
                    return Ok(v);
                }
                Err(TryError::Final(e)) => return Err(e),
                Err(TryError::Server(e)) => {
                    self.mark(i, false);
                    errors.push((self.servers[i].base.clone(), e));
                }
                Err(TryError::Busy(e)) => errors.push((self.servers[i].base.clone(), e)),
            }
            skip.push(i);
        }
        if errors.is_empty() {
            errors = self
                .servers
                .iter()
                .map(|s| {
                    (s.base.clone(), "its circuit breaker is open after repeated failures".into())
                })
                .collect();
        }
        Err(ClientError::NoneHealthy(errors))
    }
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(200u64.saturating_mul(1 << attempt.min(5))).min(Duration::from_secs(5))
}

/// The servers as an [`EvalService`]: records come back as the servers made them.
pub struct RemoteEvaluator {
    balancer: Balancer,
    info: ServerInfo,
}

impl RemoteEvaluator {
    /// Check the servers and keep the first healthy one's device and environment.
    pub async fn connect(cfg: ClientConfig) -> Result<RemoteEvaluator, ClientError> {
        let balancer = Balancer::new(cfg)?;
        let info = balancer.check().await?;
        Ok(RemoteEvaluator { balancer, info })
    }

    pub fn balancer(&self) -> &Balancer {
        &self.balancer
    }

    fn request(
        &self,
        problem: &Problem,
        candidate: &Candidate,
        config: &EvalConfig,
    ) -> SubmitRequest {
        let spec = |name: &str, source: &str, path: &std::path::Path| SourceSpec {
            name: Some(name.to_string()),
            source: source.to_string(),
            path: Some(path.display().to_string()),
        };
        let config_json = serde_json::to_string(config).unwrap_or_default();
        let mut h = Sha256::new();
        for part in [
            self.balancer.cfg.client_id.as_str(),
            &problem.name,
            &problem.source,
            &candidate.name,
            &candidate.source,
            &config_json,
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        SubmitRequest {
            problem: Some(spec(&problem.name, &problem.source, &problem.path)),
            problem_id: None,
            candidate: spec(&candidate.name, &candidate.source, &candidate.path),
            options: Default::default(),
            config: Some(config.clone()),
            tolerance: None,
            idempotency_key: Some(hex::encode(h.finalize())),
        }
    }
}

fn remote(e: ClientError) -> EvalError {
    EvalError::Remote(e.to_string())
}

impl EvalService for RemoteEvaluator {
    fn device(&self) -> DeviceKind {
        self.info.device
    }

    fn environment(&self) -> &EnvInfo {
        &self.info.environment
    }

    fn evaluate<'a>(
        &'a self,
        problem: &'a Problem,
        candidate: &'a Candidate,
        config: &'a EvalConfig,
    ) -> BoxFuture<'a, Result<Evaluation, EvalError>> {
        Box::pin(async move {
            let req = self.request(problem, candidate, config);
            let view = self.balancer.evaluate(&req).await.map_err(remote)?;
            let record = view.record.ok_or_else(|| {
                EvalError::Remote(format!("evaluation {} came back without its record", view.id))
            })?;
            Ok(Evaluation { record, cached: view.cached })
        })
    }

    fn check_problem<'a>(
        &'a self,
        problem: &'a Problem,
        overrides: BTreeMap<String, serde_json::Value>,
        budget: Duration,
    ) -> BoxFuture<'a, Result<ProblemReport, EvalError>> {
        Box::pin(async move {
            let req = ProblemCheckRequest {
                problem: SourceSpec {
                    name: Some(problem.name.clone()),
                    source: problem.source.clone(),
                    path: Some(problem.path.display().to_string()),
                },
                tolerance: problem.meta.tolerance(),
                overrides,
                budget_ms: u64::try_from(budget.as_millis()).unwrap_or(u64::MAX),
            };
            self.balancer.check_problem(&req).await.map_err(remote)
        })
    }

    /// Outstanding evaluations are left to their servers (they end and are stored there,
    /// where a later run finds them in the cache).
    fn abort_all(&self) {}
}

//! What every HTTP backend shares: a client with a per-attempt timeout, an optional
//! bearer key, a concurrency limit, retries with exponential backoff on failures a
//! server may recover from, and usage counters.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Semaphore;

use crate::backend::{BackendError, Completion};

#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The endpoint's base URL, without a trailing slash.
    pub base_url: String,
    /// Sent as a bearer token when present.
    pub api_key: Option<String>,
    /// Per attempt, from sending the request to the last byte of the reply.
    pub timeout: Duration,
    /// Further attempts after a retryable failure.
    pub retries: u32,
    /// First backoff; doubled after every failed attempt.
    pub backoff: Duration,
    /// Requests in flight at once.
    pub concurrency: usize,
}

impl HttpConfig {
    pub fn new(base_url: &str) -> HttpConfig {
        HttpConfig {
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key: None,
            timeout: Duration::from_secs(600),
            retries: 3,
            backoff: Duration::from_millis(500),
            concurrency: 8,
        }
    }
}

/// Tokens used so far through one backend.
#[derive(Debug, Default)]
pub struct Usage {
    pub requests: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
}

pub struct HttpClient {
    pub config: HttpConfig,
    client: reqwest::Client,
    slots: Semaphore,
    pub usage: Usage,
}

impl HttpClient {
    pub fn new(config: HttpConfig) -> Result<HttpClient, BackendError> {
        let client = reqwest::Client::builder().timeout(config.timeout).build().map_err(|e| {
            BackendError::Unreachable { url: config.base_url.clone(), reason: e.to_string() }
        })?;
        Ok(HttpClient {
            slots: Semaphore::new(config.concurrency.max(1)),
            config,
            client,
            usage: Usage::default(),
        })
    }

    /// POSTs `body`; a reply other than 200 is an error carrying the start of its body
    /// (401/403 as a refused key).
    pub async fn post(&self, url: &str, body: &Value) -> Result<reqwest::Response, BackendError> {
        let mut req = self.client.post(url).json(body);
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(|e| self.transport(url, e))?;
        let status = resp.status().as_u16();
        if status == 200 {
            return Ok(resp);
        }
        let text = resp.text().await.unwrap_or_default();
        let body: String = text.chars().take(300).collect();
        let url = url.to_string();
        Err(if status == 401 || status == 403 {
            BackendError::Auth { url, status, body }
        } else {
            BackendError::Http { url, status, body }
        })
    }

    /// The reply's JSON body: a body that is not JSON is a malformed reply; a body cut
    /// short (timeout, reset) is a transport failure and worth a retry.
    pub async fn json(&self, url: &str, resp: reqwest::Response) -> Result<Value, BackendError> {
        resp.json().await.map_err(|e| {
            if e.is_decode() {
                BackendError::Protocol { url: url.to_string(), reason: e.to_string() }
            } else {
                self.transport(url, e)
            }
        })
    }

    /// A transport failure, with the chain of causes (connection refused, DNS, ...).
    pub fn transport(&self, url: &str, e: reqwest::Error) -> BackendError {
        if e.is_timeout() {
            return BackendError::Timeout {
                url: url.to_string(),
                secs: self.config.timeout.as_secs_f64(),
            };
        }
        let mut reason = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            reason = format!("{reason}: {s}");
            src = s.source();
        }
        BackendError::Unreachable { url: url.to_string(), reason }
    }

    /// Runs `attempt` under the concurrency limit until it succeeds, fails for good, or
    /// the retries are spent; records latency, attempts and usage on the completion.
    pub async fn with_retries<F, Fut>(&self, mut attempt: F) -> Result<Completion, BackendError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Completion, BackendError>>,
    {
        let _slot = self.slots.acquire().await.map_err(|_| BackendError::Unreachable {
            url: self.config.base_url.clone(),
            reason: "backend closed".into(),
        })?;
        let started = Instant::now();
        let mut delay = self.config.backoff;
        let mut attempts = 0;
        loop {
            attempts += 1;
            match attempt().await {
                Ok(mut c) => {
                    c.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
                    c.attempts = attempts;
                    self.usage.requests.fetch_add(1, Ordering::Relaxed);
                    self.usage
                        .prompt_tokens
                        .fetch_add(u64::from(c.prompt_tokens.unwrap_or(0)), Ordering::Relaxed);
                    self.usage
                        .completion_tokens
                        .fetch_add(u64::from(c.completion_tokens.unwrap_or(0)), Ordering::Relaxed);
                    return Ok(c);
                }
                Err(e) if e.retryable() && attempts <= self.config.retries => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

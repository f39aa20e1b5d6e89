//! OpenAI-compatible chat completions over HTTP (SGLang, vLLM, llama.cpp's server,
//! hosted APIs): streaming or not, timeouts, retries with exponential backoff on
//! overload and network errors, a concurrency limit, and usage accounting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use crate::backend::{Backend, BackendError, BoxFuture, ChatMessage, Completion, Sampling};

#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// E.g. `http://127.0.0.1:30000/v1`; `/chat/completions` is appended.
    pub base_url: String,
    pub model: String,
    /// Sent as a bearer token when present.
    pub api_key: Option<String>,
    pub stream: bool,
    /// Per attempt, from sending the request to the last byte of the reply.
    pub timeout: Duration,
    /// Further attempts after a retryable failure.
    pub retries: u32,
    /// First backoff; doubled after every failed attempt.
    pub backoff: Duration,
    /// Requests in flight at once.
    pub concurrency: usize,
}

impl OpenAiConfig {
    pub fn new(base_url: &str, model: &str) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.trim_end_matches('/').to_string(),
            model: model.to_string(),
            api_key: None,
            stream: false,
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

pub struct OpenAiBackend {
    config: OpenAiConfig,
    client: reqwest::Client,
    slots: Semaphore,
    pub usage: Usage,
}

impl OpenAiBackend {
    pub fn new(config: OpenAiConfig) -> Result<OpenAiBackend, BackendError> {
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| BackendError::Unreachable {
                url: config.base_url.clone(),
                reason: e.to_string(),
            })?;
        Ok(OpenAiBackend {
            slots: Semaphore::new(config.concurrency.max(1)),
            config,
            client,
            usage: Usage::default(),
        })
    }

    fn url(&self) -> String {
        format!("{}/chat/completions", self.config.base_url)
    }

    fn body(&self, messages: &[ChatMessage], sampling: &Sampling) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "stream": self.config.stream,
        });
        if let Some(seed) = sampling.seed {
            body["seed"] = json!(seed);
        }
        if self.config.stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    async fn attempt(&self, body: &Value) -> Result<Completion, BackendError> {
        let url = self.url();
        let mut req = self.client.post(&url).json(body);
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(|e| self.transport(&url, e))?;
        let status = resp.status().as_u16();
        if status != 200 {
            let text = resp.text().await.unwrap_or_default();
            let body: String = text.chars().take(300).collect();
            return Err(if status == 401 || status == 403 {
                BackendError::Auth { url, status, body }
            } else {
                BackendError::Http { url, status, body }
            });
        }
        if self.config.stream {
            self.read_stream(&url, resp).await
        } else {
            let v: Value = resp.json().await.map_err(|e| BackendError::Protocol {
                url: url.clone(),
                reason: e.to_string(),
            })?;
            parse_reply(&url, &v)
        }
    }

    fn transport(&self, url: &str, e: reqwest::Error) -> BackendError {
        if e.is_timeout() {
            BackendError::Timeout {
                url: url.to_string(),
                secs: self.config.timeout.as_secs_f64(),
            }
        } else {
            let mut reason = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                reason = format!("{reason}: {s}");
                src = s.source();
            }
            BackendError::Unreachable {
                url: url.to_string(),
                reason,
            }
        }
    }

    /// Server-sent events: `data: {chunk}` lines, then `data: [DONE]`.
    async fn read_stream(
        &self,
        url: &str,
        resp: reqwest::Response,
    ) -> Result<Completion, BackendError> {
        let mut stream = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        let mut out = Completion::default();
        let mut done = false;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.transport(url, e))?;
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let line = String::from_utf8_lossy(&line);
                let line = line.trim();
                let Some(data) = line.strip_prefix("data:") else {
                    continue;
                };
                let data = data.trim();
                if data == "[DONE]" {
                    done = true;
                    break;
                }
                let v: Value = serde_json::from_str(data).map_err(|e| BackendError::Protocol {
                    url: url.to_string(),
                    reason: format!("stream chunk is not JSON ({e}): {data:.120}"),
                })?;
                if let Some(choice) = v["choices"].get(0) {
                    if let Some(t) = choice["delta"]["content"].as_str() {
                        out.text.push_str(t);
                    }
                    if let Some(r) = choice["finish_reason"].as_str() {
                        out.finish_reason = Some(r.to_string());
                    }
                }
                read_usage(&v, &mut out);
            }
            if done {
                break;
            }
        }
        if !done {
            return Err(BackendError::Protocol {
                url: url.to_string(),
                reason: "the stream ended without `data: [DONE]`".into(),
            });
        }
        Ok(out)
    }
}

fn read_usage(v: &Value, out: &mut Completion) {
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        out.prompt_tokens = u["prompt_tokens"].as_u64().map(|x| x as u32);
        out.completion_tokens = u["completion_tokens"].as_u64().map(|x| x as u32);
    }
}

/// A non-streamed `chat.completion` object.
fn parse_reply(url: &str, v: &Value) -> Result<Completion, BackendError> {
    let choice = v["choices"].get(0).ok_or_else(|| BackendError::Protocol {
        url: url.to_string(),
        reason: format!("no `choices` in {:.200}", v.to_string()),
    })?;
    let text = choice["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut out = Completion {
        text,
        finish_reason: choice["finish_reason"].as_str().map(str::to_owned),
        ..Completion::default()
    };
    // Token log-probabilities, when the server was asked for and returned them.
    if let Some(items) = choice["logprobs"]["content"].as_array() {
        out.logprobs = Some(
            items
                .iter()
                .map(|t| t["logprob"].as_f64().unwrap_or(f64::NAN) as f32)
                .collect(),
        );
    }
    read_usage(v, &mut out);
    Ok(out)
}

impl Backend for OpenAiBackend {
    fn describe(&self) -> String {
        format!("openai:{}@{}", self.config.model, self.config.base_url)
    }

    fn complete<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        sampling: &'a Sampling,
    ) -> BoxFuture<'a, Result<Completion, BackendError>> {
        Box::pin(async move {
            let _slot = self
                .slots
                .acquire()
                .await
                .map_err(|_| BackendError::Unreachable {
                    url: self.url(),
                    reason: "backend closed".into(),
                })?;
            let body = self.body(messages, sampling);
            let started = Instant::now();
            let mut delay = self.config.backoff;
            let mut attempt = 0;
            loop {
                attempt += 1;
                match self.attempt(&body).await {
                    Ok(mut c) => {
                        c.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
                        c.attempts = attempt;
                        self.usage.requests.fetch_add(1, Ordering::Relaxed);
                        self.usage
                            .prompt_tokens
                            .fetch_add(u64::from(c.prompt_tokens.unwrap_or(0)), Ordering::Relaxed);
                        self.usage.completion_tokens.fetch_add(
                            u64::from(c.completion_tokens.unwrap_or(0)),
                            Ordering::Relaxed,
                        );
                        return Ok(c);
                    }
                    Err(e) if e.retryable() && attempt <= self.config.retries => {
                        tokio::time::sleep(delay).await;
                        delay *= 2;
                    }
                    Err(e) => return Err(e),
                }
            }
        })
    }
}

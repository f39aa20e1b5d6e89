//! OpenAI-compatible chat completions over HTTP (SGLang, vLLM, llama.cpp's server,
//! hosted APIs): streaming or not, timeouts, retries with exponential backoff on
//! overload and network errors, a concurrency limit, and usage accounting.

use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::backend::{Backend, BackendError, BoxFuture, ChatMessage, Completion, Sampling};
use crate::http::{HttpClient, HttpConfig};

#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Base URL (e.g. `http://127.0.0.1:30000/v1`; `/chat/completions` is appended), key,
    /// timeout, retries, concurrency.
    pub http: HttpConfig,
    pub model: String,
    pub stream: bool,
}

impl OpenAiConfig {
    pub fn new(base_url: &str, model: &str) -> OpenAiConfig {
        OpenAiConfig { http: HttpConfig::new(base_url), model: model.to_string(), stream: false }
    }
}

pub struct OpenAiBackend {
    model: String,
    stream: bool,
    pub http: HttpClient,
}

impl OpenAiBackend {
    pub fn new(config: OpenAiConfig) -> Result<OpenAiBackend, BackendError> {
        Ok(OpenAiBackend {
            model: config.model,
            stream: config.stream,
            http: HttpClient::new(config.http)?,
        })
    }

    fn url(&self) -> String {
        format!("{}/chat/completions", self.http.config.base_url)
    }

    fn body(&self, messages: &[ChatMessage], sampling: &Sampling) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "stream": self.stream,
        });
        if let Some(seed) = sampling.seed {
            body["seed"] = json!(seed);
        }
        if self.stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    async fn attempt(&self, body: &Value) -> Result<Completion, BackendError> {
        let url = self.url();
        let resp = self.http.post(&url, body).await?;
        if self.stream {
            self.read_stream(&url, resp).await
        } else {
            let v = self.http.json(&url, resp).await?;
            parse_reply(&url, &v)
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
            let chunk = chunk.map_err(|e| self.http.transport(url, e))?;
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
    let text = choice["message"]["content"].as_str().unwrap_or_default().to_string();
    let mut out = Completion {
        text,
        finish_reason: choice["finish_reason"].as_str().map(str::to_owned),
        ..Completion::default()
    };
    // Token log-probabilities, when the server was asked for and returned them.
    if let Some(items) = choice["logprobs"]["content"].as_array() {
        out.logprobs =
            Some(items.iter().map(|t| t["logprob"].as_f64().unwrap_or(f64::NAN) as f32).collect());
    }
    read_usage(v, &mut out);
    Ok(out)
}

impl Backend for OpenAiBackend {
    fn describe(&self) -> String {
        format!("openai:{}@{}", self.model, self.http.config.base_url)
    }

    fn complete<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        sampling: &'a Sampling,
    ) -> BoxFuture<'a, Result<Completion, BackendError>> {
        Box::pin(async move {
            let body = self.body(messages, sampling);
            self.http.with_retries(|| self.attempt(&body)).await
        })
    }
}

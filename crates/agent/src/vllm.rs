//! vLLM's OpenAI-compatible `/v1/completions`, token ids in and out: what RL needs from
//! a vLLM server. The chat-completions path (`openai.rs`) returns text only, and
//! re-tokenising that text is not guaranteed to give the ids the model sampled. So the
//! prompt is rendered and tokenised here (`tritonforge-chat`), sent as a list of ids in
//! `prompt`, and the reply is read with `return_token_ids` (the sampled ids) and
//! `logprobs: 0` (each sampled token's log-probability, no alternatives).

use std::path::Path;

use serde_json::{json, Value};
use tritonforge_chat::ChatTokenizer;

use crate::backend::{Backend, BackendError, BoxFuture, ChatMessage, Completion, Sampling};
use crate::http::{HttpClient, HttpConfig};

pub struct VllmBackend {
    http: HttpClient,
    tokenizer: ChatTokenizer,
    /// The served model's name; `None` sends none, and vLLM uses the one it serves.
    model: Option<String>,
}

impl VllmBackend {
    /// `http.base_url` is the server's root (`http://127.0.0.1:8000`, no `/v1`);
    /// `tokenizer` a directory with the served model's `tokenizer.json` and chat template.
    pub fn new(
        http: HttpConfig,
        tokenizer: &Path,
        model: Option<String>,
    ) -> Result<VllmBackend, BackendError> {
        let url = http.base_url.clone();
        let tokenizer = ChatTokenizer::from_dir(tokenizer)
            .map_err(|e| BackendError::Setup { url, reason: e.to_string() })?;
        Ok(VllmBackend { http: HttpClient::new(http)?, tokenizer, model })
    }

    fn url(&self) -> String {
        format!("{}/v1/completions", self.http.config.base_url)
    }

    async fn attempt(&self, body: &Value, prompt_ids: &[u32]) -> Result<Completion, BackendError> {
        let url = self.url();
        let resp = self.http.post(&url, body).await?;
        let v = self.http.json(&url, resp).await?;
        parse_reply(&url, &v, prompt_ids, &self.tokenizer)
    }
}

/// `{"choices": [{"text", "token_ids": [..], "finish_reason",
/// "logprobs": {"token_logprobs": [..], ...}}], "usage": {...}}`.
fn parse_reply(
    url: &str,
    v: &Value,
    prompt_ids: &[u32],
    tokenizer: &ChatTokenizer,
) -> Result<Completion, BackendError> {
    let bad = |reason: String| BackendError::Protocol { url: url.to_string(), reason };
    let choice = v["choices"]
        .get(0)
        .ok_or_else(|| bad(format!("no `choices` in {:.200}", v.to_string())))?;
    let ids: Vec<u32> = choice["token_ids"]
        .as_array()
        .ok_or_else(|| {
            bad(format!(
                "no `choices[0].token_ids` (a vLLM that honours `return_token_ids` is needed): \
                 {:.200}",
                v.to_string()
            ))
        })?
        .iter()
        .map(|x| x.as_u64().and_then(|i| u32::try_from(i).ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("`token_ids` holds something other than token ids".into()))?;
    let logprobs = match choice["logprobs"]["token_logprobs"].as_array() {
        Some(items) => {
            let lps: Vec<f32> =
                items.iter().map(|x| x.as_f64().unwrap_or(f64::NAN) as f32).collect();
            if lps.len() != ids.len() {
                return Err(bad(format!("{} log-probs for {} token ids", lps.len(), ids.len())));
            }
            Some(lps)
        }
        None => None,
    };
    // The text is decoded from the ids, so it always says what the ids say.
    let text = tokenizer.decode(&ids, true).map_err(|e| bad(e.to_string()))?;
    Ok(Completion {
        text,
        prompt_tokens: Some(prompt_ids.len() as u32),
        completion_tokens: Some(ids.len() as u32),
        token_ids: Some(ids),
        prompt_ids: Some(prompt_ids.to_vec()),
        logprobs,
        finish_reason: choice["finish_reason"].as_str().map(str::to_owned),
        ..Completion::default()
    })
}

impl Backend for VllmBackend {
    fn describe(&self) -> String {
        format!("vllm:{}", self.http.config.base_url)
    }

    fn complete<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        sampling: &'a Sampling,
    ) -> BoxFuture<'a, Result<Completion, BackendError>> {
        Box::pin(async move {
            let (_, prompt_ids) = self
                .tokenizer
                .encode_chat(messages, true)
                .map_err(|e| BackendError::Setup { url: self.url(), reason: e.to_string() })?;
            let mut body = json!({
                "prompt": prompt_ids,
                "max_tokens": sampling.max_tokens,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "logprobs": 0,
                "return_token_ids": true,
                "stream": false,
            });
            // An adapter is asked for as a model of its own name.
            if let Some(model) = sampling.adapter.as_ref().or(self.model.as_ref()) {
                body["model"] = json!(model);
            }
            if let Some(seed) = sampling.seed {
                body["seed"] = json!(seed);
            }
            let mut c = self.http.with_retries(|| self.attempt(&body, &prompt_ids)).await?;
            if sampling.adapter.is_some() {
                c.weight_version = sampling.adapter.clone();
            }
            Ok(c)
        })
    }
}

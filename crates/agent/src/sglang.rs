//! SGLang's native `/generate` endpoint, token ids in and out. The prompt is rendered
//! with the model's chat template and tokenised here (`tritonforge-chat`), sent as
//! `input_ids`, and the completion comes back as `output_ids` with their log-probs: what
//! the policy saw is exactly what RL trains on, with no re-tokenisation drift.

use std::path::Path;

use serde_json::{json, Value};
use tritonforge_chat::ChatTokenizer;

use crate::backend::{Backend, BackendError, BoxFuture, ChatMessage, Completion, Sampling};
use crate::http::{HttpClient, HttpConfig};

pub struct SglangBackend {
    http: HttpClient,
    tokenizer: ChatTokenizer,
}

impl SglangBackend {
    /// `http.base_url` is the server's root (`http://127.0.0.1:30000`); `tokenizer` a
    /// directory with the served model's `tokenizer.json` and chat template.
    pub fn new(http: HttpConfig, tokenizer: &Path) -> Result<SglangBackend, BackendError> {
        let url = http.base_url.clone();
        let tokenizer = ChatTokenizer::from_dir(tokenizer)
            .map_err(|e| BackendError::Setup { url, reason: e.to_string() })?;
        Ok(SglangBackend { http: HttpClient::new(http)?, tokenizer })
    }

    fn url(&self) -> String {
        format!("{}/generate", self.http.config.base_url)
    }

    async fn attempt(&self, body: &Value, prompt_ids: &[u32]) -> Result<Completion, BackendError> {
        let url = self.url();
        let resp = self.http.post(&url, body).await?;
        let v = self.http.json(&url, resp).await?;
        parse_reply(&url, &v, prompt_ids, &self.tokenizer)
    }
}

/// `{"text", "output_ids", "meta_info": {"finish_reason", "prompt_tokens",
/// "completion_tokens", "weight_version", "output_token_logprobs": [[logprob, id, text],
/// ...]}}`.
fn parse_reply(
    url: &str,
    v: &Value,
    prompt_ids: &[u32],
    tokenizer: &ChatTokenizer,
) -> Result<Completion, BackendError> {
    let bad = |reason: String| BackendError::Protocol { url: url.to_string(), reason };
    let ids: Vec<u32> = v["output_ids"]
        .as_array()
        .ok_or_else(|| {
            bad(format!(
                "no `output_ids` (is this SGLang's native /generate?): {:.200}",
                v.to_string()
            ))
        })?
        .iter()
        .map(|x| x.as_u64().and_then(|i| u32::try_from(i).ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("`output_ids` holds something other than token ids".into()))?;
    let meta = &v["meta_info"];
    let logprobs = match meta["output_token_logprobs"].as_array() {
        Some(items) => {
            let lps: Vec<f32> =
                items.iter().map(|t| t[0].as_f64().unwrap_or(f64::NAN) as f32).collect();
            let same_ids =
                items.iter().zip(&ids).all(|(t, id)| t[1].as_u64() == Some(u64::from(*id)));
            if lps.len() != ids.len() || !same_ids {
                return Err(bad(format!(
                    "{} log-probs for {} output ids, or their ids disagree",
                    lps.len(),
                    ids.len()
                )));
            }
            Some(lps)
        }
        None => None,
    };
    let finish = match &meta["finish_reason"] {
        Value::Object(o) => o.get("type").and_then(Value::as_str).map(str::to_owned),
        Value::String(s) => Some(s.clone()),
        _ => None,
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
        finish_reason: finish,
        weight_version: meta["weight_version"].as_str().map(str::to_owned),
        ..Completion::default()
    })
}

impl Backend for SglangBackend {
    fn describe(&self) -> String {
        format!("sglang:{}", self.http.config.base_url)
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
            let mut params = json!({
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "max_new_tokens": sampling.max_tokens,
            });
            if let Some(seed) = sampling.seed {
                params["sampling_seed"] = json!(seed);
            }
            let mut body = json!({
                "input_ids": prompt_ids,
                "sampling_params": params,
                "return_logprob": true,
                "stream": false,
            });
            // SGLang's `lora_path` takes the name an adapter was loaded under.
            if let Some(adapter) = &sampling.adapter {
                body["lora_path"] = json!(adapter);
            }
            let mut c = self.http.with_retries(|| self.attempt(&body, &prompt_ids)).await?;
            // The reply's `weight_version` is the base model's; the adapter named is what
            // made the answer.
            if sampling.adapter.is_some() {
                c.weight_version = sampling.adapter.clone();
            }
            Ok(c)
        })
    }
}

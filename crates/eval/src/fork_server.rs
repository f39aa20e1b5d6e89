//! The CPU-mode fork server ("fork_server"): one Python process that has imported torch
//! and triton and run the warm-up, from which each candidate's process is forked.
//!
//! Why: on a CPU machine a started executor spends about 2.8 CPU-seconds on imports
//! and the warm-up, several times a small candidate's whole evaluation under the
//! interpreter. A fork starts in milliseconds from the same warmed-up state, and the
//! child applies its own sandbox exactly as a started process does. CUDA cannot be
//! forked once initialised, so on a GPU the process started as a fork_server simply
//! serves one candidate like any other (see `python/tritonforge_worker/fork_server.py`).
//!
//! The control channel is the server's stdin, a Unix stream socket: one JSON line
//! per child with the child's end of a fresh socket pair attached (SCM_RIGHTS).
//! Replies and exit statuses come back as JSON lines on its stdout.

use std::collections::{HashMap, HashSet};
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Interest};
use tokio::net::unix::pipe;
use tokio::net::UnixStream;
use tokio::process::{Child, ChildStdout};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;

use crate::EvalError;

/// The longest the server may take to report a child's exit once the child is gone.
const WAIT: Duration = Duration::from_secs(10);
/// The longest reply line the server writes; anything longer is not the server.
const MAX_REPLY: u64 = 64 << 10;

/// What the server has told about its children, shared with the task reading it.
#[derive(Default)]
struct State {
    pending: HashMap<u64, oneshot::Sender<Result<i32, String>>>,
    /// Raw wait statuses of children nobody has asked for yet.
    exits: HashMap<i32, i32>,
    /// Children whose status nobody will ask for (their worker was dropped first).
    forgotten: HashSet<i32>,
    /// The server is gone: no request will be answered, no status will come.
    dead: bool,
}

pub(crate) struct ForkServer {
    ctl: tokio::sync::Mutex<UnixStream>,
    _child: Child,
    pgid: i32,
    scratch: PathBuf,
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
    next: AtomicU64,
    forked: AtomicU64,
    reader: JoinHandle<()>,
}

impl std::fmt::Debug for ForkServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkServer")
            .field("pgid", &self.pgid)
            .field("forked", &self.forked())
            .finish_non_exhaustive()
    }
}

impl Drop for ForkServer {
    fn drop(&mut self) {
        self.kill();
        self.reader.abort();
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// One child, as the pool needs it: its pid, the write end of its stdin and the
/// read end of its stdout (pipes, as for a started process: fd 0 cannot be written).
pub(crate) struct Forked {
    pub pid: i32,
    pub stdin: pipe::Sender,
    pub stdout: pipe::Receiver,
}

impl ForkServer {
    /// Take over a started process that said it is a fork server. `ctl` is our end of
    /// its stdin, `stdout` its replies (the ready line already read).
    pub fn new(
        child: Child,
        pgid: i32,
        ctl: UnixStream,
        stdout: BufReader<ChildStdout>,
        scratch: PathBuf,
    ) -> Arc<ForkServer> {
        let state = Arc::new(Mutex::new(State::default()));
        let notify = Arc::new(Notify::new());
        let reader = tokio::spawn(read_replies(stdout, pgid, state.clone(), notify.clone()));
        Arc::new(ForkServer {
            ctl: tokio::sync::Mutex::new(ctl),
            _child: child,
            pgid,
            scratch,
            state,
            notify,
            next: AtomicU64::new(0),
            forked: AtomicU64::new(0),
            reader,
        })
    }

    pub fn alive(&self) -> bool {
        self.state.lock().map(|s| !s.dead).unwrap_or(false)
    }

    pub fn pid(&self) -> i32 {
        self.pgid
    }

    /// Children forked so far.
    pub fn forked(&self) -> u64 {
        self.forked.load(Ordering::Relaxed)
    }

    /// Fork a child working in `dir`, its stderr in `stderr`, with `env` set.
    pub async fn fork(
        &self,
        dir: &std::path::Path,
        stderr: &std::path::Path,
        env: &[(&str, String)],
        timeout: Duration,
    ) -> Result<Forked, EvalError> {
        let fail = |reason: String| EvalError::WorkerStart {
            reason: format!("fork server: {reason}"),
            stderr: String::new(),
        };
        let (Some(dir_s), Some(stderr_s)) = (dir.to_str(), stderr.to_str()) else {
            return Err(fail("scratch path is not UTF-8".into()));
        };
        let (in_r, in_w) = std::io::pipe().map_err(|e| fail(format!("pipe: {e}")))?;
        let (out_r, out_w) = std::io::pipe().map_err(|e| fail(format!("pipe: {e}")))?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.state.lock().map_err(|_| fail("state poisoned".into()))?;
            if st.dead {
                return Err(fail("the server has exited".into()));
            }
            st.pending.insert(id, tx);
        }
        let env: serde_json::Map<String, Value> =
            env.iter().map(|(k, v)| ((*k).to_string(), Value::String(v.clone()))).collect();
        let mut line =
            serde_json::json!({"id": id, "dir": dir_s, "stderr": stderr_s, "env": env}).to_string();
        line.push('\n');
        // Sending and the answer share one deadline: a server that stopped (a child
        // may have sent it SIGSTOP where signals are not scoped) must not hold a start
        // forever, nor the next one. On any failure here it is killed and not used again.
        let asked = async {
            self.send(line.as_bytes(), [in_r.as_raw_fd(), out_w.as_raw_fd()])
                .await
                .map_err(|e| format!("cannot send a request: {e}"))?;
            match rx.await {
                Ok(answer) => answer,
                Err(_) => Err("the server exited".to_string()),
            }
        };
        let answer = tokio::time::timeout(timeout, asked).await;
        // The child's ends live on in the child only: its exit is our end-of-file.
        drop((in_r, out_w));
        let pid = match answer {
            Ok(Ok(pid)) => pid,
            Ok(Err(e)) => {
                self.kill();
                return Err(fail(e));
            }
            Err(_) => {
                self.kill();
                return Err(fail(format!("no answer within {}s", timeout.as_secs())));
            }
        };
        let stdin =
            pipe::Sender::from_owned_fd(in_w.into()).map_err(|e| fail(format!("pipe: {e}")))?;
        let stdout =
            pipe::Receiver::from_owned_fd(out_r.into()).map_err(|e| fail(format!("pipe: {e}")))?;
        self.forked.fetch_add(1, Ordering::Relaxed);
        Ok(Forked { pid, stdin, stdout })
    }

    /// Send `bytes` with `fds` attached to their first byte.
    async fn send(&self, bytes: &[u8], fds: [i32; 2]) -> std::io::Result<()> {
        let ctl = self.ctl.lock().await;
        let raw = ctl.as_raw_fd();
        let mut sent = 0;
        while sent < bytes.len() {
            let rest = &bytes[sent..];
            let with_fd = sent == 0;
            let n = ctl
                .async_io(Interest::WRITABLE, || {
                    let iov = [IoSlice::new(rest)];
                    let cmsgs = [ControlMessage::ScmRights(&fds)];
                    let cmsgs: &[ControlMessage] = if with_fd { &cmsgs } else { &[] };
                    sendmsg::<()>(raw, &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)
                        .map_err(std::io::Error::from)
                })
                .await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            sent += n;
        }
        Ok(())
    }

    /// Kill the server and stop using it (its children are in their own sessions and
    /// live on; their hosts kill them).
    pub fn kill(&self) {
        let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        if let Ok(mut st) = self.state.lock() {
            st.dead = true;
            st.pending.clear();
        }
        self.notify.notify_waiters();
    }

    /// The child's exit status, once the server has reaped it; `None` if the server
    /// died or has not reported it within `WAIT` (a stopped server).
    pub async fn wait(&self, pid: i32) -> Option<ExitStatus> {
        tokio::time::timeout(WAIT, self.wait_unbounded(pid)).await.ok().flatten()
    }

    async fn wait_unbounded(&self, pid: i32) -> Option<ExitStatus> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.state.lock().ok()?;
                if let Some(raw) = st.exits.remove(&pid) {
                    return Some(ExitStatus::from_raw(raw));
                }
                if st.dead {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Nobody will wait for `pid`: drop its status now or when it comes.
    pub fn forget(&self, pid: i32) {
        if let Ok(mut st) = self.state.lock() {
            if st.exits.remove(&pid).is_none() && !st.dead {
                st.forgotten.insert(pid);
            }
        }
    }
}

async fn read_replies(
    mut out: BufReader<ChildStdout>,
    pgid: i32,
    state: Arc<Mutex<State>>,
    notify: Arc<Notify>,
) {
    let mut line = String::new();
    loop {
        line.clear();
        let n = (&mut out).take(MAX_REPLY).read_line(&mut line).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        // Only the server writes here; a line that is not its JSON means something
        // else got hold of the pipe. The server is not trusted again.
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            break;
        };
        let Ok(mut st) = state.lock() else {
            break;
        };
        if let (Some(pid), Some(raw)) = (v["exited"].as_i64(), v["status"].as_i64()) {
            let (Ok(pid), Ok(raw)) = (i32::try_from(pid), i32::try_from(raw)) else {
                continue;
            };
            if !st.forgotten.remove(&pid) {
                st.exits.insert(pid, raw);
            }
            drop(st);
            notify.notify_waiters();
        } else if let Some(id) = v["id"].as_u64() {
            let late = |pid: Option<i32>, st: &mut State| {
                // A request given up on: its child, if any, belongs to nobody.
                if let Some(pid) = pid.filter(|p| *p > 0) {
                    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                    st.forgotten.insert(pid);
                }
            };
            let child = v["pid"].as_i64().and_then(|p| i32::try_from(p).ok());
            let Some(tx) = st.pending.remove(&id) else {
                late(child, &mut st);
                continue;
            };
            let answer = match (
                v["pid"].as_i64().and_then(|p| i32::try_from(p).ok()),
                v["error"].as_str(),
            ) {
                (Some(pid), _) if pid > 0 => Ok(pid),
                (_, Some(e)) => Err(e.to_string()),
                _ => Err(format!("unreadable answer: {}", line.trim())),
            };
            if tx.send(answer).is_err() {
                late(child, &mut st);
            }
        }
    }
    if let Ok(mut st) = state.lock() {
        st.dead = true;
        st.pending.clear();
        st.forgotten.clear();
    }
    notify.notify_waiters();
}

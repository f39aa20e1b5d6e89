//! The one place that starts the Python worker (`python -u -m tritonforge_worker SUB ...`).
//!
//! Six callers start it (the environment probe, the executor pool, the embedded policy,
//! the trainer, two tokenizer exports), and each used to spell out the command line,
//! `PYTHONPATH`, the environment and its own stderr tail. They drifted: one inherited the
//! user's `PYTHONPATH`, one did not; one kept 8 lines of stderr, one 40. Here a
//! [`WorkerMode`] fixes the arguments and the environment each worker mode needs, and a
//! [`WorkerCommand`] turns it into a `std::process::Command` (tokio callers convert it
//! with `tokio::process::Command::from`). What a caller adds itself is only what is its
//! own: stdio, working directory, its extra variables.
//!
//! Also shared: [`StderrTail`] (a bounded ring of a worker's last stderr lines, with the
//! one formatter `...; its stderr ends: ...`) and reading the worker's hello line, in a
//! blocking and an async form.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};
use tritonforge_protocol::{DeviceKind, DeviceRequest, Message, ProtocolError};
/// The worker package's module name.
const MODULE: &str = "tritonforge_worker";

/// What the worker is started to do; each mode has its arguments and environment.
#[derive(Debug, Clone)]
pub enum WorkerMode {
    /// `probe`: print the environment (versions, device, GPUs) as one JSON line.
    Probe { device: DeviceRequest },
    /// `serve`: an executor process for one candidate (the pool adds its own variables).
    Serve,
    /// `policy MODEL DEVICE [--train]`: the embedded policy, or with `train` the trainer.
    Policy { model: String, device: DeviceKind, train: bool },
    /// `tokenizer MODEL OUT`: export a model's tokenizer files to `OUT`.
    Tokenizer { model: String, out: PathBuf },
    /// `roundtrip`: decode each protocol line strictly and encode it again (the mirror test).
    Roundtrip,
}

impl WorkerMode {
    fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        match self {
            WorkerMode::Probe { .. } => a.push("probe".into()),
            WorkerMode::Serve => a.push("serve".into()),
            WorkerMode::Policy { model, device, train } => {
                a.extend(["policy".into(), model.into(), device.as_str().into()]);
                if *train {
                    a.push("--train".into());
                }
            }
            WorkerMode::Tokenizer { model, out } => {
                a.extend(["tokenizer".into(), model.into(), out.into()]);
            }
            WorkerMode::Roundtrip => a.push("roundtrip".into()),
        }
        a
    }

    /// The variables this mode always gets (beyond `PYTHONPATH`).
    fn env(&self) -> Vec<(&'static str, String)> {
        // Models are local files: never reach for the Hub, and keep transformers' advice
        // out of the stderr tail that explains failures.
        let hf = [
            ("HF_HUB_OFFLINE", "1".to_string()),
            ("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1".to_string()),
        ];
        match self {
            WorkerMode::Probe { device } => {
                vec![("TRITONFORGE_DEVICE", device.as_str().into())]
            }
            // The pool sets every variable of an executor itself (they differ per slot).
            WorkerMode::Serve | WorkerMode::Roundtrip => Vec::new(),
            WorkerMode::Policy { train: false, .. } | WorkerMode::Tokenizer { .. } => hf.to_vec(),
            WorkerMode::Policy { train: true, .. } => {
                let mut env = vec![("PYTHONUNBUFFERED", "1".to_string())];
                env.extend(hf);
                // The trainer's data loading is in Rust; tokenizers' thread pool would
                // only warn after torchrun forks.
                env.push(("TOKENIZERS_PARALLELISM", "false".into()));
                env
            }
        }
    }
}

/// The `PYTHONPATH` a worker gets: the worker package's directory first (so the embedded
/// package always wins), then, with `inherit`, the caller's own `PYTHONPATH`.
pub fn pythonpath(worker_path: &Path, inherit: bool) -> OsString {
    let mut path = worker_path.as_os_str().to_owned();
    if inherit {
        if let Some(extra) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            path.push(":");
            path.push(extra);
        }
    }
    path
}

/// One worker's command line and environment, built up and then turned into a
/// [`Command`].
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    python: PathBuf,
    worker_path: PathBuf,
    sub: WorkerMode,
    inherit_pythonpath: bool,
    torchrun: Option<(u32, Vec<String>)>,
    process_group: bool,
    env: Vec<(OsString, OsString)>,
}

impl WorkerCommand {
    /// `python -u -m tritonforge_worker SUB ...` with `worker_path` (the directory that
    /// holds `tritonforge_worker/`) alone on `PYTHONPATH`.
    pub fn new(python: &Path, worker_path: &Path, sub: WorkerMode) -> WorkerCommand {
        WorkerCommand {
            python: python.to_owned(),
            worker_path: worker_path.to_owned(),
            sub,
            inherit_pythonpath: false,
            torchrun: None,
            process_group: false,
            env: Vec::new(),
        }
    }

    /// Put the caller's `PYTHONPATH` after the worker's directory. For processes that run
    /// only our code and may need a user's package (a model's); never for candidates,
    /// whose imports must not reach the user's packages.
    pub fn inherit_pythonpath(mut self) -> Self {
        self.inherit_pythonpath = true;
        self
    }

    /// Run under `python -m torch.distributed.run` with `procs` processes when
    /// `procs > 1`; `args` replace `--standalone`. Rank 0 speaks the protocol on the
    /// inherited stdin/stdout.
    pub fn torchrun(mut self, procs: u32, args: &[String]) -> Self {
        self.torchrun = (procs > 1).then(|| (procs, args.to_vec()));
        self
    }

    /// Start it as the leader of its own process group, so that killing the group ends
    /// every process it started (torchrun's ranks, a candidate's children).
    pub fn own_process_group(mut self) -> Self {
        self.process_group = true;
        self
    }

    /// One more variable, set after the mode's own.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// More variables, set after the mode's own.
    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        for (k, v) in vars {
            self = self.env(k, v);
        }
        self
    }

    /// The interpreter that runs it (for error messages).
    pub fn program(&self) -> &Path {
        &self.python
    }

    /// The arguments after the interpreter.
    pub fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec!["-u".into()];
        if let Some((procs, extra)) = &self.torchrun {
            a.extend(["-m".into(), "torch.distributed.run".into()]);
            if extra.is_empty() {
                a.push("--standalone".into());
            } else {
                a.extend(extra.iter().map(OsString::from));
            }
            a.push(format!("--nproc-per-node={procs}").into());
        }
        a.extend(["-m".into(), MODULE.into()]);
        a.extend(self.sub.args());
        a
    }

    /// Every variable the worker gets beyond what it inherits, in the order they are set:
    /// `PYTHONPATH`, the mode's, the caller's. A process forked rather than started (the
    /// pool's fork server) is given exactly this list.
    pub fn environment(&self) -> Vec<(OsString, OsString)> {
        let mut env = vec![(
            OsString::from("PYTHONPATH"),
            pythonpath(&self.worker_path, self.inherit_pythonpath),
        )];
        env.extend(self.sub.env().into_iter().map(|(k, v)| (OsString::from(k), OsString::from(v))));
        env.extend(self.env.iter().cloned());
        env
    }

    /// The command, ready for the caller's stdio and working directory.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.args(self.args()).envs(self.environment());
        if self.process_group {
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        }
        cmd
    }
}

/// How many of a worker's last stderr lines are kept.
pub const TAIL_KEPT: usize = 40;
/// How many of them an error quotes.
pub const TAIL_SHOWN: usize = 8;

/// The last lines a worker wrote to stderr, kept by a reader thread or task, so that an
/// error can say what the worker said before it failed. Cloning shares the ring.
#[derive(Debug, Clone)]
pub struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    keep: usize,
}

impl Default for StderrTail {
    fn default() -> Self {
        StderrTail::new(TAIL_KEPT)
    }
}

impl StderrTail {
    /// A ring of at most `keep` lines.
    pub fn new(keep: usize) -> StderrTail {
        StderrTail { lines: Arc::new(Mutex::new(VecDeque::new())), keep: keep.max(1) }
    }

    pub fn push(&self, line: String) {
        if let Ok(mut t) = self.lines.lock() {
            t.push_back(line);
            while t.len() > self.keep {
                t.pop_front();
            }
        }
    }

    /// The last `n` lines, oldest first.
    pub fn last(&self, n: usize) -> Vec<String> {
        self.lines
            .lock()
            .map(|t| t.iter().skip(t.len().saturating_sub(n)).cloned().collect())
            .unwrap_or_default()
    }

    /// `reason`, followed by the worker's last words when it said any.
    pub fn explain(&self, reason: impl Into<String>) -> String {
        with_stderr(reason, &self.last(TAIL_SHOWN))
    }

    /// Read `stderr` to its end on a thread, keeping its lines and appending each to
    /// `log` when given (opened for append; a log that cannot be opened is skipped).
    pub fn drain_blocking(
        &self,
        stderr: impl std::io::Read + Send + 'static,
        log: Option<PathBuf>,
    ) -> std::thread::JoinHandle<()> {
        let tail = self.clone();
        std::thread::spawn(move || {
            let mut file = log.and_then(|log| {
                std::fs::OpenOptions::new().create(true).append(true).open(log).ok()
            });
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(f) = file.as_mut() {
                    let _ = writeln!(f, "{line}");
                }
                tail.push(line);
            }
        })
    }

    /// Read `stderr` to its end on a tokio task, keeping its lines.
    pub fn drain(
        &self,
        stderr: impl tokio::io::AsyncRead + Send + Unpin + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let tail = self.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                tail.push(l);
            }
        })
    }
}

/// The one wording of a worker failure with its stderr: `reason; its stderr ends: a | b`.
/// One line, so that it reads the same in a progress line, a log and a JSON record.
pub fn with_stderr(reason: impl Into<String>, lines: &[String]) -> String {
    let reason = reason.into();
    if lines.is_empty() {
        reason
    } else {
        format!("{reason}; its stderr ends: {}", lines.join(" | "))
    }
}

/// The last `max_bytes` of a worker's stderr file (where the pool sends it), trimmed;
/// empty when the file cannot be read.
pub fn file_tail(path: &Path, max_bytes: usize) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let mut s = text.len().saturating_sub(max_bytes);
    while !text.is_char_boundary(s) {
        s += 1;
    }
    text[s..].trim().to_string()
}

/// Why no hello came.
#[derive(Debug, thiserror::Error)]
pub enum HelloError {
    #[error("no hello within {0:?}")]
    Timeout(Duration),
    /// The worker's stdout closed first (it exited).
    #[error("the worker exited before saying hello")]
    Exited,
    #[error("reading from the worker: {0}")]
    Io(#[source] std::io::Error),
    /// A line that is not a protocol message (`line` is its first 200 characters).
    #[error("expected hello, got {line}: {source}")]
    Malformed {
        line: String,
        #[source]
        source: ProtocolError,
    },
    /// A protocol message other than hello.
    #[error("expected hello, got {0:?}")]
    NotHello(Box<Message>),
}

fn parse_hello(line: &str) -> Result<Message, HelloError> {
    match Message::from_line(line) {
        Ok(m @ Message::Hello { .. }) => Ok(m),
        Ok(other) => Err(HelloError::NotHello(Box::new(other))),
        Err(source) => {
            Err(HelloError::Malformed { line: line.trim_end().chars().take(200).collect(), source })
        }
    }
}

/// Read the worker's first protocol line, which must be its hello, blocking (no time
/// limit: the trainer loads models of any size, possibly under torchrun). Blank lines
/// are skipped.
pub fn read_hello_blocking(reader: &mut impl BufRead) -> Result<Message, HelloError> {
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(HelloError::Io)? == 0 {
            return Err(HelloError::Exited);
        }
        if !line.trim().is_empty() {
            return parse_hello(&line);
        }
    }
}

/// Read the worker's first line within `timeout`, at most `max_line` bytes of it; it
/// must be its hello.
pub async fn read_hello(
    reader: &mut (impl AsyncBufRead + Unpin),
    timeout: Duration,
    max_line: u64,
) -> Result<Message, HelloError> {
    let mut line = String::new();
    let read = tokio::time::timeout(timeout, reader.take(max_line).read_line(&mut line)).await;
    match read {
        Err(_) => Err(HelloError::Timeout(timeout)),
        Ok(Err(e)) => Err(HelloError::Io(e)),
        Ok(Ok(0)) => Err(HelloError::Exited),
        Ok(Ok(_)) => parse_hello(&line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: Vec<OsString>) -> Vec<String> {
        v.into_iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn each_mode_has_its_command_line() {
        let py = Path::new("/py");
        let w = Path::new("/w");
        let trainer =
            WorkerMode::Policy { model: "m".into(), device: DeviceKind::Cuda, train: true };
        let one = WorkerCommand::new(py, w, trainer.clone()).torchrun(1, &[]);
        assert_eq!(
            strings(one.args()),
            ["-u", "-m", "tritonforge_worker", "policy", "m", "cuda", "--train"]
        );
        let two = WorkerCommand::new(py, w, trainer.clone()).torchrun(2, &[]);
        assert_eq!(
            strings(two.args()),
            [
                "-u",
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node=2",
                "-m",
                "tritonforge_worker",
                "policy",
                "m",
                "cuda",
                "--train"
            ]
        );
        let custom = WorkerCommand::new(py, w, trainer).torchrun(4, &["--nnodes=1".into()]);
        assert_eq!(strings(custom.args())[3..5], ["--nnodes=1", "--nproc-per-node=4"]);
        let tok = WorkerMode::Tokenizer { model: "smollm2".into(), out: "/o".into() };
        assert_eq!(
            strings(WorkerCommand::new(py, w, tok).args()),
            ["-u", "-m", "tritonforge_worker", "tokenizer", "smollm2", "/o"]
        );
        let probe = WorkerCommand::new(py, w, WorkerMode::Probe { device: DeviceRequest::Auto });
        assert_eq!(strings(probe.args()), ["-u", "-m", "tritonforge_worker", "probe"]);
        let env = probe.environment();
        assert_eq!(env[0], ("PYTHONPATH".into(), "/w".into()));
        assert_eq!(env[1], ("TRITONFORGE_DEVICE".into(), "auto".into()));
    }

    #[test]
    fn only_a_caller_that_allows_it_inherits_pythonpath() {
        let w = Path::new("/w");
        assert_eq!(pythonpath(w, false), OsString::from("/w"));
        let inherited = pythonpath(w, true);
        match std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            Some(p) => {
                let mut want = OsString::from("/w:");
                want.push(p);
                assert_eq!(inherited, want);
            }
            None => assert_eq!(inherited, OsString::from("/w")),
        }
    }

    #[test]
    fn the_tail_keeps_the_last_lines_and_explains_with_them() {
        let tail = StderrTail::new(3);
        assert_eq!(tail.explain("it died"), "it died");
        for i in 0..5 {
            tail.push(format!("l{i}"));
        }
        assert_eq!(tail.last(10), ["l2", "l3", "l4"]);
        assert_eq!(tail.last(2), ["l3", "l4"]);
        assert_eq!(tail.explain("it died"), "it died; its stderr ends: l2 | l3 | l4");
    }

    #[test]
    fn the_hello_must_come_first() {
        let mut blank_then_eof = std::io::Cursor::new(b"\n\n".to_vec());
        assert!(matches!(read_hello_blocking(&mut blank_then_eof), Err(HelloError::Exited)));
        let mut junk = std::io::Cursor::new(b"Traceback\n".to_vec());
        assert!(matches!(read_hello_blocking(&mut junk), Err(HelloError::Malformed { .. })));
    }
}

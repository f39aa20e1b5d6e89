//! The policy worker as a trainer: `python -m tritonforge_worker policy MODEL DEVICE
//! --train`, over the JSON-lines protocol. Requests are answered in order; training
//! steps may be sent ahead of their answers (see [`crate::Policy::send_step`]). Its stderr
//! goes to a log file, and its last lines into any error, so a crash explains itself.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};

use tritonforge_protocol::{Message, SaveJob, StepStats, TrainBatch, TrainInfo, TrainSetup};

use crate::{Policy, TrainError};

pub struct WorkerSpec {
    pub python: PathBuf,
    /// Directory holding `tritonforge_worker/`.
    pub worker_path: PathBuf,
    pub device: String,
    /// Where the worker's stderr is written.
    pub log: PathBuf,
    /// Processes (one per GPU) under `torchrun`; 1 runs the worker directly.
    pub procs: u32,
    /// `torchrun` arguments in place of `--standalone`.
    pub torchrun: Vec<String>,
}

pub struct WorkerPolicy {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    tail: Arc<Mutex<VecDeque<String>>>,
    next: u64,
    /// Ids of steps sent and not yet answered, oldest first.
    pending: VecDeque<String>,
}

impl WorkerPolicy {
    pub fn start(spec: &WorkerSpec, model: &str) -> Result<WorkerPolicy, TrainError> {
        let mut path = spec.worker_path.clone().into_os_string();
        if let Some(extra) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            path.push(":");
            path.push(extra);
        }
        let mut cmd = Command::new(&spec.python);
        // Its own process group: under torchrun the ranks are grandchildren, and killing
        // the group is the one way to be sure none outlives us holding GPU memory.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.arg("-u");
        if spec.procs > 1 {
            // Rank 0 speaks the protocol on the inherited stdin/stdout; the other ranks
            // get every message from it over torch.distributed.
            cmd.args(["-m", "torch.distributed.run"]);
            if spec.torchrun.is_empty() {
                cmd.arg("--standalone");
            } else {
                cmd.args(&spec.torchrun);
            }
            cmd.arg(format!("--nproc-per-node={}", spec.procs));
        }
        let mut child = cmd
            .args(["-m", "tritonforge_worker", "policy", model])
            .arg(&spec.device)
            .arg("--train")
            .env("PYTHONPATH", path)
            .env("PYTHONUNBUFFERED", "1")
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
            .env("TOKENIZERS_PARALLELISM", "false")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                TrainError::Worker(format!("could not start {}: {e}", spec.python.display()))
            })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(TrainError::Worker(
                "the worker's pipes were not set up".into(),
            ));
        };
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let log = spec.log.clone();
        let tail_w = tail.clone();
        std::thread::spawn(move || drain(stderr, &log, &tail_w));
        let mut w = WorkerPolicy {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            tail,
            next: 0,
            pending: VecDeque::new(),
        };
        match w.read()? {
            Message::Hello { .. } => Ok(w),
            other => Err(w.fail(format!("expected hello, got {other:?}"))),
        }
    }

    fn fail(&self, reason: impl Into<String>) -> TrainError {
        let tail: Vec<String> = self
            .tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default();
        let mut reason = reason.into();
        if !tail.is_empty() {
            reason = format!("{reason}; its stderr ends:\n  {}", tail.join("\n  "));
        }
        TrainError::Worker(reason)
    }

    fn read(&mut self) -> Result<Message, TrainError> {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .stdout
                .read_line(&mut line)
                .map_err(|e| self.fail(format!("reading from the worker: {e}")))?;
            if n == 0 {
                // Give the stderr thread a moment to collect the last words.
                std::thread::sleep(std::time::Duration::from_millis(200));
                let status = self.child.try_wait().ok().flatten();
                return Err(self.fail(format!(
                    "the worker exited{}",
                    status.map(|s| format!(" ({s})")).unwrap_or_default()
                )));
            }
            if line.trim().is_empty() {
                continue;
            }
            return Message::from_line(&line).map_err(|e| self.fail(format!("bad reply: {e}")));
        }
    }

    /// Writes one request; returns its id.
    fn send(&mut self, make: impl FnOnce(String) -> Message) -> Result<String, TrainError> {
        self.next += 1;
        let id = format!("t{}", self.next);
        let line = make(id.clone()).to_line();
        writeln!(self.stdin, "{line}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| self.fail(format!("writing to the worker: {e}")))?;
        Ok(id)
    }

    /// The reply to request `id`: the worker answers training requests in order.
    fn reply(&mut self, id: &str) -> Result<Message, TrainError> {
        let reply = self.read()?;
        let got = match &reply {
            Message::Error { id, .. } => id.clone(),
            Message::StepDone { id, .. }
            | Message::TrainReady { id, .. }
            | Message::Checkpointed { id, .. } => Some(id.clone()),
            _ => None,
        };
        if got.as_deref().is_some_and(|g| g != id) {
            return Err(self.fail(format!("expected the reply to {id}, got {reply:?}")));
        }
        match reply {
            Message::Error { message, .. } => Err(TrainError::Step(message)),
            reply => Ok(reply),
        }
    }

    fn ask(&mut self, make: impl FnOnce(String) -> Message) -> Result<Message, TrainError> {
        if !self.pending.is_empty() {
            return Err(TrainError::Worker(format!(
                "a request was made with {} step(s) still in flight",
                self.pending.len()
            )));
        }
        let id = self.send(make)?;
        self.reply(&id)
    }
}

fn drain(stderr: std::process::ChildStderr, log: &Path, tail: &Mutex<VecDeque<String>>) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .ok();
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        if let Some(f) = file.as_mut() {
            let _ = writeln!(f, "{line}");
        }
        if let Ok(mut t) = tail.lock() {
            if t.len() == 8 {
                t.pop_front();
            }
            t.push_back(line);
        }
    }
}

impl WorkerPolicy {
    /// Sends a request and takes the one reply kind it expects (`pick` hands anything
    /// else back, to be named in the error).
    fn call<T>(
        &mut self,
        make: impl FnOnce(String) -> Message,
        want: &str,
        pick: impl FnOnce(Message) -> Result<T, Box<Message>>,
    ) -> Result<T, TrainError> {
        let reply = self.ask(make)?;
        pick(reply).map_err(|other| self.fail(format!("expected {want}, got {other:?}")))
    }
}

fn step_done(m: Message) -> Result<StepStats, Box<Message>> {
    match m {
        Message::StepDone { stats, .. } => Ok(stats),
        other => Err(Box::new(other)),
    }
}

impl Policy for WorkerPolicy {
    fn setup(&mut self, setup: TrainSetup) -> Result<TrainInfo, TrainError> {
        let make = |id| Message::TrainSetup { id, setup };
        self.call(make, "train_ready", |m| match m {
            Message::TrainReady { info, .. } => Ok(info),
            other => Err(Box::new(other)),
        })
    }

    fn send_step(&mut self, batch: TrainBatch) -> Result<(), TrainError> {
        let sent = self.send(|id| Message::TrainStep { id, batch });
        match sent {
            Ok(id) => {
                self.pending.push_back(id);
                Ok(())
            }
            // The worker may have ended because the step in flight failed (several ranks
            // exit on a failure): its answer, if it gave one, says why better than a
            // broken pipe does.
            Err(write) => match self.pending.pop_front() {
                Some(first) => match self.reply(&first) {
                    Err(why) => Err(why),
                    Ok(_) => Err(write),
                },
                None => Err(write),
            },
        }
    }

    fn take_step(&mut self) -> Result<StepStats, TrainError> {
        let Some(id) = self.pending.pop_front() else {
            return Err(TrainError::Worker("no step in flight to take".into()));
        };
        let reply = self.reply(&id)?;
        step_done(reply).map_err(|other| self.fail(format!("expected step_done, got {other:?}")))
    }

    fn eval(&mut self, batch: TrainBatch) -> Result<StepStats, TrainError> {
        let make = |id| Message::EvalLoss { id, batch };
        self.call(make, "step_done", step_done)
    }

    fn save(&mut self, save: SaveJob) -> Result<u64, TrainError> {
        let make = |id| Message::SaveCheckpoint { id, save };
        self.call(make, "checkpointed", |m| match m {
            Message::Checkpointed { step, .. } => Ok(step),
            other => Err(Box::new(other)),
        })
    }
}

impl Drop for WorkerPolicy {
    fn drop(&mut self) {
        let line = Message::Shutdown {}.to_line();
        let _ = writeln!(self.stdin, "{line}");
        let _ = self.stdin.flush();
        let wait = |child: &mut Child, tenths: u32| {
            for _ in 0..tenths {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            false
        };
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        if !wait(&mut self.child, 100) {
            // SIGTERM first: torchrun passes it on to its ranks.
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
            if !wait(&mut self.child, 50) {
                let _ = self.child.kill();
            }
        }
        // Whatever is left of the group (ranks whose launcher is gone).
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

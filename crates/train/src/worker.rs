//! The policy worker as a trainer: `python -m tritonforge_worker policy MODEL DEVICE
//! --train`, over the JSON-lines protocol. Requests are answered in order; training
//! steps may be sent ahead of their answers (see [`crate::Policy::send_step`]). Its stderr
//! goes to a log file, and its last lines into any error, so a crash explains itself.
//! Reinforcement learning's `score` and `rl_step` go the same way (`tritonforge-rl`'s
//! learner on several ranks).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use tritonforge_protocol::{
    DeviceKind, Message, RlBatch, RlStats, SaveJob, ScoreJob, Scores, StepStats, TrainBatch,
    TrainInfo, TrainSetup,
};
use tritonforge_pyenv::launch::{read_hello_blocking, HelloError, StderrTail, TAIL_SHOWN};
use tritonforge_pyenv::{WorkerCommand, WorkerMode};

use crate::{Policy, TrainError};

/// How to start the trainer (the policy worker with `--train`). Not to be confused with
/// the evaluator's executor processes (`tritonforge_eval::WorkerSpec`).
pub struct TrainerSpec {
    pub python: PathBuf,
    /// Directory holding `tritonforge_worker/`.
    pub worker_path: PathBuf,
    pub device: DeviceKind,
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
    tail: StderrTail,
    next: u64,
    /// Ids of steps sent and not yet answered, oldest first.
    pending: VecDeque<String>,
}

impl WorkerPolicy {
    pub fn start(spec: &TrainerSpec, model: &str) -> Result<WorkerPolicy, TrainError> {
        // Its own process group: under torchrun the ranks are grandchildren, and killing
        // the group is the one way to be sure none outlives us holding GPU memory. The
        // model may live in a package on the caller's PYTHONPATH: it is inherited.
        let launch = WorkerCommand::new(
            &spec.python,
            &spec.worker_path,
            WorkerMode::Policy { model: model.to_string(), device: spec.device, train: true },
        )
        .inherit_pythonpath()
        .torchrun(spec.procs, &spec.torchrun)
        .own_process_group();
        let mut child = launch
            .command()
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
            return Err(TrainError::Worker("the worker's pipes were not set up".into()));
        };
        let tail = StderrTail::new(TAIL_SHOWN);
        tail.drain_blocking(stderr, Some(spec.log.clone()));
        let mut w = WorkerPolicy {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            tail,
            next: 0,
            pending: VecDeque::new(),
        };
        match read_hello_blocking(&mut w.stdout) {
            Ok(_) => Ok(w),
            Err(HelloError::Exited) => Err(w.exited()),
            Err(HelloError::Io(e)) => Err(w.fail(format!("reading from the worker: {e}"))),
            Err(HelloError::Malformed { source, .. }) => {
                Err(w.fail(format!("bad reply: {source}")))
            }
            Err(e) => Err(w.fail(e.to_string())),
        }
    }

    fn fail(&self, reason: impl Into<String>) -> TrainError {
        TrainError::Worker(self.tail.explain(reason))
    }

    /// The worker's stdout closed: say so with its exit status and last words.
    fn exited(&mut self) -> TrainError {
        // Give the stderr thread a moment to collect the last words.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let status = self.child.try_wait().ok().flatten();
        self.fail(format!(
            "the worker exited{}",
            status.map(|s| format!(" ({s})")).unwrap_or_default()
        ))
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
                return Err(self.exited());
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
            | Message::Checkpointed { id, .. }
            | Message::Scored { id, .. }
            | Message::RlDone { id, .. } => Some(id.clone()),
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

impl WorkerPolicy {
    /// Log-probabilities of a batch's target tokens (reinforcement learning's `score`).
    pub fn score(&mut self, job: ScoreJob) -> Result<Scores, TrainError> {
        let make = |id| Message::Score { id, job };
        self.call(make, "scored", |m| match m {
            Message::Scored { scores, .. } => Ok(scores),
            other => Err(Box::new(other)),
        })
    }

    /// One PPO-clip optimizer step (reinforcement learning's `rl_step`).
    pub fn rl_step(&mut self, batch: RlBatch) -> Result<RlStats, TrainError> {
        let make = |id| Message::RlStep { id, batch };
        self.call(make, "rl_done", |m| match m {
            Message::RlDone { stats, .. } => Ok(stats),
            other => Err(Box::new(other)),
        })
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

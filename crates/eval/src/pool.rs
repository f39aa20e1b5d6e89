//! A pool of executor processes per device: each process runs exactly one
//! candidate, but is started ahead of need (torch and triton imported, device
//! initialised, sandbox applied) so its start-up cost is off the critical path.
//!
//! Several candidates share a GPU while they import, compile and check
//! correctness; one owns it while it is timed. The worker asks (`lease_request`),
//! the pool grants from a per-device reader-writer lock: `shared` is a read hold,
//! `exclusive` a write hold (see `device_lock` for why waiting writers batch). Time spent waiting for a grant does not count
//! against the candidate's budget. In exclusive mode a candidate holds its GPU
//! for its whole life (the comparison the fidelity figure needs).
//!
//! Before any of that, a job is admitted to its device's memory (`memory`): a slot
//! starts a candidate only while the needs of those running there, its own included, fit.

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tritonforge_protocol::{
    DeviceKind, DeviceRequest, EnvInfo, EvalJob, LeaseKind, MemoryJob, Message, Outcome,
    PreflightOutcome, ProblemCheckJob, Sandbox, StartupTimes,
};
use tritonforge_pyenv::launch::{self as worker_launch, read_hello, HelloError};
use tritonforge_pyenv::{WorkerCommand, WorkerMode};

use crate::device_lock::{DeviceLock, ExclusiveHold, SharedHold};
use crate::fork_server::ForkServer;
use crate::memory::{self, Admission, Charge, JobKind, MemoryBudget};
use crate::places::{Places, Priority};
use crate::EvalError;

/// The longest protocol line accepted from a worker; anything longer is hostile.
const MAX_LINE: u64 = 16 << 20;
/// How much of a dead worker's stderr is kept.
const STDERR_TAIL: usize = 4000;
/// Lease events kept for inspection (tests, `serve` metrics).
const LEASE_LOG: usize = 10_000;
/// How long the fork server may take to fork; a hung server is given up on and
/// processes are started instead.
const FORK_ANSWER: Duration = Duration::from_secs(10);
/// The most a job's budget is extended by waiting for leases.
const MAX_LEASE_WAIT: Duration = Duration::from_secs(900);
/// The most that compiling the reference for the `torch.compile` baseline (the
/// `baseline` hold) adds to a candidate's budget: it is the reference's cost, not the
/// candidate's (a level-3 sequential scan's compile alone outlasts a 120 s budget).
const BASELINE_ALLOWANCE: Duration = Duration::from_secs(300);
/// CUDA's own default number of hardware queues per context (see
/// [`PoolConfig::cuda_connections`] and [`Pool::run_alone_with_driver_queues`]).
pub const DEFAULT_CUDA_CONNECTIONS: u32 = 8;
/// Preflights at once per device: enough for a turn's burst of candidates to import in
/// parallel, few enough not to crowd out the processes being started beside them.
const PREFLIGHTS: usize = 8;
/// The longest a preflight may take, hello and import together; one that takes longer is
/// inconclusive and the candidate is evaluated as usual.
const PREFLIGHT_LIMIT: Duration = Duration::from_secs(30);

/// How to start one executor process.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub python: PathBuf,
    /// Directory put on `PYTHONPATH`; holds `tritonforge_worker/`.
    pub worker_path: PathBuf,
    /// Each worker gets a fresh directory under here (its cwd, tmp and Triton cache).
    pub scratch_root: PathBuf,
    pub device: DeviceRequest,
    /// Torch CPU threads per worker in CPU mode.
    pub threads: u32,
}

/// How candidates share a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShareMode {
    /// Overlap everything but timing (leases).
    #[default]
    Pool,
    /// One candidate per device at a time, all phases.
    Exclusive,
}

#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Candidates evaluated at once, per device.
    pub workers: usize,
    /// Processes kept started and waiting beyond those running, per device.
    pub spares: usize,
    /// Candidates per device that may wait for the timing lane after giving their place
    /// back, so that others import, compile and check correctness meanwhile (0: a
    /// candidate keeps its place while it waits). A waiting process keeps its memory
    /// and CUDA context, so this bounds the processes alive beyond `workers`.
    pub timing_queue: usize,
    /// How long a process may take to import torch and say hello.
    pub startup_timeout: Duration,
    pub mode: ShareMode,
    /// GPU indices to use; `None`: every GPU the first worker sees (or the CPU).
    pub gpus: Option<Vec<u32>>,
    /// False: the naive baseline; start each process only when its job arrives, no warm-up.
    pub prestart: bool,
    /// Cap on each process's share of GPU memory; `None`: each job's cap follows its
    /// memory grant (twice its problem's need, at least 0.25), and processes start under
    /// 0.9 / workers, at least 0.25.
    pub gpu_memory_fraction: Option<f64>,
    /// The memory of each device, for admission; `None`: `TRITONFORGE_DEVICE_MEMORY_BYTES`
    /// when set, else a GPU's total from the first worker's hello, else (CPU mode) none,
    /// and nothing is measured or admitted by memory. Set on the CPU, it makes admission
    /// run there as on a GPU (tests).
    pub device_memory_bytes: Option<u64>,
    /// Apply landlock rules in workers (where the kernel has landlock).
    pub landlock: bool,
    /// On a GPU, the most a candidate may hold its device shared (import, build,
    /// correctness; compiles excluded). Timing waits for every shared holder, so a
    /// candidate hung in a kernel would stall the whole device without this.
    pub gpu_hold_limit: Duration,
    /// Take the timing lease in CPU mode too, where nothing is timed (so that the lease
    /// logic can be exercised without a GPU).
    pub cpu_timing_lease: bool,
    /// A starting process makes its CUDA context under a shared hold (`START_LEASE`), so
    /// that no context is made beside a timing hold; pooled, pre-started processes only.
    /// Off by default (`TRITONFORGE_START_LEASE=1` turns it on): measured on the mixed
    /// 100, it neither steadied the long kernels' windows nor shortened the batch, since
    /// other work without a hold disturbs them too (docs/results/evaluator-load.md).
    pub start_lease: bool,
    /// In CPU mode, fork each process from one warmed-up server instead of starting
    /// it from scratch (see `fork_server`). Only with `prestart`.
    pub fork: bool,
    /// Whether a candidate's import is first tried in a process forked without a GPU
    /// context (see [`Preflight`]).
    pub preflight: Preflight,
    /// `CUDA_DEVICE_MAX_CONNECTIONS` for candidate processes; `None` leaves what they
    /// inherit. One hardware queue per context (the default) makes the driver create
    /// contexts about three times as fast, and the mixed 100 ran in half the time of 8
    /// queues on an H200. But with its streams on one queue a process cannot see work a
    /// candidate left running on another stream at return (the late-write check's copy
    /// waits behind it), so a candidate that launched on another stream there is
    /// evaluated again in a process with the driver's 8 ([`Pool::run_alone_with_driver_queues`]).
    pub cuda_connections: Option<u32>,
}

/// When a candidate's import is tried first in a process that never touched the GPU.
///
/// A GPU process costs a CUDA context, which the driver creates about three at a time
/// per second on one GPU, however many cores start them; a candidate that fails its
/// import needs none. Its verdict then comes from that process; every other candidate is
/// evaluated as before (its import runs twice, some tens of milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preflight {
    /// On a GPU with a fork server; off in CPU mode, where a forked process is already
    /// warm and a preflight would only add a fork.
    #[default]
    Auto,
    /// Wherever there is a fork server, CPU mode included (tests).
    Always,
    Off,
}

/// When a job's budget runs out: its deadline, moved on by lease waits and, while the
/// `torch.compile` baseline compiles, `BASELINE_ALLOWANCE` later; once the baseline
/// ends, what it used of that allowance stays added.
#[derive(Debug)]
struct Budget {
    deadline: tokio::time::Instant,
    baseline_since: Option<Instant>,
}

impl Budget {
    fn new(deadline: tokio::time::Instant) -> Budget {
        Budget { deadline, baseline_since: None }
    }

    fn end(&self) -> tokio::time::Instant {
        match self.baseline_since {
            Some(_) => self.deadline + BASELINE_ALLOWANCE,
            None => self.deadline,
        }
    }

    fn in_baseline(&self) -> bool {
        self.baseline_since.is_some()
    }

    fn begin_baseline(&mut self) {
        self.baseline_since = Some(Instant::now());
    }

    fn end_baseline(&mut self) {
        if let Some(since) = self.baseline_since.take() {
            self.deadline += since.elapsed().min(BASELINE_ALLOWANCE);
        }
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            workers: 2,
            spares: 2,
            timing_queue: 0,
            startup_timeout: Duration::from_secs(180),
            mode: ShareMode::Pool,
            gpus: None,
            prestart: true,
            gpu_memory_fraction: None,
            device_memory_bytes: None,
            landlock: true,
            gpu_hold_limit: Duration::from_secs(30),
            cpu_timing_lease: false,
            start_lease: std::env::var("TRITONFORGE_START_LEASE").is_ok_and(|v| v == "1"),
            fork: true,
            preflight: Preflight::Auto,
            cuda_connections: Some(1),
        }
    }
}

/// How a process ended its job, as far as the host is concerned.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per evaluation, moved once
pub enum Exit {
    /// The executor answered an evaluation.
    Answered { outcome: Outcome, executor_ms: f64 },
    /// The process answered with this message (before it is interpreted).
    Reply { message: Message },
    /// The budget ran out; the process group was killed. `gpu_hold` is set when what
    /// ran out was the limit on holding the GPU shared (GPU pools only).
    TimedOut {
        stderr_tail: String,
        gpu_hold: Option<Duration>,
        /// It ran out while compiling the reference for the `torch.compile` baseline.
        in_baseline: bool,
    },
    /// The process died without answering.
    Crashed { exit: String, stderr_tail: String },
}

/// A preflight's answer, and what it cost.
#[derive(Debug)]
pub struct PreflightRun {
    pub outcome: PreflightOutcome,
    /// Host-side wall time: fork, hello, import, answer.
    pub wall_ms: f64,
    /// The process's own time on the import, when it answered.
    pub executor_ms: Option<f64>,
    /// Time it waited for a place among the preflights run at once, before `wall_ms`.
    pub queue_wait_ms: f64,
}

/// One job's run: how it ended plus what the host measured around it.
#[derive(Debug)]
pub struct Execution {
    pub exit: Exit,
    /// Host wall time from sending the job to the end, lease waits included.
    pub wall_ms: f64,
    /// Time the job spent waiting for GPU leases (not charged to its budget).
    pub lease_wait_ms: f64,
    /// Time the job held its device exclusively (timing; the whole job in exclusive mode).
    pub exclusive_ms: f64,
    /// Time the job waited for a started process.
    pub start_wait_ms: f64,
    /// Time the job waited for a place among those the pool runs at once, before `wall_ms`.
    pub queue_wait_ms: f64,
    /// How long its process took to start, and how long it had been ready when taken
    /// (zero when the job waited for it).
    pub process_start_ms: f64,
    pub process_banked_ms: f64,
    /// The process's own account of its start (context, warm-up, total).
    pub process_startup: Option<StartupTimes>,
    /// Time the job waited to be admitted to its device's memory (not charged to its budget).
    pub admission_wait_ms: f64,
    /// Which device slot ran it.
    pub slot: usize,
    /// The environment the process that ran it reported.
    pub env: EnvInfo,
}

impl Execution {
    /// This run, evaluated again after `first` (out of memory while sharing, or too few
    /// hardware queues): the waits and wall of both, this one's verdict and process.
    pub fn after(mut self, first: &Execution) -> Execution {
        self.wall_ms += first.wall_ms;
        self.lease_wait_ms += first.lease_wait_ms;
        self.admission_wait_ms += first.admission_wait_ms;
        self.queue_wait_ms += first.queue_wait_ms;
        self
    }
}

/// How a job is run: its memory charge, its kind (for the admission log), its place in
/// the queue and its process.
#[derive(Debug, Clone, Copy)]
struct How {
    charge: Charge,
    kind: JobKind,
    priority: Priority,
    process: Process,
}

impl How {
    /// A problem's own job (its check, its memory measurement): ahead of the queue, in a
    /// pooled process, an even share of the device or (`alone`) all of it.
    fn problem(kind: JobKind, alone: bool) -> How {
        let charge = if alone { Charge::Whole } else { Charge::Share };
        How { charge, kind, priority: Priority::FIRST, process: Process::Pooled }
    }
}

/// Which process a job runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Process {
    /// A started (or forked) process of the slot, as every job.
    Pooled,
    /// One started for this job, with `DEFAULT_CUDA_CONNECTIONS` hardware queues.
    DriverQueues,
}

/// One hold on a device, as it happened.
#[derive(Debug, Clone)]
pub struct LeaseEvent {
    pub job: String,
    pub slot: usize,
    pub kind: LeaseKind,
    /// When it was asked for (the wait until `acquired` is the lease wait).
    pub asked: Instant,
    pub acquired: Instant,
    pub released: Instant,
}

/// One job's admission to its device's memory, as it happened.
#[derive(Debug, Clone)]
pub struct AdmissionEvent {
    pub job: String,
    pub slot: usize,
    pub kind: JobKind,
    /// The bytes it was charged.
    pub bytes: u64,
    pub admitted: Instant,
    pub released: Instant,
}

/// The most recent events of one kind, bounded, and how many older ones were let go (so
/// that what is read from it can say it is not the whole story).
#[derive(Debug, Clone)]
struct EventLog<T> {
    events: Arc<Mutex<VecDeque<T>>>,
    lost: Arc<AtomicUsize>,
}

impl<T> Default for EventLog<T> {
    fn default() -> Self {
        EventLog { events: Arc::default(), lost: Arc::default() }
    }
}

impl<T: Clone> EventLog<T> {
    fn push(&self, e: T) {
        if let Ok(mut log) = self.events.lock() {
            if log.len() == LEASE_LOG {
                log.pop_front();
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
            log.push_back(e);
        }
    }

    fn all(&self) -> Vec<T> {
        self.events.lock().map(|l| l.iter().cloned().collect()).unwrap_or_default()
    }

    fn lost(&self) -> usize {
        self.lost.load(Ordering::Relaxed)
    }
}

type LeaseLog = EventLog<LeaseEvent>;

/// A job's hold on its device's memory; logged and given back when dropped.
struct Room {
    _admitted: memory::Admitted,
    event: AdmissionEvent,
    log: EventLog<AdmissionEvent>,
}

impl Drop for Room {
    fn drop(&mut self) {
        self.event.released = Instant::now();
        self.log.push(self.event.clone());
    }
}

enum Guard {
    Shared(#[allow(dead_code)] SharedHold),
    Exclusive(#[allow(dead_code)] ExclusiveHold),
}

/// A granted hold; logged when dropped.
struct Held {
    _guard: Guard,
    kind: LeaseKind,
    job: String,
    slot: usize,
    asked: Instant,
    acquired: Instant,
    log: LeaseLog,
    /// The job's running total of exclusive hold time, in nanoseconds.
    exclusive_ns: Arc<AtomicU64>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.kind == LeaseKind::Exclusive {
            let ns = u64::try_from(self.acquired.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.exclusive_ns.fetch_add(ns, Ordering::Relaxed);
        }
        self.log.push(LeaseEvent {
            job: self.job.clone(),
            slot: self.slot,
            kind: self.kind,
            asked: self.asked,
            acquired: self.acquired,
            released: Instant::now(),
        });
    }
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

type Input = Box<dyn AsyncWrite + Send + Unpin>;
type Output = BufReader<Box<dyn AsyncRead + Send + Unpin>>;

/// How a worker process came to be, which decides who reaps it.
enum Proc {
    Spawned(Child),
    /// Forked by the fork server, which reaps it and reports its status.
    Forked {
        pid: i32,
        fork_server: Arc<ForkServer>,
        reaped: bool,
    },
}

/// One started process. Dropping it kills its whole process group and removes its scratch.
struct Worker {
    proc: Proc,
    pgid: i32,
    stdin: Option<Input>,
    stdout: Output,
    scratch: PathBuf,
    live: Live,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        if let Proc::Forked { pid, fork_server, reaped } = &self.proc {
            // A forked child makes its own group first thing; until then only its pid names it.
            let _ = nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGKILL);
            if !reaped {
                fork_server.forget(*pid);
            }
        }
        self.live.remove(self.pgid);
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

impl Worker {
    /// Wait for the process to end; `None` when its status cannot be known.
    async fn wait(&mut self) -> Option<std::process::ExitStatus> {
        match &mut self.proc {
            Proc::Spawned(child) => child.wait().await.ok(),
            Proc::Forked { pid, fork_server, reaped } => {
                let status = fork_server.wait(*pid).await;
                *reaped = true;
                status
            }
        }
    }

    fn stderr_tail(&self) -> String {
        worker_launch::file_tail(&self.scratch.join("stderr.log"), STDERR_TAIL)
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
    sandbox: Sandbox,
    /// How long the process took to start (fork or spawn to hello), and since when it
    /// has been ready: whether the bank of spares keeps up shows in these.
    start_ms: f64,
    ready_at: Instant,
    /// The process's own account of its start.
    startup: Option<StartupTimes>,
}

enum Warm {
    Starting(JoinHandle<Result<Ready, EvalError>>),
    Ready(Box<Ready>),
}

impl Warm {
    /// Whether taking it waits for nothing.
    fn started(&self) -> bool {
        match self {
            Warm::Ready(_) => true,
            Warm::Starting(h) => h.is_finished(),
        }
    }
}

/// The first process of `warm` already started, else the oldest. Processes finish
/// starting out of order (a GPU creates their contexts one at a time, in no fixed
/// order), so the oldest may still be starting while a younger one waits, ready.
fn take_started(warm: &mut VecDeque<Warm>) -> Option<Warm> {
    let at = warm.iter().position(Warm::started).unwrap_or(0);
    warm.remove(at)
}

/// Everything a process needs to be started for one device.
#[derive(Debug)]
struct Launch {
    spec: Arc<WorkerSpec>,
    /// `CUDA_VISIBLE_DEVICES` for this device's processes.
    gpu: Option<u32>,
    gpu_memory_fraction: Option<f64>,
    landlock: bool,
    warm_up: bool,
    startup_timeout: Duration,
    live: Live,
    counter: Arc<AtomicU64>,
    /// CPU cores kept free of everything but timing, and this device's timing core.
    reserved_cpus: Vec<usize>,
    timing_cpu: Option<usize>,
    cpu_timing_lease: bool,
    cuda_connections: Option<u32>,
    /// A Triton cache holding only what the warm-up compiled (kernel and launcher),
    /// copied into each new process's own cache: its warm-up then compiles nothing.
    cache_template: Option<PathBuf>,
    /// CPU mode: the warmed-up server this device's processes are forked from; a dead
    /// one is replaced (`live_fork_server`). `None`: this device does not fork.
    fork_server: Mutex<Option<Arc<ForkServer>>>,
    /// Replacements of a dead fork server so far; held while one is made.
    restarts: tokio::sync::Mutex<u32>,
    /// This device's lease lock and the pool's lease log: a starting process makes its
    /// CUDA context under a shared hold (`START_LEASE`).
    lock: Arc<DeviceLock>,
    slot: usize,
    leases: LeaseLog,
    /// Whether its processes ask for that hold (`PoolConfig::start_lease`). Never in
    /// exclusive or naive modes, where a process may be started for a job that already
    /// holds its device alone.
    start_lease: bool,
}

/// Replacements of a dead fork server per device over a pool's life: enough for a long
/// `serve` to survive the odd loss, few enough that a candidate able to kill or stop
/// its parent (where signals are not scoped) cannot make the pool do nothing else.
const FORK_SERVER_RESTARTS: u32 = 3;

impl Launch {
    fn fork_server_now(&self) -> Option<Arc<ForkServer>> {
        self.fork_server.lock().ok().and_then(|z| z.clone())
    }
}

/// One device: its processes, its candidate slots and its lease lock.
struct Slot {
    index: usize,
    launch: Arc<Launch>,
    warm: Mutex<VecDeque<Warm>>,
    /// Places for running jobs, granted costliest first.
    running: Places,
    /// Places for candidates waiting for the timing lane without a running place.
    timing_queue: Semaphore,
    /// Preflights at once on this device (forks and imports: CPU work).
    preflights: Semaphore,
    lock: Arc<DeviceLock>,
    in_flight: AtomicUsize,
    /// Memory admission; `None` where no capacity is known, or in exclusive mode (each
    /// job holds its device alone anyway).
    admission: Option<Admission>,
}

impl Slot {
    fn spawn_warm(&self) -> Warm {
        Warm::Starting(tokio::spawn(start_worker(self.launch.clone())))
    }

    /// Keep `spares` processes started and waiting (none in the naive mode).
    fn top_up(&self, spares: usize) {
        if let Ok(mut warm) = self.warm.lock() {
            while warm.len() < spares {
                warm.push_back(self.spawn_warm());
            }
        }
    }

    async fn take_ready(&self, spares: usize) -> Result<Ready, EvalError> {
        let slot = self.warm.lock().ok().and_then(|mut w| take_started(&mut w));
        let slot = match slot {
            Some(s) => s,
            None => self.spawn_warm(),
        };
        self.top_up(spares);
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
}

/// How long a pool took to start, in its parts (the first process's hello gates every
/// other start: it says what the machine has and leaves the cache template).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolStart {
    /// Until the fork server was ready (its imports done); `None` without one.
    pub fork_server_ms: Option<f64>,
    /// Until the first process said hello, the fork server's start included.
    pub first_process_ms: f64,
}

pub struct Pool {
    cfg: PoolConfig,
    start: PoolStart,
    slots: Vec<Slot>,
    live: Live,
    env: EnvInfo,
    worker_version: String,
    sandbox: Sandbox,
    counter: Arc<AtomicU64>,
    leases: LeaseLog,
    admissions: EventLog<AdmissionEvent>,
    cache_template: Option<PathBuf>,
    /// Each device's memory as the pool gives it out; `None`: no capacity known.
    budget: Option<MemoryBudget>,
}

impl Pool {
    /// Start the pool and wait for its first process, whose hello fingerprints the environment.
    pub async fn start(spec: WorkerSpec, cfg: PoolConfig) -> Result<Pool, EvalError> {
        std::fs::create_dir_all(&spec.scratch_root)
            .map_err(|source| EvalError::Io { path: spec.scratch_root.clone(), source })?;
        let spec = Arc::new(spec);
        let live = Live::default();
        let counter = Arc::new(AtomicU64::new(0));
        let workers = cfg.workers.max(1);
        // One core per device is kept for the process being timed (its launch path is on
        // the CPU, and other candidates' compilers must not slow it down).
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let devices_hint = cfg.gpus.as_ref().map(|g| g.len()).unwrap_or(1).max(1);
        let reserved_cpus: Vec<usize> = if cpus >= 8 && devices_hint * 4 <= cpus {
            (0..devices_hint).map(|i| cpus - 1 - i).collect()
        } else {
            Vec::new()
        };
        // Slot 0's lock exists before the first process: that process serves slot 0.
        let lock0 = Arc::new(DeviceLock::default());
        let leases = LeaseLog::default();
        let launch = |gpu: Option<u32>,
                      index: usize,
                      cache_template: Option<PathBuf>,
                      fork_server: Option<Arc<ForkServer>>,
                      lock: Arc<DeviceLock>| {
            Arc::new(Launch {
                lock,
                slot: index,
                leases: leases.clone(),
                start_lease: cfg.start_lease && cfg.mode == ShareMode::Pool && cfg.prestart,
                fork_server: Mutex::new(fork_server),
                restarts: tokio::sync::Mutex::new(0),
                cache_template,
                cpu_timing_lease: cfg.cpu_timing_lease,
                cuda_connections: cfg.cuda_connections,
                reserved_cpus: reserved_cpus.clone(),
                timing_cpu: reserved_cpus.get(index).copied(),
                spec: spec.clone(),
                gpu,
                // A cap per process, not a partition: the suite's honest candidates
                // must fit, a runaway one must not take the whole device.
                gpu_memory_fraction: Some(
                    cfg.gpu_memory_fraction
                        .unwrap_or((0.9 / workers as f64).max(0.25))
                        .clamp(0.01, 1.0),
                ),
                landlock: cfg.landlock,
                warm_up: cfg.prestart,
                startup_timeout: cfg.startup_timeout,
                live: live.clone(),
                counter: counter.clone(),
            })
        };
        // The first process tells what the machine has; with several GPUs each gets its own slot.
        let first_gpu = cfg.gpus.as_ref().and_then(|g| g.first().copied());
        let first_launch = launch(first_gpu, 0, None, None, lock0.clone());
        // The first process is asked to become a fork server: in CPU mode warmed up, on a
        // GPU with its imports done and CUDA untouched (each child initialises its own).
        // Where it cannot be one (other threads), it serves a candidate as usual.
        let want_fork_server = cfg.prestart && cfg.fork;
        // Without a fork server, on a GPU the spares start together with the first process
        // rather than after its hello (seconds of Python, CUDA and warm-up each, in
        // parallel); they compile their own warm-up, since the cache template does not
        // exist yet.
        let early: Vec<JoinHandle<Result<Ready, EvalError>>> =
            if cfg.prestart && !want_fork_server && likely_gpu(spec.device) {
                (1..cfg.spares.max(1))
                    .map(|_| {
                        tokio::spawn(start_worker(launch(first_gpu, 0, None, None, lock0.clone())))
                    })
                    .collect()
            } else {
                Vec::new()
            };
        let asked = Instant::now();
        let mut fork_server_ms = None;
        let (mut first, fork_server) = match spawn(&first_launch, want_fork_server, &[]).await? {
            First::Worker(ready) => (*ready, None),
            // A server that cannot fork is dropped (killed); processes are started.
            First::ForkServer(z) => {
                fork_server_ms = Some(asked.elapsed().as_secs_f64() * 1000.0);
                match fork_worker(&first_launch, &z).await {
                    Ok(ready) => (ready, Some(z)),
                    Err(_) => {
                        z.kill();
                        (spawn_worker(&first_launch, &[]).await?, None)
                    }
                }
            }
        };
        // Its start includes the fork server's, where there is one.
        first.start_ms = asked.elapsed().as_secs_f64() * 1000.0;
        let start = PoolStart { fork_server_ms, first_process_ms: first.start_ms };
        // The first process has run nothing but the warm-up: its cache is a clean template.
        let template = spec.scratch_root.join(format!("cache-template-{}", std::process::id()));
        let cache_template = (cfg.prestart
            && copy_dir(&first.worker.scratch.join("triton-cache"), &template).is_ok())
        .then_some(template);
        let gpus: Vec<Option<u32>> = match (&cfg.gpus, first.env.gpus.len()) {
            (Some(list), _) if !list.is_empty() => list.iter().map(|g| Some(*g)).collect(),
            (_, n) if n > 1 && first.env.device == tritonforge_protocol::DeviceKind::Cuda => {
                (0..n as u32).map(Some).collect()
            }
            _ => vec![first_gpu],
        };
        let env = first.env.clone();
        let worker_version = first.worker_version.clone();
        let sandbox = first.sandbox.clone();
        let spares = if cfg.prestart { cfg.spares.max(1) } else { 0 };
        let budget = memory_budget(&cfg, &env, spares)?;
        let mut slots = Vec::new();
        for (index, gpu) in gpus.iter().copied().enumerate() {
            let lock = if index == 0 { lock0.clone() } else { Arc::new(DeviceLock::default()) };
            slots.push(Slot {
                index,
                launch: launch(
                    gpu,
                    index,
                    cache_template.clone(),
                    fork_server.clone(),
                    lock.clone(),
                ),
                warm: Mutex::new(VecDeque::new()),
                running: Places::new(workers),
                timing_queue: Semaphore::new(cfg.timing_queue),
                preflights: Semaphore::new(PREFLIGHTS),
                lock,
                in_flight: AtomicUsize::new(0),
                admission: budget.filter(|_| cfg.mode == ShareMode::Pool).map(Admission::new),
            });
        }
        // The first process serves slot 0 when it was started for it (always, unless
        // it saw several GPUs unrestricted), and only when processes are pre-started; so
        // do the spares started with it, unless it turned out to be a CPU fork server.
        let serves_slot0 = cfg.prestart && (slots.len() == 1 || first_gpu.is_some());
        if serves_slot0 {
            if let Some(s) = slots.first() {
                if let Ok(mut w) = s.warm.lock() {
                    w.push_back(Warm::Ready(Box::new(first)));
                    if fork_server.is_none() {
                        w.extend(early.into_iter().map(Warm::Starting));
                    } else {
                        discard(early);
                    }
                }
            }
        } else {
            discard(early);
        }
        let pool = Pool {
            cfg,
            start,
            slots,
            live,
            env,
            worker_version,
            sandbox,
            counter,
            leases,
            admissions: EventLog::default(),
            cache_template,
            budget,
        };
        for s in &pool.slots {
            s.top_up(pool.spares());
        }
        Ok(pool)
    }

    /// How long this pool took to start.
    pub fn start_times(&self) -> PoolStart {
        self.start
    }

    /// Processes forked from a fork server so far (CPU mode), for tests and reports.
    pub fn forked(&self) -> u64 {
        self.slots
            .iter()
            .filter_map(|s| s.launch.fork_server_now())
            .map(|z| z.forked())
            .sum::<u64>()
    }

    /// The fork server's process id, when this pool forks its processes.
    pub fn fork_server(&self) -> Option<i32> {
        self.slots
            .iter()
            .find_map(|s| s.launch.fork_server_now())
            .filter(|z| z.alive())
            .map(|z| z.pid())
    }

    fn spares(&self) -> usize {
        if self.cfg.prestart {
            self.cfg.spares.max(1)
        } else {
            0
        }
    }

    /// The environment every worker of this pool reported.
    pub fn environment(&self) -> &EnvInfo {
        &self.env
    }

    pub fn worker_version(&self) -> &str {
        &self.worker_version
    }

    /// The sandbox the first worker applied (every worker applies the same).
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// How many devices (GPUs, or the one CPU) the pool schedules over.
    pub fn devices(&self) -> usize {
        self.slots.len()
    }

    /// Jobs running now on each device (an evaluation server's `/metrics`, `/health`).
    pub fn in_flight(&self) -> Vec<usize> {
        self.slots.iter().map(|s| s.in_flight.load(Ordering::Relaxed)).collect()
    }

    /// Device memory admitted to running jobs on each device; `None` per device where
    /// memory is not admitted (CPU mode without a capacity, exclusive mode).
    pub fn admitted_bytes(&self) -> Vec<Option<u64>> {
        self.slots.iter().map(|s| s.admission.as_ref().map(Admission::admitted_bytes)).collect()
    }

    /// Candidates that can run at once on one device.
    pub fn per_device(&self) -> usize {
        self.cfg.workers.max(1)
    }

    /// Candidates that can run at once over all devices.
    pub fn capacity(&self) -> usize {
        self.slots.len() * self.cfg.workers.max(1)
    }

    /// Every lease granted so far (the most recent ones), in release order.
    pub fn lease_events(&self) -> Vec<LeaseEvent> {
        self.leases.all()
    }

    /// Lease events let go since the pool started, the oldest first, to keep the log bounded.
    pub fn lease_events_lost(&self) -> usize {
        self.leases.lost()
    }

    /// Every admission to a device's memory so far (the most recent ones), in release order.
    pub fn admission_events(&self) -> Vec<AdmissionEvent> {
        self.admissions.all()
    }

    /// Each device's memory as the pool gives it out; `None` where no capacity is known
    /// (CPU mode without a configured one): nothing is then measured or admitted by memory.
    pub fn memory_budget(&self) -> Option<MemoryBudget> {
        self.budget
    }

    /// Whether candidates share a device while they run (`ShareMode::Pool`), so that one
    /// may run out of memory because of the others.
    pub fn shares_devices(&self) -> bool {
        self.cfg.mode == ShareMode::Pool
    }

    /// Run one evaluation in a fresh process, within `budget` of its own running time,
    /// once `charge` fits its device's memory.
    /// Places go costliest first: `priority` is the job's estimated cost.
    pub async fn run(
        &self,
        job: &EvalJob,
        budget: Duration,
        charge: Charge,
        priority: Priority,
    ) -> Result<Execution, EvalError> {
        self.run_evaluation(job, budget, charge, priority, Process::Pooled).await
    }

    /// Run one evaluation holding its device alone from start to end, as exclusive mode
    /// does, its memory included: for a candidate that ran out of memory while sharing it.
    pub async fn run_alone(&self, job: &EvalJob, budget: Duration) -> Result<Execution, EvalError> {
        // Ahead of the queue: it already waited its turn once.
        self.run_evaluation(job, budget, Charge::Whole, Priority::FIRST, Process::Pooled).await
    }

    /// As [`Pool::run_alone`], in a process started for it with the driver's default
    /// hardware queues (`DEFAULT_CUDA_CONNECTIONS`), whatever the pool's processes have:
    /// for a candidate whose process had fewer, where its work on another stream could not
    /// be checked (`Verdict::needs_hardware_queues`).
    pub async fn run_alone_with_driver_queues(
        &self,
        job: &EvalJob,
        budget: Duration,
    ) -> Result<Execution, EvalError> {
        self.run_evaluation(job, budget, Charge::Whole, Priority::FIRST, Process::DriverQueues)
            .await
    }

    async fn run_evaluation(
        &self,
        job: &EvalJob,
        budget: Duration,
        charge: Charge,
        priority: Priority,
        process: Process,
    ) -> Result<Execution, EvalError> {
        let job = job.clone();
        let build = move |id| Message::Evaluate { id, job };
        let mut exec = self
            .run_message(build, budget, How { charge, kind: JobKind::Evaluate, priority, process })
            .await?;
        if let Exit::Reply { message } = exec.exit {
            exec.exit = match message {
                Message::Result { outcome, elapsed_ms, .. } => {
                    Exit::Answered { outcome, executor_ms: elapsed_ms }
                }
                other => {
                    return Err(EvalError::WorkerRefused(format!(
                        "expected a result, got {}",
                        truncate(&other.to_line(), 200)
                    )))
                }
            };
        }
        Ok(exec)
    }

    /// Run one problem check in a fresh process (`alone`: holding the device and its
    /// memory alone, after it ran out of memory sharing them).
    pub async fn check_problem(
        &self,
        job: &ProblemCheckJob,
        budget: Duration,
        alone: bool,
    ) -> Result<Execution, EvalError> {
        let job = job.clone();
        let build = move |id| Message::CheckProblem { id, job };
        // Candidates of the problem wait on it.
        self.run_message(build, budget, How::problem(JobKind::CheckProblem, alone)).await
    }

    /// Measure a problem's memory need in a fresh process (`alone` as for a check).
    pub async fn measure_memory(
        &self,
        job: &MemoryJob,
        budget: Duration,
        alone: bool,
    ) -> Result<Execution, EvalError> {
        let job = job.clone();
        let build = move |id| Message::MeasureMemory { id, job };
        self.run_message(build, budget, How::problem(JobKind::MeasureMemory, alone)).await
    }

    /// Whether evaluations on this pool are preflighted (see [`Preflight`]).
    pub fn preflights(&self) -> bool {
        let wanted = match self.cfg.preflight {
            Preflight::Off => false,
            Preflight::Always => true,
            Preflight::Auto => self.env.device == tritonforge_protocol::DeviceKind::Cuda,
        };
        wanted && self.slots.iter().any(|s| s.launch.fork_server_now().is_some())
    }

    /// Try the candidate's import in a process forked without touching the GPU. `None`
    /// where this pool does not preflight. Whatever goes wrong with that process (no fork
    /// server, a crash, a hang, a garbled line) makes the answer inconclusive, never a
    /// verdict: only the executor's own `failed` is one.
    pub async fn preflight(&self, job: &EvalJob, budget: Duration) -> Option<PreflightRun> {
        if !self.preflights() {
            return None;
        }
        let slot = self.pick_slot().ok()?;
        let queued = Instant::now();
        let _permit = slot.preflights.acquire().await.ok()?;
        let queue_wait_ms = queued.elapsed().as_secs_f64() * 1000.0;
        let started = Instant::now();
        let limit = budget.min(PREFLIGHT_LIMIT);
        let answer = tokio::time::timeout(limit, preflight_on(&slot.launch, job)).await;
        let (outcome, executor_ms) = match answer {
            Ok(Ok((outcome, ms))) => (outcome, Some(ms)),
            Ok(Err(e)) => (
                PreflightOutcome::Inconclusive { reason: format!("the preflight failed: {e}") },
                None,
            ),
            Err(_) => (
                PreflightOutcome::Inconclusive {
                    reason: format!("no answer within {:.0}s", limit.as_secs_f64()),
                },
                None,
            ),
        };
        Some(PreflightRun {
            outcome,
            wall_ms: started.elapsed().as_secs_f64() * 1000.0,
            executor_ms,
            queue_wait_ms,
        })
    }

    /// The device with the fewest jobs in flight.
    fn pick_slot(&self) -> Result<&Slot, EvalError> {
        self.slots
            .iter()
            .min_by_key(|s| s.in_flight.load(Ordering::Relaxed))
            .ok_or(EvalError::PoolClosed)
    }

    async fn acquire(
        &self,
        slot: &Slot,
        kind: LeaseKind,
        job: &str,
        exclusive_ns: &Arc<AtomicU64>,
    ) -> Held {
        let asked = Instant::now();
        let guard = match kind {
            LeaseKind::Shared | LeaseKind::Baseline => Guard::Shared(slot.lock.shared().await),
            LeaseKind::Exclusive => Guard::Exclusive(slot.lock.exclusive().await),
        };
        Held {
            _guard: guard,
            kind,
            job: job.to_string(),
            slot: slot.index,
            asked,
            acquired: Instant::now(),
            log: self.leases.clone(),
            exclusive_ns: exclusive_ns.clone(),
        }
    }

    /// Send the message `build(id)` to a fresh process; grant its lease requests; wait for
    /// its reply. `Charge::Whole` runs it alone: its device's memory, then the device.
    async fn run_message(
        &self,
        build: impl FnOnce(String) -> Message,
        budget: Duration,
        how: How,
    ) -> Result<Execution, EvalError> {
        let slot = self.pick_slot()?;
        slot.in_flight.fetch_add(1, Ordering::Relaxed);
        let result = self.run_on(slot, build, budget, how).await;
        slot.in_flight.fetch_sub(1, Ordering::Relaxed);
        result
    }

    /// Admit a job to `slot`'s memory (at once where the slot has no admission). Always
    /// before any lease is taken: a job waiting for memory must hold nothing that those
    /// it waits for need in order to finish.
    async fn admit(
        &self,
        slot: &Slot,
        charge: Charge,
        kind: JobKind,
        id: &str,
    ) -> Result<(Option<Room>, Duration), EvalError> {
        let Some(admission) = &slot.admission else {
            return Ok((None, Duration::ZERO));
        };
        let admitted = admission.admit(charge).await?;
        let waited = admitted.waited;
        let event = AdmissionEvent {
            job: id.to_string(),
            slot: slot.index,
            kind,
            bytes: admitted.bytes,
            admitted: admitted.at,
            released: admitted.at,
        };
        Ok((Some(Room { _admitted: admitted, event, log: self.admissions.clone() }), waited))
    }

    async fn run_on(
        &self,
        slot: &Slot,
        build: impl FnOnce(String) -> Message,
        budget: Duration,
        how: How,
    ) -> Result<Execution, EvalError> {
        let How { charge, kind, priority, process } = how;
        let queued = Instant::now();
        let mut place = Some(slot.running.acquire(priority).await);
        // Taken in exchange for `place` while this job waits for (and holds) the timing lane.
        let mut _timing_place = None;
        let queue_wait_ms = queued.elapsed().as_secs_f64() * 1000.0;
        let id = format!("job-{}", self.counter.fetch_add(1, Ordering::Relaxed));
        let started = Instant::now();
        let (mut room, admission_wait) = self.admit(slot, charge, kind, &id).await?;
        let alone = charge == Charge::Whole;
        let exclusive = alone || self.cfg.mode == ShareMode::Exclusive;
        let mut waited = Duration::ZERO;
        let exclusive_ns = Arc::new(AtomicU64::new(0));
        // Exclusive mode (or a job run alone): the device is the job's from before its
        // process is taken until its answer; naive start-up happens inside that hold, as
        // it would there.
        let mut held = if exclusive {
            let asked = Instant::now();
            let h = self.acquire(slot, LeaseKind::Exclusive, &id, &exclusive_ns).await;
            waited += asked.elapsed();
            Some(h)
        } else {
            None
        };
        let asked = Instant::now();
        let ready = match process {
            Process::Pooled => slot.take_ready(self.spares()).await?,
            Process::DriverQueues => {
                let queues = DEFAULT_CUDA_CONNECTIONS.to_string();
                start_worker_with(slot.launch.clone(), &[("CUDA_DEVICE_MAX_CONNECTIONS", queues)])
                    .await?
            }
        };
        let start_wait_ms = asked.elapsed().as_secs_f64() * 1000.0;
        let (process_start_ms, process_banked_ms) = (
            ready.start_ms,
            // Ready before it was asked for: banked that long; else the job waited for it.
            asked.saturating_duration_since(ready.ready_at).as_secs_f64() * 1000.0,
        );
        let env = ready.env.clone();
        let mut worker = ready.worker;
        let sent = Instant::now();
        let line = build(id.clone()).to_line();
        if let Some(stdin) = worker.stdin.as_mut() {
            // A write failure means the process already died; reading below reports how.
            let _ = write_line(stdin, &line).await;
        }
        let mut clock = Budget::new(tokio::time::Instant::from_std(sent + budget));
        let hold_limit = (env.device == tritonforge_protocol::DeviceKind::Cuda && !exclusive)
            .then_some(self.cfg.gpu_hold_limit);
        // Time spent holding the device shared, and since when the current hold runs.
        let mut shared_used = Duration::ZERO;
        let mut shared_since: Option<Instant> = None;
        let done = |exit: Exit, waited: Duration| Execution {
            exit,
            wall_ms: started.elapsed().as_secs_f64() * 1000.0,
            lease_wait_ms: waited.as_secs_f64() * 1000.0,
            exclusive_ms: exclusive_ns.load(Ordering::Relaxed) as f64 / 1e6,
            start_wait_ms,
            queue_wait_ms,
            process_start_ms,
            process_banked_ms,
            process_startup: ready.startup,
            admission_wait_ms: admission_wait.as_secs_f64() * 1000.0,
            slot: slot.index,
            env: env.clone(),
        };
        loop {
            let hold_deadline = match (hold_limit, shared_since) {
                (Some(limit), Some(since)) => {
                    Some(tokio::time::Instant::from_std(since + limit.saturating_sub(shared_used)))
                }
                _ => None,
            };
            let budget_end = clock.end();
            let until = hold_deadline.map_or(budget_end, |h| h.min(budget_end));
            let answer = tokio::time::timeout_at(until, worker.read_message()).await;
            match answer {
                Err(_) => {
                    let _ = killpg(Pid::from_raw(worker.pgid), Signal::SIGKILL);
                    let _ = worker.wait().await;
                    drop(held);
                    let gpu_hold = hold_deadline.filter(|h| *h < budget_end).and(hold_limit);
                    return Ok(done(
                        Exit::TimedOut {
                            stderr_tail: worker.stderr_tail(),
                            gpu_hold,
                            in_baseline: clock.in_baseline(),
                        },
                        waited,
                    ));
                }
                Ok(Ok(Some(Message::LeaseRequest { id: rid, kind, .. }))) if rid == id => {
                    if let Some(since) = shared_since.take() {
                        shared_used += since.elapsed();
                    }
                    clock.end_baseline();
                    if !exclusive {
                        drop(held.take());
                        // What is left of a job from its timing lease on is the timed run
                        // (on the core kept for it) and its statistics: its place goes to
                        // the next candidate, which compiles and checks meanwhile instead
                        // of queueing behind this one's wait for the lane.
                        if kind == LeaseKind::Exclusive && place.is_some() {
                            if let Ok(p) = slot.timing_queue.try_acquire() {
                                _timing_place = Some(p);
                                place = None;
                            }
                        }
                        let t = Instant::now();
                        let h = self.acquire(slot, kind, &id, &exclusive_ns).await;
                        let w = t.elapsed();
                        waited += w;
                        if waited > MAX_LEASE_WAIT {
                            let _ = killpg(Pid::from_raw(worker.pgid), Signal::SIGKILL);
                            let _ = worker.wait().await;
                            return Ok(done(
                                Exit::Crashed {
                                    exit: format!(
                                        "waited over {}s in total for its GPU",
                                        MAX_LEASE_WAIT.as_secs()
                                    ),
                                    stderr_tail: String::new(),
                                },
                                waited,
                            ));
                        }
                        clock.deadline += w;
                        held = Some(h);
                    }
                    if kind == LeaseKind::Shared {
                        shared_since = Some(Instant::now());
                    }
                    if kind == LeaseKind::Baseline {
                        clock.begin_baseline();
                    }
                    let grant = Message::LeaseGrant { id: id.clone(), kind };
                    if let Some(stdin) = worker.stdin.as_mut() {
                        let _ = write_line(stdin, &grant.to_line()).await;
                    }
                }
                Ok(Ok(Some(Message::LeaseRelease { id: rid, .. }))) if rid == id => {
                    if let Some(since) = shared_since.take() {
                        shared_used += since.elapsed();
                    }
                    clock.end_baseline();
                    if !exclusive {
                        drop(held.take());
                    }
                }
                Ok(Ok(Some(
                    message @ (Message::Result { .. }
                    | Message::ProblemReport { .. }
                    | Message::MemoryReport { .. }),
                ))) if reply_id(&message) == Some(id.as_str()) => {
                    // The process is killed (and the hold released) before anyone else is told;
                    // its memory goes back once it is gone.
                    retire(worker, room.take());
                    drop(held);
                    return Ok(done(Exit::Reply { message }, waited));
                }
                Ok(Ok(Some(Message::Error { message, .. }))) => {
                    return Err(EvalError::WorkerRefused(message))
                }
                Ok(Ok(Some(other))) => {
                    return Err(EvalError::WorkerRefused(format!(
                        "expected the result of {id}, got {}",
                        truncate(&other.to_line(), 200)
                    )))
                }
                Ok(Ok(None)) => {
                    // EOF: the process is gone (or going); give it a moment to be reaped.
                    let status = tokio::time::timeout(Duration::from_secs(10), worker.wait()).await;
                    let exit = match status {
                        Ok(Some(s)) => describe_exit(s),
                        _ => "closed its output and did not exit".to_string(),
                    };
                    drop(held);
                    return Ok(done(
                        Exit::Crashed { exit, stderr_tail: worker.stderr_tail() },
                        waited,
                    ));
                }
                Ok(Err(EvalError::Protocol(e))) => {
                    // A garbled line is treated like a crash: something in the process
                    // wrote where only the executor may write.
                    let _ = killpg(Pid::from_raw(worker.pgid), Signal::SIGKILL);
                    let _ = worker.wait().await;
                    drop(held);
                    return Ok(done(
                        Exit::Crashed {
                            exit: format!("wrote a malformed protocol line ({e})"),
                            stderr_tail: worker.stderr_tail(),
                        },
                        waited,
                    ));
                }
                Ok(Err(e)) => return Err(e),
            }
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
        if let Some(t) = &self.cache_template {
            let _ = std::fs::remove_dir_all(t);
        }
    }
}

/// Kill `worker`, and give its memory back (`room`) once it is gone: the driver frees a
/// process's device memory only as it exits, and a job admitted in its place must find
/// that memory free. Waited on aside, so that the answer need not wait.
fn retire(worker: Worker, room: Option<Room>) {
    let _ = killpg(Pid::from_raw(worker.pgid), Signal::SIGKILL);
    let Some(room) = room else {
        return;
    };
    let mut worker = worker;
    tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(10), worker.wait()).await;
        drop(worker);
        drop(room);
    });
}

/// Each device's memory as the pool will give it out: the configured capacity, else
/// `TRITONFORGE_DEVICE_MEMORY_BYTES`, else the smallest total of the GPUs the first worker
/// saw (the devices of one pool are taken to be alike).
fn memory_budget(
    cfg: &PoolConfig,
    env: &EnvInfo,
    spares: usize,
) -> Result<Option<MemoryBudget>, EvalError> {
    const VAR: &str = "TRITONFORGE_DEVICE_MEMORY_BYTES";
    let configured = match (cfg.device_memory_bytes, std::env::var(VAR)) {
        (Some(b), _) => Some(b),
        (None, Ok(text)) => Some(memory::parse_bytes(&text).ok_or_else(|| {
            EvalError::Setting(format!(
                "{VAR}={text:?} is not a byte count (e.g. 85899345920, 80GiB, 512MiB)"
            ))
        })?),
        (None, Err(_)) => None,
    };
    let on_gpu = env.device == DeviceKind::Cuda;
    let gpu = env.gpus.iter().map(|g| g.memory_bytes).min().filter(|_| on_gpu);
    let capacity = configured.or(gpu);
    Ok(capacity.map(|capacity_bytes| MemoryBudget {
        capacity_bytes,
        process_overhead_bytes: if on_gpu { memory::GPU_PROCESS_OVERHEAD } else { 0 },
        spares,
        workers: cfg.workers.max(1),
        fixed_cap: cfg.gpu_memory_fraction,
    }))
}

/// Copy a directory tree (regular files and directories only).
fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

async fn write_line(stdin: &mut Input, line: &str) -> std::io::Result<()> {
    stdin.write_all(line.as_bytes()).await?;
    stdin.write_all(b"\n").await?;
    stdin.flush().await
}

fn reply_id(m: &Message) -> Option<&str> {
    match m {
        Message::Result { id, .. }
        | Message::ProblemReport { id, .. }
        | Message::MemoryReport { id, .. } => Some(id),
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

/// A fresh scratch directory for one process, and where its stderr goes.
fn new_scratch(launch: &Launch, prefix: &str) -> Result<(PathBuf, PathBuf), EvalError> {
    let n = launch.counter.fetch_add(1, Ordering::Relaxed);
    let scratch = launch.spec.scratch_root.join(format!("{prefix}{}-{}", std::process::id(), n));
    let tmp = scratch.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(|source| EvalError::Io { path: tmp.clone(), source })?;
    if let Some(template) = &launch.cache_template {
        // Best effort: without it the warm-up compiles its kernel itself.
        let _ = copy_dir(template, &scratch.join("triton-cache"));
    }
    let stderr = scratch.join("stderr.log");
    Ok((scratch, stderr))
}

/// One executor process of `launch`: `serve`, in its own process group (a candidate's
/// children die with it), with the worker's directory alone on `PYTHONPATH` (a
/// candidate's imports must not reach the user's packages) and the slot's environment.
fn serve_command(launch: &Launch, scratch: &std::path::Path) -> WorkerCommand {
    let spec = &launch.spec;
    WorkerCommand::new(&spec.python, &spec.worker_path, WorkerMode::Serve)
        .own_process_group()
        .envs(worker_env(launch, scratch))
}

/// The environment one process of `launch` gets beyond `PYTHONPATH` and what it inherits.
fn worker_env(launch: &Launch, scratch: &std::path::Path) -> Vec<(&'static str, String)> {
    let spec = &launch.spec;
    let device = spec.device.as_str();
    let path = |p: PathBuf| p.to_string_lossy().into_owned();
    let mut env = vec![
        ("PYTHONUNBUFFERED", "1".to_string()),
        ("PYTHONDONTWRITEBYTECODE", "1".to_string()),
        // Same dict layouts in every process: one less source of timing noise.
        ("PYTHONHASHSEED", "0".to_string()),
        ("TRITONFORGE_DEVICE", device.to_string()),
        ("TRITONFORGE_THREADS", spec.threads.to_string()),
        ("TRITONFORGE_WARMUP", if launch.warm_up { "1" } else { "0" }.to_string()),
        ("TRITONFORGE_SANDBOX", if launch.landlock { "1" } else { "0" }.to_string()),
        ("TRITON_CACHE_DIR", path(scratch.join("triton-cache"))),
        ("CUDA_CACHE_PATH", path(scratch.join("cuda-cache"))),
        ("TMPDIR", path(scratch.join("tmp"))),
    ];
    if std::env::var_os("OPENBLAS_NUM_THREADS").is_none() {
        // numpy's BLAS threads: as many as torch gets, and none idling in a fork server.
        env.push(("OPENBLAS_NUM_THREADS", spec.threads.to_string()));
    }
    if let Some(gpu) = launch.gpu {
        env.push(("CUDA_VISIBLE_DEVICES", gpu.to_string()));
    }
    if let Some(n) = launch.cuda_connections {
        env.push(("CUDA_DEVICE_MAX_CONNECTIONS", n.to_string()));
    }
    if launch.cpu_timing_lease {
        env.push(("TRITONFORGE_CPU_TIMING_LEASE", "1".to_string()));
    }
    // The host grants it in `await_hello`; the worker asks only when told.
    env.push(("TRITONFORGE_START_LEASE", if launch.start_lease { "1" } else { "0" }.to_string()));
    if let Some(f) = launch.gpu_memory_fraction {
        env.push(("TRITONFORGE_GPU_MEM_FRACTION", format!("{f:.4}")));
    }
    if let Some(cpu) = launch.timing_cpu {
        let reserved: Vec<String> = launch.reserved_cpus.iter().map(|c| c.to_string()).collect();
        env.push(("TRITONFORGE_RESERVED_CPUS", reserved.join(",")));
        env.push(("TRITONFORGE_TIMING_CPU", cpu.to_string()));
    }
    env
}

/// Whether the pool will most likely run on a GPU, before any process has said so:
/// asked for, or `auto` on a machine with an NVIDIA driver loaded.
fn likely_gpu(device: DeviceRequest) -> bool {
    match device {
        DeviceRequest::Cuda => true,
        DeviceRequest::Cpu => false,
        DeviceRequest::Auto => std::path::Path::new("/dev/nvidiactl").exists(),
    }
}

/// Processes started early for a slot that turned out not to want them: each is killed
/// (its `Worker` dropped) once its start-up ends.
fn discard(early: Vec<JoinHandle<Result<Ready, EvalError>>>) {
    for handle in early {
        tokio::spawn(async move {
            drop(handle.await);
        });
    }
}

/// A process of `launch`, forked when the slot has a live fork server, else started.
async fn start_worker(launch: Arc<Launch>) -> Result<Ready, EvalError> {
    start_worker_with(launch, &[]).await
}

/// As [`start_worker`], with `extra` added to (and overriding) the slot's environment.
async fn start_worker_with(
    launch: Arc<Launch>,
    extra: &[(&str, String)],
) -> Result<Ready, EvalError> {
    let asked = Instant::now();
    let mut ready = start_worker_once(launch, extra).await?;
    ready.start_ms = asked.elapsed().as_secs_f64() * 1000.0;
    Ok(ready)
}

async fn start_worker_once(
    launch: Arc<Launch>,
    extra: &[(&str, String)],
) -> Result<Ready, EvalError> {
    // Any failure here is the server's or the fork's: a started process is the fallback,
    // and it reports its own failure if it has one. A failed fork marks its server dead,
    // so a second look replaces it (a death is often first seen that way).
    for _ in 0..2 {
        let Some(fork_server) = live_fork_server(&launch).await else {
            break;
        };
        if let Ok(ready) = fork_with(&launch, &fork_server, "w", extra).await {
            return Ok(ready);
        }
    }
    spawn_worker(&launch, extra).await
}

/// The device's fork server, when it has a live one. A dead one (killed, or given up
/// on) is replaced by a new server, at most `FORK_SERVER_RESTARTS` times; meanwhile, and
/// after, processes are started.
async fn live_fork_server(launch: &Launch) -> Option<Arc<ForkServer>> {
    // A device that does not fork has no server, dead or alive; one is never set to none.
    let current = launch.fork_server_now()?;
    if current.alive() {
        return Some(current);
    }
    // One replacement at a time; a start that finds one under way does not wait for it
    // (a new server that hangs must not stall every start) but is started itself.
    let Ok(mut restarts) = launch.restarts.try_lock() else {
        return None;
    };
    if let Some(z) = launch.fork_server_now().filter(|z| z.alive()) {
        return Some(z);
    }
    if *restarts >= FORK_SERVER_RESTARTS {
        return None;
    }
    *restarts += 1;
    match spawn(launch, true, &[]).await {
        Ok(First::ForkServer(z)) => {
            if let Ok(mut slot) = launch.fork_server.lock() {
                *slot = Some(z.clone());
            }
            Some(z)
        }
        // A process that answered as a worker is not a server; dropping it ends it.
        Ok(First::Worker(_)) | Err(_) => None,
    }
}

/// A process of `launch`, started (never a fork server).
async fn spawn_worker(launch: &Launch, extra: &[(&str, String)]) -> Result<Ready, EvalError> {
    match spawn(launch, false, extra).await? {
        First::Worker(ready) => Ok(*ready),
        First::ForkServer(_) => Err(EvalError::WorkerStart {
            reason: "a process started as a worker answered as a fork server".into(),
            stderr: String::new(),
        }),
    }
}

async fn fork_worker(launch: &Launch, fork_server: &Arc<ForkServer>) -> Result<Ready, EvalError> {
    fork_with(launch, fork_server, "w", &[]).await
}

/// Fork a process with exactly the environment a started process gets, plus `extra`.
async fn fork_with(
    launch: &Launch,
    fork_server: &Arc<ForkServer>,
    prefix: &str,
    extra: &[(&str, String)],
) -> Result<Ready, EvalError> {
    let (scratch, stderr) = new_scratch(launch, prefix)?;
    let env: Vec<(String, String)> = serve_command(launch, &scratch)
        .environment()
        .into_iter()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
        .collect();
    let mut env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    env.extend(extra.iter().cloned());
    let forked = match fork_server
        .fork(&scratch, &stderr, &env, FORK_ANSWER.min(launch.startup_timeout))
        .await
    {
        Ok(f) => f,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&scratch);
            return Err(e);
        }
    };
    launch.live.add(forked.pid);
    let worker = Worker {
        proc: Proc::Forked { pid: forked.pid, fork_server: fork_server.clone(), reaped: false },
        pgid: forked.pid,
        stdin: Some(Box::new(forked.stdin)),
        stdout: BufReader::new(Box::new(forked.stdout)),
        scratch,
        live: launch.live.clone(),
    };
    await_hello(worker, launch).await
}

/// One preflight on `launch`'s device: fork a process that never touches the GPU, send it
/// the job, read its one answer. The process is killed when this returns (or when the
/// caller's time limit drops it).
async fn preflight_on(
    launch: &Launch,
    job: &EvalJob,
) -> Result<(PreflightOutcome, f64), EvalError> {
    let Some(fork_server) = live_fork_server(launch).await else {
        return Err(EvalError::WorkerStart {
            reason: "no live fork server".into(),
            stderr: String::new(),
        });
    };
    let extra = [("TRITONFORGE_PREFLIGHT", "1".to_string())];
    let ready = fork_with(launch, &fork_server, "p", &extra).await?;
    let mut worker = ready.worker;
    let id = format!("preflight-{}", launch.counter.fetch_add(1, Ordering::Relaxed));
    let line = Message::Preflight { id: id.clone(), job: job.clone() }.to_line();
    if let Some(stdin) = worker.stdin.as_mut() {
        write_line(stdin, &line).await.map_err(EvalError::WorkerIo)?;
    }
    match worker.read_message().await? {
        Some(Message::PreflightResult { id: rid, outcome, elapsed_ms }) if rid == id => {
            Ok((outcome, elapsed_ms))
        }
        Some(other) => Err(EvalError::WorkerRefused(format!(
            "expected the preflight's answer, got {}",
            truncate(&other.to_line(), 200)
        ))),
        None => Err(EvalError::WorkerStart {
            reason: "the preflight process ended without answering".into(),
            stderr: worker.stderr_tail(),
        }),
    }
}

/// What a started process turned out to be.
enum First {
    Worker(Box<Ready>),
    ForkServer(Arc<ForkServer>),
}

/// Start a process of `launch`. With `as_fork_server` it is asked to become a fork server,
/// which it does only in CPU mode; otherwise it serves one candidate as usual.
async fn spawn(
    launch: &Launch,
    as_fork_server: bool,
    extra: &[(&str, String)],
) -> Result<First, EvalError> {
    let spec = &launch.spec;
    let (scratch, stderr_path) = new_scratch(launch, if as_fork_server { "z" } else { "w" })?;
    let stderr = std::fs::File::create(&stderr_path)
        .map_err(|source| EvalError::Io { path: stderr_path.clone(), source })?;
    let mut cmd = Command::from(serve_command(launch, &scratch).command());
    cmd.envs(extra.iter().map(|(k, v)| (*k, v.as_str())));
    cmd.current_dir(&scratch)
        .env_remove("TRITON_INTERPRET")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .kill_on_drop(true);
    // A fork server's stdin must carry file descriptors: a socket, not a pipe.
    let ctl = if as_fork_server {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(|source| EvalError::Io { path: scratch.clone(), source })?;
        cmd.env("TRITONFORGE_FORK_SERVER", "1")
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)));
        ours.set_nonblocking(true).map_err(EvalError::WorkerIo)?;
        Some(tokio::net::UnixStream::from_std(ours).map_err(EvalError::WorkerIo)?)
    } else {
        cmd.stdin(Stdio::piped());
        None
    };
    let mut child = cmd.spawn().map_err(|e| EvalError::WorkerStart {
        reason: format!("cannot run {}: {e}", spec.python.display()),
        stderr: String::new(),
    })?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    launch.live.add(pid);
    // Piped only when not a fork server candidate (whose stdin is `ctl`).
    let stdin = child.stdin.take().map(|pipe| Box::new(pipe) as Input);
    let Some(stdout) = child.stdout.take() else {
        return Err(EvalError::WorkerStart {
            reason: "worker pipes missing".into(),
            stderr: String::new(),
        });
    };
    let mut stdout = BufReader::new(stdout);
    if let Some(ctl) = ctl {
        // Its first line says which it became: a fork server, or a worker's hello.
        let mut line = String::new();
        let first = tokio::time::timeout(
            launch.startup_timeout,
            (&mut stdout).take(MAX_LINE).read_line(&mut line),
        )
        .await;
        let fork_server_pid = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| v["fork_server"].as_i64());
        if let (Ok(Ok(n)), Some(_)) = (&first, fork_server_pid) {
            if *n > 0 {
                return Ok(First::ForkServer(ForkServer::new(child, pid, ctl, stdout, scratch)));
            }
        }
        let reader: Box<dyn AsyncRead + Send + Unpin> = Box::new(stdout);
        let worker = Worker {
            proc: Proc::Spawned(child),
            pgid: pid,
            stdin: Some(Box::new(ctl)),
            stdout: BufReader::new(Box::new(std::io::Cursor::new(line.into_bytes()).chain(reader))),
            scratch,
            live: launch.live.clone(),
        };
        return match first {
            Err(_) => Err(no_hello(launch.startup_timeout, &worker)),
            Ok(Err(e)) => Err(EvalError::WorkerIo(e)),
            Ok(Ok(_)) => await_hello(worker, launch).await.map(|r| First::Worker(Box::new(r))),
        };
    }
    let worker = Worker {
        proc: Proc::Spawned(child),
        pgid: pid,
        stdin,
        stdout: BufReader::new(Box::new(stdout)),
        scratch,
        live: launch.live.clone(),
    };
    await_hello(worker, launch).await.map(|r| First::Worker(Box::new(r)))
}

fn no_hello(timeout: Duration, worker: &Worker) -> EvalError {
    EvalError::WorkerStart {
        reason: format!("no hello within {}s (torch import hung?)", timeout.as_secs()),
        stderr: worker.stderr_tail(),
    }
}

/// The id a starting process's lease request carries: it makes its CUDA context under a
/// shared hold, so that no context is made during another process's timing hold (one
/// made beside a 64 ms convolution's windows put its interquartile range from 0.05 to
/// 2.9 ms on an H200; starting the driver alone, or ending a process, did nothing:
/// `scripts/profile_timing.py --disturb`, docs/results/evaluator-load.md).
pub const START_LEASE: &str = "start";

/// The longest a starting process waits for its start hold; past it the start goes on
/// without one. A job run alone takes its device's exclusive hold before it takes a
/// process, and may be waiting for this very start: without the bound that was a
/// deadlock until the start's timeout. A timing hold lasts well under this.
const START_HOLD_WAIT: Duration = Duration::from_secs(3);

/// Read a process's hello (its first protocol line), granting on the way the shared hold
/// it may ask for while it makes its CUDA context (`START_LEASE`), which ends at its
/// release or its hello. The grant waits at most `START_HOLD_WAIT` for the hold (then
/// the start goes on without it), and that wait counts against the start's timeout. A
/// process that hangs holding it keeps it until its start times out (not bounded
/// further: the hold is off by default).
async fn await_hello(mut worker: Worker, launch: &Launch) -> Result<Ready, EvalError> {
    let timeout = launch.startup_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut start_hold: Option<Held> = None;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let first = match read_hello(&mut worker.stdout, left, MAX_LINE).await {
            Ok(m) => m,
            Err(HelloError::NotHello(other)) => *other,
            Err(HelloError::Io(e)) => return Err(EvalError::WorkerIo(e)),
            Err(HelloError::Malformed { source, .. }) => return Err(EvalError::Protocol(source)),
            Err(HelloError::Exited) => {
                let _ = worker.wait().await;
                return Err(EvalError::WorkerStart {
                    reason: "the worker exited before saying hello".into(),
                    stderr: worker.stderr_tail(),
                });
            }
            Err(HelloError::Timeout(_)) => return Err(no_hello(timeout, &worker)),
        };
        match first {
            Message::LeaseRequest { id, kind: LeaseKind::Shared } if id == START_LEASE => {
                let asked = Instant::now();
                let wait = START_HOLD_WAIT.min(left);
                start_hold =
                    tokio::time::timeout(wait, launch.lock.shared()).await.ok().map(|guard| Held {
                        _guard: Guard::Shared(guard),
                        kind: LeaseKind::Shared,
                        job: format!("{START_LEASE}-{}", worker.pgid),
                        slot: launch.slot,
                        asked,
                        acquired: Instant::now(),
                        log: launch.leases.clone(),
                        exclusive_ns: Arc::new(AtomicU64::new(0)),
                    });
                let grant = Message::LeaseGrant { id, kind: LeaseKind::Shared };
                if let Some(stdin) = worker.stdin.as_mut() {
                    write_line(stdin, &grant.to_line()).await.map_err(EvalError::WorkerIo)?;
                }
            }
            Message::LeaseRelease { id } if id == START_LEASE => start_hold = None,
            Message::Hello { env, worker_version, sandbox, pid, startup }
                if i64::from(pid) == i64::from(worker.pgid) =>
            {
                drop(start_hold);
                let ready_at = Instant::now();
                return Ok(Ready {
                    worker,
                    env,
                    worker_version,
                    sandbox,
                    start_ms: 0.0,
                    ready_at,
                    startup,
                });
            }
            // The process we started (or were told was forked) must be the one speaking.
            Message::Hello { pid, .. } => {
                return Err(EvalError::WorkerStart {
                    reason: format!("hello from pid {pid}, expected {}", worker.pgid),
                    stderr: worker.stderr_tail(),
                })
            }
            other => {
                return Err(EvalError::WorkerStart {
                    reason: format!("expected hello, got {}", truncate(&other.to_line(), 200)),
                    stderr: worker.stderr_tail(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_event_log_counts_what_it_lets_go() {
        let log: EventLog<usize> = EventLog::default();
        for i in 0..LEASE_LOG + 3 {
            log.push(i);
        }
        let kept = log.all();
        assert_eq!((kept.len(), kept[0], log.lost()), (LEASE_LOG, 3, 3));
        let line = crate::report::lane_line(0, &crate::lane::LaneSplit::default(), log.lost());
        assert!(line.ends_with("(incomplete: the lease log let go of its 3 oldest events; their holds count as idle)"), "{line}");
        assert!(!crate::report::lane_line(0, &crate::lane::LaneSplit::default(), 0)
            .contains("incomplete"));
    }

    /// A process that has started is taken before older ones still starting; with none
    /// started, the oldest is.
    #[tokio::test]
    async fn a_started_process_is_taken_before_older_ones_still_starting() {
        let starting = || {
            Warm::Starting(tokio::spawn(async {
                tokio::time::sleep(Duration::from_secs(600)).await;
                Err(EvalError::PoolClosed)
            }))
        };
        let done = tokio::spawn(async { Err(EvalError::PoolClosed) });
        while !done.is_finished() {
            tokio::task::yield_now().await;
        }
        let mut warm: VecDeque<Warm> =
            VecDeque::from([starting(), starting(), Warm::Starting(done)]);
        let first = warm.iter().map(Warm::started).collect::<Vec<_>>();
        assert_eq!(first, [false, false, true]);
        let taken = take_started(&mut warm).unwrap();
        assert!(taken.started(), "the started one, third in line");
        assert_eq!(warm.len(), 2);
        assert!(warm.iter().all(|w| !w.started()));
        // None started: the oldest, as before.
        let Some(Warm::Starting(oldest)) = warm.front() else { panic!("starting") };
        let oldest_id = oldest.id();
        let Some(Warm::Starting(taken)) = take_started(&mut warm) else { panic!("starting") };
        assert_eq!(taken.id(), oldest_id);
        assert!(take_started(&mut warm).is_some() && take_started(&mut warm).is_none());
    }

    #[test]
    fn the_baseline_moves_the_budget_by_what_it_used_and_at_most_its_allowance() {
        let start = tokio::time::Instant::now() + Duration::from_secs(120);
        let mut b = Budget::new(start);
        assert_eq!(b.end(), start);
        b.begin_baseline();
        assert!(b.in_baseline());
        // While it compiles, the whole allowance is there to use.
        assert_eq!(b.end(), start + BASELINE_ALLOWANCE);
        std::thread::sleep(Duration::from_millis(30));
        b.end_baseline();
        assert!(!b.in_baseline());
        // After it, only what it used stays added.
        let moved = b.end() - start;
        assert!(moved >= Duration::from_millis(30) && moved < Duration::from_secs(5), "{moved:?}");
        // Ending a baseline that is not running changes nothing.
        b.end_baseline();
        assert_eq!(b.end() - start, moved);
    }
}

//! `tritonforge`: the thin binary. Parses arguments, shows progress, maps outcomes
//! to exit codes; the work happens in the library crates.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tritonforge_protocol::DeviceRequest;
use tritonforge_pyenv::{PythonEnv, PythonSource};

/// Tokenising a corpus is allocation-bound (small strings and vectors per word): with
/// glibc's allocator, malloc and free took ~40% of `data build`'s time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench_cmd;
mod data_cmd;
mod doctor;
mod eval_cmd;
mod guard_cmd;
mod report;
mod run_cmd;
mod tokenizer_cmd;
mod train_cmd;

/// Exit codes: 0 all correct, 1 some verdict other than correct, 2 bad input, 3 environment failure.
pub const EXIT_CORRECT: u8 = 0;
pub const EXIT_VERDICT: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_ENV: u8 = 3;
pub const EXIT_INTERRUPTED: u8 = 130;

#[derive(Parser)]
#[command(
    name = "tritonforge",
    version,
    about = "Turn PyTorch modules into fast, verified Triton kernels"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Args, Clone)]
pub struct Global {
    /// Workspace state directory (store, managed venv, scratch).
    #[arg(
        long,
        global = true,
        env = "TRITONFORGE_HOME",
        default_value = ".tritonforge"
    )]
    pub state_dir: PathBuf,
    /// Use this Python interpreter as is (it must have torch and triton); nothing is installed.
    #[arg(long, global = true, env = "TRITONFORGE_PYTHON")]
    pub python: Option<PathBuf>,
    /// Where the managed virtual environment lives [default: <state-dir>/venv].
    #[arg(long, global = true, env = "TRITONFORGE_VENV")]
    pub venv: Option<PathBuf>,
    /// Where candidates run: auto (GPU when visible), cpu (Triton interpreter), cuda.
    #[arg(long, global = true, value_enum, default_value_t = Device::Auto)]
    pub device: Device,
}

#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
pub enum Device {
    Auto,
    Cpu,
    Cuda,
}

impl From<Device> for DeviceRequest {
    fn from(d: Device) -> Self {
        match d {
            Device::Auto => DeviceRequest::Auto,
            Device::Cpu => DeviceRequest::Cpu,
            Device::Cuda => DeviceRequest::Cuda,
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Evaluate candidates against problems: compile, correctness, timing.
    Eval(eval_cmd::EvalArgs),
    /// Benchmark a policy (an LLM endpoint) on a problem set: it writes kernels, reads the
    /// evaluator's verdicts and refines them over several turns; report and episodes stored.
    Run(Box<run_cmd::RunArgs>),
    /// Static checks of candidate files: is it really a Triton kernel, does it cheat.
    Guard(guard_cmd::GuardArgs),
    /// The problem suite: list, show, validate.
    #[command(subcommand)]
    Bench(bench_cmd::BenchCmd),
    /// Report the interpreter, versions, device, state directory and store.
    Doctor {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Create (or check) the managed Python environment now, rather than on first use.
    Setup,
    /// The SFT data pipeline: build a training set, show a build's stats.
    #[command(subcommand)]
    Data(data_cmd::DataCmd),
    /// A model's tokenizer and chat template: export one, render chats with it.
    #[command(subcommand)]
    Tokenizer(tokenizer_cmd::TokenizerCmd),
    /// Train a policy: supervised fine-tuning (`train sft --config sft.toml`).
    #[command(subcommand)]
    Train(train_cmd::TrainCmd),
}

impl Global {
    fn absolutize(&mut self) {
        let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
        self.state_dir = abs(&self.state_dir);
        self.venv = self.venv.as_deref().map(abs);
        // A bare name (`python3`) is looked up on PATH; anything with a slash is a path.
        self.python = self.python.as_deref().map(|p| {
            if p.components().count() > 1 {
                abs(p)
            } else {
                p.to_owned()
            }
        });
    }

    pub fn store_path(&self) -> PathBuf {
        self.state_dir.join("tritonforge.sqlite")
    }

    pub fn python_source(&self) -> PythonSource {
        PythonSource::resolve(self.python.clone(), self.venv.clone(), &self.state_dir)
    }

    /// The interpreter, creating the managed venv on first use (progress on stderr).
    pub fn python_env(&self) -> anyhow::Result<PythonEnv> {
        let source = self.python_source();
        let env = tritonforge_pyenv::ensure(&source, &self.state_dir, &mut |line| {
            eprintln!("  [python] {line}");
        })?;
        Ok(env)
    }
}

/// Whether and how the static guard runs before each evaluation.
#[derive(Args, Clone, Default)]
pub struct GuardOpts {
    /// Do not run the static guard (the runtime checks still run).
    #[arg(long)]
    pub no_guard: bool,
    /// Guard policy file (TOML) instead of the strict default.
    #[arg(long)]
    pub policy: Option<PathBuf>,
}

impl GuardOpts {
    /// The policy to run (`None`: no guard), or the policy file's error.
    pub fn load(&self) -> Result<Option<tritonforge_guard::Policy>, String> {
        if self.no_guard {
            return Ok(None);
        }
        guard_cmd::load_policy(self.policy.as_deref()).map(Some)
    }
}

/// The evaluator with the guard (if any) installed.
pub fn guarded(
    ev: tritonforge_eval::Evaluator,
    policy: Option<tritonforge_guard::Policy>,
) -> tritonforge_eval::Evaluator {
    match policy {
        Some(p) => ev.with_guard(p),
        None => ev,
    }
}

/// How the executor pool runs candidates (shared by `eval` and `bench validate`).
#[derive(Args, Clone, Default)]
pub struct PoolArgs {
    /// Candidates evaluated at once per device [default: number of CPUs].
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Processes kept started ahead of need, per device [default: --jobs].
    #[arg(long)]
    pub spares: Option<usize>,
    /// One candidate per GPU at a time for all its phases, instead of sharing the GPU
    /// except while timing.
    #[arg(long)]
    pub exclusive: bool,
    /// GPU indices to spread candidates over, e.g. `0,1` [default: every visible GPU].
    #[arg(long, value_delimiter = ',')]
    pub gpus: Vec<u32>,
    /// The naive baseline: a fresh interpreter started per candidate when its turn comes,
    /// one candidate at a time, nothing pre-started.
    #[arg(long)]
    pub naive: bool,
    /// Cap on each candidate process's share of GPU memory [default: 0.9 / --jobs, at least 0.25].
    #[arg(long)]
    pub gpu_mem_fraction: Option<f64>,
    /// Do not apply landlock file-system/network rules to candidate processes.
    #[arg(long)]
    pub no_landlock: bool,
    /// CPU mode: start every candidate's process from scratch instead of forking it
    /// from one warmed-up server (slower; for comparing the two).
    #[arg(long)]
    pub no_fork: bool,
}

impl PoolArgs {
    /// Bad pool settings, named (checked before anything starts).
    pub fn problem(&self) -> Option<String> {
        if let Some(f) = self.gpu_mem_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Some(format!("--gpu-mem-fraction must be in (0, 1], got {f}"));
            }
        }
        if self.jobs == Some(0) {
            return Some("--jobs must be at least 1".into());
        }
        if self.naive && self.exclusive {
            return Some("--naive already runs one candidate at a time; drop --exclusive".into());
        }
        None
    }

    /// The pool for `items` pieces of work.
    pub fn config(&self, items: usize) -> tritonforge_eval::PoolConfig {
        let jobs = jobs_or_default(self.jobs).min(items.max(1));
        let base = tritonforge_eval::PoolConfig::default();
        if self.naive {
            return tritonforge_eval::PoolConfig {
                workers: 1,
                spares: 0,
                mode: tritonforge_eval::ShareMode::Exclusive,
                prestart: false,
                gpus: (!self.gpus.is_empty()).then(|| self.gpus[..1].to_vec()),
                gpu_memory_fraction: self.gpu_mem_fraction,
                landlock: !self.no_landlock,
                ..base
            };
        }
        tritonforge_eval::PoolConfig {
            workers: jobs,
            spares: self.spares.unwrap_or(jobs),
            mode: if self.exclusive {
                tritonforge_eval::ShareMode::Exclusive
            } else {
                tritonforge_eval::ShareMode::Pool
            },
            gpus: (!self.gpus.is_empty()).then(|| self.gpus.clone()),
            prestart: true,
            gpu_memory_fraction: self.gpu_mem_fraction,
            landlock: !self.no_landlock,
            fork: !self.no_fork,
            ..base
        }
    }
}

impl Global {
    /// Resolve Python (creating the managed venv on first use) and start the executor pool.
    pub async fn start_pool(
        &self,
        cfg: tritonforge_eval::PoolConfig,
    ) -> anyhow::Result<tritonforge_eval::Pool> {
        use anyhow::Context;
        let env = self.python_env()?;
        let spec = tritonforge_eval::WorkerSpec {
            python: env.interpreter.clone(),
            worker_path: env.worker_path.clone(),
            scratch_root: self.state_dir.join("scratch"),
            device: self.device.into(),
            threads: 1,
        };
        tritonforge_eval::Pool::start(spec, cfg)
            .await
            .context("starting the executor pool")
    }
}

fn main() -> ExitCode {
    let mut cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    // Workers run in their own scratch directories: every path we hand them must be absolute.
    cli.global.absolutize();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_ENV);
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Cmd::Eval(args) => eval_cmd::run(&cli.global, args).await,
            Cmd::Run(args) => run_cmd::run(&cli.global, *args).await,
            Cmd::Bench(cmd) => bench_cmd::run(&cli.global, cmd).await,
            Cmd::Guard(args) => guard_cmd::run(args),
            Cmd::Doctor { json } => doctor::run(&cli.global, json).await,
            Cmd::Setup => setup(&cli.global),
            Cmd::Data(cmd) => data_cmd::run(&cli.global, cmd).await,
            Cmd::Tokenizer(cmd) => tokenizer_cmd::run(&cli.global, cmd).await,
            Cmd::Train(cmd) => train_cmd::run(&cli.global, cmd).await,
        }
    });
    match code {
        Ok(c) => ExitCode::from(c),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_ENV)
        }
    }
}

fn setup(global: &Global) -> anyhow::Result<u8> {
    let env = global.python_env()?;
    eprintln!("interpreter: {}", env.interpreter.display());
    let info = tritonforge_pyenv::probe(&env, global.device.into())?;
    eprintln!(
        "python {}, torch {}, triton {}, numpy {}",
        info.python, info.torch, info.triton, info.numpy
    );
    Ok(EXIT_CORRECT)
}

/// `--jobs`, or one per CPU; clamped to a sane range.
pub fn jobs_or_default(flag: Option<usize>) -> usize {
    flag.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    })
    .clamp(1, 64)
}

/// `path` relative to the current directory when it is inside it, for shorter output.
pub fn short(path: &Path) -> String {
    let cwd = std::env::current_dir().ok();
    match cwd.as_deref().and_then(|c| path.strip_prefix(c).ok()) {
        Some(rel) => rel.display().to_string(),
        None => path.display().to_string(),
    }
}

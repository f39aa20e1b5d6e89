//! Flags shared by several commands, and what they resolve to: the state directory,
//! the Python environment, the suite, the evaluator.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tritonforge_eval::{
    EvalSettings, Evaluator, PoolConfig, Preflight, ShapeCheck, ShareMode, TimingSettings,
    Workspace,
};
use tritonforge_protocol::{DeviceKind, DeviceRequest};
use tritonforge_pyenv::{PythonEnv, PythonSource};
use tritonforge_suite::{Filter, Suite, SuiteSource};

use crate::exit::usage;

#[derive(Args, Clone)]
pub struct Global {
    /// Workspace state directory (store, managed venv, scratch).
    #[arg(long, global = true, env = "TRITONFORGE_HOME", default_value = ".tritonforge")]
    pub state_dir: PathBuf,
    /// Use this Python interpreter as is (it must have torch and triton); nothing is installed.
    #[arg(long, global = true, env = "TRITONFORGE_PYTHON")]
    pub python: Option<PathBuf>,
    /// Where the managed virtual environment lives [default: <state-dir>/venv].
    #[arg(long, global = true, env = "TRITONFORGE_VENV")]
    pub venv: Option<PathBuf>,
    /// Where candidates run: auto (GPU when visible), cpu (Triton interpreter), cuda.
    #[arg(long, global = true, default_value = "auto")]
    pub device: DeviceRequest,
    /// The suite's root directory (holding manifest.toml) [default: the suite built into
    /// this binary].
    #[arg(long, global = true, env = "TRITONFORGE_SUITE")]
    pub suite: Option<PathBuf>,
    /// Evaluate on these `tritonforge serve` instances (comma-separated URLs) instead of a
    /// local pool (`run`, `suite validate`, `data build --verify`); their guard applies.
    #[arg(long, global = true, env = "TRITONFORGE_EVAL_SERVER", value_delimiter = ',')]
    pub eval_server: Vec<String>,
    /// File holding the bearer token the evaluation servers want.
    #[arg(long, global = true, env = "TRITONFORGE_EVAL_TOKEN_FILE")]
    pub eval_token_file: Option<PathBuf>,
}

impl Global {
    /// Workers run in their own scratch directories: every path we hand them is absolute.
    pub fn absolutize(&mut self) {
        let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
        self.state_dir = abs(&self.state_dir);
        self.venv = self.venv.as_deref().map(abs);
        self.suite = self.suite.as_deref().map(abs);
        // A bare name (`python3`) is looked up on PATH; anything with a slash is a path.
        self.python = self.python.as_deref().map(|p| {
            if p.components().count() > 1 {
                abs(p)
            } else {
                p.to_owned()
            }
        });
    }

    /// The workspace these flags name.
    pub fn workspace(&self) -> Workspace {
        Workspace {
            state_dir: self.state_dir.clone(),
            python: PythonSource::resolve(self.python.clone(), self.venv.clone(), &self.state_dir),
            device: self.device,
            suite: SuiteSource::resolve(self.suite.clone()),
        }
    }

    /// The interpreter, creating the managed venv on first use (progress on stderr).
    pub fn python_env(&self) -> anyhow::Result<PythonEnv> {
        Ok(self.workspace().python_env(&mut |line| eprintln!("  [python] {line}"))?)
    }

    /// The device a policy worker runs on: `--device`, or `auto` probed with `py`.
    pub fn device_kind(&self, py: &PythonEnv) -> anyhow::Result<DeviceKind> {
        Ok(match self.device {
            DeviceRequest::Cpu => DeviceKind::Cpu,
            DeviceRequest::Cuda => DeviceKind::Cuda,
            DeviceRequest::Auto => tritonforge_pyenv::probe(py, self.device)?.device,
        })
    }

    /// The suite: `--suite`, `TRITONFORGE_SUITE`, or the one built into the binary.
    pub fn load_suite(&self) -> anyhow::Result<Suite> {
        let ws = self.workspace();
        let root = ws.suite.root(&ws.state_dir).context("writing out the built-in suite")?;
        Suite::load(&root).map_err(usage)
    }

    /// Start the executor pool and open the store: the evaluator every command uses.
    pub async fn open_evaluator(
        &self,
        pool: PoolConfig,
        guard: Option<tritonforge_guard::GuardRules>,
        store: bool,
    ) -> anyhow::Result<Evaluator> {
        let env = self.python_env()?;
        let ev = self.workspace().open_evaluator(&env, pool, guard, store).await;
        ev.context("starting the executor pool")
    }
}

impl Global {
    /// Where verdicts come from: the evaluation servers when `--eval-server` names some,
    /// else a local pool (with `pool` and `guard`) and the store.
    pub async fn eval_service(
        &self,
        pool: impl FnOnce() -> anyhow::Result<PoolConfig>,
        guard: Option<tritonforge_guard::GuardRules>,
    ) -> anyhow::Result<std::sync::Arc<dyn tritonforge_eval::EvalService>> {
        match self.eval_servers().await? {
            Some(remote) => Ok(remote),
            None => Ok(std::sync::Arc::new(self.open_evaluator(pool()?, guard, true).await?)),
        }
    }

    /// The evaluation servers `--eval-server` names, connected; `None` when it names none.
    /// Apart from [`Global::eval_service`] so that a caller can learn the servers' device
    /// (one request) before it decides whether to start anything else.
    pub async fn eval_servers(
        &self,
    ) -> anyhow::Result<Option<std::sync::Arc<dyn tritonforge_eval::EvalService>>> {
        if self.eval_server.is_empty() {
            return Ok(None);
        }
        let mut cfg = tritonforge_client::ClientConfig::new(self.eval_server.clone());
        cfg.token = read_token(self.eval_token_file.as_deref())?;
        let remote = tritonforge_client::RemoteEvaluator::connect(cfg).await;
        Ok(Some(std::sync::Arc::new(remote.context("connecting to the evaluation servers")?)))
    }
}

/// A bearer token from its file (trimmed); an empty file is an error naming it.
pub fn read_token(path: Option<&Path>) -> anyhow::Result<Option<String>> {
    let Some(p) = path else { return Ok(None) };
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    let t = text.trim().to_string();
    if t.is_empty() {
        return Err(usage(format!("{}: the token file is empty", p.display())));
    }
    Ok(Some(t))
}

/// Level, family and split filters over the suite.
#[derive(Args, Clone, Default)]
pub struct FilterArgs {
    #[arg(long)]
    pub level: Option<u32>,
    #[arg(long)]
    pub family: Option<String>,
    #[arg(long)]
    pub split: Option<String>,
}

impl From<&FilterArgs> for Filter {
    fn from(a: &FilterArgs) -> Filter {
        Filter { level: a.level, family: a.family.clone(), split: a.split.clone() }
    }
}

/// Whether and how the static guard runs before each evaluation.
#[derive(Args, Clone, Default)]
pub struct GuardOpts {
    /// Do not run the static guard (the runtime checks still run).
    #[arg(long)]
    pub no_guard: bool,
    /// Guard rules file (TOML) instead of the strict default.
    #[arg(long = "guard-rules", alias = "policy")]
    pub rules: Option<PathBuf>,
}

impl GuardOpts {
    /// The rules to run (`None`: no guard), or the rules file's error.
    pub fn load(&self) -> anyhow::Result<Option<tritonforge_guard::GuardRules>> {
        if self.no_guard {
            return Ok(None);
        }
        load_rules(self.rules.as_deref()).map(Some)
    }
}

/// Read a guard rules file (or the strict default), naming the file on error.
pub fn load_rules(path: Option<&Path>) -> anyhow::Result<tritonforge_guard::GuardRules> {
    tritonforge_guard::GuardRules::load(path).map_err(usage)
}

/// How the executor pool runs candidates.
#[derive(Args, Clone)]
pub struct PoolArgs {
    /// Candidates evaluated at once per device [default: number of CPUs].
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Processes kept started ahead of need, per device [default: --jobs].
    #[arg(long)]
    pub spares: Option<usize>,
    /// Candidates per device that may wait for the timing lane after giving their place
    /// back to the next candidate, which compiles and checks correctness meanwhile
    /// (0: a waiting candidate keeps its place). Off by default: at 16 on an
    /// H200 the mixed 100 of docs/evaluator.md took longer (more processes contending).
    #[arg(long, default_value_t = 0)]
    pub timing_queue: usize,
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
    /// Cap on each candidate process's GPU memory share [default: twice its problem's need, at least 0.25].
    #[arg(long)]
    pub gpu_mem_fraction: Option<f64>,
    /// Do not apply landlock file-system/network rules to candidate processes.
    #[arg(long)]
    pub no_landlock: bool,
    /// CPU mode: start every candidate's process from scratch instead of forking it
    /// from the fork server (slower; for comparing the two).
    #[arg(long)]
    pub no_fork: bool,
    /// Try each candidate's import first in a process that never touched the GPU, so that
    /// one failing there needs no GPU process: `auto` on a GPU, `always` (CPU mode too),
    /// `off`.
    #[arg(long, value_enum, default_value_t = PreflightArg::Auto)]
    pub preflight: PreflightArg,
    /// CUDA_DEVICE_MAX_CONNECTIONS for candidate processes: hardware queues per CUDA
    /// context (0 leaves what they inherit). One lets the driver create contexts about
    /// three times as fast; a candidate that launches on another stream in a process with
    /// fewer than the driver's 8 is evaluated again in one with 8 (only there can work it
    /// left running at return be seen).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=32))]
    pub cuda_connections: u32,
}

/// The flags' own defaults, for commands that build a pool without these flags.
impl Default for PoolArgs {
    fn default() -> Self {
        PoolArgs {
            jobs: None,
            spares: None,
            timing_queue: 0,
            exclusive: false,
            gpus: Vec::new(),
            naive: false,
            gpu_mem_fraction: None,
            no_landlock: false,
            no_fork: false,
            preflight: PreflightArg::Auto,
            cuda_connections: 1,
        }
    }
}

/// `--preflight`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PreflightArg {
    #[default]
    Auto,
    Always,
    Off,
}

impl From<PreflightArg> for Preflight {
    fn from(p: PreflightArg) -> Self {
        match p {
            PreflightArg::Auto => Preflight::Auto,
            PreflightArg::Always => Preflight::Always,
            PreflightArg::Off => Preflight::Off,
        }
    }
}

impl PoolArgs {
    /// The pool for `items` pieces of work; bad settings are a usage error.
    pub fn config(&self, items: usize) -> anyhow::Result<PoolConfig> {
        if let Some(f) = self.gpu_mem_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Err(usage(format!("--gpu-mem-fraction must be in (0, 1], got {f}")));
            }
        }
        if self.jobs == Some(0) {
            return Err(usage("--jobs must be at least 1"));
        }
        if self.naive && self.exclusive {
            return Err(usage("--naive already runs one candidate at a time; drop --exclusive"));
        }
        let jobs = jobs_or_default(self.jobs).min(items.max(1));
        let base = PoolConfig {
            gpu_memory_fraction: self.gpu_mem_fraction,
            landlock: !self.no_landlock,
            cuda_connections: (self.cuda_connections > 0).then_some(self.cuda_connections),
            ..PoolConfig::default()
        };
        if self.naive {
            return Ok(PoolConfig {
                workers: 1,
                spares: 0,
                mode: ShareMode::Exclusive,
                prestart: false,
                gpus: (!self.gpus.is_empty()).then(|| self.gpus[..1].to_vec()),
                ..base
            });
        }
        Ok(PoolConfig {
            workers: jobs,
            spares: self.spares.unwrap_or(jobs),
            timing_queue: self.timing_queue,
            mode: if self.exclusive { ShareMode::Exclusive } else { ShareMode::Pool },
            gpus: (!self.gpus.is_empty()).then(|| self.gpus.clone()),
            prestart: true,
            fork: !self.no_fork,
            preflight: self.preflight.into(),
            ..base
        })
    }
}

/// `--jobs`, or one per CPU; clamped to a sane range.
pub fn jobs_or_default(flag: Option<usize>) -> usize {
    flag.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2))
        .clamp(1, 64)
}

/// How candidates are timed (GPU only).
#[derive(Args, Clone)]
pub struct TimingArgs {
    /// Skip timing.
    #[arg(long)]
    pub no_timing: bool,
    /// Wall-clock budget for the timed repetitions per candidate, milliseconds.
    #[arg(long, default_value_t = 400)]
    pub timing_budget_ms: u32,
    /// Flag speedups above this as implausible.
    #[arg(long, default_value_t = 10.0)]
    pub speedup_cap: f64,
    /// Measure the candidate kernels' share of GPU time with the profiler.
    #[arg(long)]
    pub profile: bool,
    /// Also time `torch.compile` of the reference (cached per problem, variant and environment).
    #[arg(long)]
    pub compile_baseline: bool,
}

impl From<&TimingArgs> for TimingSettings {
    fn from(a: &TimingArgs) -> TimingSettings {
        TimingSettings {
            enabled: !a.no_timing,
            budget_ms: a.timing_budget_ms,
            speedup_cap: a.speedup_cap,
            profile: a.profile,
            compile_baseline: a.compile_baseline,
        }
    }
}

/// How each candidate is evaluated: trials, seed, shapes, budgets (`eval` and `run`).
#[derive(Args, Clone)]
pub struct EvalFlags {
    /// Correctness trials, each with a fresh seed.
    #[arg(long, default_value_t = 5)]
    pub trials: u32,
    /// Shape variant from the manifest (`full`, `small`, `heldout`, ...). Default: `small` in CPU mode when defined.
    #[arg(long)]
    pub variant: Option<String>,
    /// Also run two trials at this shape variant, unseen by the candidate, after the main
    /// ones pass: kernels hard-coded to the suite's shapes fail there. Default:
    /// `heldout` on a GPU; none in CPU mode (the interpreter is too slow for those sizes).
    #[arg(long, conflicts_with = "no_shape_check")]
    pub shape_check: Option<String>,
    /// Skip the trials at unseen shapes.
    #[arg(long)]
    pub no_shape_check: bool,
    /// Wall-clock budget per candidate, seconds, from the moment its job is sent
    /// (time spent waiting for its GPU is not counted).
    #[arg(long, default_value_t = 120.0)]
    pub budget: f64,
    #[command(flatten)]
    pub timing: TimingArgs,
}

/// A `--budget` in seconds as a duration: at least a millisecond, since budgets travel in
/// whole milliseconds and a smaller one would be a budget of nothing.
pub fn budget_flag(secs: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|b| b.as_millis() >= 1)
        .ok_or_else(|| usage("--budget must be at least a millisecond"))
}

impl EvalFlags {
    /// The settings, or a usage error naming the bad flag.
    pub fn settings(&self) -> anyhow::Result<EvalSettings> {
        let settings = EvalSettings {
            trials: self.trials,
            variant: self.variant.clone(),
            shape_check: match (&self.shape_check, self.no_shape_check) {
                (_, true) => ShapeCheck::Off,
                (Some(v), false) => ShapeCheck::Variant(v.clone()),
                (None, false) => ShapeCheck::Default,
            },
            budget: budget_flag(self.budget)?,
            timing: (&self.timing).into(),
            ..EvalSettings::default()
        };
        settings.check().map_err(usage)?;
        Ok(settings)
    }
}

/// `path` relative to the current directory when it is inside it, for shorter output.
pub fn short(path: &Path) -> String {
    let cwd = std::env::current_dir().ok();
    match cwd.as_deref().and_then(|c| path.strip_prefix(c).ok()) {
        Some(rel) => rel.display().to_string(),
        None => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapped {
        #[command(flatten)]
        pool: PoolArgs,
    }

    /// A pool built without the flags (e.g. by `data`) is the one the flags' defaults give.
    #[test]
    fn pool_args_default_is_the_flags_defaults() {
        let parsed = Wrapped::parse_from(["x"]).pool;
        let default = PoolArgs::default();
        assert_eq!(parsed.cuda_connections, default.cuda_connections);
        assert_eq!(parsed.preflight, default.preflight);
        let (a, b) = (parsed.config(4).unwrap(), default.config(4).unwrap());
        assert_eq!(a.cuda_connections, Some(1));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        let off = Wrapped::parse_from(["x", "--cuda-connections", "0"]).pool.config(4).unwrap();
        assert_eq!(off.cuda_connections, None);
        assert!(Wrapped::try_parse_from(["x", "--cuda-connections", "33"]).is_err());
        // Candidates waiting for the timing lane keep their places unless asked.
        assert_eq!(a.timing_queue, 0);
        let given = Wrapped::parse_from(["x", "--timing-queue", "3"]).pool.config(4).unwrap();
        assert_eq!(given.timing_queue, 3);
    }
}

//! The evaluator's front door: one place that opens an evaluator (pool, store, guard)
//! and one that turns a caller's settings into a problem's [`EvalConfig`], so `eval`,
//! `run`, `suite validate`, `data build --verify` and later callers (the RL loop, the
//! server) cannot drift apart in their defaults.

use std::path::PathBuf;
use std::time::Duration;

use tritonforge_protocol::{DeviceKind, DeviceRequest, EvalConfig};
use tritonforge_pyenv::{PyEnvError, PythonEnv, PythonSource};
use tritonforge_store::Store;
use tritonforge_suite::{Problem, Suite, SuiteError, SuiteSource};

use crate::{EvalError, Evaluator, Pool, PoolConfig, WorkerSpec};

/// Where a command works: the state directory (store, managed venv, scratch, extracted
/// worker and suite), which Python runs workers, where candidates run, which suite. The
/// CLI, and later the server and the RL loop, open everything through it.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub state_dir: PathBuf,
    pub python: PythonSource,
    pub device: DeviceRequest,
    pub suite: SuiteSource,
}

impl Workspace {
    pub fn store_path(&self) -> PathBuf {
        self.state_dir.join("tritonforge.sqlite")
    }

    /// The interpreter, creating the managed venv on first use (`progress` hears each step).
    pub fn python_env(&self, progress: &mut dyn FnMut(&str)) -> Result<PythonEnv, PyEnvError> {
        tritonforge_pyenv::ensure(&self.python, &self.state_dir, progress)
    }

    /// The suite, writing out the built-in one on first use.
    pub fn load_suite(&self) -> Result<Suite, SuiteError> {
        Suite::load(&self.suite.root(&self.state_dir)?)
    }

    /// The evaluator of this workspace: executors of `env`, records in its store if `store`.
    pub async fn open_evaluator(
        &self,
        env: &PythonEnv,
        pool: PoolConfig,
        guard: Option<tritonforge_guard::GuardRules>,
        store: bool,
    ) -> Result<Evaluator, EvalError> {
        Evaluator::open(EvaluatorSetup {
            worker: WorkerSpec {
                python: env.interpreter.clone(),
                worker_path: env.worker_path.clone(),
                scratch_root: self.state_dir.join("scratch"),
                device: self.device,
                threads: 1,
            },
            pool,
            store: store.then(|| self.store_path()),
            guard,
            refresh: false,
            worker_fingerprint: tritonforge_pyenv::worker_hash(),
        })
        .await
    }
}

/// Everything an evaluator is opened with.
pub struct EvaluatorSetup {
    /// How executor processes are started.
    pub worker: WorkerSpec,
    pub pool: PoolConfig,
    /// The SQLite store records are cached in; `None` keeps nothing.
    pub store: Option<PathBuf>,
    /// The guard's rules; `None` runs no static guard.
    pub guard: Option<tritonforge_guard::GuardRules>,
    /// Evaluate again even when the store has the record.
    pub refresh: bool,
    /// Identifies the executor code (the worker package's hash); part of every key.
    pub worker_fingerprint: String,
}

impl Evaluator {
    /// Start the pool and open the store: the one way callers build an evaluator.
    pub async fn open(setup: EvaluatorSetup) -> Result<Evaluator, EvalError> {
        let store = setup.store.as_deref().map(Store::open).transpose()?;
        let pool = Pool::start(setup.worker, setup.pool).await?;
        let mut ev = Evaluator::new(pool, store, setup.worker_fingerprint);
        if let Some(rules) = setup.guard {
            ev = ev.with_guard(rules);
        }
        ev.refresh = setup.refresh;
        Ok(ev)
    }

    /// The device the pool's executors run on.
    pub fn device(&self) -> DeviceKind {
        self.environment().device
    }
}

/// How candidates are timed (GPU only).
#[derive(Debug, Clone, PartialEq)]
pub struct TimingSettings {
    pub enabled: bool,
    /// Wall-clock budget for the timed repetitions, milliseconds.
    pub budget_ms: u32,
    /// Speedups above this are flagged as implausible.
    pub speedup_cap: f64,
    /// Measure the candidate kernels' share of GPU time with the profiler.
    pub profile: bool,
    /// Also time `torch.compile` of the reference.
    pub compile_baseline: bool,
}

impl Default for TimingSettings {
    fn default() -> Self {
        let d = EvalConfig::default();
        TimingSettings {
            enabled: d.timing,
            budget_ms: d.timing_budget_ms,
            speedup_cap: d.speedup_cap,
            profile: d.profile,
            compile_baseline: d.compile_baseline,
        }
    }
}

/// Which unseen shapes a candidate must also be right at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ShapeCheck {
    /// On a GPU the problem's `heldout` variant (unless that is the one evaluated);
    /// none in CPU mode, where the interpreter is too slow for those sizes.
    #[default]
    Default,
    Off,
    /// This named variant.
    Variant(String),
}

/// A caller's evaluation settings, before they meet a problem.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalSettings {
    pub trials: u32,
    pub seed: u64,
    /// Shape variant; `None`: `small` in CPU mode when the problem has one, else full.
    pub variant: Option<String>,
    pub shape_check: ShapeCheck,
    /// Wall-clock budget for the candidate's whole process.
    pub budget: Duration,
    pub timing: TimingSettings,
}

impl Default for EvalSettings {
    fn default() -> Self {
        let d = EvalConfig::default();
        EvalSettings {
            trials: d.trials,
            seed: d.seed,
            variant: None,
            shape_check: ShapeCheck::Default,
            budget: Duration::from_millis(d.budget_ms),
            timing: TimingSettings::default(),
        }
    }
}

impl EvalSettings {
    /// The settings that decide what a candidate is paid, as JSON, for a training run's
    /// recipe (a slice timed with another budget would reward the same code otherwise).
    /// Diagnostics that change no verdict (`--profile`, the compiled baseline) are left out.
    pub fn to_json(&self) -> serde_json::Value {
        let t = &self.timing;
        let shape_check = match &self.shape_check {
            ShapeCheck::Default => "default".to_string(),
            ShapeCheck::Off => "off".to_string(),
            ShapeCheck::Variant(v) => format!("variant {v}"),
        };
        serde_json::json!({
            "trials": self.trials,
            "seed": self.seed,
            "variant": self.variant,
            "shape_check": shape_check,
            "budget_ms": self.budget.as_millis() as u64,
            "timing": {
                "enabled": t.enabled,
                "budget_ms": t.budget_ms,
                "speedup_cap": t.speedup_cap,
            },
        })
    }

    /// Settings no evaluation can run with, named by their flags.
    pub fn check(&self) -> Result<(), String> {
        let t = &self.timing;
        if self.trials == 0
            || self.budget.is_zero()
            || t.budget_ms == 0
            || t.speedup_cap.is_nan()
            || t.speedup_cap <= 1.0
        {
            return Err(
                "--trials, --budget and --timing-budget-ms must be positive; --speedup-cap above 1"
                    .into(),
            );
        }
        Ok(())
    }

    /// The evaluation config of `problem` on `device`: variant, shapes, tolerance, timing.
    pub fn config(&self, problem: &Problem, device: DeviceKind) -> Result<EvalConfig, EvalError> {
        let cpu_mode = device == DeviceKind::Cpu;
        let (variant, overrides) = problem.variant(self.variant.as_deref(), cpu_mode)?;
        let shape_check = match &self.shape_check {
            ShapeCheck::Off => None,
            ShapeCheck::Variant(name) => Some(problem.variant(Some(name), cpu_mode)?.1),
            ShapeCheck::Default if cpu_mode => None,
            ShapeCheck::Default => problem.shape_check(variant.as_deref()),
        };
        let t = &self.timing;
        Ok(EvalConfig {
            trials: self.trials,
            seed: self.seed,
            tolerance: problem.meta.tolerance(),
            variant,
            overrides,
            shape_check,
            device: DeviceRequest::Auto,
            budget_ms: u64::try_from(self.budget.as_millis()).unwrap_or(u64::MAX),
            timing: t.enabled,
            timing_budget_ms: t.budget_ms,
            speedup_cap: t.speedup_cap,
            profile: t.profile,
            compile_baseline: t.compile_baseline,
            ..EvalConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem() -> Problem {
        let mut p = Problem {
            name: "p".into(),
            path: "p.py".into(),
            source: "N = 8\n".into(),
            meta: Default::default(),
        };
        p.meta.variants.insert("small".into(), [("N".to_string(), 2.into())].into());
        p.meta.variants.insert("heldout".into(), [("N".to_string(), 7.into())].into());
        p
    }

    #[test]
    fn cpu_mode_takes_small_and_no_shape_check_gpu_checks_heldout() {
        let s = EvalSettings::default();
        let cpu = s.config(&problem(), DeviceKind::Cpu).unwrap();
        assert_eq!(cpu.variant.as_deref(), Some("small"));
        assert_eq!(cpu.shape_check, None);
        let gpu = s.config(&problem(), DeviceKind::Cuda).unwrap();
        assert_eq!(gpu.variant, None);
        assert_eq!(gpu.shape_check.unwrap()["N"], 7);
        assert_eq!(gpu.seed, EvalConfig::default().seed);
        let off = EvalSettings { shape_check: ShapeCheck::Off, ..EvalSettings::default() };
        assert_eq!(off.config(&problem(), DeviceKind::Cuda).unwrap().shape_check, None);
        let bad = EvalSettings { variant: Some("huge".into()), ..EvalSettings::default() };
        assert!(bad.config(&problem(), DeviceKind::Cpu).is_err());
    }
}

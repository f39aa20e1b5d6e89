//! `tritonforge doctor`'s findings: the interpreter, the worker package, the device, the
//! store and the sandbox a real executor applies, gathered without installing anything.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::json;
use tritonforge_protocol::{DeviceKind, EnvInfo, Sandbox};
use tritonforge_pyenv::{managed_is_ready, PythonEnv, PythonSource};
use tritonforge_store::{Store, StoreStats};

use crate::report::sandbox_line;
use crate::{EvalError, Pool, PoolConfig, WorkerSpec, Workspace};

/// What this installation found.
pub struct Diagnosis {
    pub state_dir: PathBuf,
    pub store_path: PathBuf,
    pub store: Result<StoreStats, String>,
    pub interpreter: PathBuf,
    pub kind: &'static str,
    /// The managed environment exists and is up to date (always, for a named interpreter).
    pub ready: bool,
    pub worker_path: PathBuf,
    /// `None` when the environment is not set up yet.
    pub probe: Option<Result<EnvInfo, String>>,
    /// What confines a candidate, read from a real executor (it applies the sandbox itself).
    pub sandbox: Option<Result<Sandbox, String>>,
}

/// Look at everything `doctor` reports.
pub async fn diagnose(ws: &Workspace) -> Result<Diagnosis, EvalError> {
    let (source, state_dir, device) = (&ws.python, ws.state_dir.as_path(), ws.device);
    let store_path = &ws.store_path();
    let worker_path = tritonforge_pyenv::extract_worker(state_dir)
        .map_err(|e| EvalError::WorkerStart { reason: e.to_string(), stderr: String::new() })?;
    let (interpreter, kind, ready) = match source {
        PythonSource::Explicit(p) => (p.clone(), "named interpreter (nothing installed)", true),
        PythonSource::Managed(v) => {
            (tritonforge_pyenv::venv_python(v), "managed virtual environment", managed_is_ready(v))
        }
    };
    let env = PythonEnv {
        interpreter: interpreter.clone(),
        worker_path: worker_path.clone(),
        managed: None,
    };
    let probe = ready.then(|| tritonforge_pyenv::probe(&env, device).map_err(|e| e.to_string()));
    let sandbox = match &probe {
        Some(Ok(_)) => {
            let spec = WorkerSpec {
                python: interpreter.clone(),
                worker_path: worker_path.clone(),
                scratch_root: state_dir.join("scratch"),
                device,
                threads: 1,
            };
            let cfg =
                PoolConfig { workers: 1, spares: 0, prestart: false, ..PoolConfig::default() };
            Some(match Pool::start(spec, cfg).await {
                Ok(pool) => Ok(pool.sandbox().clone()),
                Err(e) => Err(format!("starting the executor pool: {e}")),
            })
        }
        _ => None,
    };
    let store = if store_path.exists() {
        Store::open(store_path).and_then(|s| s.stats()).map_err(|e| e.to_string())
    } else {
        Ok(StoreStats::default())
    };
    Ok(Diagnosis {
        state_dir: state_dir.to_owned(),
        store_path: store_path.to_owned(),
        store,
        interpreter,
        kind,
        ready,
        worker_path,
        probe,
        sandbox,
    })
}

impl Diagnosis {
    /// Everything works: Python probed, a worker started, the store readable.
    pub fn ok(&self) -> bool {
        matches!(self.probe, Some(Ok(_)))
            && matches!(self.sandbox, Some(Ok(_)))
            && self.store.is_ok()
    }

    pub fn json(&self) -> serde_json::Value {
        json!({
            "tritonforge": env!("CARGO_PKG_VERSION"),
            "protocol": tritonforge_protocol::PROTOCOL_VERSION,
            "state_dir": self.state_dir,
            "store": self.store_path,
            "store_evaluations": self.store.as_ref().map(|s| s.evaluations).ok(),
            "interpreter": self.interpreter,
            "interpreter_kind": self.kind,
            "ready": self.ready,
            "worker_path": self.worker_path,
            "worker_hash": tritonforge_pyenv::worker_hash(),
            "env": self.probe.as_ref().and_then(|p| p.as_ref().ok()),
            "sandbox": self.sandbox.as_ref().and_then(|p| p.as_ref().ok()),
            "error": self.probe.as_ref().and_then(|p| p.as_ref().err()),
        })
    }

    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "tritonforge {} (protocol {})",
            env!("CARGO_PKG_VERSION"),
            tritonforge_protocol::PROTOCOL_VERSION
        );
        let _ = writeln!(s, "state dir:   {}", self.state_dir.display());
        let store_path = &self.store_path;
        match &self.store {
            Ok(st) if store_path.exists() => {
                let by: Vec<String> =
                    st.by_status.iter().map(|(k, n)| format!("{n} {k}")).collect();
                let _ = writeln!(
                    s,
                    "store:       {} ({} evaluations{}{})",
                    store_path.display(),
                    st.evaluations,
                    if by.is_empty() { "" } else { ": " },
                    by.join(", ")
                );
            }
            Ok(_) => {
                let _ = writeln!(s, "store:       {} (not created yet)", store_path.display());
            }
            Err(e) => {
                let _ = writeln!(s, "store:       {} (unreadable: {e})", store_path.display());
            }
        }
        let _ = writeln!(s, "interpreter: {} ({})", self.interpreter.display(), self.kind);
        let _ = writeln!(s, "worker:      {}", self.worker_path.display());
        match &self.probe {
            None => {
                let _ = writeln!(s, "python:      not set up yet; `tritonforge setup` (or the first `eval`) creates it");
            }
            Some(Err(e)) => {
                let _ = writeln!(s, "python:      unusable: {e}");
            }
            Some(Ok(info)) => device_lines(&mut s, info),
        }
        match &self.sandbox {
            None => {}
            Some(Err(e)) => {
                let _ = writeln!(s, "sandbox:     could not start a worker: {e}");
            }
            Some(Ok(sb)) => {
                let _ = writeln!(s, "sandbox:     {}", sandbox_line(sb));
            }
        }
        s
    }
}

fn device_lines(s: &mut String, info: &EnvInfo) {
    let _ = writeln!(
        s,
        "python:      {} | torch {} | triton {} | numpy {}",
        info.python, info.torch, info.triton, info.numpy
    );
    if info.device == DeviceKind::Cpu {
        let _ = writeln!(s, "device:      CPU mode: Triton interpreter (no GPU visible to torch); timing unavailable");
    }
    for g in info.gpus.iter().filter(|_| info.device == DeviceKind::Cuda) {
        let _ = writeln!(
            s,
            "device:      GPU {}: {} ({:.0} GiB, sm {}), CUDA {}, driver {}",
            g.index,
            g.name,
            g.memory_bytes as f64 / (1u64 << 30) as f64,
            g.capability,
            info.cuda.as_deref().unwrap_or("?"),
            info.driver.as_deref().unwrap_or("unknown")
        );
    }
}

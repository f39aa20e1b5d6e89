//! What the tests that drive the real Python worker share: the repository, the CLI's
//! fixtures, and a CPU-mode worker spec on the managed environment the whole suite
//! shares (created on first use, under a lock).

use std::path::{Path, PathBuf};

use tritonforge_eval::WorkerSpec;
use tritonforge_pyenv::PythonSource;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

pub fn fixture(rel: &str) -> PathBuf {
    repo().join("crates/cli/tests/fixtures").join(rel)
}

pub fn spec(state: &Path) -> WorkerSpec {
    let venv = std::env::var_os("TRITONFORGE_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".tritonforge/venv"));
    let env = tritonforge_pyenv::ensure(&PythonSource::Managed(venv), state, &mut |_| {})
        .expect("python environment");
    WorkerSpec {
        python: env.interpreter,
        worker_path: env.worker_path,
        scratch_root: state.join("scratch"),
        device: tritonforge_protocol::DeviceRequest::Cpu,
        threads: 1,
    }
}

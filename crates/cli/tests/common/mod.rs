//! Helpers shared by the integration tests: where the repo and the shared managed
//! environment are, and how to run the real binary against a private state directory.

// Each test crate uses its own subset of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The managed environment every test shares (the README's main command creates the same one).
pub fn venv() -> PathBuf {
    std::env::var_os("TRITONFORGE_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".tritonforge/venv"))
}

pub fn fixture(rel: &str) -> PathBuf {
    repo().join("crates/cli/tests/fixtures").join(rel)
}

/// The real binary, run from the repo root with its own state directory.
pub fn tf(state: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tritonforge"));
    c.current_dir(repo())
        .arg("--state-dir")
        .arg(state)
        .arg("--venv")
        .arg(venv())
        .env_remove("TRITONFORGE_PYTHON")
        .env_remove("TRITONFORGE_HOME")
        .stdin(Stdio::null());
    c
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run tritonforge")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

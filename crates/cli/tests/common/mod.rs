//! Helpers shared by the integration tests: where the repo and the shared managed
//! environment are, and how to run the real binary against a private state directory.

// Each test crate uses its own subset of these.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
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

/// Runs a Python fixture in the managed environment (the worker package importable, no
/// model hub) and returns its one-line JSON report, once it has exited cleanly.
pub fn fixture_report(script: &str, args: &[&Path]) -> serde_json::Value {
    let python = repo().join("python");
    let out = Command::new(venv().join("bin/python"))
        .arg(fixture(script))
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .env("PYTHONPATH", &python)
        .output()
        .unwrap();
    let report = text(&out.stdout);
    assert!(out.status.success(), "{report}\n{}", text(&out.stderr));
    serde_json::from_str(report.trim()).unwrap()
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
        .env_remove("TRITONFORGE_DEVICE_MEMORY_BYTES")
        .stdin(Stdio::null());
    c
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run tritonforge")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// One JSON value per non-empty line of a command's output (`--json` records).
pub fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    text(stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Serves `app` on a loopback port from a background thread (its own runtime): the mock
/// servers the agent tests talk to. Returns the address.
pub fn serve_on_loopback(app: axum::Router) -> std::net::SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

/// Every episode in a state directory's store, by id.
pub fn episodes(state: &Path) -> Vec<serde_json::Value> {
    let db = rusqlite::Connection::open(state.join("tritonforge.sqlite")).unwrap();
    let mut stmt = db.prepare("SELECT episode FROM episodes ORDER BY id").unwrap();
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|t| serde_json::from_str(&t.unwrap()).unwrap())
        .collect();
    rows
}

/// A `tritonforge serve` child process on a loopback port; killed when dropped.
pub struct Served {
    pub child: Child,
    pub url: String,
    log: Arc<Mutex<String>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

pub fn serve(state: &Path, extra: &[&str]) -> Served {
    let mut c = tf(state);
    c.args(["serve", "--bind", "127.0.0.1:0"]).args(extra);
    if !extra.contains(&"--jobs") {
        c.args(["--jobs", "2"]);
    }
    let mut child = c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn serve");
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let l2 = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("serving on ") {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
            l2.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(600))
        .unwrap_or_else(|_| panic!("the server did not start:\n{}", log.lock().unwrap()));
    Served { child, url, log }
}

/// SmolLM2's tokenizer (`tokenizer export`), written once per test binary: loading the
/// GGUF file takes a while.
pub fn exported_tokenizer() -> PathBuf {
    static TOK: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TOK.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let tok = dir.join("tok");
        let out = run(tf(&dir.join("state")).args(["tokenizer", "export", "--out"]).arg(&tok));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        tok
    })
    .clone()
}

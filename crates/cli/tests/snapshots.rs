//! What a person sees. Snapshot tests of `suite list`, `guard`, `eval`'s verdict and
//! batch table, and the `run` summary, from the real binary (CPU mode, real worker).
//! Values that depend on the machine or the moment (timings, hashes, ports, versions)
//! are redacted; everything else is pinned.

use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

mod common;
use common::*;

/// Redactions for output that names this machine's environment or timings.
fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.add_filter(r"\d+\.\d+s\b", "[secs]");
    s.add_filter(r"\d+\.\d+ s\b", "[secs]");
    s.add_filter(r"record:    [0-9a-f]{12}", "record:    [key]");
    s.add_filter(r"127\.0\.0\.1:\d+", "[addr]");
    s.add_filter(r"torch [^ ,)|]+", "torch [v]");
    s.add_filter(r"triton [^ ,)|]+", "triton [v]");
    s.add_filter(r"max abs err [0-9.e-]+", "max abs err [err]");
    // The re-call check makes a random number of further calls.
    s.add_filter(r"x\d+ \(\d+ of \d+ calls", "x[n] ([n] of [n] calls");
    // The batch table's wall-clock column.
    s.add_filter(r"(?m) +\d+\.\d\d  (hit|-)$", " [wall]  $1");
    s
}

#[test]
fn suite_list_of_level_two() {
    let state = tempfile::tempdir().unwrap();
    let out = run(tf(state.path()).args(["suite", "list", "--level", "2"]));
    assert_eq!(out.status.code(), Some(0));
    insta::assert_snapshot!(text(&out.stdout));
}

#[test]
fn guard_findings_read_like_a_linter() {
    let state = tempfile::tempdir().unwrap();
    let out = run(tf(state.path()).args([
        "guard",
        "tests/redteam/hostile/background_thread.py",
        "tests/redteam/hostile/builtins_escape.py",
        "tests/redteam/honest/autotuned_kernel.py",
    ]));
    assert_eq!(out.status.code(), Some(1));
    insta::assert_snapshot!(text(&out.stdout));
}

#[test]
fn eval_verdict_and_batch_table() {
    let state = tempfile::tempdir().unwrap();
    let one = run(tf(state.path()).args([
        "eval",
        "--problem",
        "bench/level1/relu.py",
        "--candidate",
        "bench/solutions/level1/relu.py",
    ]));
    assert_eq!(one.status.code(), Some(0), "{}", text(&one.stderr));
    let cands = tempfile::tempdir().unwrap();
    let sol = std::fs::read_to_string(repo().join("bench/solutions/level1/relu.py")).unwrap();
    std::fs::write(cands.path().join("relu.py"), &sol).unwrap();
    std::fs::write(cands.path().join("sigmoid.py"), "this is not python(\n").unwrap();
    let batch = run(tf(state.path())
        .args(["eval", "--problems", "bench/level1", "--candidates"])
        .arg(cands.path()));
    assert_eq!(batch.status.code(), Some(1), "{}", text(&batch.stderr));
    // A batch says how long the pool took to start, in its parts (CPU mode forks).
    let err = text(&batch.stderr);
    assert!(err.contains("pool started in") && err.contains("fork server ready at"), "{err}");
    // And where its device's time went (CPU mode times nothing: no exclusive hold).
    let lane = err.lines().find(|l| l.starts_with("device 0: ")).unwrap_or_else(|| panic!("{err}"));
    assert!(lane.contains("exclusive holds 0.0s (0 holds), draining for them 0.0s"), "{lane}");
    assert!(!lane.contains("incomplete"), "{lane}");
    settings().bind(|| {
        insta::assert_snapshot!("eval_single", text(&one.stdout));
        insta::assert_snapshot!("eval_batch", text(&batch.stdout));
    });
}

#[test]
fn run_summary() {
    let relu = std::fs::read_to_string(repo().join("bench/solutions/level1/relu.py")).unwrap();
    let reply = format!("Here it is.\n\n```python\n{relu}```\n");
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |Json(body): Json<Value>| {
            let reply = reply.clone();
            async move {
                Json(json!({
                    "id": "c1", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
                }))
            }
        }),
    );
    let url = format!("http://{}/v1", serve_on_loopback(app));
    let state = tempfile::tempdir().unwrap();
    let out_dir = state.path().join("report");
    let out = run(tf(state.path())
        .args(["run", "--base-url", &url, "--problem", "relu", "--run-id", "snap"])
        .arg("--out")
        .arg(&out_dir));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    settings().bind(|| insta::assert_snapshot!(text(&out.stdout)));
}

/// An installed binary finds its own suite: copied out of the build tree and run from an
/// empty directory, `suite list`, `run --limit 1` and `suite validate` work with no
/// `--suite` and no `bench/` in sight.
#[test]
fn an_installed_binary_runs_from_any_directory() {
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("bin/tritonforge");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_tritonforge"), &bin).unwrap();
    let work = home.path().join("elsewhere");
    std::fs::create_dir_all(&work).unwrap();
    let tf_here = |args: &[&str]| {
        let mut c = std::process::Command::new(&bin);
        c.current_dir(&work)
            .arg("--venv")
            .arg(venv())
            .args(args)
            .env_remove("TRITONFORGE_PYTHON")
            .env_remove("TRITONFORGE_HOME")
            .env_remove("TRITONFORGE_SUITE")
            .stdin(std::process::Stdio::null());
        run(&mut c)
    };
    let list = tf_here(&["suite", "list", "--json"]);
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    assert!(text(&list.stdout).lines().count() > 10);

    let relu = std::fs::read_to_string(repo().join("bench/solutions/level1/relu.py")).unwrap();
    let reply = format!("```python\n{relu}```\n");
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |Json(_): Json<Value>| {
            let reply = reply.clone();
            async move {
                Json(json!({"id": "c", "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}]}))
            }
        }),
    );
    let url = format!("http://{}/v1", serve_on_loopback(app));
    let played = tf_here(&["run", "--base-url", &url, "--limit", "1", "--json"]);
    assert_eq!(played.status.code(), Some(0), "{}", text(&played.stderr));
    let v: Value = serde_json::from_str(text(&played.stdout).trim()).unwrap();
    assert_eq!(v["summary"]["overall"]["problems"], 1, "{v}");
    assert!(work.join("tritonforge-report/report.md").is_file());
    assert!(work.join(".tritonforge/tritonforge.sqlite").is_file());

    let checked = tf_here(&["suite", "validate", "--family", "softmax", "--json"]);
    assert_eq!(checked.status.code(), Some(0), "{}", text(&checked.stderr));
    let v: Value = serde_json::from_str(text(&checked.stdout).trim()).unwrap();
    assert!(v["solutions_checked"].as_u64().unwrap() >= 1, "{v}");
}

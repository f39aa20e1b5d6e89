//! End-to-end tests of the real `tritonforge` binary driving the real Python worker
//! (CPU mode: Triton's interpreter) and a real SQLite store.
//!
//! The managed environment is shared by every test (`<repo>/.tritonforge/venv`, the
//! same one the README's main command creates); the first test to need it creates it
//! under a file lock. Each test has its own state directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::*;

/// One evaluation with `--json`: (exit code, record, stderr).
fn eval_one(
    state: &Path,
    problem: &Path,
    candidate: &Path,
    extra: &[&str],
) -> (i32, Value, String) {
    let out = run(tf(state)
        .args(["eval", "--json", "--problem"])
        .arg(problem)
        .arg("--candidate")
        .arg(candidate)
        .args(extra));
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    let record: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
    (out.status.code().unwrap_or(-1), record, stderr)
}

fn relu_problem() -> PathBuf {
    fixture("problems/relu_small.py")
}

#[test]
fn a_correct_candidate_is_correct_and_a_repeat_is_a_cache_hit() {
    let state = tempfile::tempdir().unwrap();
    let cand = repo().join("bench/solutions/level1/relu.py");
    let problem = repo().join("bench/level1/relu.py");
    let (code, rec, err) = eval_one(state.path(), &problem, &cand, &[]);
    assert_eq!(code, 0, "stderr: {err}");
    assert_eq!(rec["status"], "correct");
    assert_eq!(rec["cached"], false);
    assert_eq!(rec["trials"].as_array().unwrap().len(), 5);
    // CPU mode picks the manifest's `small` variant and never invents a timing.
    assert_eq!(rec["config"]["variant"], "small");
    assert_eq!(rec["config"]["overrides"]["DIM"], 1000);
    assert!(rec["timing"].is_null());
    assert!(rec["timing_note"].as_str().unwrap().contains("CPU mode"));
    assert_eq!(rec["environment"]["device"], "cpu");
    assert_eq!(rec["environment"]["interpret"], true);
    assert_eq!(rec["key"].as_str().unwrap().len(), 64);

    let (code2, rec2, _) = eval_one(state.path(), &problem, &cand, &[]);
    assert_eq!(code2, 0);
    assert_eq!(rec2["cached"], true);
    assert_eq!(rec2["key"], rec["key"]);

    // A different config is a different evaluation, not a hit.
    let (_, rec3, _) = eval_one(state.path(), &problem, &cand, &["--trials", "2"]);
    assert_eq!(rec3["cached"], false);
    assert_ne!(rec3["key"], rec["key"]);

    // The human-readable form says it was a hit too, and the store file holds the records.
    let out = run(tf(state.path())
        .args(["eval", "--problem"])
        .arg(&problem)
        .arg("--candidate")
        .arg(&cand));
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("verdict:   correct"), "{stdout}");
    assert!(stdout.contains("cache hit"), "{stdout}");
    let db = rusqlite::Connection::open(state.path().join("tritonforge.sqlite")).unwrap();
    let n: i64 = db.query_row("SELECT COUNT(*) FROM evaluations", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 2);
}

#[test]
fn wrong_values_are_incorrect_with_the_max_error_and_where() {
    let state = tempfile::tempdir().unwrap();
    let (code, rec, _) =
        eval_one(state.path(), &relu_problem(), &fixture("candidates/wrong_values.py"), &[]);
    assert_eq!(code, 1);
    assert_eq!(rec["status"], "incorrect");
    assert_eq!(rec["stage"], "correctness");
    let m = &rec["mismatch"];
    assert_eq!(m["kind"], "value");
    assert_eq!(m["trial"], 0);
    assert_eq!(m["output"], 0);
    let max_abs = m["max_abs_err"].as_f64().unwrap();
    assert!(max_abs > 1e-3 && max_abs < 0.1, "leaky slope 0.01 on randn: {max_abs}");
    assert_eq!(m["worst_index"].as_array().unwrap().len(), 2);
    assert!(m["mismatched"].as_u64().unwrap() > 0);
    let msg = rec["message"].as_str().unwrap();
    assert!(msg.contains("max abs err") && msg.contains("worst at"), "{msg}");
}

#[test]
fn nan_never_passes() {
    let state = tempfile::tempdir().unwrap();
    let (code, rec, _) =
        eval_one(state.path(), &relu_problem(), &fixture("candidates/nan_output.py"), &[]);
    assert_eq!(code, 1);
    assert_eq!(rec["status"], "incorrect");
    assert_eq!(rec["mismatch"]["kind"], "nonfinite");
}

#[test]
fn a_syntax_error_is_a_compile_error_at_the_candidates_line() {
    let state = tempfile::tempdir().unwrap();
    let (code, rec, _) =
        eval_one(state.path(), &relu_problem(), &fixture("candidates/syntax_error.py"), &[]);
    assert_eq!(code, 1);
    assert_eq!(rec["status"], "compile_error");
    assert_eq!(rec["stage"], "import");
    assert_eq!(rec["error"]["exc_type"], "SyntaxError");
    let frames = rec["error"]["frames"].as_array().unwrap();
    let last = frames.last().expect("a frame in the candidate");
    assert_eq!(last["file"], "syntax_error.py");
    assert_eq!(last["line"], 9);
}

#[test]
fn an_exception_in_forward_is_a_runtime_error_with_the_candidates_frames() {
    let state = tempfile::tempdir().unwrap();
    let (code, rec, _) =
        eval_one(state.path(), &relu_problem(), &fixture("candidates/raises.py"), &["--no-guard"]);
    assert_eq!(code, 1);
    assert_eq!(rec["status"], "runtime_error");
    assert_eq!(rec["error"]["exc_type"], "ValueError");
    let frames = rec["error"]["frames"].as_array().unwrap();
    // Only the candidate's own frames, innermost last, with its line numbers.
    assert!(frames.iter().all(|f| f["file"] == "raises.py"), "{frames:?}");
    assert_eq!(frames.last().unwrap()["line"], 13);
    assert_eq!(frames.last().unwrap()["function"], "compute_scale");
    assert!(rec["message"].as_str().unwrap().contains("scale table is empty"));
}

#[test]
fn writing_into_inputs_is_incorrect() {
    let state = tempfile::tempdir().unwrap();
    let (code, rec, _) =
        eval_one(state.path(), &relu_problem(), &fixture("candidates/writes_inputs.py"), &[]);
    assert_eq!(code, 1);
    assert_eq!(rec["status"], "incorrect");
    assert_eq!(rec["mismatch"]["kind"], "input_mutated");
    assert!(rec["message"].as_str().unwrap().contains("wrote into input 0"));
}

#[test]
fn broken_problem_files_get_a_clear_error_naming_the_file() {
    let state = tempfile::tempdir().unwrap();
    let cand = fixture("candidates/relu_ok.py");
    for (problem, needle) in
        [("problems/bad_syntax.py", "SyntaxError"), ("problems/no_inputs.py", "get_inputs")]
    {
        let p = fixture(problem);
        let out =
            run(tf(state.path()).args(["eval", "--problem"]).arg(&p).arg("--candidate").arg(&cand));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{problem}: {err}");
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        assert!(err.contains(&name) && err.contains(needle), "{problem}: {err}");
    }
    // A problem file that does not exist is named before anything starts.
    let out = run(tf(state.path())
        .args(["eval", "--problem", "/nonexistent/p.py", "--candidate"])
        .arg(&cand));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/p.py"));
}

#[test]
fn a_problem_too_big_for_the_device_is_bad_input_naming_the_sizes() {
    let state = tempfile::tempdir().unwrap();
    let pair = |capacity: &str| {
        run(tf(state.path())
            .env("TRITONFORGE_DEVICE_MEMORY_BYTES", capacity)
            .args(["eval", "--problem"])
            .arg(relu_problem())
            .arg("--candidate")
            .arg(fixture("candidates/relu_ok.py")))
    };
    // 64 KiB stands in for a GPU's memory: the small ReLU's copies need about 330 KiB.
    let out = pair("64KiB");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for part in ["relu_small.py", "needs 328.1 KiB", "64.0 KiB in all"] {
        assert!(err.contains(part), "{part:?} missing from {err}");
    }
    // Room enough, and it is evaluated as ever.
    assert_eq!(pair("1GiB").status.code(), Some(0));
    // A capacity that is no byte count is named; it is the environment's, not the input's.
    let out = pair("lots");
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains("TRITONFORGE_DEVICE_MEMORY_BYTES"));
}

#[test]
fn relative_paths_work_from_any_directory() {
    // Workers run in their own scratch directories; relative paths must not break them.
    let venv = venv();
    let parent = venv.parent().unwrap();
    let state = tempfile::tempdir_in(parent).unwrap();
    let out = run(Command::new(env!("CARGO_BIN_EXE_tritonforge"))
        .current_dir(parent)
        .arg("--state-dir")
        .arg(state.path().file_name().unwrap())
        .arg("--venv")
        .arg(venv.file_name().unwrap())
        .env_remove("TRITONFORGE_PYTHON")
        .args(["eval", "--json", "--problem"])
        .arg(relu_problem())
        .arg("--candidate")
        .arg(fixture("candidates/relu_ok.py")));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn usage_errors_exit_2() {
    let state = tempfile::tempdir().unwrap();
    let out = run(tf(state.path()).args(["eval", "--problem", "x.py"]));
    assert_eq!(out.status.code(), Some(2));
    let out = run(tf(state.path()).args(["eval", "--bogus"]));
    assert_eq!(out.status.code(), Some(2));
    let out = run(tf(state.path()).args(["frobnicate"]));
    assert_eq!(out.status.code(), Some(2));
    // Bad pool settings are named before anything starts.
    let pair = |extra: &[&str]| {
        run(tf(state.path())
            .args(["eval", "--problem"])
            .arg(relu_problem())
            .arg("--candidate")
            .arg(fixture("candidates/relu_ok.py"))
            .args(extra))
    };
    let out = pair(&["--gpu-mem-fraction", "1.5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--gpu-mem-fraction must be in (0, 1]"));
    let out = pair(&["--naive", "--exclusive"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--naive"));
    let out = pair(&["--speedup-cap", "0.5"]);
    assert_eq!(out.status.code(), Some(2));
}

/// Build a problems/candidates pair of directories: every candidate gets a copy of
/// the small ReLU problem under its own name.
fn batch_dirs(root: &Path, candidates: &[(&str, &str)]) -> (PathBuf, PathBuf) {
    let probs = root.join("problems");
    let cands = root.join("candidates");
    std::fs::create_dir_all(&probs).unwrap();
    std::fs::create_dir_all(&cands).unwrap();
    for (name, fixture_name) in candidates {
        std::fs::copy(relu_problem(), probs.join(format!("{name}.py"))).unwrap();
        std::fs::copy(
            fixture(&format!("candidates/{fixture_name}.py")),
            cands.join(format!("{name}.py")),
        )
        .unwrap();
    }
    (probs, cands)
}

fn by_name(records: &[Value], name: &str) -> Value {
    records
        .iter()
        .find(|r| r["problem"]["name"] == name)
        .unwrap_or_else(|| panic!("no record for {name}"))
        .clone()
}

#[test]
fn a_batch_survives_hangs_and_aborts_and_every_process_is_fresh() {
    let root = tempfile::tempdir().unwrap();
    let (probs, cands) = batch_dirs(
        root.path(),
        &[
            ("a_hang", "hangs"),
            ("b_abort", "aborts"),
            ("c_fresh", "fresh_process"),
            ("d_fresh", "fresh_process"),
            ("e_fresh", "fresh_process"),
            ("f_prints", "prints"),
        ],
    );
    let state = root.path().join("state");
    // The first use may create the Python environment; that is not the batch's time.
    let setup = run(tf(&state).arg("setup"));
    assert_eq!(setup.status.code(), Some(0), "{}", text(&setup.stderr));
    let started = Instant::now();
    let out = run(tf(&state)
        .args(["eval", "--json", "--no-guard", "--jobs", "2", "--budget", "10", "--problems"])
        .arg(&probs)
        .arg("--candidates")
        .arg(&cands));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let recs = json_lines(&out.stdout);
    assert_eq!(recs.len(), 6, "{err}");

    let hang = by_name(&recs, "a_hang");
    assert_eq!(hang["status"], "timeout");
    assert_eq!(hang["stage"], "process");
    let abort = by_name(&recs, "b_abort");
    assert_eq!(abort["status"], "runtime_error");
    assert_eq!(abort["stage"], "process");
    let msg = abort["message"].as_str().unwrap();
    assert!(msg.contains("SIGABRT") && msg.contains("b_abort.py:11 in forward"), "{abort}");
    // faulthandler's dump names the candidate's line.
    assert!(abort["stderr_tail"].as_str().unwrap().contains("b_abort.py"), "{abort}");
    for name in ["c_fresh", "d_fresh", "e_fresh"] {
        assert_eq!(by_name(&recs, name)["status"], "correct", "{name}");
    }
    // Candidate stdout is diverted to stderr: no forged or corrupted protocol line.
    assert_eq!(by_name(&recs, "f_prints")["status"], "correct");
    // The hang cost its budget once, in parallel with the others, not the whole batch.
    assert!(started.elapsed() < Duration::from_secs(90), "{:?}", started.elapsed());
    assert!(err.contains("6 evaluations"), "{err}");

    let db = rusqlite::Connection::open(state.join("tritonforge.sqlite")).unwrap();
    let n: i64 = db.query_row("SELECT COUNT(*) FROM evaluations", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 6);
    // The batch is a run the dashboard lists, its six evaluations linked to it, and the
    // sources it evaluated kept by content.
    let (id, kind, status): (String, String, String) = db
        .query_row("SELECT id, kind, status FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert!(id.starts_with("eval-"), "{id}");
    assert_eq!((kind.as_str(), status.as_str()), ("eval", "done"));
    let linked: i64 = db
        .query_row("SELECT COUNT(*) FROM run_evaluations WHERE run = ?1", [&id], |r| r.get(0))
        .unwrap();
    assert_eq!(linked, 6);
    let kept: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM evaluations e JOIN sources s ON s.sha256 = e.candidate_sha256",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kept, 6, "every candidate's source is kept");
}

fn stored(state: &Path) -> i64 {
    let path = state.join("tritonforge.sqlite");
    if !path.exists() {
        return 0;
    }
    rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|db| db.query_row("SELECT COUNT(*) FROM evaluations", [], |r| r.get(0)))
        .unwrap_or(0)
}

#[test]
fn an_interrupted_batch_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let names: Vec<(String, &str)> =
        (0..8).map(|i| (format!("slow_{i}"), "slow_correct")).collect();
    let refs: Vec<(&str, &str)> = names.iter().map(|(n, f)| (n.as_str(), *f)).collect();
    let (probs, cands) = batch_dirs(root.path(), &refs);
    let state = root.path().join("state");
    let mut child = tf(&state)
        .args(["eval", "--jobs", "1", "--problems"])
        .arg(&probs)
        .arg("--candidates")
        .arg(&cands)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    while stored(&state) < 2 {
        assert!(Instant::now() < deadline, "no progress");
        assert!(child.try_wait().unwrap().is_none(), "batch ended early");
        std::thread::sleep(Duration::from_millis(100));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    let before = stored(&state);
    assert!((2..8).contains(&before), "stored {before}");

    let out = run(tf(&state)
        .args(["eval", "--json", "--jobs", "2", "--problems"])
        .arg(&probs)
        .arg("--candidates")
        .arg(&cands));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let recs = json_lines(&out.stdout);
    assert_eq!(recs.len(), 8);
    assert!(recs.iter().all(|r| r["status"] == "correct"));
    let hits = recs.iter().filter(|r| r["cached"] == true).count() as i64;
    assert_eq!(hits, before, "everything stored before the interrupt is a cache hit");
    assert_eq!(stored(&state), 8);
}

#[test]
fn doctor_reports_interpreter_versions_device_and_store() {
    let state = tempfile::tempdir().unwrap();
    // Make sure the environment exists (first test to get here creates it).
    let out = run(tf(state.path()).arg("setup"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(tf(state.path()).arg("doctor"));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("torch 2.11.0"), "{stdout}");
    assert!(stdout.contains("triton 3.6.0"), "{stdout}");
    assert!(stdout.contains("CPU mode: Triton interpreter"), "{stdout}");
    assert!(stdout.contains(&venv().join("bin/python").display().to_string()), "{stdout}");
    assert!(stdout.contains("tritonforge.sqlite"), "{stdout}");

    let out = run(tf(state.path()).args(["doctor", "--json"]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["env"]["device"], "cpu");
    assert_eq!(
        v["protocol"],
        tritonforge_protocol::PROTOCOL_VERSION,
        "the protocol version of crates/protocol"
    );
    // The sandbox is read from a real worker; this kernel has landlock (CI's too), and
    // the text report says what is enforced.
    assert!(
        v["sandbox"]["landlock_abi"].is_u64()
            || v["sandbox"]["notes"].as_array().is_some_and(|n| !n.is_empty()),
        "{v}"
    );
    assert!(stdout.contains("sandbox:"), "{stdout}");

    // A named interpreter that lacks torch is reported as unusable, not crashed on.
    let out = run(tf(state.path()).args(["--python", "python3", "doctor"]));
    let stdout = text(&out.stdout);
    if !stdout.contains("torch 2.11.0") {
        assert_eq!(out.status.code(), Some(3), "{stdout}");
        assert!(stdout.contains("unusable"), "{stdout}");
    }
}

#[test]
fn pytorch_in_disguise_decoys_and_hook_tampering_are_rejected_at_run_time() {
    let state = tempfile::tempdir().unwrap();
    let cases = [
        // (candidate, the line the verdict must carry)
        ("torch_in_disguise.py", "trial 0: ModelNew.forward launched none of the candidate's own Triton kernels (it defines relu_kernel)"),
        ("kernel_only_at_first.py", "trial 1: ModelNew.forward launched none"),
        ("tampers_with_hooks.py", "tampered with the launch hooks"),
    ];
    for (name, expected) in cases {
        let (code, rec, stderr) = eval_one(
            state.path(),
            &relu_problem(),
            &fixture(&format!("candidates/{name}")),
            &["--no-guard"],
        );
        assert_eq!(code, 1, "{name}: {stderr}");
        assert_eq!(rec["status"], "rejected", "{name}: {rec}");
        assert_eq!(rec["stage"], "provenance", "{name}: {rec}");
        let msg = rec["message"].as_str().unwrap();
        assert!(msg.contains(expected), "{name}: {msg}");
    }
    // An honest kernel's record says which kernel ran on every call.
    let (code, rec, _) = eval_one(
        state.path(),
        &relu_problem(),
        &fixture("candidates/relu_ok.py"),
        &["--trials", "4"],
    );
    assert_eq!(code, 0, "{rec}");
    // 4 trials, then the re-call check: 3 to 6 more calls (how many is random).
    let calls = rec["provenance"]["calls"].as_u64().unwrap();
    assert!((7..=10).contains(&calls), "{rec}");
    assert_eq!(rec["provenance"]["calls_without_launch"], 0, "{rec}");
    assert_eq!(rec["provenance"]["kernels"][0]["name"], "relu_kernel");
    assert_eq!(rec["provenance"]["kernels"][0]["launches"].as_u64(), Some(calls));
}

#[test]
fn the_sandbox_stops_writes_outside_scratch_and_network_connections() {
    let state = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escaped.txt");
    let out = run(tf(state.path())
        .env("TF_TEST_ESCAPE_PATH", &target)
        .args(["eval", "--json", "--no-guard", "--problem"])
        .arg(relu_problem())
        .arg("--candidate")
        .arg(fixture("candidates/writes_outside_scratch.py")));
    let rec: Value = serde_json::from_slice(&out.stdout).expect("one JSON record");
    if rec["sandbox"]["filesystem"] != true {
        // A kernel without landlock: the record must say so rather than pretend.
        let notes = rec["sandbox"]["notes"].to_string();
        assert!(notes.contains("landlock"), "{rec}");
        eprintln!("landlock unavailable here; sandbox escape checks skipped: {notes}");
        return;
    }
    // The audit hook names the open (the runtime layers run without the guard too); the
    // sandbox is what stopped the write: `open` raised PermissionError.
    assert_eq!(rec["status"], "rejected", "{rec}");
    let msg = rec["message"].as_str().unwrap();
    assert!(msg.contains("[runtime-audit]") && msg.contains("PermissionError"), "{rec}");
    assert!(!target.exists(), "the candidate wrote outside its scratch dir");

    let (code, rec, _) = eval_one(
        state.path(),
        &relu_problem(),
        &fixture("candidates/connects_out.py"),
        &["--no-guard"],
    );
    assert_eq!(code, 1);
    assert_eq!(rec["sandbox"]["network"], true, "{rec}");
    assert_eq!(rec["status"], "runtime_error", "{rec}");
    let msg = rec["message"].as_str().unwrap();
    assert!(msg.contains("PermissionError"), "{msg}");
    // Without the sandbox the same connect is merely refused: the rule, not luck, stopped it.
    let (_, rec, _) = eval_one(
        state.path(),
        &relu_problem(),
        &fixture("candidates/connects_out.py"),
        &["--no-landlock", "--no-store", "--no-guard"],
    );
    let msg = rec["message"].as_str().unwrap();
    assert!(msg.contains("ConnectionRefusedError"), "{msg}");
}

#[test]
fn the_guard_rejects_cheats_before_anything_runs_and_names_the_rule() {
    let state = tempfile::tempdir().unwrap();
    for (name, rule) in [
        ("torch_in_disguise.py", "kernel-not-launched"),
        ("kernel_only_at_first.py", "cross-call-state"),
        ("tampers_with_hooks.py", "monkey-patching"),
        ("connects_out.py", "process-or-system"),
        ("writes_outside_scratch.py", "file-or-env-access"),
    ] {
        let (code, rec, _) =
            eval_one(state.path(), &relu_problem(), &fixture(&format!("candidates/{name}")), &[]);
        assert_eq!(code, 1, "{name}: {rec}");
        assert_eq!(rec["status"], "rejected", "{name}: {rec}");
        assert_eq!(rec["stage"], "guard", "{name}: {rec}");
        assert!(rec["message"].as_str().unwrap().contains(rule), "{name}: {rec}");
        // Nothing ran: no trials, no executor time, no provenance.
        assert!(rec["executor_ms"].is_null(), "{name}: {rec}");
        assert!(rec["provenance"].is_null(), "{name}: {rec}");
        assert!(rec["guard"].as_array().unwrap().iter().any(|f| f["rule"] == rule));
    }
    // A policy that turns the rule off lets the same file run (and the runtime layer
    // catches it instead); the policy is part of the cache key.
    let policy = state.path().join("lenient.toml");
    std::fs::write(
        &policy,
        "[rules]\n\"kernel-not-launched\" = \"off\"\n\"torch-compute-in-forward\" = \"warn\"\n",
    )
    .unwrap();
    let (_, rec, _) = eval_one(
        state.path(),
        &relu_problem(),
        &fixture("candidates/torch_in_disguise.py"),
        &["--policy", policy.to_str().unwrap()],
    );
    assert_eq!(rec["status"], "rejected", "{rec}");
    assert_eq!(rec["stage"], "provenance", "{rec}");
    assert_eq!(rec["guard"][0]["severity"], "warn", "{rec}");
    // A broken policy is bad input, named.
    std::fs::write(&policy, "[rules]\n\"no-such-rule\" = \"off\"\n").unwrap();
    let out = run(tf(state.path())
        .args(["eval", "--policy"])
        .arg(&policy)
        .arg("--problem")
        .arg(relu_problem())
        .arg("--candidate")
        .arg(fixture("candidates/relu_ok.py")));
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("lenient.toml") && err.contains("no-such-rule"), "{err}");
}

#[test]
fn guard_prints_findings_like_a_linter() {
    let state = tempfile::tempdir().unwrap();
    let out = run(tf(state.path())
        .arg("guard")
        .arg(fixture("candidates/relu_ok.py"))
        .arg(fixture("candidates/torch_in_disguise.py")));
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.iter().all(|l| l.contains("torch_in_disguise.py:")), "{stdout}");
    assert!(
        stdout.contains(
            "torch_in_disguise.py:17:16: reject [torch-compute-in-forward] `torch.relu` in forward"
        ),
        "{stdout}"
    );
    let out = run(tf(state.path()).args(["guard", "--json"]).arg(fixture("candidates/relu_ok.py")));
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["rejected"], false);
    assert_eq!(v["findings"].as_array().unwrap().len(), 0);
    let out = run(tf(state.path()).args(["guard", "--rules"]));
    assert!(text(&out.stdout).contains("kernel-not-launched [reject]"));
}

/// A kernel right only at the shape it is evaluated at fails the trials at unseen shapes
/// (`--shape-check VARIANT`; on a GPU the default is the problem's heldout variant).
#[test]
fn a_kernel_hard_coded_to_the_benchmark_shape_fails_at_unseen_shapes() {
    let root = tempfile::tempdir().unwrap();
    let bench = root.path().join("bench");
    std::fs::create_dir_all(bench.join("level1")).unwrap();
    std::fs::copy(repo().join("bench/level1/relu.py"), bench.join("level1/relu.py")).unwrap();
    std::fs::write(
        bench.join("manifest.toml"),
        "[problems.\"level1/relu\"]\nvariants.small = { BATCH = 4, DIM = 1000 }\n\
         variants.odd = { BATCH = 5, DIM = 1001 }\n",
    )
    .unwrap();
    let problem = bench.join("level1/relu.py");
    let state = root.path().join("state");
    let cheat = fixture("candidates/hard_coded_small_shape.py");
    // Without the check, the shape it was written for is all it meets.
    let (_, rec, _) = eval_one(&state, &problem, &cheat, &["--no-store"]);
    assert_eq!(rec["status"], "correct", "{rec}");
    assert!(rec["config"]["shape_check"].is_null(), "{rec}");

    let (code, rec, _) = eval_one(&state, &problem, &cheat, &["--shape-check", "odd"]);
    assert_eq!(code, 1, "{rec}");
    assert_eq!(rec["status"], "incorrect", "{rec}");
    assert_eq!(rec["config"]["shape_check"]["DIM"], 1001, "{rec}");
    let msg = rec["message"].as_str().unwrap();
    assert!(msg.starts_with("at unseen shapes (BATCH=5, DIM=1001)"), "{msg}");
    assert_eq!(rec["mismatch"]["trial"], 5, "{rec}");

    let honest = repo().join("bench/solutions/level1/relu.py");
    let (code, rec, _) = eval_one(&state, &problem, &honest, &["--shape-check", "odd"]);
    assert_eq!(code, 0, "{rec}");
    assert_eq!(rec["trials"].as_array().unwrap().len(), 7, "{rec}");

    let out = run(tf(&state)
        .args(["eval", "--shape-check", "huge", "--problem"])
        .arg(&problem)
        .arg("--candidate")
        .arg(&honest));
    assert_ne!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("huge"), "{}", text(&out.stderr));
}

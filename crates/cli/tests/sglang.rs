//! `tritonforge run --api sglang` against a mock of SGLang's native `/generate` on
//! loopback (axum): token ids in, token ids and log-probs out. The mock holds the real
//! SmolLM2 tokenizer (exported from the GGUF file the managed environment ships), so the
//! test can check that the ids the policy was sent are exactly what transformers'
//! `apply_chat_template` makes of the stored messages, and that the stored completion
//! ids are exactly the ones the server returned: no re-tokenisation anywhere.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use tritonforge_chat::ChatTokenizer;

mod common;
use common::*;

/// (input_ids, output_ids) of each request the mock answered.
type Seen = Arc<Mutex<Vec<(Vec<u32>, Vec<u32>)>>>;

#[derive(Clone)]
struct Mock {
    tokenizer: Arc<ChatTokenizer>,
    /// Replies by turn (the number of assistant turns already in the prompt).
    replies: Vec<String>,
    seen: Seen,
    /// Answer in the OpenAI shape instead (a server that is not SGLang's native API).
    wrong_shape: bool,
}

async fn generate(State(m): State<Mock>, Json(body): Json<Value>) -> Json<Value> {
    let input: Vec<u32> =
        body["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    if m.wrong_shape {
        return Json(json!({"choices": [{"message": {"content": "hi"}}]}));
    }
    let prompt = m.tokenizer.decode(&input, false).unwrap();
    let turn = prompt.matches("<|im_start|>assistant").count().saturating_sub(1);
    let text = m.replies.get(turn).or(m.replies.last()).unwrap();
    let end = m.tokenizer.token_id("<|im_end|>").unwrap();
    let mut out = m.tokenizer.encode(text).unwrap();
    out.push(end);
    let lps: Vec<Value> =
        out.iter().enumerate().map(|(i, id)| json!([-0.01 * (i % 7) as f64, id, null])).collect();
    assert_eq!(body["sampling_params"]["max_new_tokens"], 700);
    assert_eq!(body["return_logprob"], true);
    m.seen.lock().unwrap().push((input.clone(), out.clone()));
    Json(json!({
        "text": text,
        "output_ids": out,
        "meta_info": {
            "id": "r1", "prompt_tokens": input.len(), "completion_tokens": out.len(),
            "finish_reason": {"type": "stop", "matched": end},
            "weight_version": "default",
            "output_token_logprobs": lps,
        }
    }))
}

fn serve(mock: Mock) -> String {
    let app = Router::new().route("/generate", post(generate)).with_state(mock);
    format!("http://{}", serve_on_loopback(app))
}

fn export_tokenizer(state: &Path, dir: &Path) {
    let out = run(tf(state).args(["tokenizer", "export", "--out"]).arg(dir));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// transformers' `apply_chat_template` ids for each chat (JSON messages arrays).
fn hf_ids(dir: &Path, work: &Path, chats: &[Value]) -> Vec<Vec<u32>> {
    let file = work.join("chats.json");
    let wrapped: Vec<Value> =
        chats.iter().map(|m| json!({"messages": m, "add_generation_prompt": true})).collect();
    std::fs::write(&file, serde_json::to_string(&wrapped).unwrap()).unwrap();
    let out = std::process::Command::new(venv().join("bin/python"))
        .arg(fixture("chat/hf_render.py"))
        .arg(dir)
        .arg(&file)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    v.iter()
        .map(|r| r["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect())
        .collect()
}

fn sglang_run(state: &Path, url: &str, tok: Option<&PathBuf>, out: &Path) -> std::process::Output {
    let mut cmd = tf(state);
    cmd.args(["run", "--api", "sglang", "--base-url", url]);
    if let Some(t) = tok {
        cmd.arg("--tokenizer").arg(t);
    }
    run(cmd
        .args(["--problem", "relu", "--turns", "3", "--max-tokens", "700"])
        .args(["--retries", "0", "--jobs", "2", "--json", "--out"])
        .arg(out))
}

#[test]
fn sglang_native_generate_keeps_exact_token_ids_across_turns() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let dir = root.path().join("tok");
    export_tokenizer(&state, &dir);
    let tokenizer = Arc::new(ChatTokenizer::from_dir(&dir).unwrap());
    let right = std::fs::read_to_string(repo().join("bench/solutions/level1/relu.py")).unwrap();
    let wrong = right.replace("tl.maximum(x, 0.0)", "x").replace("tl.where(x > 0, x, 0.0)", "x");
    assert_ne!(wrong, right);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let url = serve(Mock {
        tokenizer: tokenizer.clone(),
        replies: vec![
            format!("Try this:\n```python\n{wrong}```"),
            format!("<think>negatives → 0</think>\n```python\n{right}```"),
        ],
        seen: seen.clone(),
        wrong_shape: false,
    });
    let out = sglang_run(&state, &url, Some(&dir), &root.path().join("r"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let eps = episodes(&state);
    assert_eq!(eps.len(), 1);
    assert!(eps[0]["backend"].as_str().unwrap().starts_with("sglang:"));
    let turns = eps[0]["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2, "wrong, then fixed");
    assert_eq!(turns[0]["outcome"], "incorrect");
    assert_eq!(turns[1]["outcome"], "correct");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    // The prompt ids sent are transformers' ids for the stored messages, turn by turn.
    let chats: Vec<Value> = turns.iter().map(|t| t["messages"].clone()).collect();
    let want = hf_ids(&dir, root.path(), &chats);
    for (i, t) in turns.iter().enumerate() {
        let stored: Vec<u32> =
            serde_json::from_value(t["completion"]["prompt_ids"].clone()).unwrap();
        assert_eq!(stored, want[i], "turn {i}: prompt ids differ from transformers'");
        assert_eq!(seen[i].0, want[i], "turn {i}: the server got other ids");
        let ids: Vec<u32> = serde_json::from_value(t["completion"]["token_ids"].clone()).unwrap();
        assert_eq!(ids, seen[i].1, "turn {i}: completion ids are the server's");
        let lps = t["completion"]["logprobs"].as_array().unwrap();
        assert_eq!(lps.len(), ids.len());
        assert_eq!(t["completion"]["finish_reason"], "stop");
        assert_eq!(t["completion"]["weight_version"], "default", "the engine's version is kept");
    }
    // The second turn's prompt holds the first reply and the evaluator's feedback.
    let second = tokenizer.decode(&seen[1].0, false).unwrap();
    assert!(second.contains("Try this:") && second.contains("max abs error"), "{second}");
    assert!(turns[1]["completion"]["text"].as_str().unwrap().contains("negatives → 0"));
}

#[test]
fn sglang_needs_a_tokenizer_and_a_native_endpoint() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let out = sglang_run(&state, "http://127.0.0.1:9", None, &root.path().join("r"));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--tokenizer"), "{}", text(&out.stderr));

    let missing = root.path().join("no-such-dir");
    let out = sglang_run(&state, "http://127.0.0.1:9", Some(&missing), &root.path().join("r"));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no-such-dir"), "{}", text(&out.stderr));

    let dir = root.path().join("tok");
    export_tokenizer(&state, &dir);
    let url = serve(Mock {
        tokenizer: Arc::new(ChatTokenizer::from_dir(&dir).unwrap()),
        replies: vec![String::new()],
        seen: Arc::new(Mutex::new(Vec::new())),
        wrong_shape: true,
    });
    let out = sglang_run(&state, &url, Some(&dir), &root.path().join("r"));
    assert_eq!(out.status.code(), Some(1), "every episode failed on its backend");
    let eps = episodes(&state);
    let err = eps[0]["error"].as_str().unwrap();
    assert!(err.contains("output_ids") && err.contains("/generate"), "{err}");
}

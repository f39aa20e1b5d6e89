//! `tritonforge bench import` on a folder in KernelBench's layout (`fixtures/kernelbench`,
//! problems written for these tests), through the real binary and the real worker in CPU
//! mode: `small` variants derived and checked, a problem that cannot be scaled reported
//! with its reason, the written suite evaluated at `small`, and bad input named.

use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

mod common;
use common::*;

/// An OpenAI-compatible endpoint on loopback that answers every request with `code`.
fn always_answers(code: String) -> String {
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |Json(body): Json<Value>| {
            let text = format!("Here it is.\n\n```python\n{code}```\n");
            async move {
                Json(json!({
                    "id": "c1", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
                }))
            }
        }),
    );
    format!("http://{}/v1", serve_on_loopback(app))
}

fn line<'a>(report: &'a Value, key: &str) -> &'a Value {
    report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == key)
        .unwrap_or_else(|| panic!("{key} missing from {report}"))
}

#[test]
fn imports_a_kernelbench_folder_with_small_variants_and_reports_what_it_cannot_scale() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let out = dir.path().join("suite");
    let o = run(tf(&state)
        .args(["bench", "import", "--json", "--out"])
        .arg(&out)
        .arg(fixture("kernelbench")));
    let stdout = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{stdout}\n{}", text(&o.stderr));
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["problems"].as_array().unwrap().len(), 5, "{report}");

    // Scaled by one power of two, smallest first; constants at or below 16 untouched.
    let relu = line(&report, "level1/19_ReLU");
    assert_eq!(relu["outcome"], "scaled");
    assert_eq!(relu["small"], serde_json::json!({ "dim": 64 }));
    assert_eq!(line(&report, "level1/1_Square_matmul")["small"], serde_json::json!({ "N": 64 }));
    let gemm = line(&report, "level2/12_Gemm_Multiply_LeakyReLU");
    assert_eq!(
        gemm["small"],
        serde_json::json!({ "batch_size": 16, "in_features": 64, "out_features": 32 })
    );
    assert_eq!(line(&report, "level1/54_Conv2d_tiny")["outcome"], "as_is");
    // Its reshape needs 4096-element rows: every scaling fails in the real forward.
    let fixed = line(&report, "level1/98_Fixed_rows");
    assert_eq!(fixed["outcome"], "unscalable");
    let reason = fixed["reason"].as_str().unwrap();
    assert!(reason.contains("reference forward fails") && reason.contains("4096"), "{reason}");

    // The suite: files copied as they were, the manifest beside them.
    let copied = std::fs::read_to_string(out.join("level1/19_ReLU.py")).unwrap();
    let original =
        std::fs::read_to_string(fixture("kernelbench/KernelBench/level1/19_ReLU.py")).unwrap();
    assert_eq!(copied, original);
    let manifest = std::fs::read_to_string(out.join("manifest.toml")).unwrap();
    assert!(manifest.contains("# no small variant: no scaling tried"), "{manifest}");
    let o = run(tf(&state).args(["bench", "list", "--json", "--suite"]).arg(&out));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).lines().count(), 5);

    // CPU mode evaluates it at `small`, through the imported manifest.
    let o = run(tf(&state)
        .args(["eval", "--json", "--problem"])
        .arg(out.join("level1/19_ReLU.py"))
        .arg("--candidate")
        .arg(repo().join("bench/solutions/level1/relu.py")));
    let stdout = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{stdout}\n{}", text(&o.stderr));
    let rec: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(rec["status"], "correct", "{rec}");
    assert_eq!(rec["config"]["variant"], "small", "{rec}");

    // `run` plays the imported suite too: a (scripted) model's answer evaluated at `small`.
    let relu = std::fs::read_to_string(repo().join("bench/solutions/level1/relu.py")).unwrap();
    let url = always_answers(relu);
    let o = run(tf(&state)
        .arg("--suite")
        .arg(&out)
        .args(["run", "--base-url", &url, "--model", "mock", "--problem", "19_ReLU"])
        .args(["--turns", "1", "--json", "--out"])
        .arg(dir.path().join("report")));
    assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o.stdout), text(&o.stderr));
    let eps = episodes(&state);
    assert_eq!(eps.len(), 1);
    assert_eq!(eps[0]["turns"][0]["outcome"], "correct", "{}", eps[0]);
    let db = rusqlite::Connection::open(state.join("tritonforge.sqlite")).unwrap();
    let records: Vec<Value> = db
        .prepare("SELECT record FROM evaluations")
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|t| serde_json::from_str(&t.unwrap()).unwrap())
        .collect();
    assert!(!records.is_empty());
    for r in &records {
        assert_eq!(r["config"]["overrides"], json!({ "dim": 64 }), "{r}");
    }

    // A second import into the same place would overwrite the suite: refused, named.
    let o =
        run(tf(&state).args(["bench", "import", "--out"]).arg(&out).arg(fixture("kernelbench")));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("already holds manifest.toml"), "{}", text(&o.stderr));
}

#[test]
fn a_flat_folder_takes_its_level_and_bad_folders_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let flat = dir.path().join("mine");
    std::fs::create_dir_all(&flat).unwrap();
    let relu =
        std::fs::read_to_string(fixture("kernelbench/KernelBench/level1/19_ReLU.py")).unwrap();
    std::fs::write(flat.join("relu_wide.py"), &relu).unwrap();
    let out = dir.path().join("mine-suite");
    let o = run(tf(&state).args(["bench", "import", "--level", "2"]).arg(&flat));
    let stdout = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{stdout}\n{}", text(&o.stderr));
    assert!(stdout.contains("level2/relu_wide") && stdout.contains("dim=64"), "{stdout}");
    assert!(out.join("level2/relu_wide.py").is_file(), "written beside the folder by default");

    // A .py file that is no problem: named, nothing written.
    std::fs::write(flat.join("helpers.py"), "def f():\n    return 1\n").unwrap();
    let o = run(tf(&state).args(["bench", "import", "--out"]).arg(dir.path().join("x")).arg(&flat));
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(err.contains("helpers.py") && err.contains("class Model"), "{err}");
    assert!(!dir.path().join("x").exists());

    let o = run(tf(&state).args(["bench", "import"]).arg(dir.path().join("nowhere")));
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("nowhere"), "{}", text(&o.stderr));
}

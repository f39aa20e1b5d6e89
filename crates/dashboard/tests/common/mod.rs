//! A store filled the way TritonForge's commands fill it (through the store's own API):
//! an eval batch, an agent run with episodes, an SFT run and an RL run with metrics, and
//! evaluations of several statuses with their sources; and a dashboard served over it
//! on loopback.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tritonforge_dashboard::{Dashboard, DashboardServer, Mode};
use tritonforge_protocol::EvalRecord;
use tritonforge_store::{RunKind, RunStatus, Store};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

pub fn suite() -> tritonforge_suite::Suite {
    tritonforge_suite::Suite::load(&repo().join("bench")).unwrap()
}

pub const RELU_PROBLEM: &str = "import torch\nimport torch.nn as nn\n\nBATCH = 16\nDIM = 16384\n\n\nclass Model(nn.Module):\n    \"\"\"Applies ReLU.\"\"\"\n\n    def forward(self, x):\n        return torch.relu(x)\n\n\ndef get_inputs():\n    return [torch.randn(BATCH, DIM)]\n\n\ndef get_init_inputs():\n    return []\n";

pub const RELU_CANDIDATE: &str = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\ndef relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    # one block of elements per program\n    pid = tl.program_id(0)\n    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n\n    x = tl.load(x_ptr + offs, mask=mask)\n    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        out = torch.empty_like(x)\n        n = x.numel()\n        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)\n        return out\n";

fn sha(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// A record as the evaluator writes it (verdict fields inline).
pub fn record(
    key: &str,
    problem: &str,
    status: &str,
    created_at: u64,
    speedup: Option<f64>,
) -> Value {
    let candidate = format!("{RELU_CANDIDATE}# {key}\n");
    let timing = speedup.map(|s| {
        json!({
            "reference": {"median_ms": 0.30, "iqr_ms": 0.02, "samples": 200, "host_median_ms": 0.31,
                          "mean_ms": 0.301, "std_ms": 0.01, "min_ms": 0.27, "max_ms": 0.36},
            "candidate": {"median_ms": 0.30 / s, "iqr_ms": 0.01, "samples": 200, "host_median_ms": 0.30 / s,
                          "mean_ms": 0.30 / s, "std_ms": 0.005, "min_ms": 0.27 / s, "max_ms": 0.34 / s},
            "speedup": s, "speedup_low": s * 0.97, "speedup_high": s * 1.03, "flags": [],
            "checked_outputs": 3, "harness_ms": 0.004, "compiled": null
        })
    });
    let (stage, message) = match status {
        "correct" => ("timing", "all 5 trials match (max abs err 0.00e+00)"),
        "incorrect" => ("correctness", "output 0 differs from the reference at index [3, 17]: max abs err 2.5 > atol 1e-5"),
        "compile_error" => ("import", "NameError: name 'tl_load' is not defined (line 12)"),
        "rejected" => ("guard", "the guard rejected it: line 19: [torch_compute] the forward computes with torch.relu, not a Triton kernel"),
        _ => ("process", "the candidate crashed"),
    };
    let guard = if status == "rejected" {
        json!([{"rule": "torch_compute", "severity": "reject", "line": 19, "column": 15,
                "message": "the forward computes with torch.relu, not a Triton kernel"}])
    } else {
        json!([{"rule": "no_autotune", "severity": "warn", "line": 7, "column": 1,
                "message": "no @triton.autotune: one configuration for every shape"}])
    };
    let trials: Vec<Value> = (0..3)
        .map(|t| json!({"trial": t, "seed": 42 + t, "outputs": 1, "max_abs_err": if status == "incorrect" { 2.5 } else { 0.0 },
                        "max_rel_err": 0.0, "passed": status != "incorrect"}))
        .collect();
    json!({
        "schema": 3, "key": key,
        "problem": {"name": problem, "path": format!("bench/level1/{problem}.py"), "sha256": sha(RELU_PROBLEM)},
        "candidate": {"name": format!("{problem}_try"), "path": format!("candidates/{problem}_try.py"), "sha256": sha(&candidate)},
        "config": {"trials": 3, "seed": 42, "tolerance": null, "variant": null, "overrides": {},
                   "device": "auto", "timing": true, "budget_ms": 120000, "timing_budget_ms": 400,
                   "speedup_cap": 10.0, "profile": false, "compile_baseline": false, "guard": "g1", "shape_check": null},
        "status": status, "stage": stage, "message": message,
        "error": if status == "compile_error" { json!({"exc_type": "NameError", "message": "name 'tl_load' is not defined", "frames": [], "out_of_memory": false}) } else { Value::Null },
        "mismatch": null,
        "trials": if matches!(status, "correct" | "incorrect") { json!(trials) } else { json!([]) },
        "timing": timing,
        "timing_note": if speedup.is_none() { json!("timing unavailable in CPU mode (Triton interpreter)") } else { Value::Null },
        "tolerance": {"atol": 1e-5, "rtol": 1e-5},
        "provenance": if matches!(status, "correct" | "incorrect") {
            json!({"kernels": [{"name": "relu_kernel", "launches": 9}], "calls": 9, "calls_without_launch": 0, "gpu_share": 0.93, "window_share": 0.9})
        } else { Value::Null },
        "phases": null,
        "guard": guard,
        "environment": {"python": "3.11.7", "platform": "linux", "torch": "2.11.0", "triton": "3.6.0", "numpy": "2.3.5",
                        "device": "cuda", "interpret": false, "cuda": "13.0", "driver": "580.1", "gpus": []},
        "sandbox": null, "worker_version": "0.1.0", "stderr_tail": null,
        "wall_ms": 812.5, "executor_ms": 790.0, "lease_wait_ms": 0.1, "exclusive_ms": 120.0, "start_wait_ms": 0.0,
        "device_slot": 0, "memory": null, "created_at": created_at, "tritonforge_version": "0.1.0"
    })
}

pub fn put_record(store: &Store, v: &Value) -> EvalRecord {
    let r: EvalRecord = serde_json::from_value(v.clone()).expect("a record");
    let candidate = format!("{RELU_CANDIDATE}# {}\n", r.key);
    store.put_with_sources(&r, RELU_PROBLEM, &candidate).unwrap();
    r
}

pub fn episode(id: &str, run: &str, problem: &str, sample: u32) -> Value {
    let turn = |t: u32,
                outcome: &str,
                reward: f64,
                ret: f64,
                code: Option<&str>,
                speedup: Option<f64>,
                record: Option<&str>| {
        json!({
            "turn": t,
            "messages": [
                {"role": "system", "content": "You write Triton kernels."},
                {"role": "user", "content": format!("Write a Triton kernel for {problem}. (turn {})", t + 1)}
            ],
            "completion": {
                "text": format!("<think>The input is a flat tensor; one program per block of 1024 elements (turn {}).</think>\nHere is the kernel:\n```python\n{}\n```", t + 1, code.unwrap_or("print('no model')")),
                "token_ids": [1, 2, 3, 4], "logprobs": [-0.1, -0.2, -0.3, -0.4], "prompt_ids": [9, 9, 9],
                "prompt_tokens": 120, "completion_tokens": 4, "finish_reason": "stop", "latency_ms": 1530.0, "attempts": 1
            },
            "code": code, "outcome": outcome, "stage": if outcome == "correct" { "timing" } else { "correctness" },
            "message": if outcome == "correct" { "all 5 trials match" } else { "output 0 differs from the reference: max abs err 2.5" },
            "record": record, "speedup": speedup, "reward": reward, "ret": ret
        })
    };
    json!({
        "id": id, "run": run, "problem": problem, "problem_path": format!("bench/level1/{problem}.py"),
        "sample": sample, "backend": "openai:test-model",
        "turns": [
            turn(0, "incorrect", 0.3, 0.62, Some("class ModelNew: pass  # wrong"), None, Some("k-incorrect-0")),
            turn(1, "correct", 0.8, 0.8, Some(RELU_CANDIDATE), Some(1.7), Some("k-correct-0")),
        ],
        "error": null
    })
}

fn sft_metric(step: u64, split: &str) -> Value {
    let loss =
        2.5 * (-(step as f64) / 12.0).exp() + 0.4 + if split == "validation" { 0.05 } else { 0.0 };
    json!({"step": step, "split": split, "epoch": 0, "loss": loss, "loss_tokens": 4000, "tokens": 8192,
           "lr": 2e-5 * (step as f64 / 5.0).min(1.0), "grad_norm": if split == "train" { json!(1.5 / (1.0 + step as f64 / 10.0)) } else { Value::Null },
           "seconds": 0.9, "tokens_per_s": 9100.0 + step as f64 * 3.0, "mfu": 0.31, "mfu_standard": 0.37,
           "tflops": 310.0, "memory_bytes": 40_000_000_000u64})
}

fn rl_metric(step: u64) -> Value {
    let s = step as f64;
    json!({"step": step, "generated_at": step - 1, "staleness": 1, "reward_mean": 0.2 + 0.04 * s, "reward_std": 0.2,
           "return_mean": 0.3 + 0.03 * s, "pass_by_turn": [0.1 + 0.02 * s, 0.2 + 0.03 * s, 0.25 + 0.035 * s],
           "compile_rate": 0.8, "reward_terms": "compile+correct+speed", "groups_drawn": 8, "groups_kept": 6,
           "groups_skipped": 2, "fill_rounds": 1, "episodes": 32, "episodes_failed": 0, "mean_abs_advantage": 0.7,
           "sequences": 64, "merged_turns": 0, "too_long_turns": 0, "generated_tokens": 60000, "trained_tokens": 80000,
           "target_tokens": 60000, "updates": 2, "loss": 0.01, "policy_loss": 0.008, "kl": 0.001 * s, "entropy": 0.9 - 0.02 * s,
           "clip_fraction": 0.05, "ratio_mean": 1.0, "ratio_max": 1.3, "tis_capped": 0.0, "grad_norm": 0.4, "lr": 1e-6,
           "rollout_s": 40.0, "generate_s": 30.0, "evaluate_s": 18.0 + s, "score_s": 4.0, "train_s": 12.0, "step_s": 58.0,
           "tokens_per_s": 1500.0, "policy_idle": 0.1})
}

/// Names the tests look for.
pub struct Filled {
    pub eval_run: String,
    pub agent_run: String,
    pub sft_run: String,
    pub rl_run: String,
    pub correct_key: String,
    pub episode_id: String,
}

/// Fill a store at `path`.
pub fn fill(path: &Path) -> Filled {
    let store = Store::open(path).unwrap();
    let t0 = 1_764_000_000u64;
    let f = Filled {
        eval_run: "eval-1764000000000".into(),
        agent_run: "agent-qwen-quick".into(),
        sft_run: "sft-1764000000500".into(),
        rl_run: "rl-grpo-small".into(),
        correct_key: "k-correct-0".into(),
        episode_id: "agent-qwen-quick/relu/0".into(),
    };
    store
        .begin_run(
            &f.eval_run,
            RunKind::Eval,
            &json!({"problems": "bench/level1", "candidates": "out/try1", "pairs": 5, "seed": 42})
                .to_string(),
        )
        .unwrap();
    let specs = [
        ("k-correct-0", "relu", "correct", Some(1.7)),
        ("k-correct-1", "softmax", "correct", Some(2.4)),
        ("k-incorrect-0", "relu", "incorrect", None),
        ("k-compile-0", "matmul", "compile_error", None),
        ("k-rejected-0", "gelu", "rejected", None),
        ("k-correct-2", "inline_only_problem", "correct", Some(0.8)),
    ];
    for (i, (key, problem, status, speedup)) in specs.into_iter().enumerate() {
        let r = put_record(&store, &record(key, problem, status, t0 + 60 * i as u64, speedup));
        if i < 5 {
            store.link_run_evaluation(&f.eval_run, key, r.created_at as i64).unwrap();
        }
    }
    store
        .finish_run(
            &f.eval_run,
            RunStatus::Done,
            Some(&json!({"pairs": 5, "wall_s": 12.5}).to_string()),
        )
        .unwrap();

    store
        .begin_run(&f.agent_run, RunKind::Agent, &json!({"base_url": "http://127.0.0.1:30000/v1", "model": "test-model", "problems": 2, "samples": 2, "turns": 3}).to_string())
        .unwrap();
    for (problem, sample) in [("relu", 0), ("relu", 1), ("softmax", 0)] {
        let id = format!("{}/{problem}/{sample}", f.agent_run);
        let ep = episode(&id, &f.agent_run, problem, sample);
        store.put_episode(&id, &f.agent_run, problem, sample, &ep.to_string()).unwrap();
    }
    store.link_run_evaluation(&f.agent_run, "k-correct-0", t0 as i64).unwrap();
    store.link_run_evaluation(&f.agent_run, "k-incorrect-0", (t0 + 120) as i64).unwrap();
    store.finish_run(&f.agent_run, RunStatus::Done, None).unwrap();

    store.begin_run(&f.sft_run, RunKind::Sft, &json!({"config": {"model": {"path": "models/qwen3-0.6b"}, "optim": {"lr": 2e-5}}, "steps": 40}).to_string()).unwrap();
    for step in 1..=30 {
        store
            .put_train_metric(&f.sft_run, step, "train", &sft_metric(step, "train").to_string())
            .unwrap();
        if step % 10 == 0 {
            store
                .put_train_metric(
                    &f.sft_run,
                    step,
                    "validation",
                    &sft_metric(step, "validation").to_string(),
                )
                .unwrap();
        }
    }
    // The RL run was never registered (as runs written before registration existed).
    for step in 1..=12 {
        store.put_train_metric(&f.rl_run, step, "rl", &rl_metric(step).to_string()).unwrap();
    }
    // Its heldout sets, measured before the first step and every 4 after (`train rl`
    // writes them as splits `heldout:<set>`), and the evaluations its episodes named.
    for step in [0, 4, 8, 12] {
        for (set, base) in [("l2-heldout", 0.1), ("synth-heldout", 0.3)] {
            let m = heldout_metric(step, set, base);
            store
                .put_train_metric(&f.rl_run, step, &format!("heldout:{set}"), &m.to_string())
                .unwrap();
        }
    }
    store
        .link_run_evaluations(&f.rl_run, &["k-correct-1", "k-compile-0"], (t0 + 300) as i64)
        .unwrap();
    drop(store);
    fill_queue(path);
    f
}

fn heldout_metric(step: u64, set: &str, base: f64) -> Value {
    let s = step as f64;
    json!({"step": step, "set": set, "problems": 20, "samples": 1, "pass_at_1": base + 0.02 * s,
           "solved": base + 0.03 * s, "compile_rate": 0.4 + base + 0.02 * s, "wall_s": 30.0, "errors": []})
}

/// Text in every queued request: the queue page must never send it (requests hold sources).
pub const REQUEST_MARKER: &str = "REQUEST-BODY-NOT-FOR-THE-PAGE";

/// The server's queue as `tritonforge serve` leaves it: one job done (its record), one
/// failed, one running, two queued (`job-q-1` runs next).
fn fill_queue(path: &Path) {
    use tritonforge_store::{JobState, NewJob};
    let mut store = Store::open(path).unwrap();
    let job = |id: &str, problem: &str| NewJob {
        id: id.into(),
        client: "trainer-7".into(),
        idempotency_key: None,
        request_hash: format!("h-{id}"),
        request: json!({"problem": {"source": REQUEST_MARKER}}).to_string(),
        problem: problem.into(),
        candidate: format!("{problem}_try"),
    };
    let jobs = [
        job("job-done-1", "relu"),
        job("job-fail-1", "gelu"),
        job("job-run-1", "softmax"),
        job("job-q-1", "matmul"),
        job("job-q-2", "layernorm"),
    ];
    store.add_jobs(&jobs, false).unwrap();
    assert_eq!(store.claim_job().unwrap().unwrap().id, "job-done-1");
    store.finish_job("job-done-1", JobState::Done, Some("k-correct-0"), None, false).unwrap();
    assert_eq!(store.claim_job().unwrap().unwrap().id, "job-fail-1");
    let error = "the problem's reference raised: RuntimeError: shape mismatch";
    store.finish_job("job-fail-1", JobState::Failed, None, Some(error), false).unwrap();
    assert_eq!(store.claim_job().unwrap().unwrap().id, "job-run-1");
}

/// The server takes the next queued job (another process writing while the page watches).
pub fn claim_next(path: &Path) -> String {
    Store::open(path).unwrap().claim_job().unwrap().expect("a queued job").id
}

/// Append SFT metrics (a trainer writing while the dashboard watches).
pub fn more_sft(path: &Path, run: &str, steps: std::ops::RangeInclusive<u64>) {
    let store = Store::open(path).unwrap();
    for step in steps {
        store.put_train_metric(run, step, "train", &sft_metric(step, "train").to_string()).unwrap();
    }
}

/// A standalone dashboard over `path` on a loopback port, polling fast for the live tests.
pub async fn start(path: &Path, token: Option<&str>) -> (DashboardServer, String) {
    start_with(path, tritonforge_dashboard::Access::new(token)).await
}

/// [`start`] with the access check given (a token and a limit on wrong ones).
pub async fn start_with(
    path: &Path,
    access: tritonforge_dashboard::Access,
) -> (DashboardServer, String) {
    let dash = Dashboard::open(path, Some(suite()), Mode::Standalone)
        .unwrap()
        .with_poll(Duration::from_millis(100));
    let server =
        DashboardServer::start_with(dash, "127.0.0.1:0".parse().unwrap(), access).await.unwrap();
    let url = format!("http://{}", server.addr);
    (server, url)
}

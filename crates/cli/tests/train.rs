//! `tritonforge train sft` on the real policy worker: a tiny randomly initialised
//! Llama-architecture model (`configs/models/tiny-llama`) with SmolLM2's tokenizer,
//! trained on CPU on conversations written here. Loss falls; metrics reach the store;
//! checkpoints load in plain transformers with the logits the trainer had; a run stopped
//! and resumed takes the same steps with the same losses as one that ran through; bad
//! rows are counted, bad settings named.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

mod common;
use common::*;

fn chat(i: usize) -> Value {
    let ops = ["relu", "sigmoid", "tanh", "exp", "abs", "neg"];
    let op = ops[i % ops.len()];
    let answer = format!(
        "```python\n@triton.jit\ndef {op}_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + offs, mask=offs < n)\n    tl.store(y_ptr + offs, {op}(x), mask=offs < n)\n```"
    );
    json!({"id": format!("row-{i}"), "messages": [
        {"role": "system", "content": "You write Triton kernels."},
        {"role": "user", "content": format!("Write a Triton kernel for {op} (variant {}).", i % 7)},
        {"role": "assistant", "content": answer},
    ]})
}

struct Setup {
    root: tempfile::TempDir,
    state: PathBuf,
    tok: PathBuf,
}

fn setup() -> Setup {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let tok = exported_tokenizer();
    let mut train: Vec<String> = (0..40).map(|i| chat(i).to_string()).collect();
    // Rows the trainer must skip and count: no answer, too long, not JSON.
    train.push(json!({"messages": [{"role": "user", "content": "hi"}]}).to_string());
    let long = "word ".repeat(3000);
    train.push(json!({"messages": [{"role": "user", "content": long}, {"role": "assistant", "content": "ok"}]}).to_string());
    train.push("{not json".into());
    std::fs::write(root.path().join("train.jsonl"), train.join("\n")).unwrap();
    let val: Vec<String> = (100..106).map(|i| chat(i).to_string()).collect();
    std::fs::write(root.path().join("validation.jsonl"), val.join("\n")).unwrap();
    Setup { root, state, tok }
}

fn config(s: &Setup, name: &str, model: &Path, extra: &str) -> PathBuf {
    let path = s.root.path().join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "model = {model:?}\ntokenizer = {:?}\n[data]\ntrain = \"train.jsonl\"\nvalidation = \"validation.jsonl\"\n[output]\ndir = {name:?}\n{extra}",
            s.tok
        ),
    )
    .unwrap();
    path
}

const SCHEDULE: &str = "[train]\nsteps = 4\nseq_len = 1024\nmicro_batch = 2\ngrad_accum = 2\nlr = 3e-3\nmin_lr = 3e-4\nwarmup_steps = 1\neval_every = 2\nsave_every = 2\nseed = 3\n";

fn tiny() -> PathBuf {
    repo().join("configs/models/tiny-llama")
}

/// Runs `train sft --json`; returns the exit code, the events and stderr.
fn train(s: &Setup, cfg: &Path, extra: &[&str]) -> (i32, Vec<Value>, String) {
    let out = run(tf(&s.state)
        .args(["--device", "cpu", "train", "sft", "--json", "--config"])
        .arg(cfg)
        .args(extra));
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (out.status.code().unwrap_or(-1), events, text(&out.stderr))
}

fn losses(events: &[Value], split: &str) -> Vec<(u64, f64)> {
    events
        .iter()
        .filter(|e| e["event"] == "metric" && e["metric"]["split"] == split)
        .map(|e| (e["metric"]["step"].as_u64().unwrap(), e["metric"]["loss"].as_f64().unwrap()))
        .collect()
}

fn check_checkpoint(dir: &Path) -> Value {
    fixture_report("train/check_checkpoint.py", &[dir])
}

#[test]
fn sft_trains_checkpoints_and_resumes_exactly() {
    let s = setup();
    let cfg = config(&s, "full", &tiny(), SCHEDULE);
    let (code, events, err) = train(&s, &cfg, &[]);
    assert_eq!(code, 0, "{err}");

    let prepared = events.iter().find(|e| e["event"] == "prepared").unwrap();
    assert_eq!(prepared["train"], 40, "{prepared}");
    assert_eq!(prepared["validation"], 6);
    assert_eq!(
        prepared["skipped"],
        json!({"malformed_json": 1, "no_assistant_turn": 1, "too_long": 1})
    );
    let ready = events.iter().find(|e| e["event"] == "ready").unwrap();
    assert_eq!(ready["info"]["vocab_size"], 49152);
    assert_eq!(ready["info"]["parameters"], ready["info"]["trainable"]);

    // Loss falls, on the training steps and on the validation split.
    let tr = losses(&events, "train");
    assert_eq!(tr.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    assert!(tr[3].1 < tr[0].1 - 0.05, "{tr:?}");
    let va = losses(&events, "validation");
    assert_eq!(va.iter().map(|x| x.0).collect::<Vec<_>>(), vec![2, 4]);
    assert!(va[1].1 < va[0].1, "{va:?}");

    // Every metric is in the store as it happened.
    let db = rusqlite::Connection::open(s.state.join("tritonforge.sqlite")).unwrap();
    let n: i64 = db.query_row("SELECT COUNT(*) FROM train_metrics", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 6);
    let stored: String = db
        .query_row("SELECT metric FROM train_metrics WHERE step = 4 AND split = 'train'", [], |r| {
            r.get(0)
        })
        .unwrap();
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored["loss"].as_f64().unwrap(), tr[3].1);
    assert!(stored["tokens_per_s"].as_f64().unwrap() > 0.0);
    // The run's row for the dashboard: its id, its settings, ended done.
    let (id, kind, status, settings): (String, String, String, String) = db
        .query_row("SELECT id, kind, status, settings FROM runs", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap();
    assert_eq!(id.as_str(), prepared["run"].as_str().unwrap());
    assert_eq!((kind.as_str(), status.as_str()), ("sft", "done"));
    let settings: Value = serde_json::from_str(&settings).unwrap();
    assert_eq!((settings["train"].as_u64(), settings["steps"].as_u64()), (Some(40), Some(4)));

    // Checkpoints in the Hugging Face layout; plain transformers reproduces the logits.
    let out = s.root.path().join("full");
    let last = out.join("checkpoint-000004");
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "chat_template.jinja",
        "trainer_state.pt",
    ] {
        assert!(last.join(f).is_file(), "{f} missing in {}", last.display());
    }
    let check = check_checkpoint(&last);
    assert_eq!(check["equal"], true, "{check}");
    assert!(check["chat"].as_str().unwrap().contains("<|im_start|>assistant"), "{check}");
    // The agent evaluates the checkpoint directly: `run --model DIR`, with no endpoint,
    // plays it on the embedded backend (and says so in the episode).
    let played = run(tf(&s.state)
        .args(["run", "--problem", "relu", "--turns", "1", "--max-tokens", "8"])
        .args(["--temperature", "0", "--jobs", "1", "--model"])
        .arg(&last)
        .arg("--out")
        .arg(s.root.path().join("report")));
    assert_eq!(played.status.code(), Some(0), "{}", text(&played.stderr));
    let eps = episodes(&s.state);
    assert_eq!(eps.len(), 1, "{}", text(&played.stderr));
    assert_eq!(eps[0]["backend"], format!("embedded:{} (cpu)", last.display()));
    assert!(eps[0]["error"].is_null(), "{}", eps[0]);
    let ids = eps[0]["turns"][0]["completion"]["token_ids"].as_array().unwrap();
    assert!(!ids.is_empty() && ids.len() <= 8, "{}", eps[0]);
    // Two names for the embedded model that disagree are refused, as is an embedded
    // model beside an endpoint.
    for extra in [
        &["--embedded-model", "smollm2"][..],
        &["--base-url", "http://127.0.0.1:9/v1", "--embedded-model", "smollm2"][..],
    ] {
        let refused =
            run(tf(&s.state).args(["run", "--problem", "relu", "--model"]).arg(&last).args(extra));
        assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
        assert!(text(&refused.stderr).contains("--embedded-model"), "{}", text(&refused.stderr));
    }

    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["done"], true);
    assert_eq!(state["latest"], "checkpoint-000004");

    // The same run stopped after step 2 and resumed takes the same steps with the same
    // losses: weights, optimizer, schedule and data order all came back.
    let cfg_b = config(&s, "split", &tiny(), SCHEDULE);
    let (code, first, err) = train(&s, &cfg_b, &["--until", "2"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(losses(&first, "train"), tr[..2].to_vec());
    let (code, second, err) = train(&s, &cfg_b, &["--resume"]);
    assert_eq!(code, 0, "{err}");
    let prepared = second.iter().find(|e| e["event"] == "prepared").unwrap();
    assert_eq!(prepared["start"], 2);
    assert_eq!(losses(&second, "train"), tr[2..].to_vec());
    assert_eq!(losses(&second, "validation"), va[1..].to_vec());

    // A finished run is not silently overwritten, and a resume must match its plan.
    let (code, _, err) = train(&s, &cfg, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("--resume"), "{err}");
    let changed = config(&s, "full", &tiny(), &SCHEDULE.replace("seed = 3", "seed = 4"));
    let (code, _, err) = train(&s, &changed, &["--resume"]);
    assert_eq!(code, 2);
    assert!(err.contains("other settings"), "{err}");
}

#[test]
fn lora_merges_into_a_loadable_model_and_bad_settings_are_named() {
    let s = setup();
    let lora = "[train]\nsteps = 2\nseq_len = 1024\nmicro_batch = 2\nlr = 1e-2\n[lora]\nenabled = true\nrank = 4\nalpha = 8\ntarget_modules = [\"q_proj\", \"v_proj\"]\n";
    let cfg = config(&s, "lora", &tiny(), lora);
    let (code, events, err) = train(&s, &cfg, &[]);
    assert_eq!(code, 0, "{err}");
    let ready = events.iter().find(|e| e["event"] == "ready").unwrap();
    let (all, trained) = (
        ready["info"]["parameters"].as_u64().unwrap(),
        ready["info"]["trainable"].as_u64().unwrap(),
    );
    // Rank-4 adapters on two projections of two layers: (64*4 + 4*64) + (64*4 + 4*32).
    assert_eq!(trained, 2 * (64 * 4 + 4 * 64 + 64 * 4 + 4 * 32), "{ready}");
    assert!(all > trained * 100);
    let last = s.root.path().join("lora/checkpoint-000002");
    assert!(last.join("adapter/adapter_config.json").is_file());
    let check = check_checkpoint(&last);
    // Merging sums the adapter into the weights: the same function up to rounding.
    assert!(check["max_diff"].as_f64().unwrap() < 1e-4, "{check}");

    // A model that is not there, and a tokenizer the model cannot embed.
    let missing = config(&s, "missing", &s.root.path().join("no-such-model"), "");
    let (code, _, err) = train(&s, &missing, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("no-such-model"), "{err}");
    let small = s.root.path().join("small-vocab");
    std::fs::create_dir_all(&small).unwrap();
    let mut c: Value =
        serde_json::from_str(&std::fs::read_to_string(tiny().join("config.json")).unwrap())
            .unwrap();
    c["vocab_size"] = json!(1000);
    std::fs::write(small.join("config.json"), c.to_string()).unwrap();
    let mismatch = config(&s, "mismatch", &small, "[train]\nsteps = 1\nseq_len = 1024\n");
    let (code, _, err) = train(&s, &mismatch, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("not a pair") && err.contains("1000"), "{err}");
}

/// How a step's conversations are laid out in rows (packed several to a row, one per
/// row, or one per row grouped by length and padded to a multiple of 64) must not change
/// its loss: the whole set in one step gives the same loss, and the same validation loss,
/// every way.
#[test]
fn batching_by_length_or_packed_gives_the_same_loss() {
    let s = setup();
    let schedule = "[train]\nsteps = 1\nseq_len = 256\nmicro_batch = 2\ngrad_accum = 64\neval_every = 1\nseed = 2\n";
    let mut got = Vec::new();
    for (name, extra) in [
        ("packed", ""),
        ("plain", "packing = false\n"),
        ("grouped", "packing = false\ngroup_by_length = true\n"),
    ] {
        let cfg = config(&s, name, &tiny(), &format!("{schedule}{extra}"));
        let (code, events, err) = train(&s, &cfg, &[]);
        assert_eq!(code, 0, "{name}: {err}");
        let (train_loss, val) = (losses(&events, "train"), losses(&events, "validation"));
        assert_eq!(train_loss.len(), 1, "{name}: {events:?}");
        got.push((name, train_loss[0].1, val[0].1));
    }
    let (_, loss, val) = got[0];
    for (name, l, v) in &got {
        assert!((l - loss).abs() <= 1e-4 * loss, "{name}: {l} against packed {loss}");
        assert!((v - val).abs() <= 1e-4 * val, "{name}: {v} against packed {val}");
    }
    // Grouping with packing on is a contradiction, named.
    let both = config(&s, "both", &tiny(), &format!("{schedule}group_by_length = true\n"));
    let (code, _, err) = train(&s, &both, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("group_by_length"), "{err}");
}

/// Two ranks under `torchrun` (FSDP2 over gloo on the CPU): a run stopped on one process
/// and resumed on two (the optimizer state is keyed by parameter name, so it moves
/// between them) takes the same losses as one process throughout, and the checkpoint
/// gathered from the shards loads with the logits the ranks had.
#[test]
fn two_ranks_train_like_one_and_resume_across_world_sizes() {
    let s = setup();
    let schedule = "[train]\nsteps = 3\nseq_len = 1024\nmicro_batch = 2\ngrad_accum = 2\nlr = 3e-3\nmin_lr = 3e-4\nwarmup_steps = 1\nseed = 5\n";
    let one = config(&s, "one", &tiny(), schedule);
    let (code, single, err) = train(&s, &one, &[]);
    assert_eq!(code, 0, "{err}");
    let two = config(&s, "two", &tiny(), schedule);
    let (code, first, err) = train(&s, &two, &["--until", "2"]);
    assert_eq!(code, 0, "{err}");
    let two = config(&s, "two", &tiny(), &format!("{schedule}gpus = 2\n"));
    let (code, second, err) = train(&s, &two, &["--resume"]);
    assert_eq!(code, 0, "{err}");
    let ready = second.iter().find(|e| e["event"] == "ready").unwrap();
    assert_eq!(ready["info"]["world_size"], 2, "{ready}");
    let mut resumed = losses(&first, "train");
    resumed.extend(losses(&second, "train"));
    let whole = losses(&single, "train");
    assert_eq!(resumed.len(), 3);
    for ((sa, a), (sb, b)) in whole.iter().zip(&resumed) {
        assert_eq!(sa, sb);
        // Gradients summed over ranks in another order: equal up to rounding.
        assert!((a - b).abs() < 1e-4 * a.abs(), "step {sa}: {a} vs {b}");
    }
    let check = check_checkpoint(&s.root.path().join("two/checkpoint-000003"));
    assert_eq!(check["equal"], true, "{check}");
}

/// The trainer's own math on the CPU (`fixtures/train/check_trainer_math.py`): the
/// chunked output-projection loss and its gradients against PyTorch's cross-entropy, rows
/// joined with padding dropped (the varlen path) against padded rows, a compiled step
/// against an uncompiled one, and `mixed` precision's fp32 masters (small updates kept,
/// saved with a probe that loads back exactly in bf16, resumed exactly over two steps,
/// losses near fp32's, optimizer state in the layout the several-rank path reads and
/// writes).
#[test]
fn trainer_math_matches_plain_references() {
    let v = fixture_report("train/check_trainer_math.py", &[&repo().join("python"), &tiny()]);
    for key in [
        "loss",
        "grad_hidden",
        "grad_weight",
        "joined_rows_loss",
        "compiled_losses",
        "mixed_resume_loss",
        "rows_attention",
        "rows_padding_invisible",
    ] {
        assert!(v[key].as_f64().unwrap() <= 1e-5, "{key}: {v}");
    }
    assert!(v["mixed_vs_fp32_losses"].as_f64().unwrap() <= 2e-2, "{v}");
    assert!(v["rows_padding_length"].as_f64().unwrap() <= 2f64.powi(-6), "{v}");
    for key in [
        "compiled",
        "joined_rows_same_targets",
        "mixed_master_weights",
        "mixed_checkpoint_is_masters",
        "mixed_probe_reproduced",
        "mixed_resume_masters",
        "mixed_small_updates_kept",
        "mixed_state_read_by_torch_distributed",
        "torch_distributed_state_read_by_mixed",
        "rows_attention_shape",
        "rows_kept_when_grouped",
        "rows_joined_when_packed",
    ] {
        assert_eq!(v[key], true, "{key}: {v}");
    }
}

/// Reinforcement learning's math and messages (`fixtures/train/check_rl.py`): chunked
/// per-token log-probs and entropies and their gradients against the full logits; the
/// PPO-clip loss, its gradients and statistics against a plain per-token loop (both clip
/// edges, either sign of advantage, the importance cap, KL, entropy); `score` against
/// plain transformers, the reference policy after updates (full weights and LoRA); an
/// `rl_step` moves log-probs the way the advantages say; saved adapters load by
/// themselves and as a chain; the worker answers score and rl_step over its protocol
/// beside generation, and refuses a malformed step by row while it keeps serving.
#[test]
fn rl_math_score_and_steps_match_plain_references() {
    let v = fixture_report("train/check_rl.py", &[&repo().join("python"), &tiny()]);
    assert_eq!(v["failures"], json!([]), "{v}");
    for key in [
        "logprob",
        "entropy",
        "logprob_grad_hidden",
        "logprob_grad_weight",
        "ppo_loss",
        "ppo_grad",
        "ppo_no_proximal_loss",
        "ppo_no_proximal_grad",
        "score",
        "full_reference",
        "lora_reference",
        "adapter_load",
        "chain_load",
    ] {
        assert!(v[key].as_f64().unwrap() <= 1e-5, "{key}: {v}");
    }
    for key in ["score_vs_generator", "score_vs_generator_after_step"] {
        assert!(v[key].as_f64().unwrap() <= 1e-4, "{key}: {v}");
    }
    for key in ["positive_rise", "negative_fall", "lora_moved", "worker_logprob_shift"] {
        assert!(v[key].as_f64().unwrap() > 1e-3, "{key}: {v}");
    }
    assert!(v["worker_error"].as_str().unwrap().contains("row 0"), "{v}");
}

/// Reinforcement learning on two ranks (`fixtures/train/check_rl_ranks.py`): the worker
/// under `torchrun` (FSDP2 over gloo on the CPU) scores every row in its place with the
/// log-probs one process gives, and an `rl_step` reports the same statistics and leaves
/// the same weights; a reference score it cannot give is refused and the ranks go on.
#[test]
fn rl_on_two_ranks_matches_one_process() {
    let v = fixture_report("train/check_rl_ranks.py", &[&repo().join("python"), &tiny()]);
    assert_eq!(v["failures"], json!([]), "{v}");
    assert!(v["score"].as_f64().unwrap() <= 1e-5, "{v}");
    assert!(v["score_after_step"].as_f64().unwrap() <= 1e-4, "{v}");
    assert!(v["stats"].as_f64().unwrap() <= 1e-4, "{v}");
    assert!(v["moved"].as_f64().unwrap() > 1e-3, "{v}");
}

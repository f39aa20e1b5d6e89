//! The KernelBench-style evaluation server's shapes (`POST /eval`, `GET /health`,
//! `/gpu_status`, `/backend_info`), filled from our records and state. Field names and
//! types follow that server; ours go under [`EXTRA_KEY`] so a client that parses theirs
//! reads ours unchanged.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tritonforge_protocol::{EnvInfo, EvalRecord, MismatchKind, Stage, Status};

/// The key under which our own fields travel in `/eval` replies.
pub const EXTRA_KEY: &str = "tritonforge";

fn d_seed() -> u64 {
    42
}
fn d_correct() -> u32 {
    5
}
fn d_perf() -> u32 {
    100
}
fn d_true() -> bool {
    true
}
fn d_backend() -> String {
    "cuda".into()
}

/// `POST /eval`'s body. Unknown fields (their client sends `seed`) are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRequest {
    pub original_model_src: String,
    pub custom_model_src: String,
    #[serde(default = "d_seed")]
    pub seed_num: u64,
    #[serde(default = "d_correct")]
    pub num_correct_trials: u32,
    /// Advisory: our timing stops once the speedup's interval is within ±1% (or at its
    /// budget); the number of timed calls is in `runtime_stats.num_trials`.
    #[serde(default = "d_perf")]
    pub num_perf_trials: u32,
    #[serde(default)]
    pub verbose: bool,
    #[serde(default = "d_true")]
    pub measure_performance: bool,
    #[serde(default)]
    pub preferred_device: Option<i64>,
    #[serde(default = "d_backend")]
    pub backend: String,
}

/// The backends a request may name. Both run through our evaluator: the guard requires
/// Triton kernels, so an inline-CUDA candidate is rejected with the guard's reason.
pub const BACKENDS: [&str; 2] = ["cuda", "triton"];

/// `POST /eval`'s reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalResponse {
    pub compiled: bool,
    pub correctness: bool,
    /// The candidate's mean time in milliseconds; -1.0 when not timed.
    pub runtime: f64,
    pub runtime_stats: Map<String, Value>,
    pub metadata: Map<String, Value>,
}

/// `GPU name` / `cpu` and the device string their replies carry.
pub fn hardware(env: &EnvInfo) -> (String, String) {
    match env.gpus.first() {
        Some(g) => (g.name.clone(), g.index.to_string()),
        None => ("cpu".into(), "cpu".into()),
    }
}

fn round3(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let digits = 3 - 1 - x.abs().log10().floor() as i32;
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

/// Their reply, filled from one of our records; `job` is the server's id for it.
pub fn response(record: &EvalRecord, job: &str, cached: bool) -> EvalResponse {
    let v = &record.verdict;
    let (hw, device) = hardware(&record.environment);
    let never_ran = matches!(v.status, Status::CompileError)
        || (v.status == Status::Rejected && v.stage == Stage::Guard);
    let compiled = !never_ran && !matches!(v.stage, Stage::Import);
    let correct = v.status == Status::Correct;
    let mut metadata = Map::new();
    metadata.insert("hardware".into(), json!(hw));
    metadata.insert(
        "gpu_type".into(),
        json!(if record.environment.gpus.is_empty() { "CPU" } else { "NVIDIA" }),
    );
    metadata.insert("device".into(), json!(device));
    let passed = v.trials.iter().filter(|t| t.passed).count();
    if !v.trials.is_empty() || correct {
        metadata.insert(
            "correctness_trials".into(),
            json!(format!("({} / {})", passed, record.config.trials)),
        );
    }
    let exc_name = v.error.as_ref().map(|e| e.exc_type.clone());
    match v.status {
        Status::Correct => {}
        Status::CompileError => {
            metadata.insert("compilation_error".into(), json!(v.message));
            metadata.insert("compilation_error_name".into(), json!(exc_name.unwrap_or_default()));
        }
        Status::Rejected if !compiled => {
            metadata.insert("compilation_error".into(), json!(v.message));
            metadata.insert("compilation_error_name".into(), json!("rejected"));
        }
        Status::Incorrect => {
            metadata.insert("correctness_issue".into(), json!(v.message));
            metadata.insert("correctness_issue_name".into(), json!("correctness_issue"));
            if let Some(m) = &v.mismatch {
                if m.kind == MismatchKind::Value {
                    let f = |x: Option<f64>| format!("{:.6}", x.unwrap_or(f64::NAN));
                    metadata.insert("max_difference".into(), json!([f(m.max_abs_err)]));
                    metadata.insert("avg_difference".into(), json!([f(m.max_rel_err)]));
                }
            }
        }
        Status::Rejected => {
            metadata.insert("correctness_issue".into(), json!(v.message));
            metadata.insert("correctness_issue_name".into(), json!("rejected"));
        }
        Status::RuntimeError | Status::Timeout => {
            metadata.insert("runtime_error".into(), json!(v.message));
            metadata.insert(
                "runtime_error_name".into(),
                json!(exc_name.unwrap_or_else(|| v.status.as_str().to_string())),
            );
        }
    }
    let mut runtime = -1.0;
    let mut runtime_stats = Map::new();
    if let (true, Some(t)) = (correct, &v.timing) {
        let c = &t.candidate;
        let mean = c.mean_ms.unwrap_or(c.median_ms);
        runtime = round3(mean);
        runtime_stats.insert("mean".into(), json!(round3(mean)));
        runtime_stats.insert("std".into(), json!(round3(c.std_ms.unwrap_or(c.iqr_ms / 1.349))));
        runtime_stats.insert("min".into(), json!(round3(c.min_ms.unwrap_or(c.median_ms))));
        runtime_stats.insert("max".into(), json!(round3(c.max_ms.unwrap_or(c.median_ms))));
        runtime_stats.insert("num_trials".into(), json!(c.samples));
        runtime_stats.insert("hardware".into(), json!(hw));
        runtime_stats.insert("device".into(), json!(device));
    }
    metadata.insert(
        EXTRA_KEY.into(),
        json!({
            "job": job,
            "key": record.key,
            "status": v.status,
            "stage": v.stage,
            "message": v.message,
            "cached": cached,
            "speedup": v.timing.as_ref().map(|t| t.speedup),
            "speedup_low": v.timing.as_ref().map(|t| t.speedup_low),
            "speedup_high": v.timing.as_ref().map(|t| t.speedup_high),
            "reference_ms": v.timing.as_ref().map(|t| t.reference.median_ms),
            "candidate_median_ms": v.timing.as_ref().map(|t| t.candidate.median_ms),
            "timing_note": v.timing_note,
        }),
    );
    EvalResponse { compiled, correctness: correct, runtime, runtime_stats, metadata }
}

/// What `/health`, `/gpu_status` and `/backend_info` are filled from.
#[derive(Debug, Clone)]
pub struct State<'a> {
    pub env: &'a EnvInfo,
    /// Candidates running per device index (CPU: one entry).
    pub running: Vec<u64>,
    /// Per-device slots (`--jobs`).
    pub capacity_per_device: usize,
    /// Worker processes replaced after a crash, per device.
    pub crashes: Vec<u64>,
    /// Device memory admitted to running candidates, per device (`None`: not admitted by
    /// memory). Their server reports its own process's torch allocations; ours holds no
    /// tensors, so the candidates' admitted share is the honest figure.
    pub admitted_bytes: Vec<Option<u64>>,
    pub draining: bool,
}

fn per_device(state: &State<'_>) -> Vec<(u32, String, u64, u64)> {
    if state.env.gpus.is_empty() {
        let r = state.running.first().copied().unwrap_or(0);
        let c = state.crashes.first().copied().unwrap_or(0);
        return vec![(0, "cpu".into(), r, c)];
    }
    state
        .env
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let r = state.running.get(i).copied().unwrap_or(0);
            let c = state.crashes.get(i).copied().unwrap_or(0);
            (g.index, g.name.clone(), r, c)
        })
        .collect()
}

pub fn health(state: &State<'_>) -> Value {
    let devs = per_device(state);
    let cap = state.capacity_per_device as u64;
    let free: Vec<u32> = devs.iter().filter(|d| d.2 < cap).map(|d| d.0).collect();
    let cuda = !state.env.gpus.is_empty();
    json!({
        "status": if state.draining { "draining" } else { "healthy" },
        "gpu_platform": if cuda { "CUDA" } else { "CPU (Triton interpreter)" },
        "cuda_available": cuda,
        "supported_backends": BACKENDS,
        "total_gpu_devices": state.env.gpus.len(),
        "available_gpu_devices": if cuda { free.len() } else { 0 },
        "busy_gpu_devices": if cuda { devs.len() - free.len() } else { 0 },
        "available_device_ids": if cuda { free } else { vec![] },
        "gpu_arch": state.env.gpus.first().map(|g| g.capability.clone()).unwrap_or_else(|| "not set".into()),
        "devices": devs.iter().map(|d| json!({
            "device_id": d.0, "available": d.2 < cap, "status": "healthy", "fault_count": d.3,
        })).collect::<Vec<_>>(),
        "isolation": "fresh_process_per_candidate",
        "total_memory_faults": devs.iter().map(|d| d.3).sum::<u64>(),
        "max_faults_per_device": Value::Null,
        "gpu_settings": {"rocm_home": Value::Null, "hip_platform": Value::Null,
                         "cuda_dsa": "disabled", "core_dumps": "disabled"},
    })
}

pub fn gpu_status(state: &State<'_>) -> Value {
    if state.env.gpus.is_empty() {
        return json!({"error": "CUDA/ROCm not available"});
    }
    let cap = state.capacity_per_device as u64;
    let devices: Vec<Value> = per_device(state)
        .iter()
        .zip(&state.env.gpus)
        .enumerate()
        .map(|(i, (d, g))| {
            let admitted = state.admitted_bytes.get(i).copied().flatten().unwrap_or(0);
            let cc: Vec<u32> = g.capability.split('.').filter_map(|x| x.parse().ok()).collect();
            json!({
                "device_id": d.0, "name": d.1, "available": d.2 < cap,
                "memory_allocated": admitted, "memory_cached": admitted, "memory_total": g.memory_bytes,
                "compute_capability": cc, "fault_count": d.3, "running": d.2,
            })
        })
        .collect();
    json!({
        "total_devices": state.env.gpus.len(),
        "devices": devices,
        "semaphore_permits": state.capacity_per_device * state.env.gpus.len(),
        "total_faults": state.crashes.iter().sum::<u64>(),
    })
}

pub fn backend_info(state: &State<'_>) -> Value {
    let cuda = !state.env.gpus.is_empty();
    json!({
        "supported_backends": BACKENDS,
        "default_backend": "triton",
        "gpu_platform": if cuda { "CUDA" } else { "CPU (Triton interpreter)" },
        "backend_descriptions": {
            "cuda": "accepted for compatibility: candidates are held to the Triton rules (inline CUDA is rejected by the guard)",
            "triton": "Triton kernels (@triton.jit), checked by the guard and the runtime provenance layers",
        },
        "cuda_available": cuda,
        "triton_available": true,
        "process_isolation": "fresh_process_per_candidate",
        "memory_fault_handling": true,
        "gpu_architecture": state.env.gpus.first().map(|g| g.capability.clone()),
        "cuda_dsa_enabled": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_significant_digits() {
        assert_eq!(round3(0.0123456), 0.0123);
        assert_eq!(round3(123.456), 123.0);
        assert_eq!(round3(-1.0), -1.0);
    }

    #[test]
    fn their_client_sends_seed_and_it_is_ignored() {
        let r: EvalRequest = serde_json::from_str(
            r#"{"original_model_src":"a","custom_model_src":"b","seed":7,"backend":"triton"}"#,
        )
        .unwrap();
        assert_eq!((r.seed_num, r.num_correct_trials, r.num_perf_trials), (42, 5, 100));
        assert!(r.measure_performance && !r.verbose && r.preferred_device.is_none());
    }
}

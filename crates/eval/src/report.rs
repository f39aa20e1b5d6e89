//! Evaluations as text: the verdict a person reads, the batch table and summary, the
//! JSON line, the environment and sandbox lines. Formatting only; the binary prints.

use std::fmt::Write as _;
use std::time::Duration;

use crate::{EvalError, Evaluation};
use tritonforge_protocol::{DeviceKind, EnvInfo, Status};

pub fn env_line(env: &EnvInfo) -> String {
    match env.device {
        DeviceKind::Cpu => format!(
            "CPU mode: Triton interpreter (torch {}, triton {}); timing unavailable",
            env.torch, env.triton
        ),
        DeviceKind::Cuda => {
            let gpus: Vec<&str> = env.gpus.iter().map(|g| g.name.as_str()).collect();
            format!(
                "GPU mode: {} (torch {}, triton {}, CUDA {})",
                gpus.join(", "),
                env.torch,
                env.triton,
                env.cuda.as_deref().unwrap_or("?")
            )
        }
    }
}

/// The record as one JSON object, with `cached` added.
pub fn json_line(ev: &Evaluation) -> String {
    let mut v = serde_json::to_value(&ev.record).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("cached".into(), serde_json::Value::Bool(ev.cached));
    }
    v.to_string()
}

/// One JSON line per pair of a batch: the record (`json_line`), or, for a pair that got
/// none, its problem name, `problem_error` (bad input: the problem, or a problem too big
/// for the device) or `error` (the evaluator's own failure), and the message.
pub fn json_result(result: &Result<Evaluation, EvalError>) -> String {
    match result {
        Ok(ev) => json_line(ev),
        Err(_) => {
            let row = Row::from_result(result);
            serde_json::json!({
                "problem": { "name": row.name },
                "status": row.status_str(),
                "message": row.message,
            })
            .to_string()
        }
    }
}

fn fmt_err(x: Option<f64>) -> String {
    match x {
        Some(0.0) => "0".into(),
        Some(v) if (1e-3..1e4).contains(&v.abs()) => format!("{v:.4}"),
        Some(v) => format!("{v:.2e}"),
        None => "-".into(),
    }
}

/// The largest max-abs-error any trial reported.
fn worst_trial_err(r: &tritonforge_protocol::EvalRecord) -> Option<f64> {
    r.verdict.trials.iter().filter_map(|t| t.max_abs_err).reduce(f64::max)
}

pub fn verdict_text(ev: &Evaluation) -> String {
    let r = &ev.record;
    let mut s = String::new();
    let passed = r.verdict.trials.iter().filter(|t| t.passed).count();
    let _ = writeln!(s, "verdict:   {} (decided at stage {})", r.verdict.status, r.verdict.stage);
    let variant =
        r.config.variant.as_deref().map(|v| format!(" (variant {v})")).unwrap_or_default();
    let _ = writeln!(s, "problem:   {}{variant}", r.problem.path);
    let _ = writeln!(s, "candidate: {}", r.candidate.path);
    let _ = writeln!(s, "message:   {}", r.verdict.message);
    if let Some(e) = &r.verdict.error {
        let _ = writeln!(s, "error:     {}: {}", e.exc_type, first_line(&e.message));
        for f in &e.frames {
            let _ = writeln!(s, "  at {}:{} in {}: {}", f.file, f.line, f.function, f.code);
        }
    }
    if let Some(m) = &r.verdict.mismatch {
        let _ = writeln!(
            s,
            "mismatch:  trial {}, output {}: {}; expected {}, got {}; max abs err {}, max rel err {}; {} of {} elements at fault",
            m.trial,
            m.output,
            serde_json::to_value(m.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            m.expected,
            m.got,
            fmt_err(m.max_abs_err),
            fmt_err(m.max_rel_err),
            m.mismatched,
            m.total
        );
    }
    let _ = writeln!(
        s,
        "trials:    {passed}/{} passed, max abs err {}",
        planned_trials(r),
        fmt_err(worst_trial_err(r))
    );
    if let Some(p) = &r.verdict.provenance {
        let kernels: Vec<String> =
            p.kernels.iter().map(|k| format!("{} x{}", k.name, k.launches)).collect();
        let mut share =
            p.gpu_share.map(|x| format!(", {:.0}% of GPU time", x * 100.0)).unwrap_or_default();
        if let Some(x) = p.window_share {
            share.push_str(&format!(", {:.0}% of the watched calls' GPU window", x * 100.0));
        }
        if let Some(x) = p.model_share {
            share.push_str(&format!(", about {:.0}% of the modelled work", x * 100.0));
        }
        let _ = writeln!(
            s,
            "kernels:   {} ({} of {} calls launched one{share})",
            if kernels.is_empty() { "none".to_string() } else { kernels.join(", ") },
            p.calls - p.calls_without_launch,
            p.calls
        );
    }
    match (&r.verdict.timing, &r.verdict.timing_note) {
        (Some(t), _) => {
            let _ = writeln!(
                s,
                "timing:    reference {:.4} ms, candidate {:.4} ms, speedup {:.2}x [{:.2}, {:.2}] over {} interleaved samples",
                t.reference.median_ms,
                t.candidate.median_ms,
                t.speedup,
                t.speedup_low,
                t.speedup_high,
                t.candidate.samples
            );
            if let Some(c) = &t.compiled {
                let _ = writeln!(
                    s,
                    "           torch.compile {:.4} ms ({:.2}x of it)",
                    c.median_ms,
                    (c.median_ms - t.harness_ms).max(1e-9)
                        / (t.candidate.median_ms - t.harness_ms).max(1e-9)
                );
            }
            for f in &t.flags {
                let why = match f {
                    tritonforge_protocol::TimingFlag::ImplausibleSpeedup => {
                        format!("speedup above the plausibility cap of {}x", r.config.speedup_cap)
                    }
                    tritonforge_protocol::TimingFlag::ClockDisagreement => {
                        "host clock and device events disagree (work outside the timed stream?)"
                            .to_string()
                    }
                    tritonforge_protocol::TimingFlag::SideStreams => {
                        "kernels ran on other streams; timed with a device-wide sync in every window"
                            .to_string()
                    }
                    tritonforge_protocol::TimingFlag::Unconverged => {
                        "the timing budget ran out before the speedup's interval narrowed to ±1%"
                            .to_string()
                    }
                };
                let _ = writeln!(s, "flag:      {why}");
            }
        }
        (None, Some(note)) => {
            let _ = writeln!(s, "timing:    {note}");
        }
        (None, None) => {}
    }
    if let Some(tail) = &r.stderr_tail {
        let _ = writeln!(s, "stderr (last lines):");
        for line in tail.lines().rev().take(12).collect::<Vec<_>>().into_iter().rev() {
            let _ = writeln!(s, "  | {line}");
        }
    }
    let _ = writeln!(
        s,
        "record:    {} ({}, {:.2}s)",
        &r.key[..12.min(r.key.len())],
        if ev.cached { "cache hit" } else { "evaluated" },
        r.wall_ms / 1000.0
    );
    s
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// One line of a batch summary.
pub struct Row {
    pub name: String,
    pub status: Option<Status>,
    pub stage: String,
    pub trials: String,
    pub max_err: String,
    pub wall_s: f64,
    pub cached: bool,
    pub message: String,
    pub problem_error: bool,
    pub env_error: bool,
}

impl Row {
    pub fn from_result(result: &Result<Evaluation, EvalError>) -> Row {
        match result {
            Ok(ev) => {
                let r = &ev.record;
                let passed = r.verdict.trials.iter().filter(|t| t.passed).count();
                Row {
                    name: r.problem.name.clone(),
                    status: Some(r.verdict.status),
                    stage: r.verdict.stage.to_string(),
                    trials: format!("{passed}/{}", planned_trials(r)),
                    max_err: fmt_err(
                        r.verdict
                            .mismatch
                            .as_ref()
                            .and_then(|m| m.max_abs_err)
                            .or_else(|| worst_trial_err(r)),
                    ),
                    wall_s: r.wall_ms / 1000.0,
                    cached: ev.cached,
                    message: r.verdict.message.clone(),
                    problem_error: false,
                    env_error: false,
                }
            }
            Err(e) => {
                let (name, problem_error) = match e {
                    EvalError::Problem { path, .. } => (
                        path.file_stem()
                            .map(|s| s.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        true,
                    ),
                    EvalError::Suite(_) => (String::from("?"), true),
                    _ => (String::from("?"), false),
                };
                Row {
                    name,
                    status: None,
                    stage: "-".into(),
                    trials: "-".into(),
                    max_err: "-".into(),
                    wall_s: 0.0,
                    cached: false,
                    message: e.to_string(),
                    problem_error,
                    env_error: !problem_error,
                }
            }
        }
    }

    pub fn status_str(&self) -> &str {
        match (self.status, self.problem_error) {
            (Some(s), _) => s.as_str(),
            (None, true) => "problem_error",
            (None, false) => "error",
        }
    }

    pub fn progress_line(&self) -> String {
        format!(
            "{:<14} {:<24} {}{}",
            self.status_str(),
            self.name,
            first_line(&self.message),
            if self.cached { " (cache hit)" } else { "" }
        )
    }
}

pub fn table(rows: &[Row]) -> String {
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(7).max(7);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<width$}  {:<14} {:<12} {:>6} {:>11} {:>8}  cache",
        "problem", "status", "stage", "trials", "max_abs_err", "wall_s"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<width$}  {:<14} {:<12} {:>6} {:>11} {:>8.2}  {}",
            r.name,
            r.status_str(),
            r.stage,
            r.trials,
            r.max_err,
            r.wall_s,
            if r.cached { "hit" } else { "-" }
        );
    }
    s
}

pub fn summary(rows: &[Row], elapsed: Duration) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for r in rows {
        let k = r.status_str().to_string();
        match counts.iter_mut().find(|(n, _)| *n == k) {
            Some((_, c)) => *c += 1,
            None => counts.push((k, 1)),
        }
    }
    counts.sort();
    let hits = rows.iter().filter(|r| r.cached).count();
    let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    format!(
        "{} evaluations: {} ({hits} cache hits) in {:.1}s",
        rows.len(),
        parts.join(", "),
        elapsed.as_secs_f64()
    )
}

/// How long the pool took to start before a batch's first evaluation (`opened`: the whole
/// of it, store included), in its parts: on a GPU this wait comes before every batch.
pub fn pool_start_line(start: &crate::PoolStart, opened: Duration) -> String {
    let server = start
        .fork_server_ms
        .map(|ms| format!("fork server ready at {:.1}s, ", ms / 1000.0))
        .unwrap_or_default();
    format!(
        "pool started in {:.1}s ({server}first process at {:.1}s)",
        opened.as_secs_f64(),
        start.first_process_ms / 1000.0
    )
}

/// One line on where a device's time went during a batch (`lane::split`); `lost`: lease
/// events the pool's bounded log let go, whose holds the line cannot count.
pub fn lane_line(slot: usize, s: &crate::lane::LaneSplit, lost: usize) -> String {
    let secs = |d: std::time::Duration| d.as_secs_f64();
    let mut line = format!(
        "device {slot}: exclusive holds {:.1}s ({} holds), draining for them {:.1}s, shared only {:.1}s, idle {:.1}s, of the batch's {:.1}s",
        secs(s.exclusive),
        s.exclusive_holds,
        secs(s.draining),
        secs(s.shared),
        secs(s.idle),
        secs(s.wall)
    );
    if lost > 0 {
        line.push_str(&format!(
            " (incomplete: the lease log let go of its {lost} oldest events; their holds count as idle)"
        ));
    }
    line
}

/// Trials the evaluation plans: the configured ones, plus those at unseen shapes when asked
/// (one at the named variant, one more with `BATCH + 1` where the problem has a `BATCH`).
fn planned_trials(r: &tritonforge_protocol::record::EvalRecord) -> usize {
    let planned = r.config.trials as usize + usize::from(r.config.shape_check.is_some());
    planned.max(r.verdict.trials.len())
}

/// One line on what confines candidate processes, and what does not.
pub fn sandbox_line(s: &tritonforge_protocol::Sandbox) -> String {
    let mut parts = Vec::new();
    match s.landlock_abi {
        Some(abi) => parts.push(format!("landlock ABI {abi}")),
        None => parts.push("no landlock".to_string()),
    }
    let yes_no = |b: bool, yes: &str, no: &str| if b { yes.to_string() } else { no.to_string() };
    parts.push(yes_no(s.filesystem, "writes confined to scratch", "writes NOT confined"));
    parts.push(yes_no(s.network, "TCP denied", "network NOT restricted"));
    parts.push(yes_no(s.signals, "signals scoped", "signals NOT scoped"));
    if let Some(f) = s.gpu_memory_fraction {
        parts.push(format!("GPU memory cap {:.0}%", f * 100.0));
    }
    let mut line = parts.join(", ");
    for n in &s.notes {
        line.push_str(&format!("\n             note: {n}"));
    }
    line
}

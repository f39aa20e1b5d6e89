//! Counters and latency histograms, rendered in Prometheus' text format at `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tritonforge_protocol::{EvalRecord, Stage, Status};

/// Bucket bounds in milliseconds: 1 ms to 10 min.
const BUCKETS_MS: [f64; 14] =
    [1.0, 5.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1e3, 2.5e3, 5e3, 1e4, 3e4, 1.2e5, 6e5];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS_MS.len()],
    sum: f64,
    n: u64,
}

impl Histogram {
    fn observe(&mut self, ms: f64) {
        for (i, b) in BUCKETS_MS.iter().enumerate() {
            if ms <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += ms / 1000.0;
        self.n += 1;
    }
}

#[derive(Default)]
pub struct Metrics {
    pub accepted: AtomicU64,
    /// Submissions answered with an existing job (idempotency key, identical `/eval`).
    pub deduplicated: AtomicU64,
    pub failed: AtomicU64,
    pub cancelled: AtomicU64,
    pub cache_hits: AtomicU64,
    /// Jobs a previous server left running, queued again at start.
    pub requeued: AtomicU64,
    /// Candidate processes that died (crash, budget) and were replaced.
    pub processes_replaced: AtomicU64,
    pub rejected_requests: Mutex<BTreeMap<u16, u64>>,
    pub store_errors: AtomicU64,
    by_status: Mutex<BTreeMap<&'static str, u64>>,
    stages: Mutex<BTreeMap<&'static str, Histogram>>,
}

impl Metrics {
    pub(crate) fn observe_stage(&self, stage: &'static str, ms: f64) {
        let mut h = self.stages.lock().unwrap_or_else(|p| p.into_inner());
        h.entry(stage).or_default().observe(ms.max(0.0));
    }

    pub(crate) fn refused(&self, code: u16) {
        *self
            .rejected_requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(code)
            .or_default() += 1;
    }

    /// One job done: its status, whether cached, and its stage latencies.
    pub(crate) fn finished(&self, r: &EvalRecord, cached: bool, took: Duration) {
        *self
            .by_status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(r.verdict.status.as_str())
            .or_default() += 1;
        if cached {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            self.observe_stage("cached", took.as_secs_f64() * 1000.0);
            return;
        }
        if r.verdict.stage == Stage::Process && r.verdict.status != Status::Correct {
            self.processes_replaced.fetch_add(1, Ordering::Relaxed);
        }
        self.observe_stage("evaluation", took.as_secs_f64() * 1000.0);
        self.observe_stage("lease_wait", r.lease_wait_ms);
        if let Some(p) = &r.verdict.phases {
            self.observe_stage("build", p.build_ms);
            self.observe_stage("trials", p.trials_ms);
            self.observe_stage("shape_check", p.shape_check_ms);
            self.observe_stage("timing", p.timing_ms);
            // Where a candidate's time goes under load (worker-reported; absent in old records).
            if let Some(ms) = p.compile_ms {
                self.observe_stage("compile", ms);
            }
            if let Some(ms) = p.shared_wait_ms {
                self.observe_stage("shared_wait", ms);
            }
        }
    }

    /// The text exposition; gauges come from the caller (they are read, not counted).
    pub(crate) fn render(&self, gauges: &Gauges) -> String {
        let mut o = String::new();
        let c = |o: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        let _ = writeln!(o, "# HELP tritonforge_queue_depth Jobs waiting to run.\n# TYPE tritonforge_queue_depth gauge\ntritonforge_queue_depth {}", gauges.queued);
        let _ = writeln!(o, "# HELP tritonforge_jobs_running Jobs handed to the evaluator.\n# TYPE tritonforge_jobs_running gauge\ntritonforge_jobs_running {}", gauges.running);
        let _ = writeln!(o, "# HELP tritonforge_in_flight Candidates running per device.\n# TYPE tritonforge_in_flight gauge");
        for (i, n) in gauges.in_flight.iter().enumerate() {
            let _ = writeln!(o, "tritonforge_in_flight{{device=\"{i}\"}} {n}");
        }
        let _ = writeln!(o, "# HELP tritonforge_uptime_seconds Since the server started.\n# TYPE tritonforge_uptime_seconds gauge\ntritonforge_uptime_seconds {:.1}", gauges.uptime_s);
        let _ = writeln!(o, "# HELP tritonforge_draining 1 while the server shuts down.\n# TYPE tritonforge_draining gauge\ntritonforge_draining {}", u8::from(gauges.draining));
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        c(
            &mut o,
            "tritonforge_jobs_accepted_total",
            "Jobs accepted into the queue.",
            ld(&self.accepted),
        );
        c(
            &mut o,
            "tritonforge_jobs_deduplicated_total",
            "Submissions answered with an existing job.",
            ld(&self.deduplicated),
        );
        c(
            &mut o,
            "tritonforge_jobs_failed_total",
            "Jobs the evaluator could not judge.",
            ld(&self.failed),
        );
        c(&mut o, "tritonforge_jobs_cancelled_total", "Jobs cancelled.", ld(&self.cancelled));
        c(
            &mut o,
            "tritonforge_cache_hits_total",
            "Verdicts answered from the store.",
            ld(&self.cache_hits),
        );
        c(
            &mut o,
            "tritonforge_jobs_requeued_total",
            "Jobs requeued at start after a crash.",
            ld(&self.requeued),
        );
        c(
            &mut o,
            "tritonforge_pool_processes_replaced_total",
            "Candidate processes that crashed or ran out of time.",
            ld(&self.processes_replaced),
        );
        c(
            &mut o,
            "tritonforge_store_errors_total",
            "Store failures in the background.",
            ld(&self.store_errors),
        );
        let _ = writeln!(o, "# HELP tritonforge_evaluations_total Finished evaluations by status.\n# TYPE tritonforge_evaluations_total counter");
        for (s, n) in self.by_status.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(o, "tritonforge_evaluations_total{{status=\"{s}\"}} {n}");
        }
        let _ = writeln!(o, "# HELP tritonforge_http_refused_total Requests refused, by HTTP status.\n# TYPE tritonforge_http_refused_total counter");
        for (code, n) in self.rejected_requests.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(o, "tritonforge_http_refused_total{{code=\"{code}\"}} {n}");
        }
        let _ = writeln!(o, "# HELP tritonforge_stage_seconds Latency by stage (queue, evaluation, cached, lease_wait, build, trials, shape_check, timing, compile, shared_wait).\n# TYPE tritonforge_stage_seconds histogram");
        for (stage, h) in self.stages.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            for (i, b) in BUCKETS_MS.iter().enumerate() {
                let _ = writeln!(
                    o,
                    "tritonforge_stage_seconds_bucket{{stage=\"{stage}\",le=\"{}\"}} {}",
                    b / 1000.0,
                    h.counts[i]
                );
            }
            let _ = writeln!(
                o,
                "tritonforge_stage_seconds_bucket{{stage=\"{stage}\",le=\"+Inf\"}} {}",
                h.n
            );
            let _ = writeln!(o, "tritonforge_stage_seconds_sum{{stage=\"{stage}\"}} {}", h.sum);
            let _ = writeln!(o, "tritonforge_stage_seconds_count{{stage=\"{stage}\"}} {}", h.n);
        }
        o
    }
}

/// Gauges read at render time.
pub(crate) struct Gauges {
    pub queued: u64,
    pub running: u64,
    pub in_flight: Vec<usize>,
    pub draining: bool,
    pub uptime_s: f64,
}

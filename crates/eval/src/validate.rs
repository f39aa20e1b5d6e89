//! Suite validation: the manifest and the files agree, every problem is sound at each
//! variant (imports, deterministic, not degenerate), and every reference solution is
//! correct. Reports every failure rather than stopping at the first.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinSet;
use tritonforge_protocol::{DeviceKind, Status};
use tritonforge_suite::{Candidate, Filter, Problem, Suite};

use crate::setup::{EvalSettings, ShapeCheck, TimingSettings};
use crate::{EvalError, EvalService};

/// A trial of a `small` variant must stay under this on one CPU core (interpreter).
pub const SMALL_TRIAL_BUDGET_MS: f64 = 2000.0;

/// How long one problem check may take.
const CHECK_BUDGET: Duration = Duration::from_secs(300);

/// A reference solution that times out is tried once more with this many times its budget.
pub const TIMEOUT_RETRY_FACTOR: u64 = 3;

/// What to validate.
#[derive(Debug, Clone, Default)]
pub struct ValidateSpec {
    pub filter: Filter,
    /// Variants to run; empty: `small` in CPU mode, `full` and `heldout` on a GPU.
    pub variants: Vec<String>,
    pub timing: TimingSettings,
    /// Wall-clock budget per reference solution; `None`: the evaluator's default.
    pub budget: Option<Duration>,
    /// Correctness trials per reference solution; `None`: the evaluator's default (5).
    pub trials: Option<u32>,
}

/// Which half of a problem a check was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Checked {
    Problem,
    Solution,
}

/// One check finished (for progress output).
#[derive(Debug, Clone)]
pub struct CheckDone {
    pub done: usize,
    pub total: usize,
    pub what: Checked,
    pub key: String,
    pub variant: String,
    pub ok: bool,
}

impl CheckDone {
    /// `[3/20] problem  level1/relu [small]: ok`, one progress line.
    pub fn line(&self) -> String {
        let what = match self.what {
            Checked::Problem => "problem ",
            Checked::Solution => "solution",
        };
        let ok = if self.ok { "ok" } else { "FAILED" };
        format!("[{}/{}] {what} {} [{}]: {ok}", self.done, self.total, self.key, self.variant)
    }
}

/// The outcome: findings make the suite invalid; `slow` notes (wall-clock, so
/// load-dependent) do not.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ValidationReport {
    pub problems_checked: usize,
    pub solutions_checked: usize,
    pub variants: Vec<String>,
    pub findings: Vec<String>,
    pub slow: Vec<String>,
    /// The failed checks one by one, for callers that act per problem (the synthetic
    /// generator drops those problems); `findings` has the same in words.
    #[serde(skip)]
    pub failed: Vec<FailedCheck>,
}

/// One failed check of one problem.
#[derive(Debug, Clone)]
pub struct FailedCheck {
    pub key: String,
    pub what: Checked,
    /// The solution's verdict, when it got one.
    pub status: Option<Status>,
    pub finding: String,
}

impl ValidationReport {
    /// The findings, the slow notes and a closing count, as `suite validate` prints them.
    pub fn text(&self) -> String {
        let r = self;
        let mut s = String::new();
        for f in &r.findings {
            let _ = writeln!(s, "FAIL {f}");
        }
        for x in &r.slow {
            let _ = writeln!(s, "SLOW {x} (wall-clock on this machine now; not a failure)");
        }
        let n = r.findings.len();
        let _ = writeln!(
            s,
            "validated {} problem variants and {} solutions ({}): {n} finding{}",
            r.problems_checked,
            r.solutions_checked,
            r.variants.join(", "),
            if n == 1 { "" } else { "s" }
        );
        s
    }
}

type Outcome = (Checked, String, String, Vec<String>, Vec<String>, Option<Status>);

/// Validate `suite` with `evaluator`, calling `progress` as each check ends.
pub async fn validate_suite<E: EvalService + ?Sized + 'static>(
    evaluator: Arc<E>,
    suite: &Suite,
    spec: &ValidateSpec,
    progress: &mut (dyn FnMut(CheckDone) + Send),
) -> Result<ValidationReport, EvalError> {
    let cpu_mode = evaluator.device() == DeviceKind::Cpu;
    let variants = if spec.variants.is_empty() {
        let default: &[&str] = if cpu_mode { &["small"] } else { &["full", "heldout"] };
        default.iter().map(|v| v.to_string()).collect()
    } else {
        spec.variants.clone()
    };
    let mut report = ValidationReport {
        variants: variants.clone(),
        findings: suite.lint(),
        ..ValidationReport::default()
    };
    let mut set: JoinSet<Outcome> = JoinSet::new();
    for e in suite.entries.iter().filter(|e| spec.filter.keep(e) && e.problem_path.is_file()) {
        let problem = match Problem::load_with(&e.problem_path, Some(&suite.manifest)) {
            Ok(p) => p,
            Err(err) => {
                report.findings.push(format!("{}: {err}", e.key));
                continue;
            }
        };
        let candidate = match e.solution_path.as_deref().map(Candidate::load).transpose() {
            Ok(c) => c,
            Err(err) => {
                report.findings.push(format!("{}: {err}", e.key));
                None
            }
        };
        for v in &variants {
            let base = EvalSettings::default();
            let settings = EvalSettings {
                variant: Some(v.clone()),
                shape_check: ShapeCheck::Off,
                timing: spec.timing.clone(),
                budget: spec.budget.unwrap_or(base.budget),
                trials: spec.trials.unwrap_or(base.trials),
                ..base
            };
            let config = match settings.config(&problem, evaluator.device()) {
                Ok(c) => c,
                Err(err) => {
                    report.findings.push(format!("{}: {err}", e.key));
                    continue;
                }
            };
            let label = config.variant.clone().unwrap_or_else(|| "full".into());
            report.problems_checked += 1;
            let (ev, p, key, l) = (evaluator.clone(), problem.clone(), e.key.clone(), label);
            let overrides = config.overrides.clone();
            let (checked, problem_checked) = tokio::sync::oneshot::channel::<()>();
            set.spawn(async move {
                let (f, slow) = check_problem(&*ev, &p, overrides, &key, &l, cpu_mode).await;
                let _ = checked.send(());
                (Checked::Problem, key, l, f, slow, None)
            });
            let Some(candidate) = candidate.clone() else {
                continue;
            };
            report.solutions_checked += 1;
            let (ev, p, key) = (evaluator.clone(), problem.clone(), e.key.clone());
            let l = config.variant.clone().unwrap_or_else(|| "full".into());
            set.spawn(async move {
                // After the problem's check, which measures (and stores) its memory need,
                // so that the solution's evaluation finds it instead of measuring again.
                let _ = problem_checked.await;
                let (f, slow, status) =
                    check_solution(&*ev, &p, &candidate, &config, &key, &l, cpu_mode).await;
                (Checked::Solution, key, l, f, slow, status)
            });
        }
    }
    let total = set.len();
    let mut done = 0;
    while let Some(joined) = set.join_next().await {
        let (what, key, variant, f, s, status) =
            joined.map_err(|e| EvalError::TaskFailed(e.to_string()))?;
        done += 1;
        let ok = f.is_empty();
        for finding in &f {
            let (key, finding) = (key.clone(), finding.clone());
            report.failed.push(FailedCheck { key, what, status, finding });
        }
        progress(CheckDone { done, total, what, key, variant, ok });
        report.findings.extend(f);
        report.slow.extend(s);
    }
    report.findings.sort();
    report.slow.sort();
    Ok(report)
}

async fn check_problem<E: EvalService + ?Sized>(
    ev: &E,
    p: &Problem,
    overrides: std::collections::BTreeMap<String, serde_json::Value>,
    key: &str,
    l: &str,
    cpu_mode: bool,
) -> (Vec<String>, Vec<String>) {
    let mut f = Vec::new();
    let mut slow = Vec::new();
    match ev.check_problem(p, overrides, CHECK_BUDGET).await {
        Ok(report) => {
            for x in report.findings {
                f.push(format!("{key} [{l}]: {x}"));
            }
            if cpu_mode && l == "small" && report.max_forward_ms > SMALL_TRIAL_BUDGET_MS {
                slow.push(format!(
                    "{key} [{l}]: reference forward takes {:.0} ms; `small` must stay under {SMALL_TRIAL_BUDGET_MS:.0} ms on CPU",
                    report.max_forward_ms
                ));
            }
        }
        Err(err) => f.push(format!("{key} [{l}]: {err}")),
    }
    (f, slow)
}

async fn check_solution<E: EvalService + ?Sized>(
    ev: &E,
    p: &Problem,
    candidate: &Candidate,
    config: &tritonforge_protocol::EvalConfig,
    key: &str,
    l: &str,
    cpu_mode: bool,
) -> (Vec<String>, Vec<String>, Option<Status>) {
    let mut f = Vec::new();
    let mut slow = Vec::new();
    let mut status = None;
    let mut result = ev.evaluate(p, candidate, config).await;
    // A reference solution that runs out of its wall-clock budget may only have shared
    // the cores with the rest of the suite (a convolution under the interpreter on two
    // busy cores): it is checked once more with `TIMEOUT_RETRY_FACTOR` times the budget
    // before it is called a failure, so that a suite's verdict does not follow the
    // machine's load. (A different budget is a different configuration: no cached
    // verdict answers the retry.)
    let mut retried = false;
    if matches!(&result, Ok(r) if r.record.verdict.status == Status::Timeout) {
        retried = true;
        let longer = tritonforge_protocol::EvalConfig {
            budget_ms: config.budget_ms.saturating_mul(TIMEOUT_RETRY_FACTOR),
            ..config.clone()
        };
        result = ev.evaluate(p, candidate, &longer).await.map(|mut r| {
            if r.record.verdict.status == Status::Timeout {
                r.record.verdict.message.push_str(&format!(
                    " (its second try: the first, with a budget of {:.1}s, timed out too)",
                    config.budget_ms as f64 / 1000.0
                ));
            }
            r
        });
    }
    match result {
        Ok(r) => {
            let rec = r.record;
            status = Some(rec.verdict.status);
            if rec.verdict.status != Status::Correct {
                f.push(format!(
                    "{key} [{l}]: reference solution is {}: {}",
                    rec.verdict.status, rec.verdict.message
                ));
            } else if retried {
                // Candidates for this problem get the first budget: a reference that needs
                // more would leave them no room.
                slow.push(format!(
                    "{key} [{l}]: the reference solution ran out of its {:.0} s budget and passed only with {TIMEOUT_RETRY_FACTOR} times it (the machine's load, or a solution too slow for candidates' budgets)",
                    config.budget_ms as f64 / 1000.0
                ));
            } else if cpu_mode && l == "small" {
                // Waiting for the device is not the solution's time.
                let per_trial = (rec.executor_ms.unwrap_or(0.0) - rec.lease_wait_ms).max(0.0)
                    / f64::from(config.trials.max(1));
                if per_trial > SMALL_TRIAL_BUDGET_MS {
                    slow.push(format!(
                        "{key} [{l}]: a solution trial takes {per_trial:.0} ms under the interpreter; `small` must stay under {SMALL_TRIAL_BUDGET_MS:.0} ms"
                    ));
                }
            }
        }
        Err(err) => f.push(format!("{key} [{l}]: solution: {err}")),
    }
    (f, slow, status)
}

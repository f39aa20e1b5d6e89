//! `bench import`: a KernelBench-style folder turned into a suite. For each problem the
//! scalings of its size constants (`tritonforge_suite::import::scalings`) are tried from
//! the smallest up through the real worker's problem check, and the first that imports,
//! builds, runs, is deterministic and not degenerate, and is small enough for the Triton
//! interpreter becomes its `small` variant. Problems with none are reported with why.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinSet;
use tritonforge_protocol::ProblemReport;
use tritonforge_suite::import::{self, Found, ImportError, Imported, Outcome};
use tritonforge_suite::Problem;

use crate::{EvalError, EvalService};

/// Inputs and outputs of a `small` variant together stay under this: the interpreter's
/// cost follows the number of elements (blocks launched), not PyTorch's forward time.
pub const SMALL_BYTES: u64 = 1 << 20;

/// The reference forward of a `small` variant stays under this (PyTorch, on the CPU).
pub const SMALL_FORWARD_MS: f64 = 500.0;

/// How long one check of one scaling may take.
const CHECK_BUDGET: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum ImportSuiteError {
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error(transparent)]
    Eval(#[from] EvalError),
}

/// What became of one problem, in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImportOutcome {
    /// A `small` variant was derived.
    Scaled,
    /// Small enough as written.
    AsIs,
    /// No `small` variant; the reason says why.
    Unscalable,
}

/// One problem's line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct ImportLine {
    pub key: String,
    pub outcome: ImportOutcome,
    /// The `small` variant's overrides (empty unless scaled).
    pub small: BTreeMap<String, u64>,
    /// Why there is no `small` variant (unscalable only).
    pub reason: Option<String>,
}

/// What `bench import` did.
#[derive(Debug, Clone, Serialize)]
pub struct ImportReport {
    pub manifest: std::path::PathBuf,
    pub problems: Vec<ImportLine>,
}

impl ImportReport {
    pub fn unscalable(&self) -> usize {
        self.problems.iter().filter(|p| p.outcome == ImportOutcome::Unscalable).count()
    }
}

/// Import `dir` (flat files at `flat_level`) into a suite under `out`, calling `progress`
/// with each problem's line as it is decided.
pub async fn import_suite<E: EvalService + ?Sized + 'static>(
    evaluator: Arc<E>,
    dir: &std::path::Path,
    out: &std::path::Path,
    flat_level: u32,
    progress: &mut (dyn FnMut(&ImportLine) + Send),
) -> Result<ImportReport, ImportSuiteError> {
    if out.join(tritonforge_suite::MANIFEST_FILE).exists() {
        return Err(ImportError::OutExists { out: out.to_owned() }.into());
    }
    let found = import::discover(dir, flat_level)?;
    let mut set: JoinSet<Result<Imported, EvalError>> = JoinSet::new();
    for f in found {
        let ev = evaluator.clone();
        set.spawn(async move {
            let outcome = decide(&*ev, &f).await?;
            Ok(Imported { found: f, outcome })
        });
    }
    let mut imported = Vec::new();
    while let Some(joined) = set.join_next().await {
        let p = joined.map_err(|e| EvalError::TaskFailed(e.to_string()))??;
        progress(&line(&p));
        imported.push(p);
    }
    imported.sort_by(|a, b| a.found.key.cmp(&b.found.key));
    let manifest = import::write_suite(out, &imported)?;
    Ok(ImportReport { manifest, problems: imported.iter().map(line).collect() })
}

fn line(p: &Imported) -> ImportLine {
    let (outcome, small, reason) = match &p.outcome {
        Outcome::Scaled { small } => (ImportOutcome::Scaled, small.clone(), None),
        Outcome::AsIs => (ImportOutcome::AsIs, BTreeMap::new(), None),
        Outcome::Unscalable { reason } => {
            (ImportOutcome::Unscalable, BTreeMap::new(), Some(reason.clone()))
        }
    };
    ImportLine { key: p.found.key.clone(), outcome, small, reason }
}

/// Try the scalings smallest first; the problem as written when there is nothing to scale.
async fn decide<E: EvalService + ?Sized>(ev: &E, f: &Found) -> Result<Outcome, EvalError> {
    let problem = Problem {
        name: f.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        path: f.path.clone(),
        source: f.source.clone(),
        meta: Default::default(),
    };
    let attempts = import::scalings(&f.constants);
    if attempts.is_empty() {
        let report = ev.check_problem(&problem, BTreeMap::new(), CHECK_BUDGET).await?;
        return Ok(match verdict(&report) {
            None => Outcome::AsIs,
            Some(why) => Outcome::Unscalable {
                reason: if f.constants.is_empty() {
                    format!("no module-level integer size constant to scale, and as written: {why}")
                } else {
                    format!(
                        "no module-level size constant above {}, and as written: {why}",
                        import::SCALE_FLOOR
                    )
                },
            },
        });
    }
    let mut last = String::new();
    for small in attempts {
        let overrides = small.iter().map(|(k, v)| (k.clone(), serde_json::json!(v))).collect();
        let report = ev.check_problem(&problem, overrides, CHECK_BUDGET).await?;
        match verdict(&report) {
            None => return Ok(Outcome::Scaled { small }),
            Some(why) => {
                let at: Vec<String> = small.iter().map(|(k, v)| format!("{k}={v}")).collect();
                last = format!("at {}: {why}", at.join(", "));
            }
        }
    }
    Ok(Outcome::Unscalable {
        reason: format!("no scaling tried builds and runs soundly; the largest, {last}"),
    })
}

/// Why a checked shape is not a usable `small` variant, or `None` when it is.
fn verdict(report: &ProblemReport) -> Option<String> {
    if let Some(f) = report.findings.first() {
        return Some(f.clone());
    }
    if let Some(m) = &report.memory {
        let bytes = m.input_bytes + m.output_bytes;
        if bytes > SMALL_BYTES {
            return Some(format!(
                "its inputs and outputs take {:.1} MiB, over the {} MiB a CPU-mode trial affords",
                bytes as f64 / f64::from(1u32 << 20),
                SMALL_BYTES >> 20
            ));
        }
    }
    if report.max_forward_ms > SMALL_FORWARD_MS {
        return Some(format!(
            "its reference forward takes {:.0} ms, over the {SMALL_FORWARD_MS:.0} ms of a CPU-mode trial",
            report.max_forward_ms
        ));
    }
    None
}

//! Generate, filter and verify a set, then write it: duplicates and look-alikes of the
//! suite's heldout problems are dropped first, then every problem is checked (sound
//! problem, correct solution) and every planted attempt evaluated (it must not be
//! correct) by the caller's [`Checker`]. Work happens in `<out>.partial`, renamed into
//! place at the end, so an interrupted run never leaves a set that looks finished.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use tritonforge_protocol::{EvalRecord, Status};

use crate::write::{self, AttemptRecord, SUMMARY_FILE};
use crate::{generate, Settings, Split, SynthError, SynthProblem};

/// Why a problem did not pass its check (`problem_unsound`, `solution_incorrect`, ...).
#[derive(Debug, Clone)]
pub struct Failure {
    pub reason: String,
    pub detail: String,
}

/// What became of one planted attempt.
#[derive(Debug, Clone)]
pub enum AttemptOutcome {
    Evaluated(Box<EvalRecord>),
    /// No verdict (its problem could not be run); the attempt is dropped.
    Failed(String),
}

/// The evaluator, as the generator needs it.
pub trait Checker {
    /// For each key of the suite at `dir`: `None` when the problem is sound and its
    /// reference solution correct, else why not. `Err` only when the evaluator itself
    /// failed.
    fn check(
        &self,
        dir: &Path,
        keys: &[String],
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Vec<Option<Failure>>, String>;
    /// Evaluate each (problem key, attempt file) of the suite at `dir`.
    fn attempts(
        &self,
        dir: &Path,
        items: &[(String, PathBuf)],
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Vec<AttemptOutcome>, String>;
}

/// For each problem source, the suite heldout problem it resembles, if any.
pub type Lookalikes<'a> = &'a (dyn Fn(&[&str]) -> Result<Vec<Option<String>>, String> + Sync);

/// A dropped problem or attempt and why.
#[derive(Debug, Clone, Serialize)]
pub struct Dropped {
    pub key: String,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// What a build did, written as `synth.json` and printed by the binary.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub seed: u64,
    pub generated: usize,
    pub kept: usize,
    pub train: usize,
    pub heldout: usize,
    pub dropped: BTreeMap<String, usize>,
    pub by_family: BTreeMap<String, usize>,
    pub by_difficulty: BTreeMap<u32, usize>,
    pub attempts_planted: usize,
    /// Kept attempts by the verdict they got.
    pub attempts_kept: BTreeMap<String, usize>,
    pub attempts_by_flaw: BTreeMap<String, usize>,
    pub attempts_dropped: BTreeMap<String, usize>,
    pub drops: Vec<Dropped>,
    pub seconds: f64,
}

impl Summary {
    fn drop(&mut self, key: String, reason: &str, detail: Option<String>) {
        *self.dropped.entry(reason.to_string()).or_default() += 1;
        self.drops.push(Dropped { key, reason: reason.to_string(), detail });
    }

    fn drop_attempt(&mut self, key: String, reason: &str, detail: Option<String>) {
        *self.attempts_dropped.entry(reason.to_string()).or_default() += 1;
        self.drops.push(Dropped {
            key: format!("attempt:{key}"),
            reason: reason.to_string(),
            detail,
        });
    }
}

/// Where the set is assembled before it replaces `out`.
fn partial(out: &Path) -> PathBuf {
    let mut name = out.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "synth".into());
    name.push(".partial");
    out.with_file_name(name)
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> SynthError + '_ {
    move |e| SynthError::Io { path: path.to_owned(), reason: e.to_string() }
}

/// `out` may be absent, empty, or an earlier set (it has `synth.json`): anything else is
/// someone's directory and is not replaced.
fn check_out(out: &Path) -> Result<(), SynthError> {
    if !out.exists() {
        return Ok(());
    }
    let empty = std::fs::read_dir(out).map_err(io(out))?.next().is_none();
    if empty || out.join(SUMMARY_FILE).is_file() {
        return Ok(());
    }
    Err(SynthError::Io {
        path: out.to_owned(),
        reason: format!("not empty and not a generated set (no {SUMMARY_FILE}); not replacing it"),
    })
}

/// Generate `settings.count` problems, keep those that pass, write them to `out`.
pub fn build(
    settings: &Settings,
    out: &Path,
    lookalikes: Lookalikes<'_>,
    checker: &dyn Checker,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Summary, SynthError> {
    let started = Instant::now();
    settings.check()?;
    check_out(out)?;
    let mut summary =
        Summary { seed: settings.seed, generated: settings.count, ..Summary::default() };
    progress(&format!("generating {} problems (seed {})", settings.count, settings.seed));
    let problems = screen(generate(settings), lookalikes, &mut summary)?;
    let stage = partial(out);
    if stage.exists() {
        std::fs::remove_dir_all(&stage).map_err(io(&stage))?;
    }
    let refs: Vec<&SynthProblem> = problems.iter().collect();
    write::write_set(&stage, &refs, settings.seed)?;
    progress(&format!("checking {} problems and their solutions", problems.len()));
    let keys: Vec<String> = problems.iter().map(SynthProblem::key).collect();
    let failures = checker.check(&stage, &keys, progress).map_err(SynthError::Check)?;
    if failures.len() != keys.len() {
        return Err(SynthError::Check(format!(
            "{} verdicts for {} problems",
            failures.len(),
            keys.len()
        )));
    }
    let mut kept = Vec::new();
    for (p, f) in problems.into_iter().zip(failures) {
        match f {
            None => kept.push(p),
            Some(f) => {
                write::remove_problem(&stage, &p.key());
                summary.drop(p.key(), &f.reason, Some(f.detail));
            }
        }
    }
    attempts(&stage, &kept, checker, progress, &mut summary)?;
    finish(&stage, out, &kept, settings.seed, &mut summary)?;
    summary.seconds = started.elapsed().as_secs_f64();
    write::write_json(&out.join(SUMMARY_FILE), &summary)?;
    Ok(summary)
}

/// Duplicates (the same module but for its sizes) and look-alikes of the suite's heldout
/// problems go before anything is evaluated.
fn screen(
    problems: Vec<SynthProblem>,
    lookalikes: Lookalikes<'_>,
    summary: &mut Summary,
) -> Result<Vec<SynthProblem>, SynthError> {
    let mut seen = BTreeSet::new();
    let mut unique = Vec::new();
    for p in problems {
        let shape: String =
            p.problem.lines().filter(|l| !is_size_constant(l)).collect::<Vec<_>>().join("\n");
        if seen.insert(shape) {
            unique.push(p);
        } else {
            summary.drop(p.key(), "duplicate", None);
        }
    }
    let sources: Vec<&str> = unique.iter().map(|p| p.problem.as_str()).collect();
    let like = lookalikes(&sources).map_err(SynthError::Decontaminate)?;
    let mut kept = Vec::new();
    for (p, l) in unique.into_iter().zip(like) {
        match l {
            Some(heldout) => summary.drop(p.key(), "heldout_lookalike", Some(heldout)),
            None => kept.push(p),
        }
    }
    Ok(kept)
}

fn is_size_constant(line: &str) -> bool {
    line.split_once(" = ").is_some_and(|(name, value)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
            && value.chars().all(|c| c.is_ascii_digit())
    })
}

/// Evaluate the planted attempts; keep the ones that are not correct, with their records.
fn attempts(
    stage: &Path,
    kept: &[SynthProblem],
    checker: &dyn Checker,
    progress: &(dyn Fn(&str) + Sync),
    summary: &mut Summary,
) -> Result<(), SynthError> {
    let planted: Vec<&SynthProblem> = kept.iter().filter(|p| p.attempt.is_some()).collect();
    summary.attempts_planted = planted.len();
    if planted.is_empty() {
        return Ok(());
    }
    progress(&format!("evaluating {} planted wrong attempts", planted.len()));
    let items: Vec<(String, PathBuf)> =
        planted.iter().map(|p| (p.key(), write::attempt_paths(stage, &p.key()).0)).collect();
    let outcomes = checker.attempts(stage, &items, progress).map_err(SynthError::Check)?;
    if outcomes.len() != items.len() {
        return Err(SynthError::Check(format!(
            "{} verdicts for {} attempts",
            outcomes.len(),
            items.len()
        )));
    }
    for (p, outcome) in planted.into_iter().zip(outcomes) {
        let (key, flaw) = (p.key(), p.attempt.as_ref().map(|a| a.flaw));
        let (py, json) = write::attempt_paths(stage, &key);
        match (outcome, flaw) {
            (AttemptOutcome::Evaluated(record), Some(flaw))
                if record.verdict.status != Status::Correct =>
            {
                *summary
                    .attempts_kept
                    .entry(record.verdict.status.as_str().to_string())
                    .or_default() += 1;
                *summary.attempts_by_flaw.entry(flaw.as_str().to_string()).or_default() += 1;
                write::write_json(&json, &AttemptRecord { key, flaw, record: *record })?;
            }
            (AttemptOutcome::Evaluated(_), _) => {
                let _ = std::fs::remove_file(&py);
                summary.drop_attempt(key, "attempt_correct", flaw.map(|f| f.as_str().to_string()));
            }
            (AttemptOutcome::Failed(why), _) => {
                let _ = std::fs::remove_file(&py);
                summary.drop_attempt(key, "attempt_not_evaluated", Some(why));
            }
        }
    }
    Ok(())
}

/// The final manifest and counts; the stage replaces `out`.
fn finish(
    stage: &Path,
    out: &Path,
    kept: &[SynthProblem],
    seed: u64,
    summary: &mut Summary,
) -> Result<(), SynthError> {
    let refs: Vec<&SynthProblem> = kept.iter().collect();
    write::write_manifest(stage, &refs, seed)?;
    summary.kept = kept.len();
    summary.heldout = kept.iter().filter(|p| p.split == Split::Heldout).count();
    summary.train = summary.kept - summary.heldout;
    for p in kept {
        *summary.by_family.entry(p.family.as_str().to_string()).or_default() += 1;
        *summary.by_difficulty.entry(p.difficulty).or_default() += 1;
    }
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(io(out))?;
    }
    std::fs::rename(stage, out).map_err(io(out))
}

//! The generated set on disk, in the suite's layout: `manifest.toml`, `levelN/<name>.py`,
//! `solutions/levelN/<name>.py`; planted attempts in `attempts/levelN/<name>.py` with the
//! evaluator's record of them in `attempts/levelN/<name>.json`; `synth.json` with what
//! was kept and dropped.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tritonforge_protocol::EvalRecord;

use crate::{Flaw, Split, SynthError, SynthProblem};

pub const ATTEMPTS_DIR: &str = "attempts";
pub const SUMMARY_FILE: &str = "synth.json";

/// What the evaluator made of a planted attempt: the data pipeline renders its feedback
/// from `record` with the agent's own template.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub key: String,
    pub flaw: Flaw,
    pub record: EvalRecord,
}

/// `attempts/<key>.py` and `attempts/<key>.json` under `dir`.
pub fn attempt_paths(dir: &Path, key: &str) -> (PathBuf, PathBuf) {
    let base = dir.join(ATTEMPTS_DIR).join(key);
    (base.with_extension("py"), base.with_extension("json"))
}

/// The manifest of `problems`, in the suite's format (keys sorted, so it is stable).
pub fn manifest(problems: &[&SynthProblem], seed: u64) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Synthetic problems written by `tritonforge bench synth --seed {seed}`; each solution\n\
         # was evaluated correct before it was kept. `difficulty`: 1 (one elementwise operator)\n\
         # to 5 (a GEMM with a fused epilogue)."
    );
    let mut sorted: Vec<&&SynthProblem> = problems.iter().collect();
    sorted.sort_by_key(|p| p.key());
    for p in sorted {
        let _ = writeln!(s, "\n[problems.\"{}\"]", p.key());
        let _ = writeln!(s, "id = \"{}\"", p.id());
        let _ = writeln!(s, "level = {}", p.level);
        let _ = writeln!(s, "family = \"{}\"", p.family.as_str());
        let split = match p.split {
            Split::Train => "train",
            Split::Heldout => "heldout",
        };
        let _ = writeln!(s, "split = \"{split}\"");
        let _ = writeln!(s, "difficulty = {}", p.difficulty);
        if let Some((atol, rtol)) = p.tolerance {
            let _ = writeln!(s, "atol = {atol:e}\nrtol = {rtol:e}");
        }
        let variant = |values: &[u64]| {
            let parts: Vec<String> =
                p.dims.names.iter().zip(values).map(|(n, v)| format!("{n} = {v}")).collect();
            format!("{{ {} }}", parts.join(", "))
        };
        let _ = writeln!(s, "variants.small = {}", variant(&p.dims.small));
        let _ = writeln!(s, "variants.heldout = {}", variant(&p.dims.heldout));
    }
    s
}

fn put(path: &Path, text: &str) -> Result<(), SynthError> {
    let io = |e: std::io::Error| SynthError::Io { path: path.to_owned(), reason: e.to_string() };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(path, text).map_err(io)
}

/// The problem, its solution and its attempt (if any) under `dir`.
pub fn write_problem(dir: &Path, p: &SynthProblem) -> Result<(), SynthError> {
    let key = p.key();
    put(&dir.join(format!("{key}.py")), &p.problem)?;
    put(&dir.join("solutions").join(format!("{key}.py")), &p.solution)?;
    if let Some(a) = &p.attempt {
        put(&attempt_paths(dir, &key).0, &a.source)?;
    }
    Ok(())
}

/// Every file of `p` under `dir` (a dropped problem), gone.
pub fn remove_problem(dir: &Path, key: &str) {
    let (attempt, record) = attempt_paths(dir, key);
    for f in [
        dir.join(format!("{key}.py")),
        dir.join("solutions").join(format!("{key}.py")),
        attempt,
        record,
    ] {
        let _ = std::fs::remove_file(f);
    }
}

/// A set: the manifest and every problem's files.
pub fn write_set(dir: &Path, problems: &[&SynthProblem], seed: u64) -> Result<(), SynthError> {
    for p in problems {
        write_problem(dir, p)?;
    }
    write_manifest(dir, problems, seed)
}

pub fn write_manifest(dir: &Path, problems: &[&SynthProblem], seed: u64) -> Result<(), SynthError> {
    put(&dir.join(tritonforge_suite::MANIFEST_FILE), &manifest(problems, seed))
}

pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), SynthError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| SynthError::Io { path: path.to_owned(), reason: e.to_string() })?;
    put(path, &(text + "\n"))
}

/// A problem's planted attempt and its record, if it has one; `Err` names what is broken.
pub fn read_attempt(dir: &Path, key: &str) -> Result<Option<(String, AttemptRecord)>, String> {
    let (py, json) = attempt_paths(dir, key);
    if !py.is_file() {
        return Ok(None);
    }
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let source = read(&py)?;
    let record =
        serde_json::from_str(&read(&json)?).map_err(|e| format!("{}: {e}", json.display()))?;
    Ok(Some((source, record)))
}

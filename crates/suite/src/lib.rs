//! Problems on disk: plain KernelBench-style Python files, plus an optional
//! `manifest.toml` beside them for what the plain-Python contract cannot say
//! (level, family, split, tolerances, named shape variants).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tritonforge_protocol::Tolerance;

pub mod embedded;
pub mod import;
pub mod render;
pub mod select;

pub use embedded::SuiteSource;
pub use select::{Filter, Selection, SelectionError};

pub const MANIFEST_FILE: &str = "manifest.toml";

#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not UTF-8 text")]
    NotUtf8 { path: PathBuf },
    #[error("{path}: invalid manifest: {message}")]
    Manifest { path: PathBuf, message: String },
    #[error("{problem}: no shape variant named {wanted:?} (it has: {available})")]
    UnknownVariant { problem: String, wanted: String, available: String },
    #[error("{path}: not a directory of .py files")]
    NotADirectory { path: PathBuf },
}

/// Per-problem metadata from the manifest.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProblemMeta {
    pub id: Option<String>,
    pub level: Option<u32>,
    pub family: Option<String>,
    pub split: Option<String>,
    /// Graded difficulty, 1 (one elementwise operator) to 5 (a GEMM with a fused epilogue):
    /// set by the synthetic generator so a curriculum can order problems; optional.
    pub difficulty: Option<u32>,
    pub atol: Option<f64>,
    pub rtol: Option<f64>,
    /// Named overrides of module-level constants, e.g. `small = { N = 64 }`.
    #[serde(default)]
    pub variants: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
    /// The mixed-kernel policy for this problem. As written in an entry, the problem's own
    /// overrides; once loaded (`Problem::load_with`, `Suite::load`), the resolved policy:
    /// the level's built-in default, then `[policy.levelN]`, then the entry's own fields.
    #[serde(default)]
    pub policy: Option<MixedPolicy>,
}

/// What a candidate may leave to PyTorch (`docs/guard.md#mixed-kernels`). At levels 3 and
/// 4 a candidate may keep parts of a whole model in PyTorch, as KernelBench allows, but
/// its own kernels must carry a least share of the work, so that keeping it all in
/// PyTorch behind a token kernel gains nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct MixedPolicy {
    /// PyTorch compute operators may run in `forward` (the runtime operator check and the
    /// static `torch-compute-in-forward` rule are lifted).
    pub allow_torch_compute: Option<bool>,
    /// The least share of the work the candidate's own kernels must do: of the GPU time
    /// (measured) on a GPU, of the modelled cost of the reference's operators on the CPU.
    pub min_kernel_share: Option<f64>,
}

impl MixedPolicy {
    /// `other`'s fields where it sets them, else this one's.
    pub fn overlaid(self, other: Option<&MixedPolicy>) -> MixedPolicy {
        match other {
            None => self,
            Some(o) => MixedPolicy {
                allow_torch_compute: o.allow_torch_compute.or(self.allow_torch_compute),
                min_kernel_share: o.min_kernel_share.or(self.min_kernel_share),
            },
        }
    }
}

/// The built-in policy of a level, used where a manifest has no `[policy.levelN]`:
/// levels 1 and 2 are all-Triton (no relaxation); level 3 (architectures) may mix with
/// PyTorch if the candidate's kernels carry half of the work, level 4 (whole models) 30%.
pub fn default_level_policy(level: u32) -> Option<MixedPolicy> {
    match level {
        3 => Some(MixedPolicy { allow_torch_compute: Some(true), min_kernel_share: Some(0.5) }),
        4 => Some(MixedPolicy { allow_torch_compute: Some(true), min_kernel_share: Some(0.3) }),
        _ => None,
    }
}

impl ProblemMeta {
    /// The manifest's tolerance override; both or neither of `atol`/`rtol` may be set,
    /// a lone one keeps the dtype default for the other (1e-4).
    pub fn tolerance(&self) -> Option<Tolerance> {
        match (self.atol, self.rtol) {
            (None, None) => None,
            (a, r) => Some(Tolerance { atol: a.unwrap_or(1e-4), rtol: r.unwrap_or(1e-4) }),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestFile {
    #[serde(default)]
    problems: BTreeMap<String, ProblemMeta>,
    #[serde(default)]
    sets: BTreeMap<String, Vec<String>>,
    /// `[policy.level3]`: the mixed-kernel policy of a level's problems.
    #[serde(default)]
    policy: BTreeMap<String, MixedPolicy>,
}

/// A parsed manifest and the directory its keys are relative to.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub root: PathBuf,
    pub path: PathBuf,
    pub problems: BTreeMap<String, ProblemMeta>,
    /// Named problem sets (`quick`: the default of `tritonforge run`), as problem keys.
    pub sets: BTreeMap<String, Vec<String>>,
    /// Mixed-kernel policy per level (`level3`, `level4`), over the built-in defaults.
    pub policy: BTreeMap<String, MixedPolicy>,
}

impl Manifest {
    pub fn load(path: &Path) -> Result<Manifest, SuiteError> {
        let text = read_text(path)?;
        let parsed: ManifestFile = toml::from_str(&text)
            .map_err(|e| SuiteError::Manifest { path: path.to_owned(), message: e.to_string() })?;
        Ok(Manifest {
            root: path.parent().map(Path::to_owned).unwrap_or_default(),
            path: path.to_owned(),
            problems: parsed.problems,
            sets: parsed.sets,
            policy: parsed.policy,
        })
    }

    /// The resolved mixed-kernel policy of a problem: its level's built-in default, then
    /// this manifest's `[policy.levelN]`, then the entry's own `policy` fields. `None`
    /// where none of them says anything (levels 1 and 2 by default): all-Triton.
    pub fn policy_for(&self, meta: &ProblemMeta) -> Option<MixedPolicy> {
        let level = meta.level?;
        let section = self.policy.get(&format!("level{level}"));
        let base = default_level_policy(level);
        if base.is_none() && section.is_none() && meta.policy.is_none() {
            return None;
        }
        Some(base.unwrap_or_default().overlaid(section).overlaid(meta.policy.as_ref()))
    }

    /// Find the manifest governing `problem_file`: the nearest `manifest.toml` in its
    /// directory or up to three levels above.
    pub fn find_for(problem_file: &Path) -> Result<Option<Manifest>, SuiteError> {
        let mut dir = problem_file.parent();
        for _ in 0..4 {
            let Some(d) = dir else { break };
            let candidate = d.join(MANIFEST_FILE);
            if candidate.is_file() {
                return Manifest::load(&candidate).map(Some);
            }
            dir = d.parent();
        }
        Ok(None)
    }

    /// The manifest key of a problem file: its path relative to the manifest, without `.py`.
    pub fn key_for(&self, problem_file: &Path) -> Option<String> {
        let abs_root = fs::canonicalize(&self.root).ok()?;
        let abs = fs::canonicalize(problem_file).ok()?;
        let rel = abs.strip_prefix(abs_root).ok()?;
        let s = rel.to_string_lossy();
        Some(s.strip_suffix(".py").unwrap_or(&s).to_string())
    }
}

/// A problem file, read and ready to send.
#[derive(Debug, Clone)]
pub struct Problem {
    /// File stem, e.g. `relu`.
    pub name: String,
    pub path: PathBuf,
    pub source: String,
    pub meta: ProblemMeta,
}

impl Problem {
    /// Read a problem file and look up its metadata in the nearest manifest.
    pub fn load(path: &Path) -> Result<Problem, SuiteError> {
        Problem::load_with(path, Manifest::find_for(path)?.as_ref())
    }

    /// Read a problem file whose manifest the caller already has (a whole directory or
    /// suite shares one; parsing it again per problem is wasted work).
    pub fn load_with(path: &Path, manifest: Option<&Manifest>) -> Result<Problem, SuiteError> {
        let source = read_text(path)?;
        let meta = manifest
            .and_then(|m| {
                m.key_for(path).and_then(|k| m.problems.get(&k).cloned()).map(|mut meta| {
                    meta.policy = m.policy_for(&meta);
                    meta
                })
            })
            .unwrap_or_default();
        Ok(Problem { name: stem(path), path: path.to_owned(), source, meta })
    }

    /// Choose the shape variant: an explicit name must exist; `None` means the CPU
    /// variant `small` when running in CPU mode and the problem has one, else full size.
    pub fn variant(
        &self,
        wanted: Option<&str>,
        cpu_mode: bool,
    ) -> Result<(Option<String>, BTreeMap<String, serde_json::Value>), SuiteError> {
        match wanted {
            Some("full") | Some("default") => Ok((None, BTreeMap::new())),
            Some(name) => match self.meta.variants.get(name) {
                Some(o) => Ok((Some(name.to_owned()), o.clone())),
                None => Err(SuiteError::UnknownVariant {
                    problem: self.path.display().to_string(),
                    wanted: name.to_owned(),
                    available: std::iter::once("full")
                        .chain(self.meta.variants.keys().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(", "),
                }),
            },
            None if cpu_mode => Ok(match self.meta.variants.get("small") {
                Some(o) => (Some("small".into()), o.clone()),
                None => (None, BTreeMap::new()),
            }),
            None => Ok((None, BTreeMap::new())),
        }
    }
}

impl Problem {
    /// The shapes a candidate must also be right at, unseen while it is evaluated at
    /// `variant`: the `heldout` variant, unless that is the one evaluated. A kernel
    /// hard-coded to the benchmark's shapes fails here.
    pub fn shape_check(
        &self,
        variant: Option<&str>,
    ) -> Option<BTreeMap<String, serde_json::Value>> {
        if variant == Some("heldout") {
            return None;
        }
        self.meta.variants.get("heldout").cloned()
    }
}

/// A candidate file, read.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub name: String,
    pub path: PathBuf,
    pub source: String,
}

impl Candidate {
    pub fn load(path: &Path) -> Result<Candidate, SuiteError> {
        Ok(Candidate { name: stem(path), path: path.to_owned(), source: read_text(path)? })
    }
}

fn stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

fn read_text(path: &Path) -> Result<String, SuiteError> {
    let bytes =
        fs::read(path).map_err(|source| SuiteError::Io { path: path.to_owned(), source })?;
    String::from_utf8(bytes).map_err(|_| SuiteError::NotUtf8 { path: path.to_owned() })
}

/// The `.py` files directly in `dir`, sorted, without `__init__.py`.
pub fn python_files(dir: &Path) -> Result<Vec<PathBuf>, SuiteError> {
    if !dir.is_dir() {
        return Err(SuiteError::NotADirectory { path: dir.to_owned() });
    }
    let entries =
        fs::read_dir(dir).map_err(|source| SuiteError::Io { path: dir.to_owned(), source })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension().is_some_and(|e| e == "py")
                && p.file_name().is_some_and(|n| n != "__init__.py")
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Problems and candidates matched by file name.
#[derive(Debug, Default)]
pub struct Pairing {
    pub pairs: Vec<(PathBuf, PathBuf)>,
    /// Problems with no candidate of the same name.
    pub unmatched_problems: Vec<PathBuf>,
    /// Candidates with no problem of the same name.
    pub unmatched_candidates: Vec<PathBuf>,
}

pub fn pair_dirs(problems: &Path, candidates: &Path) -> Result<Pairing, SuiteError> {
    let probs = python_files(problems)?;
    let cands = python_files(candidates)?;
    let by_name: BTreeMap<String, PathBuf> = cands.iter().map(|c| (stem(c), c.clone())).collect();
    let mut pairing = Pairing::default();
    for p in probs {
        match by_name.get(&stem(&p)) {
            Some(c) => pairing.pairs.push((p, c.clone())),
            None => pairing.unmatched_problems.push(p),
        }
    }
    let prob_names: std::collections::BTreeSet<String> =
        pairing.pairs.iter().map(|(p, _)| stem(p)).collect();
    pairing.unmatched_candidates =
        cands.into_iter().filter(|c| !prob_names.contains(&stem(c))).collect();
    Ok(pairing)
}

/// Read every pair of `paths` (problems with the manifest beside the first one, if any).
/// All unreadable files are reported together, one message each, so a batch fails once
/// and names every culprit.
pub fn load_pairs(
    paths: Vec<(PathBuf, PathBuf)>,
) -> Result<Vec<(Problem, Candidate)>, Vec<String>> {
    // Every problem of a batch lives in one directory: read its manifest once.
    let manifest = match paths.first() {
        Some((p, _)) => Manifest::find_for(p).map_err(|e| vec![e.to_string()])?,
        None => None,
    };
    let mut errors = Vec::new();
    let mut pairs = Vec::new();
    for (p, c) in paths {
        match (Problem::load_with(&p, manifest.as_ref()), Candidate::load(&c)) {
            (Ok(p), Ok(c)) => pairs.push((p, c)),
            (p, c) => {
                errors.extend(p.err().map(|e| e.to_string()));
                errors.extend(c.err().map(|e| e.to_string()));
            }
        }
    }
    if errors.is_empty() {
        Ok(pairs)
    } else {
        Err(errors)
    }
}

/// A problem and a candidate given as source text rather than files (a row of a
/// training set), evaluated like any pair.
#[derive(Debug, Clone)]
pub struct SourcePair {
    /// Names the files the executor writes; anything but ASCII letters and digits becomes `_`.
    pub id: String,
    pub problem: String,
    pub candidate: String,
}

impl SourcePair {
    /// The pair as a problem and a candidate the evaluator takes, named after the id.
    pub fn files(&self) -> (Problem, Candidate) {
        let stem: String =
            self.id.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let problem = Problem {
            name: format!("row_{stem}"),
            path: PathBuf::from(format!("row_{stem}.py")),
            source: self.problem.clone(),
            meta: Default::default(),
        };
        let candidate = Candidate {
            name: format!("row_{stem}_answer"),
            path: PathBuf::from(format!("row_{stem}_answer.py")),
            source: self.candidate.clone(),
        };
        (problem, candidate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_by_name_and_reports_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let (p, c) = (d.path().join("p"), d.path().join("c"));
        fs::create_dir_all(&p).unwrap();
        fs::create_dir_all(&c).unwrap();
        for n in ["a.py", "b.py", "__init__.py", "notes.txt"] {
            fs::write(p.join(n), "").unwrap();
        }
        for n in ["b.py", "z.py"] {
            fs::write(c.join(n), "").unwrap();
        }
        let pairing = pair_dirs(&p, &c).unwrap();
        assert_eq!(pairing.pairs, vec![(p.join("b.py"), c.join("b.py"))]);
        assert_eq!(pairing.unmatched_problems, vec![p.join("a.py")]);
        assert_eq!(pairing.unmatched_candidates, vec![c.join("z.py")]);
        assert!(matches!(pair_dirs(&p.join("a.py"), &c), Err(SuiteError::NotADirectory { .. })));
    }

    #[test]
    fn manifest_supplies_variants_and_tolerances() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("level1")).unwrap();
        fs::write(
            d.path().join(MANIFEST_FILE),
            "[problems.\"level1/relu\"]\nlevel = 1\nrtol = 0.01\n\
             [problems.\"level1/relu\".variants]\nsmall = { N = 8 }\nheldout = { N = 37 }\n",
        )
        .unwrap();
        let path = d.path().join("level1/relu.py");
        fs::write(&path, "N = 1024\n").unwrap();
        let p = Problem::load(&path).unwrap();
        assert_eq!(p.meta.level, Some(1));
        assert_eq!(p.meta.tolerance(), Some(Tolerance { atol: 1e-4, rtol: 0.01 }));
        let (name, o) = p.variant(None, true).unwrap();
        assert_eq!(name.as_deref(), Some("small"));
        assert_eq!(o["N"], serde_json::json!(8));
        assert_eq!(p.variant(None, false).unwrap().0, None);
        assert_eq!(p.variant(Some("heldout"), false).unwrap().1["N"], serde_json::json!(37));
        let err = p.variant(Some("huge"), false).unwrap_err().to_string();
        assert!(err.contains("huge") && err.contains("heldout"), "{err}");
    }

    #[test]
    fn mixed_policy_resolves_default_then_level_then_problem() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("level3")).unwrap();
        fs::create_dir_all(d.path().join("level4")).unwrap();
        fs::write(
            d.path().join(MANIFEST_FILE),
            "[policy.level3]\nmin_kernel_share = 0.6\n\n\
             [problems.\"level3/a\"]\nlevel = 3\n\n\
             [problems.\"level3/b\"]\nlevel = 3\npolicy = { min_kernel_share = 0.4 }\n\n\
             [problems.\"level4/c\"]\nlevel = 4\n\n\
             [problems.\"level1/d\"]\nlevel = 1\n",
        )
        .unwrap();
        fs::create_dir_all(d.path().join("level1")).unwrap();
        for f in ["level3/a.py", "level3/b.py", "level4/c.py", "level1/d.py"] {
            fs::write(d.path().join(f), "N = 1\n").unwrap();
        }
        let policy = |f: &str| Problem::load(&d.path().join(f)).unwrap().meta.policy;
        let a = policy("level3/a.py").unwrap();
        assert_eq!((a.allow_torch_compute, a.min_kernel_share), (Some(true), Some(0.6)));
        assert_eq!(policy("level3/b.py").unwrap().min_kernel_share, Some(0.4));
        assert_eq!(policy("level4/c.py").unwrap().min_kernel_share, Some(0.3));
        assert_eq!(policy("level1/d.py"), None);
        let suite = Suite::load(d.path()).unwrap();
        assert_eq!(
            suite.find("level3/b").unwrap().meta.policy.unwrap().min_kernel_share,
            Some(0.4)
        );
    }

    #[test]
    fn a_broken_manifest_names_its_file() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join(MANIFEST_FILE), "[problems.x]\nlevle = 1\n").unwrap();
        fs::write(d.path().join("x.py"), "").unwrap();
        let err = Problem::load(&d.path().join("x.py")).unwrap_err().to_string();
        assert!(err.contains("manifest.toml") && err.contains("levle"), "{err}");
    }

    #[test]
    fn non_utf8_problem_is_named() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("x.py"), [0xff, 0xfe, 0x00]).unwrap();
        let err = Problem::load(&d.path().join("x.py")).unwrap_err().to_string();
        assert!(err.contains("x.py") && err.contains("UTF-8"), "{err}");
    }
}

/// One problem of the suite: its manifest entry, file and reference solution.
#[derive(Debug, Clone)]
pub struct SuiteEntry {
    /// Path relative to the suite root without `.py`, e.g. `level1/relu`.
    pub key: String,
    pub meta: ProblemMeta,
    pub problem_path: PathBuf,
    /// `solutions/<key>.py`, when it exists.
    pub solution_path: Option<PathBuf>,
}

impl SuiteEntry {
    pub fn name(&self) -> &str {
        self.key.rsplit('/').next().unwrap_or(&self.key)
    }
    pub fn id(&self) -> &str {
        self.meta.id.as_deref().unwrap_or("")
    }
}

/// The problem suite: `levelN/` directories of problems, `solutions/levelN/` of reference
/// solutions, and the `manifest.toml` that describes them.
#[derive(Debug, Clone)]
pub struct Suite {
    pub root: PathBuf,
    pub manifest: Manifest,
    pub entries: Vec<SuiteEntry>,
    /// Problem files with no manifest entry (a lint finding, still listed).
    pub unlisted: Vec<PathBuf>,
}

/// Splits a problem can belong to.
pub const SPLITS: [&str; 2] = ["train", "heldout"];

/// The difficulty grades a manifest may give.
pub const DIFFICULTIES: std::ops::RangeInclusive<u32> = 1..=5;

impl Suite {
    pub fn load(root: &Path) -> Result<Suite, SuiteError> {
        let manifest = Manifest::load(&root.join(MANIFEST_FILE))?;
        let mut entries = Vec::new();
        for (key, meta) in &manifest.problems {
            let problem_path = root.join(format!("{key}.py"));
            let solution = root.join("solutions").join(format!("{key}.py"));
            let mut meta = meta.clone();
            meta.policy = manifest.policy_for(&meta);
            entries.push(SuiteEntry {
                key: key.clone(),
                meta,
                problem_path,
                solution_path: solution.is_file().then_some(solution),
            });
        }
        let mut unlisted = Vec::new();
        for level in 1..=4 {
            let dir = root.join(format!("level{level}"));
            if !dir.is_dir() {
                continue;
            }
            for f in python_files(&dir)? {
                let key = format!("level{level}/{}", stem(&f));
                if !manifest.problems.contains_key(&key) {
                    unlisted.push(f);
                }
            }
        }
        Ok(Suite { root: root.to_owned(), manifest, entries, unlisted })
    }

    /// Find by id (`L1-001`), key (`level1/relu`) or bare name (`relu`, when unique).
    pub fn find(&self, what: &str) -> Option<&SuiteEntry> {
        self.entries.iter().find(|e| e.id() == what || e.key == what).or_else(|| {
            let mut named = self.entries.iter().filter(|e| e.name() == what);
            match (named.next(), named.next()) {
                (Some(e), None) => Some(e),
                _ => None,
            }
        })
    }

    /// Static checks that the manifest and the files agree; one sentence per finding.
    pub fn lint(&self) -> Vec<String> {
        let mut findings = Vec::new();
        let manifest = self.manifest.path.display();
        for f in &self.unlisted {
            findings.push(format!("{}: problem file has no entry in {manifest}", f.display()));
        }
        for (set, keys) in &self.manifest.sets {
            for k in keys {
                if !self.entries.iter().any(|e| &e.key == k) {
                    findings
                        .push(format!("{manifest}: set `{set}` names {k}, which is not a problem"));
                }
            }
        }
        for (name, p) in &self.manifest.policy {
            let level = name.strip_prefix("level").and_then(|n| n.parse::<u32>().ok());
            if !level.is_some_and(|l| (1..=4).contains(&l)) {
                findings
                    .push(format!("{manifest}: [policy.{name}] names no level (level1 to level4)"));
            }
            if let Some(share) = p.min_kernel_share.filter(|s| !(0.0..=1.0).contains(s)) {
                findings.push(format!(
                    "{manifest}: [policy.{name}] min_kernel_share {share} is not between 0 and 1"
                ));
            }
        }
        let mut ids: BTreeMap<&str, &str> = BTreeMap::new();
        for e in &self.entries {
            let k = &e.key;
            let dir_level = k
                .strip_prefix("level")
                .and_then(|r| r.split('/').next())
                .and_then(|n| n.parse::<u32>().ok());
            let source = match fs::read_to_string(&e.problem_path) {
                Ok(s) => s,
                Err(_) => {
                    findings.push(format!(
                        "{k}: manifest entry has no problem file {}",
                        e.problem_path.display()
                    ));
                    continue;
                }
            };
            match e.meta.id.as_deref() {
                None | Some("") => findings.push(format!("{k}: no id")),
                Some(id) => {
                    if let Some(other) = ids.insert(id, k) {
                        findings.push(format!("{k}: id {id} is also used by {other}"));
                    }
                }
            }
            match (e.meta.level, dir_level) {
                (None, _) => findings.push(format!("{k}: no level")),
                (Some(l), Some(d)) if l != d => {
                    findings.push(format!("{k}: level {l} but the file is in level{d}/"))
                }
                (Some(_), None) => findings.push(format!("{k}: not inside a levelN/ directory")),
                _ => {}
            }
            if let Some(share) =
                e.meta.policy.and_then(|p| p.min_kernel_share).filter(|s| !(0.0..=1.0).contains(s))
            {
                findings
                    .push(format!("{k}: policy min_kernel_share {share} is not between 0 and 1"));
            }
            if let Some(d) = e.meta.difficulty.filter(|d| !DIFFICULTIES.contains(d)) {
                findings.push(format!("{k}: difficulty {d} is outside 1..=5"));
            }
            if e.meta.family.as_deref().unwrap_or("").is_empty() {
                findings.push(format!("{k}: no family"));
            }
            match e.meta.split.as_deref() {
                Some(s) if SPLITS.contains(&s) => {}
                other => {
                    findings.push(format!("{k}: split must be train or heldout, not {other:?}"))
                }
            }
            for required in ["small", "heldout"] {
                if !e.meta.variants.contains_key(required) {
                    findings.push(format!("{k}: no `{required}` shape variant"));
                }
            }
            for (variant, overrides) in &e.meta.variants {
                for name in overrides.keys() {
                    if !defines_constant(&source, name) {
                        findings.push(format!(
                            "{k}: variant `{variant}` overrides {name}, which the file does not define at module level"
                        ));
                    }
                }
            }
            if dir_level == Some(1) && e.solution_path.is_none() {
                findings.push(format!(
                    "{k}: level-1 problem has no reference solution solutions/{k}.py"
                ));
            }
        }
        let solutions = self.root.join("solutions");
        for level in 1..=4 {
            let dir = solutions.join(format!("level{level}"));
            if let Ok(files) = python_files(&dir) {
                for f in files {
                    let key = format!("level{level}/{}", stem(&f));
                    if !self.manifest.problems.contains_key(&key) {
                        findings.push(format!("{}: solution for no listed problem", f.display()));
                    }
                }
            }
        }
        findings
    }
}

/// Does the source assign `name` at module level (`NAME = ...` or `NAME: int = ...`)?
fn defines_constant(source: &str, name: &str) -> bool {
    source.lines().any(|l| {
        l.strip_prefix(name)
            .map(|rest| {
                let rest = rest.trim_start();
                rest.starts_with('=') && !rest.starts_with("==") || rest.starts_with(':')
            })
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod suite_tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    #[test]
    fn lint_reports_every_disagreement_between_manifest_and_files() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        write(
            r,
            MANIFEST_FILE,
            r#"
[problems."level1/a"]
id = "L1-001"
level = 1
family = "activation"
split = "train"
variants.small = { N = 4 }
variants.heldout = { N = 7, M = 3 }

[problems."level1/b"]
id = "L1-001"
level = 2
split = "dev"
difficulty = 9
variants.small = { N = 4 }

[policy.level9]
min_kernel_share = 1.5

[problems."level1/ghost"]
id = "L1-003"
level = 1
family = "x"
split = "train"
"#,
        );
        write(r, "level1/a.py", "N = 16\n");
        write(r, "level1/b.py", "N: int = 16\n");
        write(r, "level1/stray.py", "N = 1\n");
        write(r, "solutions/level1/a.py", "");
        write(r, "solutions/level1/zzz.py", "");
        let suite = Suite::load(r).unwrap();
        let f = suite.lint().join("\n");
        for needle in [
            "stray.py: problem file has no entry",
            "level1/b: id L1-001 is also used by level1/a",
            "level1/b: level 2 but the file is in level1/",
            "level1/b: no family",
            "level1/b: difficulty 9 is outside 1..=5",
            "level1/b: split must be train or heldout",
            "level1/b: no `heldout` shape variant",
            "level1/a: variant `heldout` overrides M",
            "level1/b: level-1 problem has no reference solution",
            "level1/ghost: manifest entry has no problem file",
            "zzz.py: solution for no listed problem",
            "[policy.level9] names no level",
            "[policy.level9] min_kernel_share 1.5 is not between 0 and 1",
        ] {
            assert!(f.contains(needle), "missing {needle:?} in:\n{f}");
        }
        assert!(!f.contains("level1/a: level-1 problem has no reference"), "{f}");
        assert_eq!(suite.find("L1-001").unwrap().key, "level1/a");
        assert_eq!(suite.find("a").unwrap().key, "level1/a");
        assert!(suite.find("nope").is_none());
    }
}

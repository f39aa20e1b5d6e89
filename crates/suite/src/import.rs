//! `bench import`: the pure half. Finding the problems of a KernelBench-style folder,
//! their module-level size constants, the scalings worth trying for a `small` CPU
//! variant, and writing the folder out as a suite with a manifest. Checking that a
//! scaled problem still builds and runs needs the Python worker, so that loop lives with
//! the evaluator (`tritonforge_eval::import`); this module never runs anything.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use crate::{python_files, stem, MANIFEST_FILE};

/// Constants at or below this are left alone: kernel sizes, strides, paddings, head
/// counts, reduction dimensions. Scaling them changes what a problem computes.
pub const SCALE_FLOOR: u64 = 16;

/// The largest size constant a first `small` attempt aims at.
pub const SMALL_TARGET: u64 = 64;

/// How many scalings are tried, from the smallest problem up (each twice the last).
pub const ATTEMPTS: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a directory")]
    NotADirectory { path: PathBuf },
    #[error(
        "{path}: no problem files (expected KernelBench's levelN/ folders, a KernelBench/ checkout, or .py files)"
    )]
    NoProblems { path: PathBuf },
    #[error("{path}: not UTF-8 text")]
    NotUtf8 { path: PathBuf },
    #[error("{path}: a problem file must define {missing} (KernelBench's format)")]
    NotAProblem { path: PathBuf, missing: String },
    #[error("{out}: already holds {MANIFEST_FILE}; choose another --out or remove it")]
    OutExists { out: PathBuf },
    #[error("{path}: the level must be at least 1, not {level}")]
    BadLevel { path: PathBuf, level: u32 },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
    move |source| ImportError::Io { path: path.to_owned(), source }
}

/// A module-level `NAME = <integer>` of a problem file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeConstant {
    pub name: String,
    pub value: u64,
}

/// One problem file found in the folder.
#[derive(Debug, Clone)]
pub struct Found {
    /// `levelN/<file stem>`: its key in the written suite.
    pub key: String,
    pub level: u32,
    pub path: PathBuf,
    pub source: String,
    pub constants: Vec<SizeConstant>,
}

/// Find the problems: KernelBench's `levelN/` folders (directly in `dir` or under its
/// `KernelBench/`), else the `.py` files directly in `dir`, all at `flat_level`.
pub fn discover(dir: &Path, flat_level: u32) -> Result<Vec<Found>, ImportError> {
    if !dir.is_dir() {
        return Err(ImportError::NotADirectory { path: dir.to_owned() });
    }
    if flat_level == 0 {
        return Err(ImportError::BadLevel { path: dir.to_owned(), level: flat_level });
    }
    let root = if level_dirs(&dir.join("KernelBench"))?.is_empty() {
        dir.to_owned()
    } else {
        dir.join("KernelBench")
    };
    let mut files: Vec<(u32, PathBuf)> = Vec::new();
    let levels = level_dirs(&root)?;
    if levels.is_empty() {
        for f in python_files(dir).map_err(|_| ImportError::NotADirectory { path: dir.into() })? {
            files.push((flat_level, f));
        }
    } else {
        for (level, d) in levels {
            for f in python_files(&d).map_err(|_| ImportError::NotADirectory { path: d.clone() })? {
                files.push((level, f));
            }
        }
    }
    if files.is_empty() {
        return Err(ImportError::NoProblems { path: dir.to_owned() });
    }
    let mut found = Vec::new();
    for (level, path) in files {
        let bytes = fs::read(&path).map_err(io(&path))?;
        let source =
            String::from_utf8(bytes).map_err(|_| ImportError::NotUtf8 { path: path.clone() })?;
        let missing: Vec<&str> = ["class Model", "def get_inputs", "def get_init_inputs"]
            .into_iter()
            .filter(|needle| !source.lines().any(|l| l.starts_with(needle)))
            .collect();
        if !missing.is_empty() {
            return Err(ImportError::NotAProblem { path, missing: missing.join(", ") });
        }
        let constants = size_constants(&source);
        found.push(Found {
            key: format!("level{level}/{}", stem(&path)),
            level,
            path,
            source,
            constants,
        });
    }
    Ok(found)
}

/// `levelN` subdirectories of `dir`, by level.
fn level_dirs(dir: &Path) -> Result<Vec<(u32, PathBuf)>, ImportError> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(io(dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(n) = name.strip_prefix("level").and_then(|n| n.parse::<u32>().ok()) {
            if n > 0 && e.path().is_dir() {
                out.push((n, e.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Module-level integer constants (`NAME = 4096`, `NAME: int = 4096`, `NAME = 16_384`),
/// the only ones the executor's shape overrides can replace. Sizes written inline or as
/// expressions (`dim = 2 ** 14`) are not found: a problem with none is reported.
pub fn size_constants(source: &str) -> Vec<SizeConstant> {
    let mut out: Vec<SizeConstant> = Vec::new();
    for line in source.lines() {
        let code = line.split('#').next().unwrap_or("").trim_end();
        let Some((lhs, rhs)) = code.split_once('=') else { continue };
        if rhs.starts_with('=') || lhs.ends_with(['!', '<', '>', '=']) {
            continue;
        }
        if lhs.starts_with(char::is_whitespace) {
            continue; // inside a block: not module level
        }
        let name = lhs.split(':').next().unwrap_or("").trim_end();
        let annotated = lhs.contains(':');
        if annotated && lhs.split(':').nth(1).map(str::trim) != Some("int") {
            continue;
        }
        let name_ok = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let value = rhs.trim().replace('_', "");
        let Ok(value) = value.parse::<u64>() else { continue };
        if !name_ok || rhs.trim().starts_with(['+', '-']) {
            continue;
        }
        match out.iter_mut().find(|c| c.name == name) {
            // Assigned twice: an override replaces both, so the larger decides the scale.
            Some(c) => c.value = c.value.max(value),
            None => out.push(SizeConstant { name: name.to_owned(), value }),
        }
    }
    out
}

/// The overrides worth trying for a `small` variant, smallest problem first: every
/// constant above [`SCALE_FLOOR`] divided by one power of two (rounded up, never below
/// the floor), so ratios between sizes (a width and a head count, two matching
/// dimensions) survive as far as rounding allows. The first divisor brings the largest
/// constant to about [`SMALL_TARGET`]; each next one is half the last. Empty when no
/// constant is above the floor.
pub fn scalings(constants: &[SizeConstant]) -> Vec<BTreeMap<String, u64>> {
    let big: Vec<&SizeConstant> = constants.iter().filter(|c| c.value > SCALE_FLOOR).collect();
    let Some(max) = big.iter().map(|c| c.value).max() else {
        return Vec::new();
    };
    let mut divisor = max.div_ceil(SMALL_TARGET).next_power_of_two().max(2);
    let mut out = Vec::new();
    for _ in 0..ATTEMPTS {
        if divisor < 2 {
            break;
        }
        let o: BTreeMap<String, u64> = big
            .iter()
            .map(|c| (c.name.clone(), c.value.div_ceil(divisor).max(SCALE_FLOOR)))
            .collect();
        if out.last() != Some(&o) {
            out.push(o);
        }
        divisor /= 2;
    }
    out
}

/// What became of one problem.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A `small` variant that builds, runs, and is sound at CPU size.
    Scaled { small: BTreeMap<String, u64> },
    /// Small enough as written (nothing above the floor to scale).
    AsIs,
    /// No `small` variant: CPU mode runs it at its own size. The reason says why.
    Unscalable { reason: String },
}

/// One problem ready to be written.
#[derive(Debug, Clone)]
pub struct Imported {
    pub found: Found,
    pub outcome: Outcome,
}

/// Write the problems under `out` (`levelN/NAME.py`, copied byte for byte) with a
/// `manifest.toml`: ids `I<level>-<n>`, family `imported`, split `train`, the `small`
/// variants, and a comment on each problem that could not be scaled. Refuses to
/// overwrite an existing manifest.
pub fn write_suite(out: &Path, problems: &[Imported]) -> Result<PathBuf, ImportError> {
    let manifest = out.join(MANIFEST_FILE);
    if manifest.exists() {
        return Err(ImportError::OutExists { out: out.to_owned() });
    }
    let mut text = String::from(
        "# Written by `tritonforge bench import`: each problem file is copied as it was; `small`\n\
         # variants scale its module-level size constants for CPU mode (Triton interpreter).\n",
    );
    let mut per_level: BTreeMap<u32, u32> = BTreeMap::new();
    let mut sorted: Vec<&Imported> = problems.iter().collect();
    sorted.sort_by(|a, b| a.found.key.cmp(&b.found.key));
    for p in sorted {
        let f = &p.found;
        let dest = out.join(format!("{}.py", f.key));
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        fs::write(&dest, &f.source).map_err(io(&dest))?;
        let n = per_level.entry(f.level).or_insert(0);
        *n += 1;
        let _ = writeln!(text, "\n[problems.{}]", quote(&f.key));
        if let Outcome::Unscalable { reason } = &p.outcome {
            for line in reason.lines() {
                let _ = writeln!(text, "# no small variant: {line}");
            }
        }
        let _ = writeln!(text, "id = \"I{}-{:03}\"", f.level, n);
        let _ = writeln!(text, "level = {}", f.level);
        let _ = writeln!(text, "family = \"imported\"");
        let _ = writeln!(text, "split = \"train\"");
        match &p.outcome {
            Outcome::Scaled { small } => {
                let pairs: Vec<String> = small.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                let _ = writeln!(text, "variants.small = {{ {} }}", pairs.join(", "));
            }
            Outcome::AsIs => {
                let _ = writeln!(text, "variants.small = {{}}");
            }
            Outcome::Unscalable { .. } => {}
        }
    }
    fs::create_dir_all(out).map_err(io(out))?;
    fs::write(&manifest, text).map_err(io(&manifest))?;
    Ok(manifest)
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut q = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(q, "\\u{:04X}", c as u32);
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Manifest, Problem};

    const PROBLEM: &str = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n\nbatch_size = 16\ndim: int = 16_384\nkernel_size = 3\neps = 1e-5\nshape = (4, 4)\nscaled = dim * 2\nx == 5\n\ndef get_inputs():\n    return [torch.randn(batch_size, dim)]\n\ndef get_init_inputs():\n    return []\n";

    #[test]
    fn finds_integer_constants_only() {
        let c = size_constants(PROBLEM);
        let names: Vec<(&str, u64)> = c.iter().map(|c| (c.name.as_str(), c.value)).collect();
        assert_eq!(names, vec![("batch_size", 16), ("dim", 16384), ("kernel_size", 3)]);
    }

    #[test]
    fn scalings_divide_the_big_constants_by_one_power_of_two() {
        let c = vec![
            SizeConstant { name: "N".into(), value: 4096 },
            SizeConstant { name: "H".into(), value: 768 },
            SizeConstant { name: "heads".into(), value: 12 },
            SizeConstant { name: "odd".into(), value: 1000 },
        ];
        let s = scalings(&c);
        assert_eq!(s.len(), 3);
        // 4096 / 64 = 64; 768 / 64 = 12, raised to the floor; 1000 / 64 rounds up.
        assert_eq!(s[0]["N"], 64);
        assert_eq!(s[0]["H"], 16);
        assert_eq!(s[0]["odd"], 16);
        assert!(!s[0].contains_key("heads"));
        assert_eq!(s[1]["N"], 128);
        assert_eq!(s[1]["H"], 24);
        assert_eq!(s[2]["odd"], 63);
        assert!(scalings(&[SizeConstant { name: "k".into(), value: 7 }]).is_empty());
        // A constant barely over the floor: one attempt, not three identical ones.
        assert_eq!(scalings(&[SizeConstant { name: "n".into(), value: 20 }]).len(), 1);
    }

    #[test]
    fn discovers_kernelbench_levels_or_a_flat_folder_and_names_non_problems() {
        let d = tempfile::tempdir().unwrap();
        let kb = d.path().join("kb/KernelBench");
        fs::create_dir_all(kb.join("level1")).unwrap();
        fs::create_dir_all(kb.join("level2")).unwrap();
        fs::write(kb.join("level1/1_A.py"), PROBLEM).unwrap();
        fs::write(kb.join("level2/7_B.py"), PROBLEM).unwrap();
        let found = discover(&d.path().join("kb"), 1).unwrap();
        let keys: Vec<&str> = found.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, vec!["level1/1_A", "level2/7_B"]);

        let flat = d.path().join("flat");
        fs::create_dir_all(&flat).unwrap();
        fs::write(flat.join("mine.py"), PROBLEM).unwrap();
        let found = discover(&flat, 3).unwrap();
        assert_eq!(found[0].key, "level3/mine");

        fs::write(flat.join("notes.py"), "x = 1\n").unwrap();
        let err = discover(&flat, 3).unwrap_err().to_string();
        assert!(err.contains("notes.py") && err.contains("class Model"), "{err}");
        let empty = d.path().join("empty");
        fs::create_dir_all(&empty).unwrap();
        assert!(matches!(discover(&empty, 1), Err(ImportError::NoProblems { .. })));
        assert!(matches!(
            discover(&flat.join("mine.py"), 1),
            Err(ImportError::NotADirectory { .. })
        ));
    }

    #[test]
    fn the_written_suite_loads_with_its_variants() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("a \"q\".py"), PROBLEM).unwrap();
        fs::write(src.join("b.py"), PROBLEM).unwrap();
        let found = discover(&src, 1).unwrap();
        let small: BTreeMap<String, u64> = [("dim".to_string(), 64)].into();
        let problems = vec![
            Imported { found: found[0].clone(), outcome: Outcome::Scaled { small } },
            Imported {
                found: found[1].clone(),
                outcome: Outcome::Unscalable { reason: "view needs\n4096".into() },
            },
        ];
        let out = d.path().join("out");
        let manifest = write_suite(&out, &problems).unwrap();
        let m = Manifest::load(&manifest).unwrap();
        let a = &m.problems["level1/a \"q\""];
        assert_eq!(a.variants["small"]["dim"], serde_json::json!(64));
        assert_eq!(a.id.as_deref(), Some("I1-001"));
        assert!(m.problems["level1/b"].variants.is_empty());
        let text = fs::read_to_string(&manifest).unwrap();
        assert!(
            text.contains("# no small variant: view needs\n# no small variant: 4096"),
            "{text}"
        );
        let p = Problem::load(&out.join("level1/a \"q\".py")).unwrap();
        assert_eq!(p.source, PROBLEM);
        assert_eq!(p.variant(None, true).unwrap().0.as_deref(), Some("small"));
        assert!(matches!(write_suite(&out, &problems), Err(ImportError::OutExists { .. })));
    }
}

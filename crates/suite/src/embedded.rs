//! The suite this library was built with, carried in the binary. It is written once
//! under the state directory (by content hash) and loaded from there like any other
//! suite, so `tritonforge run` and `suite list` work from any directory and from an
//! installed binary; `--suite DIR` or `TRITONFORGE_SUITE` points at another.

use std::fs;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::SuiteError;

include!(concat!(env!("OUT_DIR"), "/suite_files.rs"));

/// Environment variable naming a suite directory to use instead of the built-in one.
pub const SUITE_ENV_VAR: &str = "TRITONFORGE_SUITE";

/// Where a command's suite comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SuiteSource {
    /// A directory holding `manifest.toml`.
    Dir(PathBuf),
    /// The suite carried in the binary, written under the state directory on first use.
    BuiltIn,
}

impl SuiteSource {
    /// `--suite DIR`, else `TRITONFORGE_SUITE`, else the built-in suite.
    pub fn resolve(flag: Option<PathBuf>) -> SuiteSource {
        flag.or_else(|| {
            std::env::var_os(SUITE_ENV_VAR).filter(|v| !v.is_empty()).map(PathBuf::from)
        })
        .map_or(SuiteSource::BuiltIn, SuiteSource::Dir)
    }

    /// The suite's root directory, writing the built-in suite under `state_dir` if needed.
    pub fn root(&self, state_dir: &Path) -> Result<PathBuf, SuiteError> {
        match self {
            SuiteSource::Dir(d) => Ok(d.clone()),
            SuiteSource::BuiltIn => extract(state_dir),
        }
    }
}

/// Content hash of the built-in suite.
pub fn suite_hash() -> String {
    let mut h = Sha256::new();
    for (name, text) in SUITE_FILES {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(text.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SuiteError + '_ {
    move |source| SuiteError::Io { path: path.to_owned(), source }
}

/// Write the built-in suite under `<state>/suite/<hash>/` (once) and return that root.
/// Written to a private directory and renamed, so concurrent runs never see half a suite.
pub fn extract(state_dir: &Path) -> Result<PathBuf, SuiteError> {
    let hash = suite_hash();
    let base = state_dir.join("suite");
    let root = base.join(&hash[..16]);
    let done = root.join(".complete");
    if done.exists() {
        return Ok(root);
    }
    // Private to this call: two extractions in one process must not share it.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = base.join(format!(".tmp-{}-{}-{n}", &hash[..16], std::process::id()));
    for (name, text) in SUITE_FILES {
        let p = tmp.join(name);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        fs::write(&p, text).map_err(io(&p))?;
    }
    let marker = tmp.join(".complete");
    fs::write(&marker, &hash).map_err(io(&marker))?;
    let mut renamed = fs::rename(&tmp, &root);
    if renamed.is_err() && !done.exists() && root.exists() {
        // A directory left without its marker (an interrupted older writer): replace it.
        let _ = fs::remove_dir_all(&root);
        renamed = fs::rename(&tmp, &root);
    }
    match renamed {
        Ok(()) => Ok(root),
        Err(_) if done.exists() => {
            let _ = fs::remove_dir_all(&tmp);
            Ok(root)
        }
        Err(source) => {
            let _ = fs::remove_dir_all(&tmp);
            Err(SuiteError::Io { path: root, source })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_suite_is_the_repository_suite_and_loads() {
        let state = tempfile::tempdir().unwrap();
        let root = extract(state.path()).unwrap();
        assert_eq!(extract(state.path()).unwrap(), root, "extracted once");
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench");
        for (name, text) in SUITE_FILES {
            assert_eq!(&fs::read_to_string(repo.join(name)).unwrap(), text, "{name}");
        }
        let suite = crate::Suite::load(&root).unwrap();
        assert!(suite.entries.len() > 10);
        assert!(suite.manifest.sets.contains_key("quick"));
        assert!(suite.entries.iter().all(|e| e.problem_path.is_file()));
    }

    #[test]
    fn a_half_written_suite_is_replaced() {
        let state = tempfile::tempdir().unwrap();
        let root = state.path().join("suite").join(&suite_hash()[..16]);
        fs::create_dir_all(root.join("level1")).unwrap();
        fs::write(root.join("manifest.toml"), "half").unwrap();
        assert_eq!(extract(state.path()).unwrap(), root);
        assert!(root.join(".complete").is_file());
        assert!(crate::Suite::load(&root).is_ok());
    }

    #[test]
    fn a_flag_beats_the_environment_beats_the_built_in_suite() {
        assert_eq!(SuiteSource::resolve(Some("/s".into())), SuiteSource::Dir("/s".into()));
        let expected = match std::env::var_os(SUITE_ENV_VAR).filter(|v| !v.is_empty()) {
            Some(v) => SuiteSource::Dir(v.into()),
            None => SuiteSource::BuiltIn,
        };
        assert_eq!(SuiteSource::resolve(None), expected);
    }
}

//! Choosing problems of the suite: by level, family and split (`suite list`,
//! `suite validate`), and the run's selection on top of that (named sets, ids, a limit).

use crate::{Suite, SuiteEntry};

/// Level, family and split filters; `None` keeps everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub level: Option<u32>,
    pub family: Option<String>,
    pub split: Option<String>,
}

impl Filter {
    pub fn keep(&self, e: &SuiteEntry) -> bool {
        self.level.is_none_or(|l| e.meta.level == Some(l))
            && self.family.as_deref().is_none_or(|f| e.meta.family.as_deref() == Some(f))
            && self.split.as_deref().is_none_or(|s| e.meta.split.as_deref() == Some(s))
    }

    fn is_empty(&self) -> bool {
        self.level.is_none() && self.family.is_none() && self.split.is_none()
    }
}

/// The set played when nothing else is selected.
pub const DEFAULT_SET: &str = "quick";

/// Which problems a run plays.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub filter: Filter,
    /// Ids, keys or unique names.
    pub problems: Vec<String>,
    /// A named set of the manifest; [`DEFAULT_SET`] when no other selection is given.
    pub set: Option<String>,
    /// At most this many problems, after the rest, in suite order.
    pub limit: Option<usize>,
}

/// Why a selection chose nothing, or could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error("no set {name:?} in {manifest} (sets: {known})")]
    UnknownSet { name: String, manifest: String, known: String },
    #[error("no problem {wanted:?} in {suite}")]
    UnknownProblem { wanted: String, suite: String },
    #[error("no problem matches the filters")]
    Empty,
}

impl Selection {
    /// The set actually used: the named one, or the default when nothing else selects.
    pub fn effective_set(&self) -> Option<String> {
        self.set.clone().or_else(|| {
            (self.filter.is_empty() && self.problems.is_empty()).then(|| DEFAULT_SET.to_string())
        })
    }

    /// The chosen entries, in suite order.
    pub fn select(&self, suite: &Suite) -> Result<Vec<SuiteEntry>, SelectionError> {
        let mut entries: Vec<SuiteEntry> =
            suite.entries.iter().filter(|e| self.filter.keep(e)).cloned().collect();
        if let Some(name) = self.effective_set() {
            let Some(keys) = suite.manifest.sets.get(&name) else {
                let known: Vec<&str> = suite.manifest.sets.keys().map(String::as_str).collect();
                return Err(SelectionError::UnknownSet {
                    name,
                    manifest: suite.manifest.path.display().to_string(),
                    known: known.join(", "),
                });
            };
            entries.retain(|e| keys.contains(&e.key));
        }
        if !self.problems.is_empty() {
            let mut picked = Vec::new();
            for want in &self.problems {
                match suite.find(want) {
                    Some(e) => picked.push(e.key.clone()),
                    None => {
                        return Err(SelectionError::UnknownProblem {
                            wanted: want.clone(),
                            suite: suite.root.display().to_string(),
                        })
                    }
                }
            }
            entries.retain(|e| picked.contains(&e.key));
        }
        if let Some(n) = self.limit {
            entries.truncate(n);
        }
        if entries.is_empty() {
            return Err(SelectionError::Empty);
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite() -> Suite {
        Suite::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench")).unwrap()
    }

    #[test]
    fn nothing_selected_plays_the_quick_set() {
        let s = suite();
        let picked = Selection::default().select(&s).unwrap();
        assert_eq!(picked.len(), s.manifest.sets[DEFAULT_SET].len());
        let one = Selection { limit: Some(1), ..Selection::default() };
        assert_eq!(one.select(&s).unwrap().len(), 1);
    }

    #[test]
    fn filters_names_and_errors() {
        let s = suite();
        let lvl2 = Selection {
            filter: Filter { level: Some(2), ..Filter::default() },
            ..Selection::default()
        };
        let got = lvl2.select(&s).unwrap();
        assert!(got.iter().all(|e| e.meta.level == Some(2)) && !got.is_empty());
        let named = Selection { problems: vec!["relu".into()], ..Selection::default() };
        assert_eq!(named.select(&s).unwrap()[0].key, "level1/relu");
        let bad = Selection { problems: vec!["no-such".into()], ..Selection::default() };
        assert!(matches!(bad.select(&s), Err(SelectionError::UnknownProblem { .. })));
        let bad_set = Selection { set: Some("nope".into()), ..Selection::default() };
        let err = bad_set.select(&s).unwrap_err().to_string();
        assert!(err.contains("nope") && err.contains("quick"), "{err}");
    }
}

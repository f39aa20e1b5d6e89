//! `data.toml`: the inputs, and each stage's settings. Every stage can be switched off;
//! an unknown key is an error (a misspelt setting must not silently do nothing).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::DataError;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(rename = "input", default)]
    pub inputs: Vec<Input>,
    pub output: Output,
    #[serde(default)]
    pub prompts: PromptsCfg,
    #[serde(default)]
    pub thinking: Thinking,
    #[serde(default)]
    pub length: Length,
    #[serde(default)]
    pub quality: Quality,
    #[serde(default)]
    pub dedup: Dedup,
    #[serde(default)]
    pub decontaminate: Decontaminate,
    #[serde(default)]
    pub verify: Verify,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "lowercase")]
pub enum Input {
    /// KernelBook-shaped rows: `.jsonl` or `.parquet` (`python_code`, `triton_code`,
    /// `entry_point`, `uuid`, ...; other columns are kept as metadata).
    Kernelbook { path: PathBuf },
    /// The suite's `train` problems with their reference solutions.
    Suite {
        #[serde(default = "default_suite")]
        path: PathBuf,
    },
    /// A set written by `tritonforge bench synth`: its `train` problems with their
    /// reference solutions; where a planted wrong attempt was kept, the conversation is
    /// the task, that attempt, the evaluator's feedback on it and the solution.
    Synthetic { path: PathBuf },
    /// Episodes from a store that became correct: single-turn pairs, or the failed attempt,
    /// its feedback and the fix as one multi-turn conversation.
    Episodes {
        store: PathBuf,
        /// One run; every run when absent.
        run: Option<String>,
        /// A suite or a `bench synth` set. An unsolved episode of one of its `train`
        /// problems becomes a repair row: the policy's own first attempt and the
        /// evaluator's feedback on it (as the policy saw them), then the problem's
        /// reference solution. So the fix-after-feedback rows teach the model's real
        /// mistakes, not planted ones. Absent: unsolved episodes are dropped.
        repair: Option<PathBuf>,
    },
}

fn default_suite() -> PathBuf {
    PathBuf::from("bench")
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Output {
    pub dir: PathBuf,
    /// Share of rows in the validation split.
    #[serde(default = "default_validation")]
    pub validation: f64,
    /// Salt of the split hash (another seed, another split).
    #[serde(default)]
    pub seed: u64,
    /// `jsonl` and/or `parquet`.
    #[serde(default = "default_formats")]
    pub formats: Vec<String>,
}

fn default_validation() -> f64 {
    0.05
}

fn default_formats() -> Vec<String> {
    vec!["jsonl".into(), "parquet".into()]
}

/// The agent's prompt templates (the same task text as inference) and the target they name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptsCfg {
    /// Replacement templates, as `tritonforge run --prompts`.
    pub dir: Option<PathBuf>,
    #[serde(default = "default_device")]
    pub device: String,
    #[serde(default = "default_dtype")]
    pub dtype: String,
}

impl Default for PromptsCfg {
    fn default() -> Self {
        PromptsCfg { dir: None, device: default_device(), dtype: default_dtype() }
    }
}

fn default_device() -> String {
    "NVIDIA GPU (CUDA)".into()
}

fn default_dtype() -> String {
    "float32".into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingMode {
    /// Provided reasoning goes in `<think>…</think>` before the answer.
    #[default]
    Wrap,
    /// No thinking tags at all (provided reasoning is dropped, recorded thinking stripped).
    None,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thinking {
    #[serde(default)]
    pub mode: ThinkingMode,
    /// The input column holding reasoning.
    #[serde(default = "default_reasoning_field")]
    pub field: String,
}

impl Default for Thinking {
    fn default() -> Self {
        Thinking { mode: ThinkingMode::Wrap, field: default_reasoning_field() }
    }
}

fn default_reasoning_field() -> String {
    "reasoning".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Length {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Model directory with `tokenizer.json` and a chat template. Without it the stage
    /// is off (and says so in the stats).
    pub tokenizer: Option<PathBuf>,
    #[serde(default = "default_min")]
    pub min: usize,
    #[serde(default = "default_max")]
    pub max: usize,
    /// Tokenise the text rows share (system prompt, task rules, worked example) once;
    /// exact by construction, switchable to compare.
    #[serde(default = "yes")]
    pub prefix_cache: bool,
}

impl Default for Length {
    fn default() -> Self {
        Length {
            enabled: true,
            tokenizer: None,
            min: default_min(),
            max: default_max(),
            prefix_cache: true,
        }
    }
}

fn yes() -> bool {
    true
}

fn default_min() -> usize {
    100
}

fn default_max() -> usize {
    8192
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quality {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Run the guard on answers (a launched `@triton.jit` kernel, no fallback, no cheat).
    #[serde(default = "yes")]
    pub guard: bool,
    /// A guard rules file instead of the strict default (`policy` is the old key).
    #[serde(alias = "policy")]
    pub rules: Option<PathBuf>,
}

impl Default for Quality {
    fn default() -> Self {
        Quality { enabled: true, guard: true, rules: None }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dedup {
    #[serde(default = "yes")]
    pub exact: bool,
    #[serde(default = "yes")]
    pub near: bool,
    /// Jaccard similarity of two rows' distinctive token shingles (problem and answer,
    /// boilerplate set aside) at or above which they are one cluster (candidates come from
    /// MinHash LSH).
    #[serde(default = "default_threshold")]
    pub threshold: f64,
    #[serde(default = "default_perms")]
    pub permutations: usize,
    #[serde(default = "default_bands")]
    pub bands: usize,
    /// Tokens per shingle.
    #[serde(default = "default_shingle")]
    pub shingle: usize,
    /// Shingles found in more than this share of rows are boilerplate and ignored when
    /// comparing; 1.0 compares everything.
    #[serde(default = "default_boilerplate")]
    pub boilerplate: f64,
}

impl Default for Dedup {
    fn default() -> Self {
        Dedup {
            exact: true,
            near: true,
            threshold: default_threshold(),
            permutations: default_perms(),
            bands: default_bands(),
            shingle: default_shingle(),
            boilerplate: default_boilerplate(),
        }
    }
}

fn default_boilerplate() -> f64 {
    0.05
}

fn default_threshold() -> f64 {
    0.8
}

fn default_perms() -> usize {
    128
}

fn default_bands() -> usize {
    32
}

fn default_shingle() -> usize {
    5
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decontaminate {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The suite whose `heldout` problems no training row may resemble.
    #[serde(default = "default_suite")]
    pub suite: PathBuf,
    /// Jaccard similarity of the normalised token shingles of a row's PyTorch module and
    /// a heldout problem with the same anchors, at or above which the row is dropped.
    #[serde(default = "default_contamination")]
    pub threshold: f64,
}

impl Default for Decontaminate {
    fn default() -> Self {
        Decontaminate { enabled: true, suite: default_suite(), threshold: default_contamination() }
    }
}

fn default_contamination() -> f64 {
    0.6
}

/// Run every remaining pair through the evaluator and keep only `correct` ones. Off by
/// default: it costs an evaluation per row (verdicts are cached in the store, so a
/// rerun or an interrupted build picks up where it stopped).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verify {
    #[serde(default)]
    pub enabled: bool,
    /// Correctness trials per pair.
    #[serde(default = "default_trials")]
    pub trials: u32,
    /// Wall-clock budget per pair, seconds.
    #[serde(default = "default_budget")]
    pub budget_s: f64,
    /// Also time each pair (only meaningful on a GPU; speedups are recorded).
    #[serde(default)]
    pub timing: bool,
    /// Pairs evaluated at once [default: number of CPUs].
    pub jobs: Option<usize>,
}

impl Default for Verify {
    fn default() -> Self {
        Verify {
            enabled: false,
            trials: default_trials(),
            budget_s: default_budget(),
            timing: false,
            jobs: None,
        }
    }
}

fn default_trials() -> u32 {
    3
}

fn default_budget() -> f64 {
    120.0
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, DataError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| DataError::Config { path: path.to_path_buf(), reason: e.to_string() })?;
        let mut cfg: Config = toml::from_str(&text)
            .map_err(|e| DataError::Config { path: path.to_path_buf(), reason: e.to_string() })?;
        // Relative paths are relative to the config file.
        let base = path.parent().unwrap_or(Path::new("."));
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        for input in &mut cfg.inputs {
            match input {
                Input::Kernelbook { path } | Input::Suite { path } | Input::Synthetic { path } => {
                    fix(path)
                }
                Input::Episodes { store, repair, .. } => {
                    fix(store);
                    if let Some(r) = repair {
                        fix(r);
                    }
                }
            }
        }
        fix(&mut cfg.output.dir);
        if let Some(d) = &mut cfg.prompts.dir {
            fix(d);
        }
        if let Some(t) = &mut cfg.length.tokenizer {
            fix(t);
        }
        if let Some(p) = &mut cfg.quality.rules {
            fix(p);
        }
        fix(&mut cfg.decontaminate.suite);
        cfg.check().map_err(|reason| DataError::Config { path: path.to_path_buf(), reason })?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), String> {
        if self.inputs.is_empty() {
            return Err("no [[input]]".into());
        }
        if !(0.0..1.0).contains(&self.output.validation) {
            return Err("output.validation must be in [0, 1)".into());
        }
        for f in &self.output.formats {
            if f != "jsonl" && f != "parquet" {
                return Err(format!("output.formats: unknown format {f:?} (jsonl, parquet)"));
            }
        }
        let d = &self.dedup;
        if d.bands == 0 || d.permutations == 0 || !d.permutations.is_multiple_of(d.bands) {
            return Err("dedup.permutations must be a positive multiple of dedup.bands".into());
        }
        if d.shingle == 0 {
            return Err("dedup.shingle must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&d.threshold)
            || !(0.0..=1.0).contains(&self.decontaminate.threshold)
        {
            return Err("thresholds are similarities in [0, 1]".into());
        }
        let v = &self.verify;
        if v.trials == 0 || v.budget_s.is_nan() || v.budget_s <= 0.0 || v.jobs == Some(0) {
            return Err("verify.trials, verify.budget_s and verify.jobs must be positive".into());
        }
        if self.length.min > self.length.max {
            return Err("length.min is above length.max".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in data configs load as `data build` reads them, and the repair recipe
    /// is the first stage's set plus episodes: the same inputs and the same rendering,
    /// length, dedup and decontamination settings, so the two adapters differ by the
    /// repair rows alone.
    #[test]
    fn the_checked_in_data_configs_load_and_the_repair_set_extends_the_first() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for p in ["examples/data.toml", "examples/data-synth.toml", "examples/data-repair.toml"] {
            Config::load(&root.join(p)).unwrap_or_else(|e| panic!("{e}"));
        }
        let first = Config::load(&root.join("configs/bundled/data.toml")).unwrap();
        let repair = Config::load(&root.join("configs/bundled/data-repair.toml")).unwrap();
        let key = |i: &Input| format!("{i:?}");
        let theirs: Vec<String> = repair.inputs.iter().map(key).collect();
        for i in &first.inputs {
            assert!(theirs.contains(&key(i)), "{i:?} is missing from data-repair.toml");
        }
        let mut sets: Vec<&Path> = repair
            .inputs
            .iter()
            .filter_map(|i| match i {
                Input::Episodes { repair: Some(r), .. } => Some(r.as_path()),
                _ => None,
            })
            .collect();
        sets.sort();
        let want = [
            root.join("configs/bundled/../../bench"),
            root.join("configs/bundled/../../data/bundled/synth"),
        ];
        assert_eq!(sets, want.iter().map(PathBuf::as_path).collect::<Vec<_>>());
        assert_eq!(repair.inputs.len(), first.inputs.len() + sets.len());
        assert_ne!(first.output.dir, repair.output.dir);
        let rest = |p: &str| {
            let text = std::fs::read_to_string(root.join(p)).unwrap();
            let mut v: toml::Table = toml::from_str(&text).unwrap();
            v.remove("input");
            if let Some(toml::Value::Table(o)) = v.get_mut("output") {
                o.remove("dir");
            }
            v
        };
        assert_eq!(rest("configs/bundled/data.toml"), rest("configs/bundled/data-repair.toml"));
    }
}

//! The SFT data pipeline: KernelBook-style pairs, the suite's train pairs and our own
//! episodes become one clean set of conversations, with a record of what was kept and
//! why. Stages (each optional): ingest, normalise (the agent's own prompt templates, so
//! training and inference see the same task text; thinking tags), length filter (real
//! token counts), quality filter (both sides parse; the answer passes the guard), exact
//! and near-duplicate removal (MinHash LSH, keeping the best row of a cluster),
//! decontamination against heldout suite problems, split and write (JSONL, parquet, stats
//! in Markdown and JSON). Bad rows are counted and logged with their reason, never fatal.
//! A library that never prints: progress goes through a callback.

pub mod config;
pub mod ingest;
pub mod minhash;
pub mod normalize;
pub mod synth;
pub mod write;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Instant;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tritonforge_episode::{ChatMessage, Prompts, Target};
use tritonforge_protocol::Status;

pub use config::Config;
use config::{Input, ThinkingMode};

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: {reason}")]
    Config { path: PathBuf, reason: String },
    #[error("input {path}: {reason}")]
    Input { path: PathBuf, reason: String },
    #[error("output {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    #[error("{0}")]
    Setup(String),
    #[error("verify: {0}")]
    Verify(String),
}

pub use tritonforge_suite::SourcePair;

/// What the evaluator made of one pair: a verdict's status, or a broken problem.
/// Written as the bare names (`correct`, ..., `problem_error`) rows have always carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RowStatus {
    Evaluated(Status),
    NotEvaluated(NotEvaluated),
}

/// Why a pair has no verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotEvaluated {
    /// The row's PyTorch side does not import, build or run: the row goes, the build goes on.
    ProblemError,
}

impl RowStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RowStatus::Evaluated(s) => s.as_str(),
            RowStatus::NotEvaluated(NotEvaluated::ProblemError) => "problem_error",
        }
    }
}

/// The evaluator's verdict on one pair, as much of it as the set records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RowVerdict {
    pub status: RowStatus,
    pub message: String,
    /// The evaluation record's key in the store.
    pub key: String,
    /// Served from the store (an earlier build or run evaluated this exact pair).
    pub cached: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
}

impl RowVerdict {
    /// A pair whose PyTorch side is broken: the row goes, the build goes on.
    pub fn problem_error(message: String) -> RowVerdict {
        let status = RowStatus::NotEvaluated(NotEvaluated::ProblemError);
        RowVerdict { status, message, key: String::new(), cached: false, speedup: None }
    }
}

/// Runs pairs through the evaluator. The pipeline knows nothing of processes or devices;
/// the binary supplies the real evaluator, whose verdicts are stored as they come, so an
/// interrupted build loses no evaluation.
pub trait Verifier: Sync {
    /// One verdict per item, in order. `Err` only when the evaluator itself failed (not
    /// a candidate): the build stops rather than drop rows for the tool's fault.
    fn verify(
        &self,
        items: &[SourcePair],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<RowVerdict>, String>;
}

/// One training example on its way through the stages.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Row {
    pub id: String,
    /// Where it came from: `file:line`, `file#rowN`, `suite:key`, `episode:id`.
    pub origin: String,
    /// The PyTorch module (its class renamed to `Model` by the normalise stage).
    pub problem: String,
    /// The Triton answer (its class renamed to `ModelNew`).
    pub answer: String,
    /// The problem's class name in the source data.
    pub entry_point: String,
    pub reasoning: Option<String>,
    /// Episodes: the exact messages before the fixing reply.
    pub history: Vec<ChatMessage>,
    /// Episodes: the fixing reply as the policy wrote it.
    pub final_reply: Option<String>,
    /// Columns not read by the pipeline, kept.
    pub meta: Map<String, Value>,
    pub stars: f64,
    /// Known correct (the suite's solutions, episodes that ended correct).
    pub verified: bool,
    pub messages: Vec<ChatMessage>,
    pub tokens: Option<usize>,
    /// Guard warnings on the answer (fewer is better when choosing among duplicates).
    pub warnings: usize,
}

impl Row {
    /// Which row of a duplicate cluster to keep: verified, then clean, then popular.
    pub fn quality(&self) -> f64 {
        f64::from(u8::from(self.verified)) * 2.0 - 0.1 * self.warnings as f64
            + 0.1 * (1.0 + self.stars.max(0.0)).ln()
            + if self.reasoning.is_some() { 0.05 } else { 0.0 }
    }
}

/// A row that did not make it, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bad {
    pub stage: String,
    pub reason: String,
    /// `origin` of the row (file and line for malformed input).
    pub place: String,
    /// The row's id, when it got far enough to have one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The row kept in its place, for duplicates and look-alikes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instead: Option<String>,
    /// More about the reason (the evaluator's message for a failed verification).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Bad {
    pub fn new(stage: &str, reason: &str, place: &str) -> Bad {
        Bad {
            stage: stage.into(),
            reason: reason.into(),
            place: place.into(),
            id: None,
            instead: None,
            detail: None,
        }
    }

    fn of(stage: &str, reason: &str, row: &Row) -> Bad {
        let mut b = Bad::new(stage, reason, &row.origin);
        b.id = Some(row.id.clone());
        b
    }
}

/// What one stage did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StageStats {
    pub stage: String,
    pub rows_in: usize,
    pub rows_out: usize,
    /// Dropped rows by reason.
    pub dropped: BTreeMap<String, usize>,
    pub seconds: f64,
    /// Why the stage did nothing, when it did nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BuildReport {
    pub stages: Vec<StageStats>,
    pub train: usize,
    pub validation: usize,
    /// Token-length histogram of kept rows: (upper bound, rows); the last bound is open.
    pub token_histogram: Vec<(String, usize)>,
    pub seconds: f64,
    pub rows_per_second: f64,
    pub outputs: Vec<String>,
}

fn drop_reason(b: &Bad) -> String {
    // Reasons like `guard:no-modelnew` are counted under the full reason.
    b.reason.clone()
}

struct Stage<'a> {
    stats: StageStats,
    started: Instant,
    bad: &'a mut Vec<Bad>,
}

impl<'a> Stage<'a> {
    fn start(name: &str, rows_in: usize, bad: &'a mut Vec<Bad>) -> Stage<'a> {
        Stage {
            stats: StageStats { stage: name.into(), rows_in, ..StageStats::default() },
            started: Instant::now(),
            bad,
        }
    }

    fn drop(&mut self, b: Bad) {
        *self.stats.dropped.entry(drop_reason(&b)).or_default() += 1;
        self.bad.push(b);
    }

    fn finish(mut self, rows_out: usize, note: Option<String>) -> StageStats {
        self.stats.rows_out = rows_out;
        self.stats.seconds = self.started.elapsed().as_secs_f64();
        self.stats.note = note;
        self.stats
    }
}

/// Runs `f` on every row in parallel; rows it rejects are dropped with their reason.
fn filter_rows<F>(stage: &mut Stage<'_>, rows: Vec<Row>, f: F) -> Vec<Row>
where
    F: Fn(&mut Row) -> Result<(), String> + Sync + Send,
{
    let results: Vec<(Row, Result<(), String>)> = rows
        .into_par_iter()
        .map(|mut r| {
            let res = f(&mut r);
            (r, res)
        })
        .collect();
    let name = stage.stats.stage.clone();
    let mut kept = Vec::with_capacity(results.len());
    for (r, res) in results {
        match res {
            Ok(()) => kept.push(r),
            Err(reason) => stage.drop(Bad::of(&name, &reason, &r)),
        }
    }
    kept
}

/// Replaces `from` where it is a whole identifier (not part of a longer name).
fn rename(src: &str, from: &str, to: &str) -> String {
    if from == to || from.is_empty() {
        return src.to_string();
    }
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(src.len());
    let mut last = 0;
    for (at, _) in src.match_indices(from) {
        if at < last {
            continue;
        }
        let before = src[..at].chars().next_back();
        let after = src[at + from.len()..].chars().next();
        if before.is_some_and(ident) || after.is_some_and(ident) {
            continue;
        }
        out.push_str(&src[last..at]);
        out.push_str(to);
        last = at + from.len();
    }
    out.push_str(&src[last..]);
    out
}

/// Drops `<think>…</think>` blocks (thinking mode `none` on recorded replies).
fn strip_thinking(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = &rest[start + end + "</think>".len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out.trim_start().to_string()
}

/// The whole pipeline. `progress` hears each stage's name as it starts.
pub fn build(
    cfg: &Config,
    progress: &(dyn Fn(&str) + Sync),
    verifier: Option<&dyn Verifier>,
) -> Result<(BuildReport, Vec<Bad>), DataError> {
    if cfg.verify.enabled && verifier.is_none() {
        return Err(DataError::Setup("verify is on but no evaluator was supplied".into()));
    }
    let started = Instant::now();
    let mut bad: Vec<Bad> = Vec::new();
    let mut stages = Vec::new();

    // The agent's templates: synthetic conversations are rendered at ingest, the others
    // when normalised.
    let prompts =
        Prompts::load(cfg.prompts.dir.as_deref()).map_err(|e| DataError::Setup(e.to_string()))?;
    let target = Target {
        device: cfg.prompts.device.clone(),
        dtype: cfg.prompts.dtype.clone(),
        timing: true,
    };

    // 1. Ingest.
    progress("ingest");
    let t = Instant::now();
    let mut rows = Vec::new();
    let mut ingest_bad = Vec::new();
    for input in &cfg.inputs {
        let (r, b) = match input {
            Input::Kernelbook { path } => ingest::kernelbook(path, &cfg.thinking.field)?,
            Input::Suite { path } => ingest::suite(path)?,
            Input::Synthetic { path } => ingest::synthetic(path, &prompts, &target)?,
            Input::Episodes { store, run, repair } => {
                ingest::episodes(store, run.as_deref(), repair.as_deref())?
            }
        };
        rows.extend(r);
        ingest_bad.extend(b);
    }
    let mut st = StageStats {
        stage: "ingest".into(),
        rows_in: rows.len() + ingest_bad.len(),
        rows_out: rows.len(),
        seconds: t.elapsed().as_secs_f64(),
        ..StageStats::default()
    };
    for b in &ingest_bad {
        *st.dropped.entry(drop_reason(b)).or_default() += 1;
    }
    bad.extend(ingest_bad);
    stages.push(st);
    let total_in = stages[0].rows_in;

    // 2-4. Normalise to conversations with the agent's templates; thinking tags.
    progress("normalise");
    let system = prompts.system().map_err(|e| DataError::Setup(e.to_string()))?;
    let mode = cfg.thinking.mode;
    let mut stage = Stage::start("normalise", rows.len(), &mut bad);
    let rows = filter_rows(&mut stage, rows, |r| {
        r.problem = rename(&r.problem, &r.entry_point, "Model");
        r.answer = rename(&r.answer, &format!("{}New", r.entry_point), "ModelNew");
        if !r.problem.contains("class Model") {
            return Err("no_model_class".into());
        }
        if !r.history.is_empty() {
            if !ingest::valid_history(&r.history) {
                return Err("bad_history".into());
            }
            let reply = r.final_reply.clone().unwrap_or_default();
            let reply = match mode {
                ThinkingMode::Wrap => reply,
                ThinkingMode::None => strip_thinking(&reply),
            };
            // Earlier assistant turns are attempts that failed (planted, or the policy's
            // own): context for the fix, never a target, or the model learns the bugs.
            r.messages = r
                .history
                .iter()
                .cloned()
                .map(|m| if m.role == "assistant" { m.as_context() } else { m })
                .collect();
            r.messages.push(ChatMessage::new("assistant", reply));
            return Ok(());
        }
        let name =
            r.meta.get("module_name").and_then(Value::as_str).unwrap_or(&r.entry_point).to_string();
        let task =
            prompts.task(&name, &r.problem, &target).map_err(|e| format!("template_error: {e}"))?;
        let fenced = ingest::fenced(&r.answer);
        let reply = match (&r.reasoning, mode) {
            (Some(why), ThinkingMode::Wrap) => {
                format!("<think>\n{}\n</think>\n\n{fenced}", why.trim())
            }
            _ => fenced,
        };
        r.messages = vec![
            ChatMessage::new("system", system.clone()),
            ChatMessage::new("user", task),
            ChatMessage::new("assistant", reply),
        ];
        Ok(())
    });
    stages.push(stage.finish(rows.len(), None));

    // 5. Length by real token counts.
    progress("length");
    let mut stage = Stage::start("length", rows.len(), &mut bad);
    let rows = match (&cfg.length.tokenizer, cfg.length.enabled) {
        (Some(dir), true) => {
            let mut tok = tritonforge_chat::ChatTokenizer::from_dir(dir)
                .map_err(|e| DataError::Setup(e.to_string()))?;
            if !cfg.length.prefix_cache {
                tok = tok.without_prefix_cache();
            }
            let (min, max) = (cfg.length.min, cfg.length.max);
            let rows = filter_rows(&mut stage, rows, |r| {
                let (_, ids) = tok
                    .encode_chat(&r.messages, false)
                    .map_err(|e| format!("template_error: {e}"))?;
                r.tokens = Some(ids.len());
                if ids.len() < min {
                    Err("too_short".into())
                } else if ids.len() > max {
                    Err("too_long".into())
                } else {
                    Ok(())
                }
            });
            let n = rows.len();
            stages.push(stage.finish(n, None));
            rows
        }
        (None, true) => {
            let n = rows.len();
            stages.push(stage.finish(n, Some("off: no length.tokenizer configured".into())));
            rows
        }
        (_, false) => {
            let n = rows.len();
            stages.push(stage.finish(n, Some("off".into())));
            rows
        }
    };

    // 6. Quality: both sides parse; the answer passes the guard.
    progress("quality");
    let mut stage = Stage::start("quality", rows.len(), &mut bad);
    let rows = if cfg.quality.enabled {
        let policy =
            tritonforge_guard::GuardRules::load(cfg.quality.rules.as_deref()).map_err(|e| {
                DataError::Config {
                    path: cfg.quality.rules.clone().unwrap_or_default(),
                    reason: e.to_string(),
                }
            })?;
        let use_guard = cfg.quality.guard;
        let rows = filter_rows(&mut stage, rows, |r| {
            let p = tritonforge_guard::check(&r.problem, &policy);
            if p.parse_error.is_some() {
                return Err("problem_unparsable".into());
            }
            let a = tritonforge_guard::check(&r.answer, &policy);
            if a.parse_error.is_some() {
                return Err("answer_unparsable".into());
            }
            if use_guard {
                if let Some(f) =
                    a.findings.iter().find(|f| f.severity == tritonforge_guard::Severity::Reject)
                {
                    return Err(format!("guard:{}", f.rule));
                }
                r.warnings = a.findings.len();
            }
            Ok(())
        });
        let n = rows.len();
        stages.push(stage.finish(n, None));
        rows
    } else {
        let n = rows.len();
        stages.push(stage.finish(n, Some("off".into())));
        rows
    };

    // 7. Dedup: exact, then near (MinHash LSH on the answers).
    progress("dedup");
    let rows = dedup(cfg, rows, &mut bad, &mut stages);

    // 8. Decontamination against heldout suite problems.
    progress("decontaminate");
    let rows = decontaminate(cfg, rows, &mut bad, &mut stages)?;

    // 6b. Verify: last of the filters, so the evaluator only sees rows that would be
    // kept (duplicates and look-alikes are never evaluated).
    let rows = match verifier.filter(|_| cfg.verify.enabled) {
        Some(v) => {
            progress("verify");
            verify(rows, v, progress, &mut bad, &mut stages)?
        }
        None => {
            stages.push(StageStats {
                stage: "verify".into(),
                rows_in: rows.len(),
                rows_out: rows.len(),
                note: Some("off".into()),
                ..StageStats::default()
            });
            rows
        }
    };

    // 9. Split and write.
    progress("write");
    let t = Instant::now();
    let (train, validation): (Vec<Row>, Vec<Row>) = rows
        .into_iter()
        .partition(|r| !in_validation(&r.id, cfg.output.seed, cfg.output.validation));
    let outputs = write::write_all(cfg, &train, &validation, &bad)?;
    stages.push(StageStats {
        stage: "split+write".into(),
        rows_in: train.len() + validation.len(),
        rows_out: train.len() + validation.len(),
        seconds: t.elapsed().as_secs_f64(),
        ..StageStats::default()
    });
    let seconds = started.elapsed().as_secs_f64();
    let report = BuildReport {
        token_histogram: histogram(train.iter().chain(&validation)),
        stages,
        train: train.len(),
        validation: validation.len(),
        seconds,
        rows_per_second: total_in as f64 / seconds.max(1e-9),
        outputs,
    };
    write::write_stats(cfg, &report)?;
    Ok((report, bad))
}

/// Evaluates every row; keeps the `correct` ones, with their verdict in `meta.verdict`.
fn verify(
    rows: Vec<Row>,
    verifier: &dyn Verifier,
    progress: &(dyn Fn(&str) + Sync),
    bad: &mut Vec<Bad>,
    stages: &mut Vec<StageStats>,
) -> Result<Vec<Row>, DataError> {
    let mut stage = Stage::start("verify", rows.len(), bad);
    let items: Vec<SourcePair> = rows
        .iter()
        .map(|r| SourcePair {
            id: r.id.clone(),
            problem: r.problem.clone(),
            candidate: r.answer.clone(),
        })
        .collect();
    let total = items.len();
    let tick = |done: usize| progress(&format!("verify {done}/{total}"));
    let verdicts = verifier.verify(&items, &tick).map_err(DataError::Verify)?;
    if verdicts.len() != rows.len() {
        return Err(DataError::Verify(format!(
            "{} verdicts for {} pairs",
            verdicts.len(),
            rows.len()
        )));
    }
    let cached = verdicts.iter().filter(|v| v.cached).count();
    let mut kept = Vec::with_capacity(rows.len());
    for (mut r, v) in rows.into_iter().zip(verdicts) {
        let record = serde_json::to_value(&v).unwrap_or(Value::Null);
        if v.status == RowStatus::Evaluated(Status::Correct) {
            r.verified = true;
            r.meta.insert("verdict".into(), record);
            kept.push(r);
        } else {
            let mut b = Bad::of("verify", v.status.as_str(), &r);
            b.detail = Some(v.message.chars().take(500).collect());
            stage.drop(b);
        }
    }
    let n = kept.len();
    stages.push(stage.finish(n, Some(format!("{cached} of {total} verdicts from the store"))));
    Ok(kept)
}

/// A stable, seeded assignment: the same id lands in the same split every run.
fn in_validation(id: &str, seed: u64, share: f64) -> bool {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{seed}:{id}").as_bytes());
    let mut x = [0u8; 8];
    x.copy_from_slice(&digest[..8]);
    (u64::from_le_bytes(x) as f64 / u64::MAX as f64) < share
}

fn histogram<'a>(rows: impl Iterator<Item = &'a Row>) -> Vec<(String, usize)> {
    let bounds = [128usize, 256, 512, 1024, 2048, 4096, 8192];
    let mut counts = vec![0usize; bounds.len() + 1];
    let mut any = false;
    for r in rows {
        if let Some(t) = r.tokens {
            any = true;
            let i = bounds.iter().position(|b| t < *b).unwrap_or(bounds.len());
            counts[i] += 1;
        }
    }
    if !any {
        return Vec::new();
    }
    let mut out: Vec<(String, usize)> =
        bounds.iter().zip(&counts).map(|(b, c)| (format!("<{b}"), *c)).collect();
    out.push((format!(">={}", bounds[bounds.len() - 1]), counts[bounds.len()]));
    out
}

/// The failed attempts a row's conversation carries (its history's replies), normalised:
/// part of what makes a multi-turn example itself. Empty for a plain pair.
fn attempts(r: &Row) -> String {
    r.history
        .iter()
        .filter(|m| m.role == "assistant")
        .map(|m| normalize::canonical_text(&m.content))
        .collect::<Vec<_>>()
        .join("\u{0}")
}

/// Keeps the best row of each group of indices (by quality, then id for determinism).
fn best_of(rows: &[Row], members: &[usize]) -> usize {
    let mut best = members[0];
    for &m in &members[1..] {
        let (q, qb) = (rows[m].quality(), rows[best].quality());
        if q > qb || (q == qb && rows[m].id < rows[best].id) {
            best = m;
        }
    }
    best
}

/// Keeps the best row of each group (every row is in exactly one group); the others are
/// dropped for `reason`, naming the row kept instead, in row order.
fn keep_best<'g>(
    rows: Vec<Row>,
    groups: impl Iterator<Item = &'g Vec<usize>>,
    stage: &mut Stage<'_>,
    reason: &str,
) -> Vec<Row> {
    let mut keep = vec![false; rows.len()];
    let mut dropped = Vec::new();
    for members in groups {
        let best = best_of(&rows, members);
        keep[best] = true;
        dropped.extend(members.iter().filter(|&&m| m != best).map(|&m| (m, best)));
    }
    dropped.sort_unstable();
    let name = stage.stats.stage.clone();
    for (m, best) in dropped {
        let mut b = Bad::of(&name, reason, &rows[m]);
        b.instead = Some(rows[best].id.clone());
        stage.drop(b);
    }
    rows.into_iter().zip(keep).filter_map(|(r, k)| k.then_some(r)).collect()
}

fn dedup(
    cfg: &Config,
    rows: Vec<Row>,
    bad: &mut Vec<Bad>,
    stages: &mut Vec<StageStats>,
) -> Vec<Row> {
    use sha2::{Digest, Sha256};
    // Exact: the same normalised problem and answer (docstrings, comments, layout and
    // the file's own names do not count: a renamed copy is a copy).
    let mut stage = Stage::start("dedup_exact", rows.len(), bad);
    let rows = if cfg.dedup.exact {
        let keys: Vec<String> = rows
            .par_iter()
            .map(|r| {
                let text = format!(
                    "{}\u{0}{}\u{0}{}",
                    normalize::canonical_text(&r.problem),
                    normalize::canonical_text(&r.answer),
                    attempts(r)
                );
                hex::encode(Sha256::digest(text.as_bytes()))
            })
            .collect();
        let mut groups: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            groups.entry(k.as_str()).or_default().push(i);
        }
        keep_best(rows, groups.values(), &mut stage, "exact_duplicate")
    } else {
        rows
    };
    let n = rows.len();
    stages.push(stage.finish(n, (!cfg.dedup.exact).then(|| "off".into())));

    // Near: MinHash signatures of the answers, LSH candidates, clusters by union-find.
    let mut stage = Stage::start("dedup_near", rows.len(), bad);
    if !cfg.dedup.near || rows.len() < 2 {
        let n = rows.len();
        stages.push(stage.finish(n, (!cfg.dedup.near).then(|| "off".into())));
        return rows;
    }
    let groups = near_clusters(&cfg.dedup, &rows);
    let rows = keep_best(rows, groups.values(), &mut stage, "near_duplicate");
    let n = rows.len();
    stages.push(stage.finish(n, None));
    rows
}

/// Clusters of near-duplicate rows (by their first member): MinHash signatures of the
/// normalised problem and answer nominate, exact Jaccard and equal anchors confirm,
/// union-find joins.
fn near_clusters(d: &config::Dedup, rows: &[Row]) -> BTreeMap<usize, Vec<usize>> {
    let hasher = minhash::MinHasher::new(d.permutations, 0);
    // A duplicate is the same example: the problem and the answer together, compared on
    // what is distinctive once shared boilerplate is set aside.
    let mut sets: Vec<_> = rows
        .par_iter()
        .map(|r| {
            minhash::union(
                &normalize::canonical_shingles(&r.problem, d.shingle),
                &normalize::canonical_shingles(&r.answer, d.shingle),
            )
        })
        .collect();
    minhash::drop_boilerplate(&mut sets, d.boilerplate);
    let sigs: Vec<Vec<u64>> = sets.par_iter().map(|s| hasher.signature(s)).collect();
    // Normalised code of one family differs in little but its operations and constants,
    // so a near duplicate must also pose the same problem: the same anchors.
    // Rows of one problem and answer that follow different failed attempts teach
    // different fixes: their attempts are an anchor too.
    let anchors: Vec<Vec<String>> = rows
        .par_iter()
        .map(|r| {
            let mut a = normalize::anchors(&r.problem);
            a.push(attempts(r));
            a
        })
        .collect();
    // Each member of a band bucket is checked against the bucket's first member with the
    // exact Jaccard similarity of their shingle sets (the signature only nominates): a
    // bucket of k rows costs k checks, not k² (boilerplate-heavy code fills big buckets).
    let buckets = minhash::band_buckets(&sigs, d.bands);
    let similar: Vec<(usize, usize)> = buckets
        .par_iter()
        .flat_map_iter(|members| {
            let first = members[0];
            let (sets, anchors) = (&sets, &anchors);
            members[1..]
                .iter()
                .filter(move |&&m| {
                    anchors[first] == anchors[m]
                        && minhash::jaccard(&sets[first], &sets[m]) >= d.threshold
                })
                .map(move |&m| (first, m))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut clusters = minhash::Clusters::new(rows.len());
    for (a, b) in similar {
        clusters.union(a, b);
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..rows.len() {
        let root = clusters.find(i);
        groups.entry(root).or_default().push(i);
    }
    groups
}

/// One heldout problem of the suite, as the decontamination stage compares it.
struct Held {
    key: String,
    /// Its sizes are part of what it is: another problem of the suite differs from it in
    /// sizes only (the train `matmul` and the heldout `matmul_large_k`).
    sized: bool,
    anchors: Vec<String>,
    shingles: minhash::Shingles,
}

/// The suite's heldout problems, with their normalised forms.
struct Heldout {
    problems: Vec<Held>,
    /// Normalised source, sizes masked -> key; sized problems by their full form.
    exact: HashMap<String, String>,
    any_sized: bool,
}

impl Heldout {
    fn load(root: &std::path::Path, shingle: usize) -> Result<Heldout, DataError> {
        let suite = tritonforge_suite::Suite::load(root)
            .map_err(|e| DataError::Input { path: root.to_path_buf(), reason: e.to_string() })?;
        let read =
            |e: &tritonforge_suite::SuiteEntry| std::fs::read_to_string(&e.problem_path).ok();
        let is_heldout =
            |e: &tritonforge_suite::SuiteEntry| e.meta.split.as_deref() == Some("heldout");
        // Problems the suite keeps apart from its heldout ones, by sizes alone if need be.
        let others: std::collections::HashSet<String> = suite
            .entries
            .iter()
            .filter(|e| !is_heldout(e))
            .filter_map(|e| read(e).map(|src| normalize::shape_free_text(&src)))
            .collect();
        let mut held = Heldout { problems: Vec::new(), exact: HashMap::new(), any_sized: false };
        // A heldout problem we cannot read cannot leak through us either.
        for (e, src) in
            suite.entries.iter().filter(|e| is_heldout(e)).filter_map(|e| Some((e, read(e)?)))
        {
            let shape_free = normalize::shape_free_text(&src);
            let sized = others.contains(&shape_free);
            let (text, anchors) = if sized {
                (normalize::canonical_text(&src), normalize::sized_anchors(&src))
            } else {
                (shape_free, normalize::anchors(&src))
            };
            held.any_sized |= sized;
            held.exact.insert(text, e.key.clone());
            let shingles = normalize::canonical_shingles(&src, shingle);
            held.problems.push(Held { key: e.key.clone(), sized, anchors, shingles });
        }
        Ok(held)
    }

    /// The heldout problem a row's PyTorch module is, and how it was matched.
    fn matches(&self, problem: &str, k: usize, threshold: f64) -> Option<(&'static str, &str)> {
        let shape_free = normalize::shape_free_text(problem);
        let full = self.any_sized.then(|| normalize::canonical_text(problem));
        let exact = self.exact.get(&shape_free).or_else(|| full.and_then(|f| self.exact.get(&f)));
        if let Some(key) = exact {
            return Some(("heldout_normalised_match", key));
        }
        let anchors = normalize::anchors(problem);
        let sized = self.any_sized.then(|| normalize::sized_anchors(problem));
        let mut shingles = None;
        self.problems
            .iter()
            .find(|h| {
                let same =
                    if h.sized { sized.as_ref() == Some(&h.anchors) } else { anchors == h.anchors };
                // Anchors first: they are cheap, and rarely equal.
                same && {
                    let s =
                        shingles.get_or_insert_with(|| normalize::canonical_shingles(problem, k));
                    minhash::jaccard(s, &h.shingles) >= threshold
                }
            })
            .map(|h| ("heldout_lookalike", h.key.as_str()))
    }
}

/// For each PyTorch module source, the key of the `heldout` problem of the suite at
/// `suite_root` it is (the decontamination stage's matching: normalised code, or anchors
/// and shingles at or above `threshold`), and how many heldout problems were compared.
/// The decontamination stage, and the synthetic generator before it keeps a problem.
pub fn heldout_lookalikes(
    suite_root: &std::path::Path,
    problems: &[&str],
    shingle: usize,
    threshold: f64,
) -> Result<(Vec<Option<String>>, usize), DataError> {
    let heldout = Heldout::load(suite_root, shingle)?;
    let verdicts = problems
        .par_iter()
        .map(|p| heldout.matches(p, shingle, threshold).map(|(_, key)| key.to_string()))
        .collect();
    Ok((verdicts, heldout.problems.len()))
}

/// Drops rows whose PyTorch module is a heldout problem: the same normalised code, sizes
/// aside (`heldout_normalised_match`), or the same anchors and normalised shingles with
/// Jaccard at or above the threshold (`heldout_lookalike`). Normalised, so a renamed
/// class, renamed variables, a reworded docstring or added comments hide nothing;
/// anchored, so a sibling of a heldout problem (another activation, another dim) is not
/// taken for it. The anchors do what setting boilerplate aside does in dedup, so all
/// shingles count: a problem as small as `sigmoid` has almost no distinctive ones.
fn decontaminate(
    cfg: &Config,
    rows: Vec<Row>,
    bad: &mut Vec<Bad>,
    stages: &mut Vec<StageStats>,
) -> Result<Vec<Row>, DataError> {
    let mut stage = Stage::start("decontaminate", rows.len(), bad);
    if !cfg.decontaminate.enabled {
        let n = rows.len();
        stages.push(stage.finish(n, Some("off".into())));
        return Ok(rows);
    }
    let heldout = Heldout::load(&cfg.decontaminate.suite, cfg.dedup.shingle)?;
    let (k, threshold) = (cfg.dedup.shingle, cfg.decontaminate.threshold);
    let verdicts: Vec<Option<(&str, String)>> = rows
        .par_iter()
        .map(|r| heldout.matches(&r.problem, k, threshold).map(|(why, key)| (why, key.to_string())))
        .collect();
    let mut kept = Vec::with_capacity(rows.len());
    for (r, v) in rows.into_iter().zip(verdicts) {
        match v {
            Some((reason, key)) => {
                let mut b = Bad::of("decontaminate", reason, &r);
                b.instead = Some(format!("suite:{key}"));
                stage.drop(b);
            }
            None => kept.push(r),
        }
    }
    let n = kept.len();
    let note = format!("{} heldout problems compared", heldout.problems.len());
    stages.push(stage.finish(n, Some(note)));
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_whole_identifiers_only() {
        let src = "class Foo(nn.Module):\n    pass\nclass FooNew(Foo):\n    x = Foobar\n";
        assert_eq!(
            rename(src, "Foo", "Model"),
            "class Model(nn.Module):\n    pass\nclass FooNew(Model):\n    x = Foobar\n"
        );
    }

    #[test]
    fn thinking_is_stripped_when_asked() {
        assert_eq!(strip_thinking("<think>a</think>\n\nB <think>c</think>D"), "B D");
        assert_eq!(strip_thinking("A<think>unclosed"), "A");
    }

    #[test]
    fn the_split_is_stable_and_near_its_share() {
        let n = (0..10_000).filter(|i| in_validation(&format!("row-{i}"), 7, 0.1)).count();
        assert!((900..1100).contains(&n), "{n}");
        assert_eq!(in_validation("x", 7, 0.5), in_validation("x", 7, 0.5));
    }
}

//! Reading rows: KernelBook-shaped JSONL and parquet, the suite's train pairs, and
//! episodes from a store. A bad row is counted with its reason and its place, never fatal.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use tritonforge_episode::{ChatMessage, Episode, Prompts, Target};

use crate::{Bad, DataError, Row};

/// The KernelBook columns this pipeline reads; every other column is kept as metadata.
const PROBLEM: &str = "python_code";
const ANSWER: &str = "triton_code";

/// Rows of a `.jsonl` or `.parquet` file in the KernelBook shape.
pub fn kernelbook(path: &Path, reasoning_field: &str) -> Result<(Vec<Row>, Vec<Bad>), DataError> {
    let (objects, mut bad) = objects(path)?;
    let mut rows = Vec::new();
    for (place, obj) in objects {
        match from_object(obj, &place, reasoning_field) {
            Ok(row) => rows.push(row),
            Err(reason) => bad.push(Bad::new("ingest", &reason, &place)),
        }
    }
    Ok((rows, bad))
}

/// A record and its place (`file:line` or `file#rowN`).
pub type Placed = tritonforge_rows::Placed;

/// The records of a `.jsonl` or `.parquet` file as JSON objects, each with its place;
/// records that are not objects are bad rows, not errors. (The reader is
/// `tritonforge-rows`, shared with the trainer.)
pub fn objects(path: &Path) -> Result<(Vec<Placed>, Vec<Bad>), DataError> {
    let (rows, unreadable) = tritonforge_rows::read(path)
        .map_err(|e| DataError::Input { path: e.path, reason: e.reason })?;
    let bad = unreadable.iter().map(|u| Bad::new("ingest", &u.reason, &u.place)).collect();
    Ok((rows, bad))
}

fn take_string(obj: &mut Map<String, Value>, key: &str) -> Result<String, String> {
    match obj.remove(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
        Some(Value::String(_)) => Err(format!("empty_field:{key}")),
        Some(Value::Null) | None => Err(format!("missing_field:{key}")),
        Some(_) => Err(format!("not_a_string:{key}")),
    }
}

/// The first `class Name(` of a module: the entry point when the row names none.
fn first_class(src: &str) -> Option<String> {
    src.lines().find_map(|l| {
        let rest = l.strip_prefix("class ")?;
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
        (end > 0).then(|| rest[..end].to_string())
    })
}

fn from_object(
    mut obj: Map<String, Value>,
    place: &str,
    reasoning_field: &str,
) -> Result<Row, String> {
    let problem = take_string(&mut obj, PROBLEM)?;
    let answer = take_string(&mut obj, ANSWER)?;
    let entry_point = match obj.get("entry_point") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => first_class(&problem).ok_or_else(|| "missing_field:entry_point".to_string())?,
    };
    let reasoning = match obj.remove(reasoning_field) {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s),
        _ => None,
    };
    let id = match obj.get("uuid") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => place.to_string(),
    };
    let stars = obj.get("stars").and_then(Value::as_f64).unwrap_or(0.0);
    Ok(Row {
        id,
        origin: place.to_string(),
        problem,
        answer,
        entry_point,
        reasoning,
        history: Vec::new(),
        meta: obj,
        stars,
        ..Row::default()
    })
}

/// The suite's `train` problems that have a reference solution.
pub fn suite(root: &Path) -> Result<(Vec<Row>, Vec<Bad>), DataError> {
    let suite = tritonforge_suite::Suite::load(root)
        .map_err(|e| DataError::Input { path: root.to_path_buf(), reason: e.to_string() })?;
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    for e in &suite.entries {
        if e.meta.split.as_deref() != Some("train") {
            continue;
        }
        let place = format!("suite:{}", e.key);
        let Some(sol) = &e.solution_path else {
            bad.push(Bad::new("ingest", "no_solution", &place));
            continue;
        };
        let read =
            |p: &Path| std::fs::read_to_string(p).map_err(|err| format!("unreadable: {err}"));
        match (read(&e.problem_path), read(sol)) {
            (Ok(problem), Ok(answer)) => {
                let mut meta = Map::new();
                meta.insert("suite_key".into(), Value::from(e.key.clone()));
                // The task names the problem as `run` does (its file stem), so training
                // sees the prompt inference sends.
                meta.insert("module_name".into(), Value::from(e.name()));
                meta.insert("level".into(), Value::from(e.meta.level));
                meta.insert("family".into(), Value::from(e.meta.family.clone()));
                rows.push(Row {
                    id: format!("suite/{}", e.key),
                    origin: place,
                    problem,
                    answer,
                    entry_point: "Model".into(),
                    meta,
                    verified: true,
                    ..Row::default()
                })
            }
            (Err(r), _) | (_, Err(r)) => bad.push(Bad::new("ingest", &r, &place)),
        }
    }
    Ok((rows, bad))
}

/// A set written by `tritonforge bench synth`: its `train` problems with their reference
/// solutions (heldout ones are never ingested). A problem whose planted wrong attempt was
/// kept becomes the conversation the agent would have had: the task, that attempt, the
/// evaluator's feedback on it (the agent's own template, from the stored record), then
/// the solution. The task names the problem by its file stem, as `tritonforge run` does.
pub fn synthetic(
    root: &Path,
    prompts: &Prompts,
    target: &Target,
) -> Result<(Vec<Row>, Vec<Bad>), DataError> {
    let suite = tritonforge_suite::Suite::load(root)
        .map_err(|e| DataError::Input { path: root.to_path_buf(), reason: e.to_string() })?;
    let setup = |e: tritonforge_episode::prompts::PromptError| DataError::Setup(e.to_string());
    let system = prompts.system().map_err(setup)?;
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    for e in suite.entries.iter().filter(|e| e.meta.split.as_deref() == Some("train")) {
        let place = format!("synthetic:{}", e.key);
        let read =
            |p: &Path| std::fs::read_to_string(p).map_err(|err| format!("unreadable: {err}"));
        let pair = match &e.solution_path {
            None => Err("no_solution".to_string()),
            Some(sol) => read(&e.problem_path).and_then(|p| Ok((p, read(sol)?))),
        };
        let attempt = tritonforge_synth::write::read_attempt(root, &e.key)
            .map_err(|why| format!("bad_attempt: {why}"));
        let ((problem, answer), attempt) = match (pair, attempt) {
            (Ok(pair), Ok(attempt)) => (pair, attempt),
            (Err(why), _) | (_, Err(why)) => {
                bad.push(Bad::new("ingest", &why, &place));
                continue;
            }
        };
        let mut meta = Map::new();
        meta.insert("synth_key".into(), Value::from(e.key.clone()));
        meta.insert("module_name".into(), Value::from(e.name()));
        meta.insert("level".into(), Value::from(e.meta.level));
        meta.insert("family".into(), Value::from(e.meta.family.clone()));
        meta.insert("difficulty".into(), Value::from(e.meta.difficulty));
        let mut history = Vec::new();
        let mut final_reply = None;
        if let Some((wrong, rec)) = attempt {
            let feedback = prompts
                .feedback(&tritonforge_episode::prompts::Attempt::Evaluated(&rec.record), 1.0)
                .map_err(setup)?;
            meta.insert("flaw".into(), Value::from(rec.flaw.as_str()));
            meta.insert("attempt_status".into(), Value::from(rec.record.verdict.status.as_str()));
            history = vec![
                ChatMessage::new("system", system.clone()),
                ChatMessage::new("user", prompts.task(e.name(), &problem, target).map_err(setup)?),
                ChatMessage::new("assistant", fenced(&wrong)),
                ChatMessage::new("user", feedback),
            ];
            final_reply = Some(fenced(&answer));
        }
        rows.push(Row {
            id: format!("synth/{}", e.key),
            origin: place,
            problem,
            answer,
            entry_point: "Model".into(),
            history,
            final_reply,
            meta,
            verified: true,
            ..Row::default()
        });
    }
    Ok((rows, bad))
}

/// Code as a reply: one `python` fence, as the normalise stage writes answers.
pub fn fenced(code: &str) -> String {
    format!("```python\n{}\n```", code.trim_end())
}

/// Reference solutions of a suite's (or synthetic set's) problems by the problem file's
/// canonical path: `train` problems with a solution, and the heldout ones (which never
/// give a row).
struct Repairs {
    train: BTreeMap<PathBuf, PathBuf>,
    /// Train problems without a reference solution.
    unsolved: BTreeSet<PathBuf>,
    heldout: BTreeSet<PathBuf>,
}

impl Repairs {
    fn load(root: &Path) -> Result<Repairs, DataError> {
        let suite = tritonforge_suite::Suite::load(root)
            .map_err(|e| DataError::Input { path: root.to_path_buf(), reason: e.to_string() })?;
        let mut out =
            Repairs { train: BTreeMap::new(), unsolved: BTreeSet::new(), heldout: BTreeSet::new() };
        for e in &suite.entries {
            let Ok(path) = e.problem_path.canonicalize() else { continue };
            match (e.meta.split.as_deref(), &e.solution_path) {
                (Some("train"), Some(sol)) => {
                    out.train.insert(path, sol.clone());
                }
                (Some("train"), None) => {
                    out.unsolved.insert(path);
                }
                _ => {
                    out.heldout.insert(path);
                }
            }
        }
        Ok(out)
    }
}

/// Episodes that became correct. Solved on the first turn: a plain pair. Solved later:
/// the conversation up to the fixing turn (failed attempts and their feedback included)
/// plus the fix. With `repair` (a suite or synthetic set), an unsolved episode of one of
/// its train problems gives the conversation of its second turn (the first attempt and
/// its feedback) with the reference solution as the fix.
pub fn episodes(
    store: &Path,
    run: Option<&str>,
    repair: Option<&Path>,
) -> Result<(Vec<Row>, Vec<Bad>), DataError> {
    let repairs = repair.map(Repairs::load).transpose()?;
    let err = |e: tritonforge_store::StoreError| DataError::Input {
        path: store.to_path_buf(),
        reason: e.to_string(),
    };
    if !store.is_file() {
        return Err(DataError::Input { path: store.to_path_buf(), reason: "no such store".into() });
    }
    let db = tritonforge_store::Store::open(store).map_err(err)?;
    let all = match run {
        Some(r) => db
            .episodes(r)
            .map_err(err)?
            .into_iter()
            .map(|(_, text)| (r.to_string(), text))
            .collect(),
        None => db.all_episodes().map_err(err)?,
    };
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    let mut sources: BTreeMap<String, Option<String>> = BTreeMap::new();
    for (run, text) in all {
        let ep: Episode = match serde_json::from_str(&text) {
            Ok(e) => e,
            Err(_) => {
                bad.push(Bad::new("ingest", "malformed_episode", &format!("episodes:{run}")));
                continue;
            }
        };
        let place = format!("episode:{}", ep.id);
        let Some(k) = ep.turns.iter().position(|t| t.outcome.is_correct()) else {
            match &repairs {
                None => bad.push(Bad::new("ingest", "episode_unsolved", &place)),
                Some(r) => match repair_row(r, &run, &ep, &place) {
                    Ok(row) => rows.push(row),
                    Err((reason, file)) => {
                        let mut b = Bad::new("ingest", reason, &place);
                        b.detail = Some(file);
                        bad.push(b);
                    }
                },
            }
            continue;
        };
        // With a repair set, its heldout problems give no row of any kind.
        if let Some(r) = &repairs {
            if Path::new(&ep.problem_path).canonicalize().is_ok_and(|p| r.heldout.contains(&p)) {
                let mut b = Bad::new("ingest", "repair_heldout", &place);
                b.detail = Some(ep.problem_path.clone());
                bad.push(b);
                continue;
            }
        }
        let turn = &ep.turns[k];
        let Some(code) = turn.code.clone() else {
            bad.push(Bad::new("ingest", "episode_without_code", &place));
            continue;
        };
        let problem = sources
            .entry(ep.problem_path.clone())
            .or_insert_with(|| std::fs::read_to_string(&ep.problem_path).ok())
            .clone();
        let Some(problem) = problem else {
            bad.push(Bad::new("ingest", "episode_problem_unreadable", &place));
            continue;
        };
        let mut meta = Map::new();
        meta.insert("run".into(), Value::from(run));
        meta.insert("problem".into(), Value::from(ep.problem.clone()));
        meta.insert("turns_to_fix".into(), Value::from(k + 1));
        rows.push(Row {
            id: ep.id.clone(),
            origin: place,
            problem,
            answer: code,
            entry_point: "Model".into(),
            // The exact messages the policy saw (system, task, attempts, feedback) and
            // the reply that fixed it.
            history: turn.messages.clone(),
            final_reply: Some(turn.completion.text.clone()),
            meta,
            verified: true,
            ..Row::default()
        });
    }
    Ok((rows, bad))
}

/// The repair row of an unsolved episode, or why there is none (a reason, and the file).
fn repair_row(
    r: &Repairs,
    run: &str,
    ep: &Episode,
    place: &str,
) -> Result<Row, (&'static str, String)> {
    // A relative problem path is as `run` wrote it: relative to where it ran.
    let played = ep.problem_path.clone();
    let Ok(path) = Path::new(&played).canonicalize() else {
        return Err(("episode_problem_unreadable", played));
    };
    let Ok(problem) = std::fs::read_to_string(&path) else {
        return Err(("episode_problem_unreadable", played));
    };
    // The task the policy saw holds the problem's source as it was then; a file changed
    // since (a set generated again in place) would pair that task with another answer.
    let source = problem.trim();
    let task = ep.turns.first().map(|t| t.messages.as_slice()).unwrap_or_default();
    if !task.iter().any(|m| m.role == "user" && m.content.contains(source)) {
        return Err(("repair_problem_changed", played));
    }
    if r.heldout.contains(&path) {
        return Err(("repair_heldout", played));
    }
    if r.unsolved.contains(&path) {
        return Err(("repair_no_solution", played));
    }
    let Some(sol) = r.train.get(&path) else {
        return Err(("repair_not_in_set", played));
    };
    // The second turn's messages end with the evaluator's feedback on the first attempt.
    let Some(turn) = ep.turns.get(1) else {
        return Err(("repair_no_feedback", played));
    };
    let Ok(answer) = std::fs::read_to_string(sol) else {
        return Err(("repair_solution_unreadable", sol.display().to_string()));
    };
    let mut meta = Map::new();
    meta.insert("run".into(), Value::from(run));
    meta.insert("problem".into(), Value::from(ep.problem.clone()));
    meta.insert("repair".into(), Value::from(true));
    meta.insert("first_outcome".into(), Value::from(ep.turns[0].outcome.as_str()));
    Ok(Row {
        id: format!("{}#repair", ep.id),
        origin: place.to_string(),
        problem,
        final_reply: Some(fenced(&answer)),
        answer,
        entry_point: "Model".into(),
        history: turn.messages.clone(),
        meta,
        verified: true,
        ..Row::default()
    })
}

/// Messages of a conversation, checked: roles known, contents strings.
pub fn valid_history(h: &[ChatMessage]) -> bool {
    h.iter().all(|m| matches!(m.role.as_str(), "system" | "user" | "assistant"))
}

//! Prompts as template files (minijinja). The defaults are compiled in; a directory given
//! by the user replaces any of them by file name (`system.j2`, `task.j2`, `feedback.j2`,
//! `example_problem.py`, `example_solution.py`).

use std::path::{Path, PathBuf};

use minijinja::{context, Environment};
use serde_json::{json, Value};
use tritonforge_protocol::{EvalRecord, FindingSeverity, Status};

const DEFAULTS: [(&str, &str); 5] = [
    ("system.j2", include_str!("../templates/system.j2")),
    ("task.j2", include_str!("../templates/task.j2")),
    ("feedback.j2", include_str!("../templates/feedback.j2")),
    ("example_problem.py", include_str!("../templates/example_problem.py")),
    ("example_solution.py", include_str!("../templates/example_solution.py")),
];

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("template {name}: {reason}")]
    Render { name: String, reason: String },
}

/// The rendered-prompt factory.
pub struct Prompts {
    env: Environment<'static>,
    example_problem: String,
    example_solution: String,
}

/// What the task prompt says about the target.
#[derive(Debug, Clone)]
pub struct Target {
    /// E.g. `NVIDIA H100 80GB HBM3 (CUDA)` or `CPU (Triton interpreter)`.
    pub device: String,
    pub dtype: String,
    pub timing: bool,
}

impl Prompts {
    /// The compiled-in templates, with any file of `dir` replacing its namesake.
    pub fn load(dir: Option<&Path>) -> Result<Prompts, PromptError> {
        let mut env = Environment::new();
        env.set_keep_trailing_newline(true);
        let mut texts: Vec<(String, String)> = Vec::new();
        for (name, text) in DEFAULTS {
            let text = match dir.map(|d| d.join(name)).filter(|p| p.is_file()) {
                Some(p) => std::fs::read_to_string(&p)
                    .map_err(|e| PromptError::File { path: p.clone(), reason: e.to_string() })?,
                None => text.to_string(),
            };
            texts.push((name.to_string(), text));
        }
        if let Some(d) = dir {
            if !d.is_dir() {
                return Err(PromptError::File {
                    path: d.to_path_buf(),
                    reason: "not a directory".into(),
                });
            }
        }
        let mut example_problem = String::new();
        let mut example_solution = String::new();
        for (name, text) in texts {
            match name.as_str() {
                "example_problem.py" => example_problem = text,
                "example_solution.py" => example_solution = text,
                _ => env
                    .add_template_owned(name.clone(), text)
                    .map_err(|e| PromptError::Render { name, reason: e.to_string() })?,
            }
        }
        Ok(Prompts { env, example_problem, example_solution })
    }

    fn render(&self, name: &str, ctx: minijinja::Value) -> Result<String, PromptError> {
        self.env
            .get_template(name)
            .and_then(|t| t.render(ctx))
            .map(|s| s.trim_end().to_string())
            .map_err(|e| PromptError::Render { name: name.to_string(), reason: format!("{e:#}") })
    }

    pub fn system(&self) -> Result<String, PromptError> {
        self.render("system.j2", context! {})
    }

    pub fn task(
        &self,
        problem_name: &str,
        problem_source: &str,
        target: &Target,
    ) -> Result<String, PromptError> {
        self.render(
            "task.j2",
            context! {
                problem_name => problem_name,
                problem_source => problem_source.trim_end(),
                device => target.device,
                dtype => target.dtype,
                timing => target.timing,
                example_problem => self.example_problem.trim_end(),
                example_solution => self.example_solution.trim_end(),
            },
        )
    }

    /// The next user message after a turn: what happened and what to do next.
    pub fn feedback(
        &self,
        outcome: &Attempt<'_>,
        target_speedup: f64,
    ) -> Result<String, PromptError> {
        let ctx = match outcome {
            Attempt::NoCode(kind) => minijinja::Value::from_serialize(json!({"outcome": kind})),
            Attempt::Evaluated(r) => {
                minijinja::Value::from_serialize(feedback_context(r, target_speedup))
            }
        };
        self.render("feedback.j2", ctx)
    }
}

/// What a turn produced, for feedback.
pub enum Attempt<'a> {
    /// Extraction failed: `no_code` or `no_model_new`.
    NoCode(&'a str),
    Evaluated(&'a EvalRecord),
}

fn feedback_context(r: &EvalRecord, target: f64) -> Value {
    let status = serde_json::to_value(r.verdict.status).unwrap_or(Value::Null);
    let frames: Vec<Value> = r
        .verdict
        .error
        .as_ref()
        .map(|e| {
            e.frames
                .iter()
                .rev()
                .take(3)
                .rev()
                .map(|f| json!({"line": f.line, "function": f.function, "code": f.code}))
                .collect()
        })
        .unwrap_or_default();
    let findings: Vec<Value> = r
        .guard
        .iter()
        .filter(|f| f.severity == FindingSeverity::Reject)
        .map(|f| json!({"line": f.line, "rule": f.rule, "message": f.message}))
        .collect();
    let timing = r.verdict.timing.as_ref().filter(|_| r.verdict.status == Status::Correct);
    json!({
        "outcome": "evaluated",
        "status": status,
        "stage": r.verdict.stage.to_string(),
        "message": trim(&r.verdict.message, 1200),
        "error": r.verdict.error.as_ref().map(|e| json!({"exc_type": e.exc_type})),
        "frames": frames,
        "findings": findings,
        "mismatch": r.verdict.mismatch,
        "speedup": timing.map(|t| t.speedup),
        "ref_ms": timing.map(|t| t.reference.median_ms),
        "cand_ms": timing.map(|t| t.candidate.median_ms),
        "timing_note": r.verdict.timing_note,
        "target": target,
    })
}

fn trim(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let head: String = s.chars().take(max).collect();
        format!("{head} …")
    }
}

//! Turning a config into the parts of a run: the problems of each source, ready to
//! evaluate, the learner's set-up, and the checks that must pass before anything starts
//! (the policy's chat template).

use std::path::{Path, PathBuf};

use tritonforge_chat::{ChatError, ChatTemplate};
use tritonforge_eval::EvalSettings;
use tritonforge_protocol::{Compile, DeviceKind, LoraSetup, TrainSetup};
use tritonforge_pyenv::PythonEnv;
use tritonforge_suite::{Filter, Problem, Selection, Suite};

use crate::config::{GenerationCfg, RlConfig, SourceCfg};
use crate::env::Task;
use crate::run::source_name;
use crate::RlError;

/// The suite a source names: `builtin` is the suite the binary carries (`builtin_root`).
fn suite_root(s: &SourceCfg, builtin_root: &Path) -> PathBuf {
    if s.suite.as_os_str() == "builtin" {
        builtin_root.to_path_buf()
    } else {
        s.suite.clone()
    }
}

/// Every problem of `sources`, keyed `source/name`; a source that selects nothing, or a
/// problem that does not load, is an error naming it.
pub fn load_tasks(
    sources: &[SourceCfg],
    builtin_root: &Path,
    settings: &EvalSettings,
    device: DeviceKind,
) -> Result<Vec<Task>, RlError> {
    let mut tasks = Vec::new();
    for s in sources {
        let root = suite_root(s, builtin_root);
        let what = format!("data source {} (split {})", root.display(), s.split);
        let suite = Suite::load(&root).map_err(|e| RlError::Config(format!("{what}: {e}")))?;
        let selection = Selection {
            filter: Filter {
                level: s.level.map(u32::from),
                family: None,
                split: Some(s.split.clone()),
            },
            problems: Vec::new(),
            set: None,
            limit: None,
        };
        let entries =
            selection.select(&suite).map_err(|e| RlError::Config(format!("{what}: {e}")))?;
        let name = source_name(s);
        for e in entries {
            let problem = Problem::load_with(&e.problem_path, Some(&suite.manifest))
                .map_err(|err| RlError::Config(format!("{what}: {}: {err}", e.key)))?;
            let config = settings
                .config(&problem, device)
                .map_err(|err| RlError::Config(format!("{what}: {}: {err}", e.key)))?;
            tasks.push(Task { key: format!("{name}/{}", problem.name), problem, config });
        }
    }
    Ok(tasks)
}

/// The learner's set-up for `cfg`, training `model` (a path the worker loads).
pub fn train_setup(cfg: &RlConfig, model: &str) -> TrainSetup {
    let o = &cfg.optim;
    let m = &cfg.model;
    TrainSetup {
        model: model.to_string(),
        resume: None,
        lora: m.lora.as_ref().map(|l| LoraSetup {
            rank: l.rank,
            alpha: l.alpha,
            dropout: l.dropout,
            target_modules: l.target_modules.clone(),
        }),
        lr: o.lr,
        min_lr: o.min_lr.unwrap_or(o.lr),
        warmup_steps: o.warmup_steps,
        total_steps: cfg.schedule.steps * o.updates as u64,
        weight_decay: o.weight_decay,
        grad_clip: o.grad_clip,
        gradient_checkpointing: m.gradient_checkpointing,
        dtype: m.dtype,
        seed: o.seed,
        attention: m.attention,
        // Compiled layers only when asked for: an RL batch's micro-batches change shape at
        // every step, and each new shape recompiles. (The colocated engine decodes with its
        // own generation copy, so the trainer keeps its own attention kernel.)
        compile: if m.compile == Compile::Auto { Compile::Off } else { m.compile },
        // Rows hold one sequence each.
        one_per_row: true,
    }
}

/// The longest chain of adapters followed (as `python/tritonforge_worker/models.py`).
const MAX_CHAIN: usize = 16;

/// The local directory whose chat template the policy worker renders `model`'s prompts
/// with: the model directory, or for a LoRA adapter the base it names, followed through
/// chains of adapters as the worker follows them. `None`: the template is not in a
/// directory here (a `.gguf` file, the `smollm2` package, a hub name).
pub fn template_home(model: &str) -> Result<Option<PathBuf>, RlError> {
    let mut m = PathBuf::from(model);
    for _ in 0..=MAX_CHAIN {
        let cfg = m.join("adapter_config.json");
        if !cfg.is_file() {
            return Ok(m.is_dir().then_some(m));
        }
        let bad = |reason: String| RlError::Config(format!("{}: {reason}", cfg.display()));
        let text = std::fs::read_to_string(&cfg).map_err(|e| bad(e.to_string()))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let base = match v["base_model_name_or_path"].as_str() {
            Some(b) if !b.is_empty() => b,
            _ => return Err(bad("base_model_name_or_path names no base model".into())),
        };
        if base == "smollm2" {
            return Ok(None);
        }
        m = if Path::new(base).is_absolute() { PathBuf::from(base) } else { m.join(base) };
    }
    Err(RlError::Config(format!("{model}: a chain of more than {MAX_CHAIN} adapters")))
}

/// Where a colocated run's prompts get their chat template, checked before anything
/// starts: the policy worker renders every prompt with the template of `model` (the
/// config's `model.path`, resolved), and a model without one would fail every episode at its first
/// request, deep in the worker. Disaggregated runs render with `generation.tokenizer`,
/// checked when the engines are set up. A template outside a local directory (a `.gguf`
/// file) is seen through the tokenizer the worker exports to `output.dir/tokenizer`.
pub fn check_chat_template(cfg: &RlConfig, model: &str, py: &PythonEnv) -> Result<(), RlError> {
    if !matches!(cfg.generation, GenerationCfg::Colocated) {
        return Ok(());
    }
    let shown = &cfg.model.path;
    let name = if shown == model {
        format!("model.path {shown}")
    } else {
        format!("model.path {shown} ({model})")
    };
    let dir = match template_home(model)? {
        Some(dir) => dir,
        None => {
            let dir = cfg.output.dir.join("tokenizer");
            if !dir.join("tokenizer_config.json").is_file() {
                let exported = py
                    .export_tokenizer(model, &dir, true)
                    .map_err(|e| RlError::Config(format!("{name}: reading its tokenizer: {e}")))?;
                if !exported {
                    return Err(RlError::Config(format!(
                        "{name}: its tokenizer could not be read (the worker's error is above)"
                    )));
                }
            }
            dir
        }
    };
    require_chat_template(&name, &dir)
}

/// An error naming `name` unless `dir` holds a chat template. A template that does not
/// compile here passes: the worker renders with Python's Jinja, not this one.
fn require_chat_template(name: &str, dir: &Path) -> Result<(), RlError> {
    match ChatTemplate::from_dir(dir) {
        Ok(_) | Err(ChatError::Template(_)) => Ok(()),
        Err(ChatError::NoTemplate(d)) => Err(RlError::Config(format!(
            "{name}: the model has no chat template (looked in {} for chat_template.jinja, \
             chat_template.json and `chat_template` in tokenizer_config.json); `train rl` \
             renders every prompt with it: add one to the model's directory, or start from \
             a chat (instruct) model",
            d.display()
        ))),
        Err(e) => Err(RlError::Config(format!("{name}: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    /// An adapter's template is its base's (followed through a chain, relative bases
    /// resolved against the adapter); the `smollm2` package and `.gguf` files are not
    /// directories to look in.
    #[test]
    fn the_template_is_looked_for_where_the_worker_finds_it() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().join("base");
        let (a1, a2) = (d.path().join("a1"), d.path().join("a2"));
        for m in [&base, &a1, &a2] {
            std::fs::create_dir_all(m).unwrap();
        }
        write(&a1.join("adapter_config.json"), r#"{"base_model_name_or_path": "../base"}"#);
        let abs = format!(r#"{{"base_model_name_or_path": "{}"}}"#, a1.display());
        write(&a2.join("adapter_config.json"), &abs);
        let s = |p: &Path| p.display().to_string();
        assert_eq!(template_home(&s(&base)).unwrap(), Some(base.clone()));
        assert_eq!(template_home(&s(&a2)).unwrap(), Some(a1.join("../base")));
        assert_eq!(template_home(&s(&d.path().join("m.gguf"))).unwrap(), None);
        let bundled = d.path().join("bundled");
        std::fs::create_dir_all(&bundled).unwrap();
        write(&bundled.join("adapter_config.json"), r#"{"base_model_name_or_path": "smollm2"}"#);
        assert_eq!(template_home(&s(&bundled)).unwrap(), None);
        write(&a1.join("adapter_config.json"), "{}");
        let e = template_home(&s(&a2)).unwrap_err().to_string();
        assert!(e.contains("a1") && e.contains("base_model_name_or_path"), "{e}");
        // A loop is cut short.
        write(&a1.join("adapter_config.json"), r#"{"base_model_name_or_path": "../a1"}"#);
        assert!(template_home(&s(&a1)).unwrap_err().to_string().contains("chain"));
    }

    #[test]
    fn a_missing_template_is_named() {
        let d = tempfile::tempdir().unwrap();
        write(&d.path().join("tokenizer_config.json"), r#"{"eos_token": "</s>"}"#);
        let e = require_chat_template("model.path m", d.path()).unwrap_err().to_string();
        assert!(e.starts_with("model.path m: the model has no chat template"), "{e}");
        write(
            &d.path().join("chat_template.jinja"),
            "{% for m in messages %}{{ m.content }}{% endfor %}",
        );
        require_chat_template("model.path m", d.path()).unwrap();
    }
}

//! Turning a config into the parts of a run: the problems of each source, ready to
//! evaluate, and the learner's set-up.

use std::path::{Path, PathBuf};

use tritonforge_eval::EvalSettings;
use tritonforge_protocol::{DeviceKind, LoraSetup, TrainSetup};
use tritonforge_suite::{Filter, Problem, Selection, Suite};

use crate::config::{RlConfig, SourceCfg};
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
        compile: m.compile,
        // Rows hold one sequence each.
        one_per_row: true,
    }
}

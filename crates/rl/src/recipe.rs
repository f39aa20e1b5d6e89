//! A run's recipe: the parts of its config that decide what a step trains (model, training
//! data, rollout, reward, advantages, loss, optimizer, staleness) and the evaluator's
//! settings that decide what a candidate is paid, as opposed to how long
//! an invocation runs, how heldout is measured or where completions come from. Every
//! checkpoint records it, and a resume compares: a slice that silently trained with
//! another learning rate made run 17's figures describe neither (docs/rl.md).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::config::RlConfig;
use crate::RlError;

/// The recipe of `cfg` as JSON (what a checkpoint records): the whole config less what a
/// slice may change, and `evaluation` (the evaluator's settings, [`crate::Parts`]) under
/// that key unless null. A section added to the config later counts as recipe until it is
/// named here, so a new setting is compared rather than missed.
pub fn recipe(cfg: &RlConfig, evaluation: &Value) -> Result<Value, RlError> {
    let mut v = serde_json::to_value(cfg)
        .map_err(|e| RlError::Config(format!("the config cannot be recorded: {e}")))?;
    if let Value::Object(m) = &mut v {
        for free in ["generation", "learner", "output"] {
            m.remove(free);
        }
        if let Some(Value::Object(data)) = m.get_mut("data") {
            data.remove("heldout");
        }
        if let Some(Value::Object(loss)) = m.get_mut("loss") {
            loss.remove("measure_kl"); // an instrument: it changes no update
        }
        if let Some(Value::Object(schedule)) = m.get_mut("schedule") {
            schedule.retain(|k, _| k == "max_staleness");
        }
        if !evaluation.is_null() {
            m.insert(EVALUATION.into(), evaluation.clone());
        }
    }
    Ok(v)
}

/// The recipe's key for the evaluator's settings. Checkpoints written before it was
/// recorded lack it; a resume from one compares the rest.
pub const EVALUATION: &str = "evaluation";

/// What differs from `old` to `new`, one `path: old → new` per changed leaf (a list is
/// one leaf), in key order.
pub fn changes(old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk("", old, new, &mut out);
    out
}

fn walk(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                walk(&p, a.get(k).unwrap_or(&Value::Null), b.get(k).unwrap_or(&Value::Null), out);
            }
        }
        _ if old != new => out.push(format!("{path}: {} → {}", short(old), short(new))),
        _ => {}
    }
}

/// A value as it reads in a message, cut at 80 characters (a list of sources is long).
fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changes_name_each_changed_leaf_by_its_path() {
        let old = json!({"optim": {"lr": 0.0003, "updates": 2}, "loss": {"kl_coef": 0.0}});
        let new = json!({"optim": {"lr": 5e-5, "updates": 2}, "loss": {"kl_coef": 0.0, "x": 1}});
        assert_eq!(changes(&old, &new), ["loss.x: null → 1", "optim.lr: 0.0003 → 0.00005"]);
        assert!(changes(&old, &old).is_empty());
        let long = json!({"data": {"train": ["a".repeat(200)]}});
        let c = changes(&json!({"data": {"train": []}}), &long);
        assert_eq!(c.len(), 1);
        assert!(c[0].starts_with("data.train: [] → [\"aaa") && c[0].ends_with('…'), "{c:?}");
    }
}

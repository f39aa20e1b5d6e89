//! A run's recipe: the parts of its config that decide what a step trains (model, training
//! data, rollout, reward, advantages, loss, optimizer, staleness), as opposed to how long
//! an invocation runs, how heldout is measured or where completions come from. Every
//! checkpoint records it, and a resume compares: a slice that silently trained with
//! another learning rate made run 17's figures describe neither (docs/rl.md).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::config::RlConfig;
use crate::RlError;

/// The recipe of `cfg` as JSON (what a checkpoint records).
pub fn recipe(cfg: &RlConfig) -> Result<Value, RlError> {
    fn part(name: &str, v: serde_json::Result<Value>) -> Result<Value, RlError> {
        v.map_err(|e| RlError::Config(format!("the config's {name} cannot be recorded: {e}")))
    }
    let mut m = Map::new();
    m.insert("model".into(), part("model", serde_json::to_value(&cfg.model))?);
    let mut data = Map::new();
    data.insert("train".into(), part("data.train", serde_json::to_value(&cfg.data.train))?);
    data.insert(
        "curriculum".into(),
        part("data.curriculum", serde_json::to_value(&cfg.data.curriculum))?,
    );
    m.insert("data".into(), Value::Object(data));
    m.insert("rollout".into(), part("rollout", serde_json::to_value(&cfg.rollout))?);
    m.insert("reward".into(), part("reward", serde_json::to_value(&cfg.reward))?);
    m.insert("advantage".into(), part("advantage", serde_json::to_value(&cfg.advantage))?);
    let mut loss = part("loss", serde_json::to_value(&cfg.loss))?;
    if let Value::Object(l) = &mut loss {
        l.remove("measure_kl"); // an instrument: it changes no update
    }
    m.insert("loss".into(), loss);
    m.insert("optim".into(), part("optim", serde_json::to_value(&cfg.optim))?);
    let mut schedule = Map::new();
    schedule.insert("max_staleness".into(), Value::from(cfg.schedule.max_staleness));
    m.insert("schedule".into(), Value::Object(schedule));
    Ok(Value::Object(m))
}

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

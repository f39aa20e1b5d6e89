//! The suite as text: the `suite list` table and one problem's `suite show` page.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::SuiteEntry;

/// One row per problem, then counts by split.
pub fn list_table(rows: &[&SuiteEntry]) -> String {
    let w = rows.iter().map(|e| e.key.len()).max().unwrap_or(3).max(3);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<8} {:<w$} {:<14} {:<8} {:<24} solution",
        "id", "key", "family", "split", "variants"
    );
    let mut by_split: BTreeMap<&str, usize> = BTreeMap::new();
    for e in rows {
        let variants: Vec<&str> = e.meta.variants.keys().map(String::as_str).collect();
        let split = e.meta.split.as_deref().unwrap_or("?");
        *by_split.entry(split).or_default() += 1;
        let _ = writeln!(
            s,
            "{:<8} {:<w$} {:<14} {:<8} {:<24} {}",
            e.id(),
            e.key,
            e.meta.family.as_deref().unwrap_or("?"),
            split,
            variants.join(","),
            if e.solution_path.is_some() { "yes" } else { "-" }
        );
    }
    let counts: Vec<String> = by_split.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let _ = writeln!(s, "{} problems ({})", rows.len(), counts.join(", "));
    s
}

/// Metadata, variants, solution, then the problem's source.
pub fn show(e: &SuiteEntry) -> String {
    let mut s = String::new();
    let opt = |o: Option<&str>| o.unwrap_or("?").to_string();
    let level = e.meta.level.map(|l| l.to_string()).unwrap_or_default();
    let _ = writeln!(s, "id:       {}", e.id());
    let _ = writeln!(s, "key:      {}", e.key);
    let _ = writeln!(s, "level:    {level}");
    let _ = writeln!(s, "family:   {}", opt(e.meta.family.as_deref()));
    let _ = writeln!(s, "split:    {}", opt(e.meta.split.as_deref()));
    if let Some(d) = e.meta.difficulty {
        let _ = writeln!(s, "difficulty: {d}");
    }
    if let Some(t) = e.meta.tolerance() {
        let _ = writeln!(s, "tolerance: atol {} rtol {}", t.atol, t.rtol);
    }
    let _ = writeln!(s, "problem:  {}", e.problem_path.display());
    let solution = e.solution_path.as_ref().map(|p| p.display().to_string());
    let _ = writeln!(s, "solution: {}", solution.as_deref().unwrap_or("none"));
    for (name, o) in &e.meta.variants {
        let parts: Vec<String> = o.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(s, "variant:  {name}: {}", parts.join(" "));
    }
    let _ = writeln!(s, "---");
    s.push_str(&std::fs::read_to_string(&e.problem_path).unwrap_or_else(|e| format!("<{e}>\n")));
    s
}

/// One problem as a JSON object (`suite list --json` prints one per line).
pub fn json(e: &SuiteEntry) -> serde_json::Value {
    serde_json::json!({
        "id": e.id(), "key": e.key, "name": e.name(), "level": e.meta.level,
        "family": e.meta.family, "split": e.meta.split, "difficulty": e.meta.difficulty,
        "variants": e.meta.variants, "path": e.problem_path,
        "solution": e.solution_path,
    })
}

//! What a run of episodes amounts to: unbiased pass@k, fast_p, geometric-mean speedup,
//! outcome breakdown, per level and family, and turn-by-turn progress.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::episode::{Episode, TurnOutcome};

/// The `p` thresholds of fast_p.
pub const FAST_P: [f64; 6] = [0.0, 0.5, 0.8, 1.0, 1.5, 2.0];

/// Unbiased pass@k from `n` samples of which `c` passed: `1 - C(n-c, k) / C(n, k)`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    if n == 0 || k == 0 {
        return 0.0;
    }
    if n - c < k {
        return 1.0;
    }
    // Product form, stable for large n.
    let mut fail = 1.0;
    for i in (n - c + 1)..=n {
        fail *= 1.0 - k as f64 / i as f64;
    }
    1.0 - fail
}

/// Where an episode belongs in the per-group tables.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Labels {
    pub level: Option<u32>,
    pub family: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub problems: usize,
    pub episodes: usize,
    /// Mean over problems of pass@k, for each k ≤ samples.
    pub pass_at: BTreeMap<usize, f64>,
    /// Share of episodes correct with speedup > p (untimed correct episodes count only for p = 0).
    pub fast_p: BTreeMap<String, f64>,
    /// Geometric mean of the best speedup of each correct, timed episode.
    pub geomean_speedup: Option<f64>,
    /// Final outcome of each episode, counted.
    pub outcomes: BTreeMap<String, usize>,
    /// Share of the turns played whose code compiled and ran (ended runtime_error,
    /// timeout, incorrect or correct): what a model has learned before it is right.
    #[serde(default)]
    pub compile_rate: f64,
}

/// Whether a turn's code got past extraction, the guard and compilation.
pub fn compiled(t: &crate::Turn) -> bool {
    use tritonforge_protocol::Status;
    matches!(
        t.outcome,
        TurnOutcome::Evaluated(
            Status::RuntimeError | Status::Timeout | Status::Incorrect | Status::Correct
        )
    )
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStats {
    pub turn: u32,
    /// Episodes that played this turn.
    pub played: usize,
    /// Share of all episodes correct at or before this turn.
    pub solved_by: f64,
    pub mean_reward: f64,
    /// Outcomes of this turn, counted.
    pub outcomes: BTreeMap<String, usize>,
}

/// One problem's episodes, for the per-problem table and the speedup plot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProblemRow {
    pub problem: String,
    pub level: Option<u32>,
    pub family: Option<String>,
    pub episodes: usize,
    pub solved: usize,
    /// Best speedup of any correct, timed turn.
    pub best_speedup: Option<f64>,
    /// Each episode's final outcome, in sample order.
    pub outcomes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub overall: Group,
    #[serde(default)]
    pub problems: Vec<ProblemRow>,
    pub by_level: BTreeMap<String, Group>,
    pub by_family: BTreeMap<String, Group>,
    pub turns: Vec<TurnStats>,
    pub errors: Vec<String>,
}

/// An episode's final outcome; `error` when the backend never answered.
fn outcome_of(e: &Episode) -> String {
    if e.turns.is_empty() && e.error.is_some() {
        "error".to_string()
    } else {
        e.final_outcome().to_string()
    }
}

fn group(eps: &[(&Episode, &Labels)]) -> Group {
    let mut per_problem: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let mut logs = Vec::new();
    for (e, _) in eps {
        let slot = per_problem.entry(e.problem.as_str()).or_default();
        slot.0 += 1;
        slot.1 += usize::from(e.solved());
        *outcomes.entry(outcome_of(e)).or_default() += 1;
        if let Some(s) = e.best_speedup().filter(|s| *s > 0.0 && s.is_finite()) {
            logs.push(s.ln());
        }
    }
    let turns: Vec<_> = eps.iter().flat_map(|(e, _)| e.turns.iter()).collect();
    let compile_rate =
        turns.iter().filter(|t| compiled(t)).count() as f64 / turns.len().max(1) as f64;
    let max_n = per_problem.values().map(|(n, _)| *n).min().unwrap_or(0);
    let mut pass_at = BTreeMap::new();
    for k in [1usize, 2, 5, 10, 20, 50, 100] {
        if k > max_n {
            break;
        }
        let v: f64 = per_problem.values().map(|(n, c)| pass_at_k(*n, *c, k)).sum::<f64>()
            / per_problem.len() as f64;
        pass_at.insert(k, v);
    }
    let mut fast_p = BTreeMap::new();
    for p in FAST_P {
        let hits = eps
            .iter()
            .filter(|(e, _)| {
                e.solved()
                    && match e.best_speedup() {
                        Some(s) => s > p,
                        None => p == 0.0,
                    }
            })
            .count();
        fast_p.insert(format!("{p}"), hits as f64 / eps.len().max(1) as f64);
    }
    Group {
        problems: per_problem.len(),
        episodes: eps.len(),
        pass_at,
        fast_p,
        geomean_speedup: (!logs.is_empty())
            .then(|| (logs.iter().sum::<f64>() / logs.len() as f64).exp()),
        outcomes,
        compile_rate,
    }
}

pub fn summarize(episodes: &[(Episode, Labels)]) -> Summary {
    let all: Vec<(&Episode, &Labels)> = episodes.iter().map(|(e, l)| (e, l)).collect();
    let mut by_level: BTreeMap<String, Vec<(&Episode, &Labels)>> = BTreeMap::new();
    let mut by_family: BTreeMap<String, Vec<(&Episode, &Labels)>> = BTreeMap::new();
    for (e, l) in &all {
        let lv = l.level.map(|x| format!("level{x}")).unwrap_or("?".into());
        by_level.entry(lv).or_default().push((e, l));
        let fam = l.family.clone().unwrap_or("?".into());
        by_family.entry(fam).or_default().push((e, l));
    }
    let max_turns = all.iter().map(|(e, _)| e.turns.len()).max().unwrap_or(0);
    let mut turns = Vec::new();
    for t in 0..max_turns {
        let played: Vec<_> = all.iter().filter_map(|(e, _)| e.turns.get(t)).collect();
        let solved = all
            .iter()
            .filter(|(e, _)| e.turns.iter().take(t + 1).any(|x| x.outcome.is_correct()))
            .count();
        let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
        for x in &played {
            *outcomes.entry(x.outcome.to_string()).or_default() += 1;
        }
        turns.push(TurnStats {
            turn: t as u32,
            played: played.len(),
            solved_by: solved as f64 / all.len().max(1) as f64,
            mean_reward: played.iter().map(|x| x.reward).sum::<f64>() / played.len().max(1) as f64,
            outcomes,
        });
    }
    let mut problems: BTreeMap<&str, ProblemRow> = BTreeMap::new();
    for (e, l) in &all {
        let row = problems.entry(e.problem.as_str()).or_insert_with(|| ProblemRow {
            problem: e.problem.clone(),
            level: l.level,
            family: l.family.clone(),
            episodes: 0,
            solved: 0,
            best_speedup: None,
            outcomes: Vec::new(),
        });
        row.episodes += 1;
        row.solved += usize::from(e.solved());
        row.outcomes.push(outcome_of(e));
        if let Some(s) = e.best_speedup() {
            row.best_speedup = Some(row.best_speedup.map_or(s, |b| b.max(s)));
        }
    }
    Summary {
        overall: group(&all),
        problems: problems.into_values().collect(),
        by_level: by_level.iter().map(|(k, v)| (k.clone(), group(v))).collect(),
        by_family: by_family.iter().map(|(k, v)| (k.clone(), group(v))).collect(),
        turns,
        errors: all
            .iter()
            .filter_map(|(e, _)| e.error.as_ref().map(|m| format!("{}: {m}", e.id)))
            .collect(),
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn group_row(name: &str, g: &Group) -> String {
    format!(
        "| {name} | {} | {} | {} | {} | {} | {} |",
        g.problems,
        g.episodes,
        g.pass_at.get(&1).map(|x| pct(*x)).unwrap_or("-".into()),
        g.fast_p.get("0").map(|x| pct(*x)).unwrap_or("-".into()),
        g.fast_p.get("1").map(|x| pct(*x)).unwrap_or("-".into()),
        g.geomean_speedup.map(|x| format!("{x:.2}x")).unwrap_or("-".into()),
    )
}

/// The report as Markdown.
pub fn markdown(title: &str, header: &[(String, String)], s: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {title}\n");
    for (k, v) in header {
        let _ = writeln!(out, "- **{k}**: {v}");
    }
    let _ = writeln!(out, "\n## Overall\n");
    let g = &s.overall;
    let _ = writeln!(out, "| metric | value |\n| --- | ---: |");
    let _ = writeln!(out, "| problems | {} |\n| episodes | {} |", g.problems, g.episodes);
    for (k, v) in &g.pass_at {
        let _ = writeln!(out, "| pass@{k} | {} |", pct(*v));
    }
    let _ = writeln!(out, "| compile rate (turns) | {} |", pct(g.compile_rate));
    for (p, v) in &g.fast_p {
        let _ = writeln!(out, "| fast_{p} | {} |", pct(*v));
    }
    let _ = writeln!(
        out,
        "| geometric-mean speedup (correct, timed) | {} |",
        g.geomean_speedup.map(|x| format!("{x:.3}x")).unwrap_or("- (untimed)".into())
    );
    let _ = writeln!(out, "\n## Final outcomes\n\n| outcome | episodes |\n| --- | ---: |");
    for (k, v) in &g.outcomes {
        let _ = writeln!(out, "| {k} | {v} |");
    }
    for (title, groups) in [("level", &s.by_level), ("family", &s.by_family)] {
        let _ = writeln!(
            out,
            "\n## By {title}\n\n| {title} | problems | episodes | pass@1 | fast_0 | fast_1 | geomean speedup |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for (k, g) in groups {
            let _ = writeln!(out, "{}", group_row(k, g));
        }
    }
    let _ = writeln!(
        out,
        "\n## Turn by turn\n\n| turn | played | solved by this turn | mean reward | outcomes |\n| ---: | ---: | ---: | ---: | --- |"
    );
    for t in &s.turns {
        let oc: Vec<String> = t.outcomes.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.3} | {} |",
            t.turn + 1,
            t.played,
            pct(t.solved_by),
            t.mean_reward,
            oc.join(", ")
        );
    }
    if !s.errors.is_empty() {
        let _ = writeln!(out, "\n## Errors\n");
        for e in &s.errors {
            let _ = writeln!(out, "- {e}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_at_k_is_the_unbiased_estimator() {
        assert_eq!(pass_at_k(5, 0, 1), 0.0);
        assert!((pass_at_k(5, 1, 1) - 0.2).abs() < 1e-12);
        // 1 - C(3,2)/C(5,2) = 1 - 3/10
        assert!((pass_at_k(5, 2, 2) - 0.7).abs() < 1e-12);
        assert_eq!(pass_at_k(5, 4, 2), 1.0);
        assert_eq!(pass_at_k(0, 0, 1), 0.0);
    }
}

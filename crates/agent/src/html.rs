//! The run report as one self-contained HTML file: inline CSS and inline SVG plots (styled
//! by attributes, so a plot copied out renders the same), no script and no external
//! resource, so it opens offline and can be attached anywhere.

use std::fmt::Write as _;

use crate::metrics::{Group, Summary, FAST_P};

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// An axis maximum for counts: a multiple of 4, so the four grid steps are whole numbers.
fn count_axis(most: f64) -> f64 {
    ((most / 4.0).ceil() * 4.0).max(4.0)
}

/// A vertical bar chart: one bar per (label, value), values in `0..=max`.
fn bars(title: &str, data: &[(String, f64)], max: f64, fmt: &dyn Fn(f64) -> String) -> String {
    let (w, h, left, bottom, top) = (420.0, 230.0, 52.0, 40.0, 40.0);
    let plot_h = h - bottom - top;
    let n = data.len().max(1) as f64;
    let slot = (w - left - 10.0) / n;
    let max = if max > 0.0 { max } else { 1.0 };
    let mut svg = format!(
        "<svg viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"{t}\">\
         <text x=\"{x}\" y=\"16\" font-size=\"12\" font-weight=\"600\" text-anchor=\"middle\">{t}</text>",
        t = escape(title),
        x = w / 2.0
    );
    for i in 0..=4 {
        let v = max * f64::from(i) / 4.0;
        let y = top + plot_h - plot_h * f64::from(i) / 4.0;
        let _ = write!(
            svg,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{}\" y=\"{:.1}\" font-size=\"10\" fill=\"#444\" text-anchor=\"end\">{}</text>",
            w - 10.0,
            left - 4.0,
            y + 4.0,
            escape(&fmt(v))
        );
    }
    for (i, (label, v)) in data.iter().enumerate() {
        let bh = (v / max).clamp(0.0, 1.0) * plot_h;
        let x = left + slot * i as f64 + slot * 0.15;
        let bw = slot * 0.7;
        let y = top + plot_h - bh;
        let _ = write!(
            svg,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bw:.1}\" height=\"{bh:.1}\" fill=\"#3b6ea8\">\
             <title>{l}: {v}</title></rect>\
             <text x=\"{cx:.1}\" y=\"{ly:.1}\" font-size=\"10\" fill=\"#444\" text-anchor=\"middle\">{v}</text>\
             <text x=\"{cx:.1}\" y=\"{by:.1}\" font-size=\"10\" fill=\"#444\" text-anchor=\"middle\">{l}</text>",
            l = escape(label),
            v = escape(&fmt(*v)),
            cx = x + bw / 2.0,
            ly = (y - 4.0).max(top - 2.0),
            by = h - bottom + 16.0,
        );
    }
    svg.push_str("</svg>");
    svg
}

fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = String::from("<table><thead><tr>");
    for h in head {
        let _ = write!(t, "<th>{}</th>", escape(h));
    }
    t.push_str("</tr></thead><tbody>");
    for r in rows {
        t.push_str("<tr>");
        for c in r {
            let _ = write!(t, "<td>{}</td>", escape(c));
        }
        t.push_str("</tr>");
    }
    t.push_str("</tbody></table>");
    t
}

fn group_rows<'a>(groups: impl Iterator<Item = (&'a String, &'a Group)>) -> Vec<Vec<String>> {
    groups
        .map(|(k, g)| {
            vec![
                k.clone(),
                g.problems.to_string(),
                g.episodes.to_string(),
                g.pass_at.get(&1).map(|x| pct(*x)).unwrap_or("-".into()),
                g.fast_p.get("1").map(|x| pct(*x)).unwrap_or("-".into()),
                g.geomean_speedup.map(|x| format!("{x:.2}x")).unwrap_or("-".into()),
            ]
        })
        .collect()
}

/// The whole report. `header` is the same (key, value) list the Markdown report opens with.
pub fn html(title: &str, header: &[(String, String)], s: &Summary) -> String {
    let g = &s.overall;
    let mut body = String::new();
    let _ = write!(body, "<h1>{}</h1><dl>", escape(title));
    for (k, v) in header {
        let _ = write!(body, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(v));
    }
    body.push_str("</dl><h2>Overall</h2>");
    let mut overall = vec![
        vec!["problems".to_string(), g.problems.to_string()],
        vec!["episodes".to_string(), g.episodes.to_string()],
    ];
    for (k, v) in &g.pass_at {
        overall.push(vec![format!("pass@{k}"), pct(*v)]);
    }
    overall.push(vec!["compile rate (turns)".into(), pct(g.compile_rate)]);
    overall.push(vec![
        "geometric-mean speedup (correct, timed)".into(),
        g.geomean_speedup.map(|x| format!("{x:.3}x")).unwrap_or("- (untimed)".into()),
    ]);
    body.push_str(&table(&["metric", "value"], &overall));

    body.push_str("<div class=\"plots\">");
    let fast: Vec<(String, f64)> = FAST_P
        .iter()
        .map(|p| {
            let key = format!("{p}");
            (format!("p={key}"), g.fast_p.get(&key).copied().unwrap_or(0.0))
        })
        .collect();
    body.push_str(&bars("fast_p: correct and faster than p x", &fast, 1.0, &|v| pct(v)));
    let outcomes: Vec<(String, f64)> =
        g.outcomes.iter().map(|(k, v)| (k.clone(), *v as f64)).collect();
    let most = outcomes.iter().map(|(_, v)| *v).fold(0.0, f64::max);
    body.push_str(&bars("final outcomes (episodes)", &outcomes, count_axis(most), &|v| {
        format!("{v:.0}")
    }));
    let solved: Vec<(String, f64)> =
        s.turns.iter().map(|t| (format!("turn {}", t.turn + 1), t.solved_by)).collect();
    body.push_str(&bars("solved by each turn (share of episodes)", &solved, 1.0, &|v| pct(v)));
    let reward: Vec<(String, f64)> =
        s.turns.iter().map(|t| (format!("turn {}", t.turn + 1), t.mean_reward)).collect();
    let top = reward.iter().map(|(_, v)| v.abs()).fold(1.0, f64::max);
    body.push_str(&bars("mean reward per turn (negatives at 0)", &reward, top, &|v| {
        format!("{v:.2}")
    }));
    // Speedups of correct timed episodes, in power-of-two bins.
    let speedups: Vec<f64> = s
        .problems
        .iter()
        .filter_map(|p| p.best_speedup)
        .filter(|x| *x > 0.0 && x.is_finite())
        .collect();
    if !speedups.is_empty() {
        let edges = [0.0, 0.25, 0.5, 1.0, 2.0, 4.0, f64::INFINITY];
        let hist: Vec<(String, f64)> = edges
            .windows(2)
            .map(|w| {
                let label =
                    if w[1].is_infinite() { format!(">{}x", w[0]) } else { format!("<{}x", w[1]) };
                let n = speedups.iter().filter(|x| **x >= w[0] && **x < w[1]).count();
                (label, n as f64)
            })
            .collect();
        let most = hist.iter().map(|(_, v)| *v).fold(0.0, f64::max);
        body.push_str(&bars(
            "best speedup per problem (correct, timed)",
            &hist,
            count_axis(most),
            &|v| format!("{v:.0}"),
        ));
    }
    body.push_str("</div>");

    let head = ["group", "problems", "episodes", "pass@1", "fast_1", "geomean speedup"];
    body.push_str("<h2>By level</h2>");
    body.push_str(&table(&head, &group_rows(s.by_level.iter())));
    body.push_str("<h2>By family</h2>");
    body.push_str(&table(&head, &group_rows(s.by_family.iter())));
    body.push_str("<h2>Turn by turn</h2>");
    let turns: Vec<Vec<String>> = s
        .turns
        .iter()
        .map(|t| {
            let oc: Vec<String> = t.outcomes.iter().map(|(k, v)| format!("{k} {v}")).collect();
            vec![
                (t.turn + 1).to_string(),
                t.played.to_string(),
                pct(t.solved_by),
                format!("{:.3}", t.mean_reward),
                oc.join(", "),
            ]
        })
        .collect();
    body.push_str(&table(
        &["turn", "played", "solved by this turn", "mean reward", "outcomes"],
        &turns,
    ));
    body.push_str("<h2>Problems</h2>");
    let problems: Vec<Vec<String>> = s
        .problems
        .iter()
        .map(|p| {
            vec![
                p.problem.clone(),
                p.level.map(|l| l.to_string()).unwrap_or("-".into()),
                p.family.clone().unwrap_or("-".into()),
                format!("{}/{}", p.solved, p.episodes),
                p.best_speedup.map(|x| format!("{x:.2}x")).unwrap_or("-".into()),
                p.outcomes.join(", "),
            ]
        })
        .collect();
    body.push_str(&table(
        &["problem", "level", "family", "solved", "best speedup", "final outcomes"],
        &problems,
    ));
    if !s.errors.is_empty() {
        body.push_str("<h2>Errors</h2><ul>");
        for e in &s.errors {
            let _ = write!(body, "<li>{}</li>", escape(e));
        }
        body.push_str("</ul>");
    }
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{t}</title><style>{STYLE}</style></head><body>{body}</body></html>\n",
        t = escape(title)
    )
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:70em;color:#222}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}\
td:first-child,th:first-child{text-align:left}dl{display:grid;grid-template-columns:max-content auto;gap:.1em 1em}\
dt{font-weight:600}dd{margin:0}.plots{display:flex;flex-wrap:wrap;gap:1em}";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episode::{Episode, Turn};
    use crate::metrics::{summarize, Labels};

    fn turn(outcome: &str, speedup: Option<f64>, reward: f64) -> Turn {
        Turn { outcome: outcome.parse().unwrap(), speedup, reward, ..Turn::default() }
    }

    #[test]
    fn the_report_is_self_contained_and_carries_the_numbers() {
        let ep = |p: &str, turns: Vec<Turn>| {
            (
                Episode {
                    id: format!("r/{p}/0"),
                    run: "r".into(),
                    problem: p.into(),
                    turns,
                    ..Episode::default()
                },
                Labels { level: Some(1), family: Some("<activation>".into()) },
            )
        };
        let eps = vec![
            ep("relu", vec![turn("incorrect", None, 0.3), turn("correct", Some(1.5), 0.88)]),
            ep("gelu", vec![turn("compile_error", None, 0.0)]),
        ];
        let s = summarize(&eps);
        let html = html("run <x>", &[("policy".into(), "m & co".into())], &s);
        assert!(html.starts_with("<!DOCTYPE html>"));
        for fetch in ["src=", "href=", "<link", "<script", "url(", "http"] {
            assert!(!html.contains(fetch), "{fetch}: nothing fetched from elsewhere");
        }
        assert!(html.contains("run &lt;x&gt;") && html.contains("m &amp; co"));
        assert!(html.contains("&lt;activation&gt;"), "family names are escaped");
        assert_eq!(html.matches("<svg").count(), 5, "fast_p, outcomes, two turn plots, speedups");
        assert!(html.contains("<td>pass@1</td><td>50.0%</td>"), "{html}");
        // Two of three turns compiled (incorrect, correct; not the compile error).
        assert!((s.overall.compile_rate - 2.0 / 3.0).abs() < 1e-12);
        assert!(html.contains("<td>compile rate (turns)</td><td>66.7%</td>"), "{html}");
        assert!(html.contains(
            "<td>relu</td><td>1</td><td>&lt;activation&gt;</td><td>1/1</td><td>1.50x</td>"
        ));
        assert!(html.contains("<title>p=1: 50.0%</title>"), "fast_1 bar");
    }
}

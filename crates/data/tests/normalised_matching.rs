//! Decontamination and dedup on normalised code, through the whole pipeline, on the real
//! suite (`bench/`): a heldout problem reworded and renamed is still dropped, a renamed
//! copy of a kernel is still merged, and siblings of one family are all kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;
use tritonforge_data::{build, Bad, Config};

fn bench() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(bench().join(rel)).unwrap()
}

/// Renames whole identifiers (not parts of longer names), as someone rewording code would.
fn rename(src: &str, pairs: &[(&str, &str)]) -> String {
    let mut out = src.to_string();
    for (from, to) in pairs {
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        let mut next = String::new();
        let mut rest = out.as_str();
        while let Some(at) = rest.find(from) {
            let before = rest[..at].chars().next_back().or(next.chars().next_back());
            let after = rest[at + from.len()..].chars().next();
            next.push_str(&rest[..at]);
            // A keyword argument (`mask=...`) names the callee's parameter: not renamed.
            let keyword = rest[at + from.len()..].starts_with('=')
                && !rest[at + from.len()..].starts_with("==");
            if before.is_some_and(ident) || after.is_some_and(ident) || keyword {
                next.push_str(from);
            } else {
                next.push_str(to);
            }
            rest = &rest[at + from.len()..];
        }
        next.push_str(rest);
        out = next;
    }
    out
}

/// One KernelBook-shaped row: (uuid, python_code, triton_code, entry_point, stars).
type Spec = (String, String, String, String, u32);

/// Runs the pipeline (no tokenizer, so no length filter) over `rows`; returns the ids
/// kept and the dropped rows by id.
fn run(rows: &[Spec]) -> (Vec<String>, BTreeMap<String, Bad>) {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<String> = rows
        .iter()
        .map(|(id, py, tr, entry, stars)| {
            json!({"uuid": id, "python_code": py, "triton_code": tr, "entry_point": entry,
                   "stars": stars})
            .to_string()
        })
        .collect();
    std::fs::write(dir.path().join("rows.jsonl"), lines.join("\n")).unwrap();
    let toml = format!(
        "[[input]]\nkind = \"kernelbook\"\npath = \"rows.jsonl\"\n\n[output]\ndir = \"out\"\nvalidation = 0.0\nformats = [\"jsonl\"]\n\n[decontaminate]\nsuite = {:?}\n",
        bench()
    );
    std::fs::write(dir.path().join("data.toml"), toml).unwrap();
    let cfg = Config::load(&dir.path().join("data.toml")).unwrap();
    let (report, bad) = build(&cfg, &|_| {}, None).unwrap();
    let written = std::fs::read_to_string(dir.path().join("out/train.jsonl")).unwrap();
    let kept: Vec<String> = written
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].as_str().unwrap().into()
        })
        .collect();
    assert_eq!(kept.len(), report.train);
    let dropped = bad.into_iter().map(|b| (b.id.clone().unwrap_or_default(), b)).collect();
    (kept, dropped)
}

/// A suite pair as a KernelBook row, under the class name `entry`, its docstrings
/// reworded and a comment added (what a scraped copy looks like).
fn suite_row(key: &str, entry: &str, stars: u32) -> Spec {
    let problem = read(&format!("{key}.py"));
    let answer = read(&format!("solutions/{key}.py"));
    let problem = reword(&rename(&problem, &[("Model", entry)]));
    let answer = rename(&answer, &[("ModelNew", &format!("{entry}New"))]);
    (format!("row-{entry}"), problem, answer, entry.to_string(), stars)
}

/// Each docstring's text replaced, and a comment on the forward pass.
fn reword(src: &str) -> String {
    let parts: Vec<&str> = src.split("\"\"\"").collect();
    let mut out = String::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push_str("\"\"\"");
        }
        out.push_str(if i % 2 == 1 { "Squash." } else { p });
    }
    out.replace("    def forward", "    # the whole computation\n    def forward")
}

#[test]
fn a_reworded_renamed_heldout_problem_is_dropped() {
    // The heldout `sigmoid`: class, variables and module constants renamed, docstring
    // reworded, comments added; once more with other sizes; once more with its functions
    // in another order (not the same code: a near match).
    let renames = [
        ("Model", "Squasher"),
        ("ModelNew", "SquasherNew"),
        ("x", "inp"),
        ("y", "out"),
        ("BATCH", "N_ROWS"),
        ("DIM", "WIDTH"),
        ("sigmoid_kernel", "squash_fwd"),
    ];
    let problem = reword(&rename(&read("level1/sigmoid.py"), &renames));
    assert!(problem.contains("\"\"\"Squash.\"\"\"") && problem.contains("class Squasher("));
    let answer = rename(&read("solutions/level1/sigmoid.py"), &renames);
    let resized = problem.replace("N_ROWS = 128", "N_ROWS = 256");
    assert_ne!(resized, problem);
    // Its two input functions swapped: another order of the same code.
    let inputs = problem.find("def get_inputs").unwrap();
    let init = problem.find("def get_init_inputs").unwrap();
    let reordered = format!(
        "{}{}\n\n{}",
        &problem[..inputs],
        problem[init..].trim_end(),
        problem[inputs..init].trim_end()
    );
    assert_ne!(reordered, problem);
    // Each on its own next to train-split siblings (together, dedup would merge them
    // before decontamination sees them).
    let cases = [
        ("leak", problem.as_str(), "heldout_normalised_match"),
        ("leak-resized", resized.as_str(), "heldout_normalised_match"),
        ("leak-reordered", reordered.as_str(), "heldout_lookalike"),
    ];
    for (id, p, reason) in cases {
        let mut rows = vec![(id.to_string(), p.to_string(), answer.clone(), "Squasher".into(), 5)];
        for (key, entry) in
            [("level1/relu", "Rect"), ("level1/tanh", "Tan"), ("level1/gelu", "Gel")]
        {
            rows.push(suite_row(key, entry, 1));
        }
        let (kept, dropped) = run(&rows);
        let b = dropped.get(id).unwrap_or_else(|| panic!("{id} kept: {dropped:#?}"));
        assert_eq!((b.stage.as_str(), b.reason.as_str()), ("decontaminate", reason), "{id}");
        assert_eq!(b.instead.as_deref(), Some("suite:level1/sigmoid"));
        assert_eq!(kept.len(), 3, "the siblings stay: {kept:?} {dropped:#?}");
    }
}

#[test]
fn a_renamed_duplicate_kernel_is_merged() {
    let original = suite_row("level1/relu", "Rectifier", 50);
    // The same pair scraped from elsewhere: other class, kernel and variable names,
    // other comments, another docstring.
    let renames = [
        ("Rectifier", "ClampLow"),
        ("RectifierNew", "ClampLowNew"),
        ("relu_kernel", "_fwd"),
        ("x_ptr", "src"),
        ("y_ptr", "dst"),
        ("offsets", "idx"),
        ("mask", "in_bounds"),
        ("n_elements", "numel"),
        ("pid", "block_id"),
    ];
    let copy = |id: &str, answer: &str| {
        (
            id.to_string(),
            rename(&original.1, &renames).replace("Squash.", "Zero below zero."),
            format!("# ported from a blog post\n{}", rename(answer, &renames)),
            "ClampLow".to_string(),
            0,
        )
    };
    let renamed = copy("renamed", &original.2);
    // Mask keyword arguments keep their name: `mask=in_bounds` is still `mask=`.
    assert!(renamed.2.contains("mask=in_bounds") && !renamed.2.contains("relu_kernel"));
    // The same, with its block size changed too: no longer exact, still near.
    let retuned = copy("retuned", &original.2.replace("BLOCK = 1024", "BLOCK = 512"));
    assert_ne!(retuned.2, renamed.2);
    let mut rows = vec![original, renamed, retuned];
    for (key, entry) in [
        ("level1/leaky_relu", "Leaky"),
        ("level1/tanh", "Tan"),
        ("level1/gelu", "Gel"),
        ("level1/silu", "Swish"),
        ("level1/softplus", "SoftP"),
    ] {
        rows.push(suite_row(key, entry, 1));
    }
    let (kept, dropped) = run(&rows);
    let why = |id: &str| (dropped[id].stage.clone(), dropped[id].reason.clone());
    assert_eq!(why("renamed"), ("dedup_exact".into(), "exact_duplicate".into()));
    assert_eq!(why("retuned"), ("dedup_near".into(), "near_duplicate".into()));
    for id in ["renamed", "retuned"] {
        assert_eq!(dropped[id].instead.as_deref(), Some("row-Rectifier"), "the starred row stays");
    }
    assert_eq!(kept.len(), 6, "{kept:?}");
}

#[test]
fn distinct_problems_of_one_family_are_kept() {
    // Activations and reductions of the suite's train split, each next to siblings (and
    // heldout siblings such as `relu6`, `sigmoid`) that differ in an operation or a dim.
    let mut rows: Vec<Spec> = [
        ("level1/relu", "A"),
        ("level1/leaky_relu", "B"),
        ("level1/tanh", "C"),
        ("level1/gelu", "D"),
        ("level1/silu", "E"),
        ("level1/softplus", "F1"),
        ("level1/hardsigmoid", "G"),
        ("level1/sum_rows", "H"),
        ("level1/sum_middle_dim", "I"),
        ("level1/mean_rows", "J"),
        ("level1/mean_first_dim", "K"),
    ]
    .iter()
    .map(|(key, entry)| suite_row(key, entry, 1))
    .collect();
    // One module summing over dim 1, one over dim 0 with other constants, and the same
    // kernel for both: only the problem tells them apart.
    let answer = rename(&read("solutions/level1/sum_rows.py"), &[("ModelNew", "SumDimNew")]);
    for (dim, scale) in [(1, "2.0"), (0, "0.5")] {
        let problem = format!(
            "import torch\nimport torch.nn as nn\n\n\nclass SumDim(nn.Module):\n    \"\"\"Sum.\"\"\"\n\n    def forward(self, x):\n        return torch.sum(x * {scale}, dim={dim})\n\n\ndef get_inputs():\n    return [torch.rand([64, 64])]\n\n\ndef get_init_inputs():\n    return [[], {{}}]\n"
        );
        rows.push((format!("sum-dim{dim}"), problem, answer.clone(), "SumDim".into(), 1));
    }
    let n = rows.len();
    let (kept, dropped) = run(&rows);
    assert!(dropped.is_empty(), "{dropped:#?}");
    assert_eq!(kept.len(), n);
}

//! `tritonforge bench` against the real suite and a deliberately broken one,
//! with the real worker in CPU mode.

use serde_json::Value;

mod common;
use common::*;

/// Named to sort first: libtest starts a binary's tests in name order, and this one takes
/// most of the binary's time, so it starts at once rather than after the short ones.
/// Two correctness trials per reference solution rather than `eval`'s five (the re-call
/// check after them draws fresh inputs of its own, so every solution still meets three
/// input draws): the trials are about half the time a solution takes under the interpreter.
#[test]
fn a_full_validation_of_the_bundled_suite_passes_in_cpu_mode() {
    let state = tempfile::tempdir().unwrap();
    let out = run(tf(state.path()).args(["bench", "validate", "--json", "--trials", "2"]));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", text(&out.stderr));
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["findings"].as_array().unwrap().len(), 0, "{v}");
    // Every problem of every level (3 included) was checked at `small`, and every reference
    // solution evaluated (levels 1 and 2 have one per problem; level 3 has a subset, judged
    // under its mixed-kernel policy).
    let manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(repo().join("bench/manifest.toml")).unwrap())
            .unwrap();
    let problems = manifest["problems"].as_table().unwrap();
    let level3 = problems.keys().filter(|k| k.starts_with("level3/")).count();
    assert!(level3 >= 50, "{level3} level-3 problems");
    assert_eq!(v["problems_checked"].as_u64().unwrap(), problems.len() as u64, "{v}");
    let solutions = |level: &str| {
        std::fs::read_dir(repo().join("bench/solutions").join(level))
            .map(|d| {
                d.filter(|e| {
                    e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "py"))
                })
                .count()
            })
            .unwrap_or(0)
    };
    assert!(solutions("level3") >= 20, "{} level-3 solutions", solutions("level3"));
    let all: usize = ["level1", "level2", "level3", "level4"].iter().map(|l| solutions(l)).sum();
    assert_eq!(v["solutions_checked"].as_u64().unwrap(), all as u64, "{v}");
}

#[test]
fn list_filters_and_show_finds_by_id() {
    let state = tempfile::tempdir().unwrap();
    let out = run(tf(state.path()).args(["bench", "list", "--level", "1", "--json"]));
    assert_eq!(out.status.code(), Some(0));
    let rows: Vec<Value> =
        text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r["level"] == 1));
    let id = rows[0]["id"].as_str().unwrap().to_string();
    let out = run(tf(state.path()).args(["bench", "show", &id]));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout.contains("class Model"), "{stdout}");
    assert!(stdout.contains("variant:  small"), "{stdout}");
    let out = run(tf(state.path()).args(["bench", "show", "no-such-problem"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no-such-problem"));
}

const HEADER: &str = "import torch\nimport torch.nn as nn\n\nN = 64\n\n";
const FOOTER: &str =
    "\n\ndef get_inputs():\n    return [torch.randn(N)]\n\n\ndef get_init_inputs():\n    return []\n";

fn problem(body: &str) -> String {
    format!("{HEADER}{body}{FOOTER}")
}

/// Write `text` at `rel` under `root`, making its folders.
fn write_file(root: &std::path::Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn validate_reports_every_broken_problem_and_solution() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let write = |rel: &str, text: &str| write_file(r, rel, text);
    let mut manifest = String::new();
    let cases: &[(&str, String)] = &[
        (
            "good",
            problem("class Model(nn.Module):\n    def forward(self, x):\n        return x * 3.0\n"),
        ),
        (
            "zeros",
            problem("class Model(nn.Module):\n    def forward(self, x):\n        return x * 0.0\n"),
        ),
        (
            "tiny",
            problem("class Model(nn.Module):\n    def forward(self, x):\n        return 1.0 + x * 1e-7\n"),
        ),
        (
            "random",
            problem("import random\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x * random.random()\n"),
        ),
        (
            "ignores_input",
            problem("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.w = nn.Parameter(torch.randn(N))\n\n    def forward(self, x):\n        return self.w * 2.0\n"),
        ),
        (
            "nan",
            problem("class Model(nn.Module):\n    def forward(self, x):\n        return torch.log(x)\n"),
        ),
        (
            "broken",
            "import torch\nN = 64\nclass Model(:\n".to_string(),
        ),
    ];
    for (name, src) in cases {
        write(&format!("level1/{name}.py"), src);
        manifest.push_str(&format!(
            "[problems.\"level1/{name}\"]\nid = \"T-{name}\"\nlevel = 1\nfamily = \"elementwise\"\nsplit = \"train\"\nvariants.small = {{ N = 32 }}\nvariants.heldout = {{ N = 37 }}\n\n"
        ));
    }
    write("manifest.toml", &manifest);
    // A wrong solution for `good` (x * 2 instead of x * 3); the others have none.
    write(
        "solutions/level1/good.py",
        "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\
         @triton.jit\ndef k(x_ptr, y_ptr, n, B: tl.constexpr):\n    o = tl.program_id(0) * B + tl.arange(0, B)\n    \
         m = o < n\n    tl.store(y_ptr + o, tl.load(x_ptr + o, mask=m) * 2.0, mask=m)\n\n\n\
         class ModelNew(nn.Module):\n    def forward(self, x):\n        y = torch.empty_like(x)\n        \
         k[(1,)](x, y, x.numel(), B=64)\n        return y\n",
    );
    let state = r.join("state");
    let out = run(tf(&state).args(["bench", "validate", "--json", "--suite"]).arg(r));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{}", text(&out.stderr));
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    let findings: Vec<String> =
        v["findings"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()).collect();
    let all = findings.join("\n");
    // Each check is reported on stderr as it ends, JSON mode included.
    let progress = text(&out.stderr);
    assert!(progress.contains("] problem  level1/zeros [small]: FAILED"), "{progress}");
    let expect = [
        ("level1/zeros [small]", "degenerate"),
        ("level1/tiny [small]", "degenerate"),
        ("level1/random [small]", "not deterministic"),
        ("level1/ignores_input [small]", "does not depend on the inputs"),
        ("level1/nan [small]", "NaN or Inf"),
        ("level1/broken [small]", "does not import"),
        ("level1/good [small]", "reference solution is incorrect"),
        ("level1/zeros", "no reference solution"),
    ];
    for (who, what) in expect {
        assert!(
            findings.iter().any(|f| f.starts_with(who) && f.contains(what)),
            "missing {who}: {what} in\n{all}"
        );
    }
    // The sound problem itself has no finding other than its wrong solution.
    assert!(
        findings.iter().filter(|f| f.starts_with("level1/good")).all(|f| f.contains("solution")),
        "{all}"
    );
}

/// A reference solution that runs out of its budget (as a slow one does on busy cores) is
/// tried once more with three times the budget before it is a failure (and noted as slow),
/// and one that never ends fails after both tries, saying so.
#[test]
fn a_reference_solution_out_of_time_is_tried_again_with_more() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let write = |rel: &str, text: &str| write_file(r, rel, text);
    let mut manifest = String::new();
    // A correct Triton solution that first sleeps: past a 5 s budget, well inside 15 s
    // (`slow`), or past both (`stuck`).
    for (name, sleep) in [("slow", 6), ("stuck", 120)] {
        write(
            &format!("level1/{name}.py"),
            &problem(
                "class Model(nn.Module):\n    def forward(self, x):\n        return x * 3.0\n",
            ),
        );
        manifest.push_str(&format!(
            "[problems.\"level1/{name}\"]\nid = \"T-{name}\"\nlevel = 1\nfamily = \"elementwise\"\nsplit = \"train\"\nvariants.small = {{ N = 32 }}\nvariants.heldout = {{ N = 37 }}\n\n"
        ));
        write(
            &format!("solutions/level1/{name}.py"),
            &format!(
                "import time\n\nimport torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\
                 @triton.jit\ndef k(x_ptr, y_ptr, n, B: tl.constexpr):\n    o = tl.program_id(0) * B + tl.arange(0, B)\n    \
                 m = o < n\n    tl.store(y_ptr + o, tl.load(x_ptr + o, mask=m) * 3.0, mask=m)\n\n\n\
                 class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        time.sleep({sleep})\n\n    \
                 def forward(self, x):\n        y = torch.empty_like(x)\n        \
                 k[(1,)](x, y, x.numel(), B=64)\n        return y\n"
            ),
        );
    }
    write("manifest.toml", &manifest);
    let state = r.join("state");
    let out =
        run(tf(&state).args(["bench", "validate", "--json", "--budget", "5", "--suite"]).arg(r));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{}", text(&out.stderr));
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    let findings: Vec<&str> =
        v["findings"].as_array().unwrap().iter().filter_map(|f| f.as_str()).collect();
    assert!(!findings.iter().any(|f| f.starts_with("level1/slow")), "{findings:?}");
    // Passing only on the second try is noted: candidates get the first budget.
    assert!(
        v["slow"].as_array().unwrap().iter().any(|s| s.as_str().is_some_and(|s| s
            .starts_with("level1/slow [small]")
            && s.contains("passed only with 3 times"))),
        "{v}"
    );
    assert!(
        findings.iter().any(|f| f.starts_with("level1/stuck [small]")
            && f.contains("timeout")
            && f.contains("its second try: the first, with a budget of 5.0s, timed out too")),
        "{findings:?}"
    );
    let out = run(tf(&state).args(["bench", "validate", "--budget", "0.0001", "--suite"]).arg(r));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--budget"), "{}", text(&out.stderr));
}

/// A stored timeout is not reused: whether a candidate finished in its budget depends on
/// the machine's load then. The same pair evaluated again with the same settings runs again
/// (a candidate that sleeps until a set time, past its budget the first time only: far
/// enough ahead that the first evaluation reaches it on cores busy with other tests).
#[test]
fn a_stored_timeout_is_evaluated_again() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let until =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
            + 40.0;
    write_file(
        r,
        "p/late.py",
        &problem("class Model(nn.Module):\n    def forward(self, x):\n        return x * 3.0\n"),
    );
    write_file(
        r,
        "c/late.py",
        &format!(
            "import time\n\nimport torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\
             @triton.jit\ndef k(x_ptr, y_ptr, n, B: tl.constexpr):\n    o = tl.program_id(0) * B + tl.arange(0, B)\n    \
             m = o < n\n    tl.store(y_ptr + o, tl.load(x_ptr + o, mask=m) * 3.0, mask=m)\n\n\n\
             class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        \
             time.sleep(max(0.0, {until} - time.time()))\n\n    \
             def forward(self, x):\n        y = torch.empty_like(x)\n        \
             k[(1,)](x, y, x.numel(), B=64)\n        return y\n"
        ),
    );
    let state = r.join("state");
    let eval = || {
        let out = run(tf(&state)
            .args(["eval", "--json", "--budget", "4", "--problems"])
            .arg(r.join("p"))
            .arg("--candidates")
            .arg(r.join("c")));
        let recs = json_lines(&out.stdout);
        assert_eq!(recs.len(), 1, "{}", text(&out.stderr));
        recs[0]["status"].as_str().unwrap_or_default().to_string()
    };
    assert_eq!(eval(), "timeout");
    while std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
        < until + 0.5
    {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(eval(), "correct");
}

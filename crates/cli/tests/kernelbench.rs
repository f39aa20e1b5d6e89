//! `scripts/kernelbench_check.py` on the CPU against a tiny stand-in checkout this test
//! writes (KernelBench's layout and file style, its own small shapes: no KernelBench file),
//! to show the plumbing: files copied under one name, the real binary's batch, the table
//! and the exit code.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::*;

/// A problem in KernelBench's style: module-level sizes, `torch.rand` inputs.
fn kb_problem(op: &str, dim: usize) -> String {
    format!(
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n        super(Model, self).__init__()\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        return {op}(x)\n\nbatch_size = 4\ndim = {dim}\n\ndef get_inputs():\n    x = torch.rand(batch_size, dim)\n    return [x]\n\ndef get_init_inputs():\n    return []\n"
    )
}

fn checkout(root: &Path) -> PathBuf {
    let kb = root.join("KB");
    let level1 = kb.join("KernelBench/level1");
    std::fs::create_dir_all(&level1).unwrap();
    std::fs::write(level1.join("19_ReLU.py"), kb_problem("torch.relu", 1000)).unwrap();
    std::fs::write(level1.join("21_Sigmoid.py"), kb_problem("torch.sigmoid", 1000)).unwrap();
    std::fs::write(level1.join("22_Tanh.py"), kb_problem("torch.tanh", 100_000)).unwrap();
    kb
}

fn mapping(root: &Path, name: &str, pairs: &[(&str, &str)]) -> PathBuf {
    let mut text = String::from("[pairs]\n");
    for (kb, ours) in pairs {
        text.push_str(&format!("\"{kb}\" = \"bench/solutions/level1/{ours}.py\"\n"));
    }
    let path = root.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn check(root: &Path, kb: &Path, map: &Path, capacity: Option<&str>) -> Output {
    let python = venv().join("bin/python");
    let mut cmd = Command::new(&python);
    cmd.current_dir(repo())
        .arg(repo().join("scripts/kernelbench_check.py"))
        .arg(kb)
        .arg(map)
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_tritonforge"))
        .arg("--python")
        .arg(&python)
        .arg("--state-dir")
        .arg(root.join("state"))
        .arg("--out")
        .arg(root.join("out"))
        .env_remove("TRITONFORGE_DEVICE_MEMORY_BYTES")
        .stdin(Stdio::null());
    if let Some(c) = capacity {
        cmd.env("TRITONFORGE_DEVICE_MEMORY_BYTES", c);
    }
    cmd.output().expect("run the script")
}

fn row<'a>(table: &'a str, problem: &str) -> &'a str {
    table.lines().find(|l| l.starts_with(problem)).unwrap_or_else(|| panic!("{problem}: {table}"))
}

#[test]
fn the_kernelbench_check_runs_the_pairs_and_fails_unless_all_are_correct() {
    let dir = tempfile::tempdir().unwrap();
    let kb = checkout(dir.path());

    let good = mapping(
        dir.path(),
        "good.toml",
        &[("level1/19_ReLU.py", "relu"), ("level1/21_Sigmoid.py", "sigmoid")],
    );
    let out = check(dir.path(), &kb, &good, None);
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}\n{}", text(&out.stderr));
    assert!(row(&table, "level1/19_ReLU.py").contains("correct"), "{table}");
    assert!(row(&table, "level1/21_Sigmoid.py").contains("correct"), "{table}");
    // Copied as they are, under one name on both sides.
    let copied =
        std::fs::read_to_string(dir.path().join("out/problems/level1_19_ReLU.py")).unwrap();
    assert_eq!(copied, kb_problem("torch.relu", 1000));
    assert!(dir.path().join("out/candidates/level1_19_ReLU.py").is_file());

    // A wrong pairing is not correct; a problem too big for the (stand-in) device is a
    // problem error naming its sizes; either makes the check fail.
    let bad = mapping(
        dir.path(),
        "bad.toml",
        &[
            ("level1/19_ReLU.py", "relu"),
            ("level1/21_Sigmoid.py", "relu"),
            ("level1/22_Tanh.py", "tanh"),
        ],
    );
    let out = check(dir.path(), &kb, &bad, Some("1MiB"));
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{table}\n{}", text(&out.stderr));
    assert!(row(&table, "level1/19_ReLU.py").contains(" correct "), "{table}");
    assert!(row(&table, "level1/21_Sigmoid.py").contains("incorrect"), "{table}");
    let tanh = row(&table, "level1/22_Tanh.py");
    assert!(tanh.contains("problem_error") && tanh.contains("needs"), "{table}");

    // A KernelBench file that is not in the checkout is named, and nothing runs for it.
    let missing = mapping(dir.path(), "missing.toml", &[("level1/23_Softmax.py", "softmax")]);
    let out = check(dir.path(), &kb, &missing, None);
    assert_eq!(out.status.code(), Some(2));
    assert!(row(&text(&out.stdout), "level1/23_Softmax.py").contains("missing"));
}

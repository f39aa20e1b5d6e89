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

/// A level-2 problem in KernelBench's style: a linear layer (bias or a separate bias
/// parameter drawn after it), then an elementwise tail, constructor arguments as its
/// module-level constants.
fn kb_gemm_problem(init: &str, args: &str, tail: &str, values: &str) -> String {
    format!(
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self, {args}):\n        super(Model, self).__init__()\n{init}\n\n    def forward(self, x):\n        x = self.gemm(x)\n{tail}\n        return x\n\nbatch_size = 9\nin_features = 100\nout_features = 70\n{values}\n\ndef get_inputs():\n    return [torch.rand(batch_size, in_features)]\n\ndef get_init_inputs():\n    return [in_features, out_features, {}]\n",
        values.lines().map(|l| l.split(" = ").next().unwrap_or("")).collect::<Vec<_>>().join(", ")
    )
}

#[test]
fn the_level2_answers_take_kernelbench_signatures_and_only_picks_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let kb = checkout(dir.path());
    let level2 = kb.join("KernelBench/level2");
    std::fs::create_dir_all(&level2).unwrap();
    std::fs::write(
        level2.join("76_Gemm_Add_ReLU.py"),
        kb_gemm_problem(
            "        self.gemm = nn.Linear(in_features, out_features, bias=False)\n        self.bias = nn.Parameter(torch.randn(bias_shape))",
            "in_features, out_features, bias_shape",
            "        x = torch.relu(x + self.bias)",
            "bias_shape = (out_features,)",
        ),
    )
    .unwrap();
    std::fs::write(
        level2.join("12_Gemm_Multiply_LeakyReLU.py"),
        kb_gemm_problem(
            "        self.gemm = nn.Linear(in_features, out_features)\n        self.multiplier = multiplier\n        self.leaky_relu = nn.LeakyReLU(negative_slope)",
            "in_features, out_features, multiplier, negative_slope",
            "        x = self.leaky_relu(x * self.multiplier)",
            "multiplier = 2.0\nnegative_slope = 0.1",
        ),
    )
    .unwrap();
    let ours = |name: &str| format!("scripts/kernelbench/level2/{name}.py");
    let map = dir.path().join("level2.toml");
    std::fs::write(
        &map,
        format!(
            "[pairs]\n\"level1/19_ReLU.py\" = \"bench/solutions/level1/relu.py\"\n\"level2/76_Gemm_Add_ReLU.py\" = \"{}\"\n\"level2/12_Gemm_Multiply_LeakyReLU.py\" = \"{}\"\n",
            ours("gemm_add_relu"),
            ours("gemm_multiply_leaky_relu")
        ),
    )
    .unwrap();
    let only = |map: &Path| {
        let mut cmd = Command::new(venv().join("bin/python"));
        cmd.current_dir(repo())
            .arg(repo().join("scripts/kernelbench_check.py"))
            .arg(&kb)
            .arg(map)
            .args(["--only", "level2/", "--binary", env!("CARGO_BIN_EXE_tritonforge")])
            .arg("--python")
            .arg(venv().join("bin/python"))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--out")
            .arg(dir.path().join("out2"))
            .env_remove("TRITONFORGE_DEVICE_MEMORY_BYTES")
            .stdin(Stdio::null());
        cmd.output().expect("run the script")
    };
    let out = only(&map);
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}\n{}", text(&out.stderr));
    assert!(row(&table, "level2/76_Gemm_Add_ReLU.py").contains(" correct "), "{table}");
    assert!(row(&table, "level2/12_Gemm_Multiply_LeakyReLU.py").contains(" correct "), "{table}");
    assert!(!table.contains("level1/19_ReLU.py"), "--only level2/ ran a level-1 pair: {table}");

    // Control: the answers swapped do not take each other's signature.
    std::fs::write(
        &map,
        format!(
            "[pairs]\n\"level2/76_Gemm_Add_ReLU.py\" = \"{}\"\n\"level2/12_Gemm_Multiply_LeakyReLU.py\" = \"{}\"\n",
            ours("gemm_multiply_leaky_relu"),
            ours("gemm_add_relu")
        ),
    )
    .unwrap();
    let out = only(&map);
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{table}\n{}", text(&out.stderr));
    assert!(!row(&table, "level2/76_Gemm_Add_ReLU.py").contains(" correct "), "{table}");
    assert!(!row(&table, "level2/12_Gemm_Multiply_LeakyReLU.py").contains(" correct "), "{table}");

    // --only that matches nothing is bad input.
    std::fs::write(&map, "[pairs]\n\"level1/19_ReLU.py\" = \"bench/solutions/level1/relu.py\"\n")
        .unwrap();
    assert_eq!(only(&map).status.code(), Some(2));
}

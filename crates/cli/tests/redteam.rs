//! The red-team corpus (`tests/redteam/`): every hostile candidate must end anything
//! but `correct`, and no honest one may be rejected. Each file names its problem
//! (`# problem: level1/relu`); hostile files the guard cannot see say how the run
//! must catch them (`# runtime: ...`); `# gpu-only:` files are only guard-checked here.
//! `# static-only:` files do honest work wherever they run at all (the static rules object to
//! their means); every other hostile file must also fail with every static rule off, and
//! with no guard at all (`--no-guard`) the runtime layers alone must keep at least 95% of the
//! whole corpus from `correct` while passing every honest file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

mod common;
use common::*;

struct Entry {
    path: PathBuf,
    name: String,
    problem: String,
    /// `# runtime: ...`: what the run must make of it (`rejected`, `incorrect`, ...).
    runtime: Option<String>,
    /// `# static-only: why`: its run is honest work (where it runs); only the static rules object.
    static_only: bool,
    gpu_only: bool,
}

fn corpus(kind: &str) -> Vec<Entry> {
    let dir = repo().join("tests/redteam").join(kind);
    let mut out: Vec<Entry> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let header = |key: &str| {
                text.lines().find_map(|l| l.strip_prefix(&format!("# {key}: ")).map(str::to_owned))
            };
            let label = if kind == "hostile" { "cheat" } else { "honest" };
            assert!(header(label).is_some(), "{} has no `# {label}:` line", path.display());
            Entry {
                name: path.file_stem().unwrap().to_string_lossy().into_owned(),
                problem: header("problem")
                    .unwrap_or_else(|| panic!("{} names no problem", path.display())),
                runtime: header("runtime"),
                static_only: header("static-only").is_some(),
                gpu_only: header("gpu-only").is_some(),
                path,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// `tritonforge guard --json` over files: file name → (rejected, rules).
fn guard(state: &Path, files: &[PathBuf]) -> BTreeMap<String, (bool, Vec<String>)> {
    let out = run(tf(state).args(["guard", "--json"]).args(files));
    text(&out.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let name = Path::new(v["file"].as_str().unwrap())
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let rules = v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["severity"] == "reject")
                .map(|f| f["rule"].as_str().unwrap().to_string())
                .collect();
            (name, (v["rejected"] == true, rules))
        })
        .collect()
}

#[test]
fn the_corpus_is_big_enough_and_labelled() {
    let hostile = corpus("hostile");
    let honest = corpus("honest");
    assert!(hostile.len() >= 40, "{} hostile", hostile.len());
    assert!(honest.len() >= 40, "{} honest", honest.len());
    for e in hostile.iter().chain(&honest) {
        assert!(
            repo().join("bench").join(format!("{}.py", e.problem)).is_file(),
            "{}: no problem {}",
            e.name,
            e.problem
        );
    }
}

#[test]
fn the_guard_rejects_every_static_cheat_and_no_honest_kernel() {
    let state = tempfile::tempdir().unwrap();
    let hostile = corpus("hostile");
    let verdicts = guard(state.path(), &hostile.iter().map(|e| e.path.clone()).collect::<Vec<_>>());
    for e in &hostile {
        let (rejected, rules) = &verdicts[&e.name];
        if e.runtime.is_some() {
            // Left to the run: the guard must not be the reason it passes or fails.
            continue;
        }
        assert!(rejected, "hostile {} passed the guard", e.name);
        assert!(!rules.is_empty(), "{}", e.name);
    }
    // Honest files of levels that allow mixed kernels are checked under that level's policy.
    let (mixed, honest): (Vec<Entry>, Vec<Entry>) =
        corpus("honest").into_iter().partition(|e| e.problem.starts_with("level3/"));
    let honest: Vec<PathBuf> = honest.into_iter().map(|e| e.path).collect();
    let mixed: Vec<PathBuf> = mixed.into_iter().map(|e| e.path).collect();
    assert!(!mixed.is_empty(), "no honest level-3 file");
    let mut solutions: Vec<PathBuf> = ["level1", "level2"]
        .iter()
        .flat_map(|l| std::fs::read_dir(repo().join("bench/solutions").join(l)).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    solutions.sort();
    assert!(solutions.len() >= 200);
    for (name, (rejected, rules)) in guard(state.path(), &[honest, solutions].concat()) {
        assert!(!rejected, "honest {name} rejected by {rules:?}");
    }
    // Level 3's solutions may keep parts in PyTorch: checked under that level's policy,
    // where calling PyTorch only warns; strict, the mixed ones are rejected.
    let level3: Vec<PathBuf> = std::fs::read_dir(repo().join("bench/solutions/level3"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(level3.len() >= 20, "{} level-3 solutions", level3.len());
    let level3 = [level3, mixed].concat();
    let out = run(tf(state.path()).args(["guard", "--json", "--level", "3"]).args(&level3));
    for l in text(&out.stdout).lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["rejected"], false, "level-3 solution rejected: {v}");
    }
    let mixed = repo().join("bench/solutions/level3/convnext_block.py");
    assert!(
        guard(state.path(), std::slice::from_ref(&mixed))["convnext_block"].0,
        "strict rules passed a mixed file"
    );
    let out = run(tf(state.path()).args(["guard", "--json", "--level", "3"]).arg(&mixed));
    assert!(text(&out.stdout).contains("torch-compute-in-forward"), "the warning is kept");
}

/// A batch directory: the named problem copied under each candidate's name, with a
/// manifest carrying the original's tolerances and shape variants.
fn batch(root: &Path, entries: &[&Entry]) -> (PathBuf, PathBuf) {
    let manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(repo().join("bench/manifest.toml")).unwrap())
            .unwrap();
    let problems = manifest["problems"].as_table().unwrap();
    let probs = root.join("bench/level");
    let cands = root.join("cands");
    std::fs::create_dir_all(&probs).unwrap();
    std::fs::create_dir_all(&cands).unwrap();
    let mut out = toml::Table::new();
    for e in entries {
        std::fs::copy(
            repo().join("bench").join(format!("{}.py", e.problem)),
            probs.join(format!("{}.py", e.name)),
        )
        .unwrap();
        std::fs::copy(&e.path, cands.join(format!("{}.py", e.name))).unwrap();
        let mut meta = problems[&e.problem].as_table().unwrap().clone();
        meta.remove("id");
        out.insert(format!("level/{}", e.name), toml::Value::Table(meta));
    }
    let mut doc = toml::Table::new();
    doc.insert("problems".into(), toml::Value::Table(out));
    std::fs::write(root.join("bench/manifest.toml"), toml::to_string(&doc).unwrap()).unwrap();
    (probs, cands)
}

/// Every file of the corpus that runs on the CPU through `tritonforge eval` with `args`
/// (guard options): candidate name → record.
fn evaluate(
    hostile: &[Entry],
    honest: &[Entry],
    args: &[&std::ffi::OsStr],
) -> BTreeMap<String, Value> {
    let root = tempfile::tempdir().unwrap();
    let runnable: Vec<&Entry> =
        hostile.iter().chain(honest.iter()).filter(|e| !e.gpu_only).collect();
    let (probs, cands) = batch(root.path(), &runnable);
    let out = run(tf(&root.path().join("state"))
        .args(["eval", "--json", "--jobs", "2", "--budget", "60"])
        .args(args)
        .arg("--problems")
        .arg(&probs)
        .arg("--candidates")
        .arg(&cands));
    let records: BTreeMap<String, Value> = text(&out.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["problem"]["name"].as_str().unwrap().to_string(), v)
        })
        .collect();
    assert_eq!(records.len(), runnable.len(), "{}", text(&out.stderr));
    records
}

#[test]
fn every_hostile_candidate_fails_and_every_honest_one_is_correct() {
    let hostile = corpus("hostile");
    let honest = corpus("honest");
    let records = evaluate(&hostile, &honest, &[]);
    for e in &hostile {
        let r = &records[&e.name];
        assert_ne!(r["status"], "correct", "hostile {} was judged correct: {r}", e.name);
        if let Some(expect) = &e.runtime {
            // These reach the executor; the run (not the static pass) catches them.
            let static_rejects = r["guard"]
                .as_array()
                .is_some_and(|fs| fs.iter().any(|f| f["severity"] == "reject"));
            assert!(!static_rejects, "{}: the static pass rejected it: {r}", e.name);
            let word = expect.split_whitespace().next().unwrap_or_default();
            if ["rejected", "incorrect", "runtime_error"].contains(&word) {
                assert_eq!(r["status"], word, "{}: {r}", e.name);
            }
        } else {
            assert_eq!(r["status"], "rejected", "{}: {r}", e.name);
        }
    }
    for e in honest.iter().filter(|e| !e.gpu_only) {
        let r = &records[&e.name];
        assert_eq!(r["status"], "correct", "honest {}: {r}", e.name);
    }
}

/// With every static rule off, the runtime layers alone (dispatch recorder on every thread,
/// foreign modes, audit hooks, host reads, re-calls, threads, function identities, late
/// writes, provenance) still keep every hostile candidate that runs on the CPU from a
/// `correct` verdict, and pass every honest one.
#[test]
fn the_run_alone_catches_every_cheat_that_runs_on_the_cpu() {
    let hostile = corpus("hostile");
    let honest = corpus("honest");
    let rules = repo().join("tests/redteam/runtime-only.toml");
    let records = evaluate(&hostile, &honest, &["--guard-rules".as_ref(), rules.as_os_str()]);
    let mut by_runtime_guard = 0;
    for e in &hostile {
        let r = &records[&e.name];
        assert!(
            r["guard"].as_array().is_some_and(|f| f.is_empty()),
            "{}: static findings with every rule off: {r}",
            e.name
        );
        if e.static_only {
            continue;
        }
        assert_ne!(r["status"], "correct", "hostile {} passed the run: {r}", e.name);
        if r["message"].as_str().is_some_and(|m| m.contains("[runtime-")) {
            by_runtime_guard += 1;
        }
        if r["status"] == "rejected" {
            // The runtime layers decide at stage `provenance`; `guard` is the static pass's.
            assert_eq!(r["stage"], "provenance", "{}: {r}", e.name);
        }
    }
    assert!(by_runtime_guard >= 30, "only {by_runtime_guard} caught by the runtime layers");
    for e in honest.iter().filter(|e| !e.gpu_only) {
        let r = &records[&e.name];
        assert_eq!(r["status"], "correct", "honest {}: {r}", e.name);
    }
}

/// Hostile files whose PyTorch compute (or host read) reaches the dispatch recorder by a
/// route no static pass sees; each must be rejected at stage `provenance` naming the
/// operator and the candidate's line that dispatched it.
const ATEN_ROUTES: &[&str] = &[
    "torch_relu_in_forward",           // PyTorch behind a launched kernel
    "decoy_launch_then_inplace_torch", // an in-place clamp on the kernel's copy
    "getattr_built_name_after_launch", // getattr(torch, "r" + "elu")
    "sys_modules_torch",               // sys.modules["to" + "rch"]
    "exec_string_in_forward",          // exec of a built string
    "tensor_operators",                // (x + abs(x)) * 0.5
    "operator_module",                 // operator.mul
    "reduce_matmul",                   // functools.reduce(operator.matmul, ...)
    "thread_joined_in_forward",        // a thread started and joined in forward
    "worker_thread_queue",             // a thread started in __init__, fed by a queue
    "reference_via_gc",                // the reference Model found with gc
    "numpy_array_protocol",            // NumPy on the host (np.asarray)
    "tolist_round_trip",               // Python lists on the host
    "torch_inside_kernel_body",        // PyTorch in a kernel body the interpreter runs
    "numpy_on_host",                   // .cpu().numpy() and NumPy
    "fp16_compute",                    // a PyTorch add after a half-precision kernel
    // Launching none of their kernels as well (the message says both):
    "functional_relu",               // torch.nn.functional
    "tensor_method_clamp",           // a tensor method
    "matmul_operator",               // the @ operator
    "nn_module_in_init",             // an nn.ReLU held by ModelNew
    "getattr_built_name",            // getattr with a built name
    "dunder_import",                 // __import__ of a built name
    "eval_builtin",                  // eval of a string
    "builtins_escape",               // eval reached through __builtins__
    "exec_built_code",               // forward built from a string at import
    "importlib_load",                // a module loaded at run time
    "sys_modules_reference",         // the reference module from sys.modules
    "decoy_kernel_never_launched",   // a kernel defined, never launched
    "decoy_launched_from_dead_code", // the launch in dead code
];

/// Hostile files caught by the other runtime layers, with the tag their message carries.
const OTHER_ROUTES: &[(&str, &str)] = &[
    ("dispatch_mode", "[runtime-mode]"),
    ("dispatch_mode_left_from_init", "[runtime-mode]"),
    ("function_mode_swaps_result", "[runtime-mode]"),
    ("os_system", "[runtime-audit]"),
    ("subprocess_call", "[runtime-audit]"),
    ("opens_file", "[runtime-audit]"),
    ("inspect_frames", "[runtime-audit]"),
    ("getframe", "[runtime-audit]"),
    ("gc_objects", "[runtime-audit]"),
    ("problem_file_exec", "[runtime-audit]"),
    ("counter_with_token_launch", "[runtime-recall]"),
];

/// Level-3 cheats the mixed-kernel policy must catch (PyTorch compute is allowed there, so
/// no operator is refused): the tag their message carries, with or without the guard.
const MIXED_ROUTES: &[(&str, &str)] = &[
    ("lazy_relu_only_level3", "[runtime-share-model]"), // ReLUs in Triton, the GEMMs in PyTorch
    ("decoy_copy_around_pytorch_level3", "[runtime-share-model]"), // a copy kernel, then all of it in PyTorch
    ("decoy_output_scale_level3", "[runtime-share-model]"), // PyTorch, then the output scale in Triton
    ("loosens_reference_precision", "[runtime-patched]"),   // TF32 for the reference too
    ("slows_the_reference", "[runtime-patched]"),           // the reference's attention slowed
    ("shadows_module_attribute", "[runtime-patched]"),      // the same, by a module subclass
];

/// With no guard at all the runtime layers are still on (they belong to the evaluator):
/// at least 95% of every hostile file that can run on the CPU (static-only ones included)
/// ends anything but `correct`, every honest file (views, reshapes, allocation, scratch
/// buffers, `torch.no_grad`...) stays `correct`, and each route to PyTorch in the corpus is
/// named by the recorder with its operator and source line.
#[test]
fn with_no_guard_the_runtime_layers_keep_95_percent_of_the_corpus_from_correct() {
    let hostile = corpus("hostile");
    let honest = corpus("honest");
    let records = evaluate(&hostile, &honest, &["--no-guard".as_ref()]);
    let runnable: Vec<&Entry> = hostile.iter().filter(|e| !e.gpu_only).collect();
    let passed: Vec<&str> = runnable
        .iter()
        .filter(|e| records[&e.name]["status"] == "correct")
        .map(|e| e.name.as_str())
        .collect();
    let caught = runnable.len() - passed.len();
    assert!(
        caught * 100 >= runnable.len() * 95,
        "only {caught} of {} hostile files kept from correct with --no-guard; correct: {passed:?}",
        runnable.len()
    );
    for e in honest.iter().filter(|e| !e.gpu_only) {
        let r = &records[&e.name];
        assert_eq!(r["status"], "correct", "honest {} with --no-guard: {r}", e.name);
    }
    for name in ATEN_ROUTES {
        let r = &records[*name];
        let msg = r["message"].as_str().unwrap_or_default();
        assert_eq!(r["status"], "rejected", "{name}: {r}");
        assert_eq!(r["stage"], "provenance", "{name}: {r}");
        assert!(msg.contains("[runtime-aten]"), "{name}: {msg}");
        let names_op = msg.contains("aten::") || msg.contains("Tensor.");
        assert!(
            names_op && msg.contains(&format!("{name}.py:")),
            "{name}: no operator or line in {msg}"
        );
    }
    for (name, tag) in MIXED_ROUTES {
        let r = &records[*name];
        let msg = r["message"].as_str().unwrap_or_default();
        assert!(msg.contains(tag), "{name}: expected {tag}: {r}");
        assert_eq!(
            (&r["status"], &r["stage"]),
            (&"rejected".into(), &"provenance".into()),
            "{name}: {r}"
        );
    }
    for (name, tag) in OTHER_ROUTES {
        let r = &records[*name];
        let msg = r["message"].as_str().unwrap_or_default();
        assert!(msg.contains(tag), "{name}: expected {tag}: {r}");
        if *tag == "[runtime-recall]" {
            assert_eq!(r["status"], "incorrect", "{name}: {r}");
            assert_eq!(r["stage"], "correctness", "{name}: {r}");
        } else {
            assert!(msg.contains(&format!("{name}.py:")), "{name}: no line in {msg}");
            assert_eq!(r["status"], "rejected", "{name}: {r}");
            assert_eq!(r["stage"], "provenance", "{name}: {r}");
        }
    }
}

/// The GPU fork server imports torch._dynamo before forking (each child imported it at
/// its first guarded torch call: 3 CPU-seconds, 13-20 s under load on a GPU machine)
/// while leaving CUDA untouched and starting no thread, as forking safely needs.
#[test]
fn the_gpu_fork_server_imports_dynamo_without_touching_cuda_or_threads() {
    let v = fixture_report("guard/check_fork_server_imports.py", &[&repo().join("python")]);
    assert_eq!(v["failures"], serde_json::json!([]), "{v}");
}

/// On a GPU a watched call holds back the first launch on any stream other than the
/// caller's, once per stream and call, so that work left unjoined is still running when
/// the outputs are copied at return (`runtime-late-write` every time, not by a race).
/// The hook's bookkeeping is checked here through the metadata Triton hands it; the spin
/// itself is a CUDA call (run on a GPU by `scripts/bench_gpu_pool.py redteam`).
#[test]
fn a_watched_call_holds_back_the_first_launch_on_each_other_stream() {
    let v = fixture_report("guard/check_stream_hold.py", &[&repo().join("python")]);
    assert_eq!(v["failures"], serde_json::json!([]), "{v}");
}

/// The other side of a trustworthy verdict: an honest kernel is not timed slow for the
/// pool's sake. The spin before each timed window must cover the host's launch of the
/// call: it lasts 2.5 times the slower side's enqueue time (0.2 to 2 ms), and its
/// calibration takes the fastest of several spins (one that shared the GPU with another
/// process ran long and gave a tenth of the cushion) and never goes below the device's
/// top clock. Checked with a stand-in spin and events on a simulated clock.
#[test]
fn the_timing_cushion_is_calibrated_on_its_fastest_spin() {
    let v = fixture_report("timing/check_cushion.py", &[&repo().join("python")]);
    assert_eq!(v["failures"], serde_json::json!([]), "{v}");
    assert_eq!(v["first try shared"], 400_000, "{v}");
}

/// The timing gate's kernel, run by the Triton interpreter: it passes once the host's flag
/// reaches its target, gives up after its polls when it never does and records which, and
/// a run counts the gates that gave up, a stalled probe round is tried once more; without a
/// GPU the executor is told to keep the spin.
#[test]
fn the_timing_gate_passes_when_released_and_gives_up_when_not() {
    let v = fixture_report("timing/check_gate.py", &[&repo().join("python")]);
    assert_eq!(v["failures"], serde_json::json!([]), "{v}");
    assert_eq!(v["released"], serde_json::json!([7, 7, 1, 7]), "{v}");
    assert_eq!(v["given_up"], serde_json::json!([7, 0, 7, 7]), "{v}");
    // A probe round that stalled once is tried again on a fresh gate; one that always
    // stalls leaves the candidate to the spin.
    assert_eq!(v["probe_after_one_stall"]["kept_the_second"], true, "{v}");
    assert_eq!(v["probe_always_stalled"]["gate"], false, "{v}");
    assert_eq!(v["works_without_gpu"], false, "{v}");
    assert_eq!(v["why_not_without_gpu"], "check_raised", "{v}");
}

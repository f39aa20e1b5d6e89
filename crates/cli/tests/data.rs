//! `tritonforge data build` on generated KernelBook-shaped fixtures (`data synth
//! --defects`: a few hundred valid rows plus rows planted for every stage to drop), in
//! JSONL and parquet: each stage's keep/drop decisions, the conversations written, the
//! token counts against transformers, and clear errors for broken configs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{json, Value};

mod common;
use common::*;

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn config(dir: &Path, input: &Path, out: &str, extra: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{out}.toml"));
    let text = format!(
        "[[input]]\nkind = \"kernelbook\"\npath = {input:?}\n\n[output]\ndir = {:?}\nvalidation = 0.1\n\n[decontaminate]\nsuite = {:?}\n\n{extra}",
        dir.join(out),
        repo().join("bench")
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn build(state: &Path, cfg: &Path) -> Value {
    let out = run(tf(state).args(["data", "build", "--json", "--config"]).arg(cfg));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn stage<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == name)
        .unwrap_or_else(|| panic!("no stage {name}: {report}"))
}

fn kept(dir: &Path) -> Vec<Value> {
    let mut rows = jsonl(&dir.join("train.jsonl"));
    rows.extend(jsonl(&dir.join("validation.jsonl")));
    rows
}

#[test]
fn every_stage_keeps_and_drops_what_it_should() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let fx = root.path().join("fx");
    let out = run(tf(&state)
        .args(["data", "synth", "--rows", "300", "--defects", "--seed", "3", "--out"])
        .arg(&fx));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let tok = root.path().join("tok");
    let out = run(tf(&state).args(["tokenizer", "export", "--out"]).arg(&tok));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // JSONL, thinking wrapped, real token counts.
    let cfg = config(
        root.path(),
        &fx.join("kernelbook.jsonl"),
        "a",
        &format!("[length]\ntokenizer = {tok:?}\nmin = 100\nmax = 8192\n"),
    );
    let report = build(&state, &cfg);
    let ingest = stage(&report, "ingest");
    assert_eq!(ingest["dropped"]["malformed_json"], 1, "{ingest}");
    assert_eq!(ingest["dropped"]["non_utf8"], 1, "{ingest}");
    assert_eq!(ingest["dropped"]["missing_field:triton_code"], 1, "{ingest}");
    assert_eq!(ingest["dropped"]["empty_field:python_code"], 1, "{ingest}");

    let a = root.path().join("a");
    let dropped: BTreeMap<String, Value> = jsonl(&a.join("dropped.jsonl"))
        .into_iter()
        .filter_map(|b| Some((b["id"].as_str()?.to_string(), b)))
        .collect();
    let reason = |id: &str| {
        let b = dropped.get(id).unwrap_or_else(|| panic!("{id} was kept"));
        (b["stage"].as_str().unwrap().to_string(), b["reason"].as_str().unwrap().to_string())
    };
    assert_eq!(reason("bad-too-long"), ("length".into(), "too_long".into()));
    assert_eq!(reason("bad-tiny").0, "quality", "a stub with no kernel");
    assert_eq!(reason("bad-problem-syntax"), ("quality".into(), "problem_unparsable".into()));
    assert_eq!(reason("bad-answer-syntax"), ("quality".into(), "answer_unparsable".into()));
    let (st, why) = reason("bad-guard-torch");
    assert_eq!(st, "quality");
    assert!(why.starts_with("guard:"), "{why}");
    assert_eq!(reason("bad-exact-dup"), ("dedup_exact".into(), "exact_duplicate".into()));
    assert_eq!(dropped["bad-exact-dup"]["instead"], "ok-000000", "the better row stays");
    assert_eq!(reason("bad-near-dup"), ("dedup_near".into(), "near_duplicate".into()));
    assert_eq!(dropped["bad-near-dup"]["instead"], "ok-000001");
    assert_eq!(
        reason("bad-heldout-leak"),
        ("decontaminate".into(), "heldout_normalised_match".into())
    );
    assert!(
        dropped.keys().all(|id| id.starts_with("bad-")),
        "a valid row was dropped: {dropped:?}"
    );

    // Every valid row is kept, once, as a conversation in the agent's task format.
    let rows = kept(&a);
    let ids: BTreeSet<String> =
        rows.iter().map(|r| r["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids.len(), rows.len());
    assert_eq!(
        ids.len(),
        300,
        "{:?}",
        ids.iter().filter(|i| !i.starts_with("ok-")).collect::<Vec<_>>()
    );
    assert_eq!(report["train"].as_u64().unwrap() + report["validation"].as_u64().unwrap(), 300);
    assert!(report["validation"].as_u64().unwrap() > 10, "about 10% validation");
    for r in &rows {
        let m = r["messages"].as_array().unwrap();
        assert_eq!(
            m.iter().map(|x| x["role"].as_str().unwrap()).collect::<Vec<_>>(),
            ["system", "user", "assistant"]
        );
        let user = m[1]["content"].as_str().unwrap();
        let answer = m[2]["content"].as_str().unwrap();
        assert!(user.contains("class Model(nn.Module)"), "{user}");
        assert!(
            answer.contains("class ModelNew(nn.Module)") && answer.contains("```python"),
            "{answer}"
        );
        let n: usize = r["id"].as_str().unwrap()[3..].parse().unwrap();
        assert_eq!(
            answer.starts_with("<think>\n"),
            n.is_multiple_of(3),
            "reasoning wrapped: {answer:.80}"
        );
        assert!(r["meta"]["repo_name"].is_string(), "unknown columns kept: {r}");
        let t = r["tokens"].as_u64().unwrap();
        assert!((100..=8192).contains(&t));
    }

    // Token counts are transformers' counts of the same rendered conversation.
    let sample: Vec<Value> = rows
        .iter()
        .take(25)
        .map(|r| json!({"messages": r["messages"], "add_generation_prompt": false}))
        .collect();
    let chats = root.path().join("sample.json");
    std::fs::write(&chats, serde_json::to_string(&sample).unwrap()).unwrap();
    let hf = std::process::Command::new(venv().join("bin/python"))
        .arg(fixture("chat/hf_render.py"))
        .arg(&tok)
        .arg(&chats)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(hf.status.success(), "{}", text(&hf.stderr));
    let want: Vec<Value> = serde_json::from_slice(&hf.stdout).unwrap();
    for (r, w) in rows.iter().zip(&want) {
        assert_eq!(
            r["tokens"].as_u64().unwrap() as usize,
            w["ids"].as_array().unwrap().len(),
            "{}",
            r["id"]
        );
    }

    // Outputs: parquet beside JSONL, stats in both forms, `data stats` reads them back.
    for f in ["train.parquet", "validation.parquet", "stats.md", "stats.json"] {
        assert!(a.join(f).is_file(), "{f}");
    }
    let md = std::fs::read_to_string(a.join("stats.md")).unwrap();
    assert!(md.contains("| dedup_near | near_duplicate | 1 |"), "{md}");
    let out = run(tf(&state).args(["data", "stats"]).arg(&a));
    assert_eq!(text(&out.stdout), md);

    // The same rows from parquet, with no thinking tags and no tokenizer: the same rows kept
    // (the too-long row is kept: nothing measures it), none with <think>.
    let cfg =
        config(root.path(), &fx.join("kernelbook.parquet"), "b", "[thinking]\nmode = \"none\"\n");
    let report = build(&state, &cfg);
    assert!(stage(&report, "length")["note"].as_str().unwrap().contains("no length.tokenizer"));
    let b_rows = kept(&root.path().join("b"));
    let b_ids: BTreeSet<String> =
        b_rows.iter().map(|r| r["id"].as_str().unwrap().to_string()).collect();
    let mut with_long = ids.clone();
    with_long.insert("bad-too-long".to_string());
    assert_eq!(b_ids, with_long, "parquet and JSONL give the same set");
    assert!(b_rows
        .iter()
        .all(|r| !r["messages"][2]["content"].as_str().unwrap().contains("<think>")));
    // The split is a function of the id: the same rows land in validation both times.
    let va: BTreeSet<_> =
        jsonl(&a.join("validation.jsonl")).iter().map(|r| r["id"].clone().to_string()).collect();
    let vb: BTreeSet<_> = jsonl(&root.path().join("b/validation.jsonl"))
        .iter()
        .map(|r| r["id"].clone().to_string())
        .collect();
    assert_eq!(va, vb);
}

#[test]
fn broken_configs_and_inputs_are_named() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let cfg = root.path().join("bad.toml");
    std::fs::write(&cfg, "[[input]]\nkind = \"kernelbook\"\npath = \"x.jsonl\"\n[output]\ndir = \"o\"\n[dedup]\nthreshhold = 0.5\n").unwrap();
    let out = run(tf(&state).args(["data", "build", "--config"]).arg(&cfg));
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("bad.toml") && err.contains("threshhold"), "{err}");

    std::fs::write(
        &cfg,
        "[[input]]\nkind = \"kernelbook\"\npath = \"missing.jsonl\"\n[output]\ndir = \"o\"\n",
    )
    .unwrap();
    let out = run(tf(&state).args(["data", "build", "--config"]).arg(&cfg));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("missing.jsonl"), "{}", text(&out.stderr));

    let junk = root.path().join("junk.parquet");
    std::fs::write(&junk, b"not parquet at all").unwrap();
    std::fs::write(
        &cfg,
        format!("[[input]]\nkind = \"kernelbook\"\npath = {junk:?}\n[output]\ndir = \"o\"\n"),
    )
    .unwrap();
    let out = run(tf(&state).args(["data", "build", "--config"]).arg(&cfg));
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("junk.parquet") && err.contains("parquet"), "{err}");
}

fn turn(n: u32, messages: &[(&str, &str)], reply: &str, code: &str, outcome: &str) -> Value {
    let msgs: Vec<Value> = messages.iter().map(|(r, c)| json!({"role": r, "content": c})).collect();
    json!({
        "turn": n, "messages": msgs,
        "completion": {"text": reply, "token_ids": null, "logprobs": null, "prompt_tokens": null,
                       "completion_tokens": null, "finish_reason": "stop", "latency_ms": 1.0, "attempts": 1},
        "code": code, "outcome": outcome, "stage": null, "message": "", "record": null,
        "speedup": null, "reward": 0.0, "ret": 0.0,
    })
}

#[test]
fn a_solved_episode_becomes_its_failed_attempt_feedback_and_fix() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let store_path = root.path().join("eps.sqlite");
    let problem = repo().join("bench/level1/relu.py");
    let right = std::fs::read_to_string(repo().join("bench/solutions/level1/relu.py")).unwrap();
    let wrong = right.replace("tl.maximum(x, 0.0)", "x");
    let store = tritonforge_store::Store::open(&store_path).unwrap();
    let first = [("system", "SYS"), ("user", "TASK relu")];
    let fixed_reply = format!("<think>mask negatives</think>\n```python\n{right}```");
    let solved = json!({
        "id": "r/relu/0", "run": "r", "problem": "relu", "problem_path": problem, "sample": 0,
        "backend": "mock", "error": null,
        "turns": [
            turn(0, &first, &format!("```python\n{wrong}```"), &wrong, "incorrect"),
            turn(1, &[("system", "SYS"), ("user", "TASK relu"), ("assistant", "ATTEMPT"), ("user", "FEEDBACK: output is wrong")],
                 &fixed_reply, &right, "correct"),
        ],
    });
    let unsolved = json!({
        "id": "r/relu/1", "run": "r", "problem": "relu", "problem_path": problem, "sample": 1,
        "backend": "mock", "error": null,
        "turns": [turn(0, &first, "no idea", &wrong, "incorrect")],
    });
    for ep in [&solved, &unsolved] {
        store
            .put_episode(
                ep["id"].as_str().unwrap(),
                "r",
                "relu",
                ep["sample"].as_u64().unwrap() as u32,
                &ep.to_string(),
            )
            .unwrap();
    }
    drop(store);
    let cfg = root.path().join("eps.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[input]]\nkind = \"episodes\"\nstore = {store_path:?}\n\n[output]\ndir = {:?}\nvalidation = 0.0\n\n[thinking]\nmode = \"none\"\n\n[decontaminate]\nsuite = {:?}\n",
            root.path().join("out"),
            repo().join("bench")
        ),
    )
    .unwrap();
    let report = build(&state, &cfg);
    assert_eq!(stage(&report, "ingest")["dropped"]["episode_unsolved"], 1, "{report}");
    let rows = jsonl(&root.path().join("out/train.jsonl"));
    assert_eq!(rows.len(), 1, "{report}");
    let m = rows[0]["messages"].as_array().unwrap();
    let roles: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user", "assistant"]);
    assert_eq!(m[3]["content"], "FEEDBACK: output is wrong");
    let fix = m[4]["content"].as_str().unwrap();
    assert!(fix.starts_with("```python") && fix.contains("tl.maximum"), "thinking stripped: {fix}");
    assert_eq!(rows[0]["meta"]["turns_to_fix"], 2);
}

/// With `repair`, an unsolved episode of a train problem becomes the policy's own first
/// attempt and feedback, then the suite's reference solution. Rows after different
/// attempts are all kept, beside the suite's own pair for that problem. A heldout problem
/// (solved or not), an episode without a second turn, a problem the set lacks and a
/// problem whose file changed since it was played give no row, each named with its file.
#[test]
fn an_unsolved_episode_is_repaired_with_the_reference_solution() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let store_path = root.path().join("eps.sqlite");
    let relu = repo().join("bench/level1/relu.py");
    let sigmoid = repo().join("bench/level1/sigmoid.py");
    let right = std::fs::read_to_string(repo().join("bench/solutions/level1/relu.py")).unwrap();
    let wrong = right.replace("tl.maximum(x, 0.0)", "x");
    let other_wrong = right.replace("tl.maximum(x, 0.0)", "x * 0.5");
    let outside = root.path().join("elsewhere.py");
    std::fs::copy(&relu, &outside).unwrap();
    let changed = root.path().join("changed.py");
    std::fs::write(&changed, "class Model: pass\n").unwrap();
    let task = |path: &Path| {
        let src = std::fs::read_to_string(path).unwrap();
        format!("TASK\n```python\n{}\n```", src.trim())
    };
    // turns: the code of each failed attempt; the first is the one repaired.
    let episode = |id: &str, path: &Path, codes: &[&str], last: &str| {
        let t = task(path);
        let mut turns = Vec::new();
        let mut history = vec![("system".to_string(), "SYS".to_string()), ("user".to_string(), t)];
        for (n, code) in codes.iter().enumerate() {
            let outcome = if n + 1 == codes.len() { last } else { "incorrect" };
            let msgs: Vec<(&str, &str)> =
                history.iter().map(|(r, c)| (r.as_str(), c.as_str())).collect();
            turns.push(turn(n as u32, &msgs, &format!("```python\n{code}```"), code, outcome));
            history.push(("assistant".into(), format!("```python\n{code}```")));
            history.push(("user".into(), format!("FEEDBACK {n}")));
        }
        json!({"id": id, "run": "r", "problem": "p", "problem_path": path, "sample": 0,
               "backend": "mock", "error": null, "turns": turns})
    };
    std::fs::write(&changed, "class Model: pass\n").unwrap();
    let eps = [
        episode("r/relu/0", &relu, &[&wrong, &wrong, &wrong], "incorrect"),
        episode("r/relu/1", &relu, &[&other_wrong, &wrong], "incorrect"),
        episode("r/relu/2", &relu, &[&wrong], "incorrect"),
        episode("r/sigmoid/0", &sigmoid, &[&wrong, &wrong], "incorrect"),
        episode("r/sigmoid/1", &sigmoid, &[&wrong, &right], "correct"),
        episode("r/other/0", &outside, &[&wrong, &wrong], "incorrect"),
        episode("r/changed/0", &changed, &[&wrong, &wrong], "incorrect"),
    ];
    // Changed after it was played.
    std::fs::write(&changed, "class Model: pass  # edited\n").unwrap();
    let store = tritonforge_store::Store::open(&store_path).unwrap();
    for (i, ep) in eps.iter().enumerate() {
        store.put_episode(ep["id"].as_str().unwrap(), "r", "p", i as u32, &ep.to_string()).unwrap();
    }
    drop(store);
    let cfg = root.path().join("eps.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[input]]\nkind = \"episodes\"\nstore = {store_path:?}\nrepair = {bench:?}\n\n[[input]]\nkind = \"suite\"\npath = {bench:?}\n\n[output]\ndir = {:?}\nvalidation = 0.0\n\n[thinking]\nmode = \"none\"\n\n[decontaminate]\nsuite = {bench:?}\n",
            root.path().join("out"),
            bench = repo().join("bench"),
        ),
    )
    .unwrap();
    let report = build(&state, &cfg);
    let dropped = &stage(&report, "ingest")["dropped"];
    assert_eq!(dropped["repair_no_feedback"], 1, "{report}");
    assert_eq!(dropped["repair_heldout"], 2, "{report}");
    assert_eq!(dropped["repair_not_in_set"], 1, "{report}");
    assert_eq!(dropped["repair_problem_changed"], 1, "{report}");
    let bad = jsonl(&root.path().join("out/dropped.jsonl"));
    let named = bad.iter().find(|b| b["reason"] == "repair_not_in_set").unwrap();
    assert_eq!(named["detail"].as_str().unwrap(), outside.to_str().unwrap());
    let rows = jsonl(&root.path().join("out/train.jsonl"));
    let repairs: Vec<&Value> = rows.iter().filter(|r| r["meta"]["repair"] == true).collect();
    assert_eq!(repairs.len(), 2, "both attempts at relu are kept: {report}");
    assert!(
        rows.iter().any(|r| r["id"] == "suite/level1/relu"),
        "the suite's own relu pair stays beside them: {report}"
    );
    for r in &repairs {
        let m = r["messages"].as_array().unwrap();
        let roles: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
        // The second turn's conversation, never a later one's.
        assert_eq!(roles, ["system", "user", "assistant", "user", "assistant"], "{r}");
        assert_eq!(m[3]["content"], "FEEDBACK 0");
        let fix = m[4]["content"].as_str().unwrap();
        assert!(fix.contains("tl.maximum(x, 0.0)") && fix.starts_with("```python"), "{fix}");
    }
    let firsts: BTreeSet<&str> =
        repairs.iter().map(|r| r["messages"][2]["content"].as_str().unwrap()).collect();
    assert_eq!(firsts.len(), 2, "each row keeps its own first attempt");
}

/// A tiny elementwise problem and a Triton answer computing `body` from `x`.
fn pair(name: &str, torch_expr: &str, body: &str) -> (String, String) {
    let problem = format!(
        "import torch\nimport torch.nn as nn\n\n\nclass {name}(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, x):\n        return {torch_expr}\n\n\ndef get_inputs():\n    return [torch.randn(4, 300)]\n\n\ndef get_init_inputs():\n    return []\n"
    );
    let answer = format!(
        "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\ndef {name}_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n\n    x = tl.load(x_ptr + offs, mask=mask)\n    tl.store(y_ptr + offs, {body}, mask=mask)\n\n\nclass {name}New(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, x):\n        x = x.contiguous()\n        y = torch.empty_like(x)\n        n = x.numel()\n        {name}_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)\n        return y\n"
    );
    (problem, answer)
}

#[test]
fn verify_keeps_only_pairs_the_evaluator_finds_correct_and_reuses_its_verdicts() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let rows = [
        ("good", "Doubler", "x * 2.0", "x * 2.0"),
        ("wrong", "PlusOne", "x + 1.0", "x + 2.0"),
        ("broken", "Cuber", "x * x * x", "tl.cube_it(x)"),
    ];
    let input = root.path().join("rows.jsonl");
    let lines: Vec<String> = rows
        .iter()
        .map(|(uuid, name, t, body)| {
            let (p, a) = pair(name, t, body);
            json!({"uuid": uuid, "entry_point": name, "python_code": p, "triton_code": a})
                .to_string()
        })
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let cfg =
        config(root.path(), &input, "verified", "[dedup]\nnear = false\n\n[verify]\ntrials = 2\n");
    let text_cfg = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text_cfg.replace("[decontaminate]\n", "[decontaminate]\nenabled = false\n"),
    )
    .unwrap();

    let verify = |state: &Path| -> Value {
        let out = run(tf(state)
            .args(["--device", "cpu", "data", "build", "--json", "--verify", "--config"])
            .arg(&cfg));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let report = verify(&state);
    let v = stage(&report, "verify");
    assert_eq!(v["rows_in"], 3, "{report}");
    assert_eq!(v["rows_out"], 1, "{report}");
    assert_eq!(v["note"], "0 of 3 verdicts from the store", "{report}");
    let dropped: BTreeMap<String, u64> = serde_json::from_value(v["dropped"].clone()).unwrap();
    assert_eq!(dropped.get("incorrect"), Some(&1), "{report}");
    assert_eq!(dropped.values().sum::<u64>(), 2, "{report}");
    assert!(!dropped.contains_key("correct"));

    let out = root.path().join("verified");
    let kept = kept(&out);
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0]["id"], "good");
    assert_eq!(kept[0]["meta"]["verdict"]["status"], "correct");
    let key = kept[0]["meta"]["verdict"]["key"].as_str().unwrap().to_string();
    assert_eq!(key.len(), 64);

    // Each failed row says which verdict dropped it and why.
    let bad = jsonl(&out.join("dropped.jsonl"));
    let by_id: BTreeMap<&str, &Value> = bad
        .iter()
        .filter(|b| b["stage"] == "verify")
        .map(|b| (b["id"].as_str().unwrap(), b))
        .collect();
    assert_eq!(by_id.len(), 2, "{bad:?}");
    assert_eq!(by_id["wrong"]["reason"], "incorrect");
    assert!(by_id["broken"]["detail"].as_str().unwrap().contains("cube_it"), "{bad:?}");

    // The verdicts are in the store: a second build evaluates nothing and decides the same.
    let again = verify(&state);
    let v2 = stage(&again, "verify");
    assert_eq!(v2["note"], "3 of 3 verdicts from the store", "{again}");
    assert_eq!(v2["dropped"], v["dropped"]);
    assert_eq!(kept_ids(&out), vec!["good".to_string()]);
    assert_eq!(kept_first_key(&out), key);

    // Without --verify the stage is off and all three stay.
    let plain = build(&state, &cfg);
    assert_eq!(stage(&plain, "verify")["note"], "off");
    assert_eq!(kept_ids(&out).len(), 3);
}

fn kept_ids(dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> =
        kept(dir).iter().map(|r| r["id"].as_str().unwrap().to_string()).collect();
    ids.sort();
    ids
}

fn kept_first_key(dir: &Path) -> String {
    kept(dir)[0]["meta"]["verdict"]["key"].as_str().unwrap().to_string()
}

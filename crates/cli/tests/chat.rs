//! Chat templates rendered in Rust against transformers' `apply_chat_template`, byte for
//! byte, and the token ids against transformers' tokenisation: the model's own template
//! (SmolLM2's, exported from the GGUF file the managed environment ships) and templates of
//! our own written in the styles models use (default system prompts, whitespace control,
//! namespaces and alternation checks, thinking stripped from history, `tojson`).

use std::path::Path;

use serde_json::Value;

mod common;
use common::*;

fn python() -> std::path::PathBuf {
    venv().join("bin/python")
}

fn reference(dir: &Path, template: Option<&Path>) -> Vec<Value> {
    let mut cmd = std::process::Command::new(python());
    cmd.arg(fixture("chat/hf_render.py"))
        .arg(dir)
        .arg(fixture("chat/chats.json"))
        .env("HF_HUB_OFFLINE", "1");
    if let Some(t) = template {
        cmd.arg(t);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ours(state: &Path, dir: &Path, template: Option<&Path>) -> Vec<Value> {
    let mut cmd = tf(state);
    cmd.args(["tokenizer", "render", "--tokenizer"]).arg(dir);
    if let Some(t) = template {
        cmd.arg("--template").arg(t);
    }
    let out = run(cmd.arg(fixture("chat/chats.json")));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn rust_renders_and_tokenises_chats_exactly_as_transformers_does() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("state");
    let dir = root.path().join("smollm2-tokenizer");
    let out = run(tf(&state).args(["tokenizer", "export", "--out"]).arg(&dir));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(dir.join("tokenizer.json").is_file());

    let mut templates = vec![None];
    let mut names: Vec<_> =
        std::fs::read_dir(fixture("chat/templates")).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    assert!(names.len() >= 5);
    templates.extend(names.into_iter().map(Some));

    let mut compared = 0;
    let mut errors = 0;
    for template in &templates {
        let want = reference(&dir, template.as_deref());
        let got = ours(&state, &dir, template.as_deref());
        assert_eq!(want.len(), got.len());
        let name = template
            .as_ref()
            .map(|t| t.display().to_string())
            .unwrap_or("the model's own template".into());
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            if w.get("error").is_some() {
                // transformers refused (raise_exception): so must we, with the same message.
                let (we, ge) = (w["error"].as_str().unwrap(), g["error"].as_str());
                let ge = ge.unwrap_or_else(|| {
                    panic!("{name}, chat {i}: we rendered what transformers refused ({we}): {g}")
                });
                assert!(
                    we.contains("alternate") && ge.contains("alternate"),
                    "{name}, chat {i}: {we} vs {ge}"
                );
                errors += 1;
                continue;
            }
            assert_eq!(w["text"], g["text"], "{name}, chat {i}: rendered text differs");
            assert_eq!(w["ids"], g["ids"], "{name}, chat {i}: token ids differ");
            compared += 1;
        }
    }
    assert!(compared >= 30, "only {compared} renderings compared");
    assert!(errors >= 1, "the alternation check never fired");
}

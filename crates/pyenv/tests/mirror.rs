//! The Python mirror agrees with these definitions: every sample message goes
//! through `python -m tritonforge_worker roundtrip` (strict decode, re-encode) and
//! must come back as the same JSON value; drifted messages must be refused.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;

use tritonforge_protocol::{sample_messages, Message, ProtocolError, PROTOCOL_VERSION};
use tritonforge_pyenv::{WorkerCommand, WorkerMode};

fn python_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python")
}

/// The mirror needs only the standard library, so any python3 will do.
fn python() -> String {
    std::env::var("TRITONFORGE_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn roundtrip(lines: &[String]) -> Vec<String> {
    let mut child =
        WorkerCommand::new(&PathBuf::from(python()), &python_dir(), WorkerMode::Roundtrip)
            .command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 must be installed to run the protocol mirror test");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for l in lines {
            writeln!(stdin, "{l}").expect("write");
        }
    }
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "roundtrip exited with {:?}", out.status);
    String::from_utf8(out.stdout).expect("utf8").lines().map(str::to_owned).collect()
}

#[test]
fn every_message_type_round_trips_through_python() {
    let samples = sample_messages();
    let mut seen: Vec<String> = samples
        .iter()
        .map(|m| serde_json::to_value(m).unwrap()["type"].as_str().unwrap().to_string())
        .collect();
    seen.sort();
    seen.dedup();
    let mut all: Vec<String> = Message::TYPES.iter().map(|s| s.to_string()).collect();
    all.sort();
    assert_eq!(seen, all, "the samples must cover every message type");

    let lines: Vec<String> = samples.iter().map(Message::to_line).collect();
    let back = roundtrip(&lines);
    assert_eq!(back.len(), lines.len());
    for (sent, got) in samples.iter().zip(&back) {
        assert!(!got.starts_with('!'), "python refused {sent:?}: {got}");
        let got_msg = Message::from_line(got).unwrap_or_else(|e| panic!("rust refused {got}: {e}"));
        assert_eq!(&got_msg, sent);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(got).unwrap(),
            serde_json::to_value(sent).unwrap()
        );
    }
}

#[test]
fn python_refuses_drifted_messages() {
    let mut hello = serde_json::to_value(&sample_messages()[0]).unwrap();
    hello["env"]["extra_field"] = serde_json::json!(1);
    let mut missing = serde_json::to_value(&sample_messages()[2]).unwrap();
    missing["job"].as_object_mut().unwrap().remove("trials");
    let mut wrong_version = serde_json::to_value(&sample_messages()[9]).unwrap();
    wrong_version["protocol"] = serde_json::json!(PROTOCOL_VERSION + 1);
    let mut bad_status = serde_json::to_value(&sample_messages()[4]).unwrap();
    bad_status["outcome"]["status"] = serde_json::json!("almost_correct");
    let lines = vec![
        hello.to_string(),
        missing.to_string(),
        wrong_version.to_string(),
        bad_status.to_string(),
        format!("{{\"type\":\"teleport\",\"protocol\":{PROTOCOL_VERSION}}}"),
        // A type that is not a string (once an uncaught TypeError in the decoder).
        format!("{{\"type\":[\"hello\"],\"protocol\":{PROTOCOL_VERSION}}}"),
    ];
    let back = roundtrip(&lines);
    assert_eq!(back.len(), lines.len());
    assert!(back[0].contains("unknown field") && back[0].contains("extra_field"), "{}", back[0]);
    assert!(back[1].contains("missing field 'trials'"), "{}", back[1]);
    assert!(back[2].contains("protocol version mismatch"), "{}", back[2]);
    assert!(back[3].contains("almost_correct"), "{}", back[3]);
    assert!(back[4].contains("unknown message type"), "{}", back[4]);
    assert!(back[5].contains("string 'type' field"), "{}", back[5]);
}

#[test]
fn rust_refuses_drifted_messages() {
    let mut v = serde_json::to_value(&sample_messages()[0]).unwrap();
    v["env"]["extra_field"] = serde_json::json!(1);
    assert!(matches!(Message::from_line(&v.to_string()), Err(ProtocolError::Malformed { .. })));
    let mut v = serde_json::to_value(&sample_messages()[9]).unwrap();
    v["protocol"] = serde_json::json!(PROTOCOL_VERSION + 1);
    let err = Message::from_line(&v.to_string()).unwrap_err();
    let found = PROTOCOL_VERSION + 1;
    assert!(
        matches!(err, ProtocolError::VersionMismatch { expected: PROTOCOL_VERSION, found: f } if f == found)
    );
    assert!(err.to_string().contains(&format!("version {found}")));
}

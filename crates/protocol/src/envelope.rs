//! The wire envelope: one JSON object per line, tagged by `type`, carrying the protocol
//! version once at its top level.
//!
//! The version belongs to the line, not to any one message, so the message variants do
//! not carry it: [`Message`]'s `Serialize` writes `"protocol"` beside `"type"` and its
//! `Deserialize` (and [`Message::from_line`]) checks it before reading the body, so a
//! worker from another release is named as such instead of failing on some field.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::executor::{
    EnvInfo, EvalJob, LeaseKind, MemoryJob, MemoryReport, Outcome, PreflightOutcome,
    ProblemCheckJob, ProblemReport, Sandbox, StartupTimes,
};
use crate::generation::{GenerateJob, Generated};
use crate::trainer::{
    RlBatch, RlStats, SaveJob, ScoreJob, Scores, StepStats, TrainBatch, TrainInfo, TrainSetup,
};

/// Bumped whenever a message's shape changes; both sides refuse a mismatch.
pub const PROTOCOL_VERSION: u32 = 7;

/// Errors decoding a protocol line.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("worker sent a line that is not a protocol message ({source}): {line}")]
    Malformed {
        line: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "protocol version mismatch: the worker speaks version {found}, this tritonforge speaks \
         {expected}; the worker package and the binary come from different releases"
    )]
    VersionMismatch { expected: u32, found: u32 },
}

/// Every message of the protocol, in both directions, without the envelope.
///
/// `#[serde(remote = "Self")]` makes the derive produce the body's (de)serialiser as
/// inherent functions; the `Serialize`/`Deserialize` impls below wrap them in the
/// envelope, so every encoding of a message carries the version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[allow(clippy::large_enum_variant)] // a few per evaluation; boxing buys nothing
pub enum Message {
    /// Worker → host, once, when torch and triton are imported and the device is up.
    /// `startup`: how its start went (candidate processes; `None` from others and
    /// older workers).
    Hello {
        worker_version: String,
        pid: u32,
        env: EnvInfo,
        sandbox: Sandbox,
        #[serde(default)]
        startup: Option<StartupTimes>,
    },
    /// Host → worker: the one job this process will ever run.
    Evaluate { id: String, job: EvalJob },
    /// Worker → host: the answer to `evaluate`.
    Result { id: String, outcome: Outcome, elapsed_ms: f64 },
    /// Either way: a message could not be understood.
    Error { id: Option<String>, message: String },
    /// Host → worker: exit without running anything.
    Shutdown {},
    /// Host → worker: validate a problem (the one job of this process).
    CheckProblem { id: String, job: ProblemCheckJob },
    /// Worker → host: the answer to `check_problem`.
    ProblemReport { id: String, report: ProblemReport, elapsed_ms: f64 },
    /// Worker → host: block until the job holds its GPU this way (any other hold is dropped first).
    LeaseRequest { id: String, kind: LeaseKind },
    /// Host → worker: the hold asked for is granted.
    LeaseGrant { id: String, kind: LeaseKind },
    /// Worker → host: the job needs no hold on the GPU for now (e.g. while compiling).
    LeaseRelease { id: String },
    /// Host → worker: measure a problem's memory need (the one job of this process).
    MeasureMemory { id: String, job: MemoryJob },
    /// Worker → host: the answer to `measure_memory`.
    MemoryReport { id: String, report: MemoryReport, elapsed_ms: f64 },
    /// Host → worker (a process that never touched the GPU): import the candidate only.
    Preflight { id: String, job: EvalJob },
    /// Worker → host: the answer to `preflight`.
    PreflightResult { id: String, outcome: PreflightOutcome, elapsed_ms: f64 },
    /// Host → policy worker: answer this chat.
    Generate { id: String, job: GenerateJob },
    /// Policy worker → host: the completion, with exact token ids.
    Generation { id: String, result: Generated, elapsed_ms: f64 },
    /// Host → policy worker: load the model for training, with its optimizer and schedule.
    TrainSetup { id: String, setup: TrainSetup },
    /// Policy worker → host: ready to train; what it trains.
    TrainReady { id: String, info: TrainInfo },
    /// Host → policy worker: one optimizer step over these micro-batches.
    TrainStep { id: String, batch: TrainBatch },
    /// Host → policy worker: the loss on these micro-batches, no update.
    EvalLoss { id: String, batch: TrainBatch },
    /// Policy worker → host: what a step (or an evaluation) did.
    StepDone { id: String, stats: StepStats },
    /// Host → policy worker: write a checkpoint.
    SaveCheckpoint { id: String, save: SaveJob },
    /// Policy worker → host: the checkpoint is written (every file in place).
    Checkpointed { id: String, dir: String, step: u64 },
    /// Host → policy worker: log-probabilities of these target tokens, no update.
    Score { id: String, job: ScoreJob },
    /// Policy worker → host: the answer to `score`.
    Scored { id: String, scores: Scores },
    /// Host → policy worker: one PPO-clip optimizer step.
    RlStep { id: String, batch: RlBatch },
    /// Policy worker → host: what the RL step did.
    RlDone { id: String, stats: RlStats },
}

impl Message {
    /// The `type` tags of every message, for the mirror test.
    pub const TYPES: [&'static str; 27] = [
        "hello",
        "evaluate",
        "result",
        "error",
        "shutdown",
        "check_problem",
        "problem_report",
        "lease_request",
        "lease_grant",
        "lease_release",
        "measure_memory",
        "memory_report",
        "preflight",
        "preflight_result",
        "generate",
        "generation",
        "train_setup",
        "train_ready",
        "train_step",
        "eval_loss",
        "step_done",
        "save_checkpoint",
        "checkpointed",
        "score",
        "scored",
        "rl_step",
        "rl_done",
    ];

    /// One line of the wire format, without the newline.
    pub fn to_line(&self) -> String {
        // Serialising these types cannot fail: no maps with non-string keys.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parse one line, checking the version before the shape so a mismatch is named as such.
    pub fn from_line(line: &str) -> Result<Message, ProtocolError> {
        let trimmed = line.trim_end();
        let malformed = |source| ProtocolError::Malformed { line: truncate(trimmed, 300), source };
        let value: Value = serde_json::from_str(trimmed).map_err(malformed)?;
        open(value).map_err(|e| match e {
            Opening::Version(found) => {
                ProtocolError::VersionMismatch { expected: PROTOCOL_VERSION, found }
            }
            Opening::Body(source) => malformed(source),
        })
    }
}

/// Why an envelope did not open.
enum Opening {
    /// The line speaks another protocol version.
    Version(u32),
    /// The line is no message of this version (missing version, unknown type or field,
    /// a value outside a closed set, ...).
    Body(serde_json::Error),
}

/// Checks and removes the envelope's `protocol`, then reads the message body.
fn open(mut value: Value) -> Result<Message, Opening> {
    if let Some(object) = value.as_object_mut() {
        match object.remove("protocol") {
            None => return Err(Opening::Body(serde_json::Error::missing_field("protocol"))),
            Some(found) => match found.as_u64() {
                Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
                Some(v) => return Err(Opening::Version(u32::try_from(v).unwrap_or(u32::MAX))),
                None => {
                    return Err(Opening::Body(serde_json::Error::custom(format!(
                        "the protocol version must be a non-negative integer, not {found}"
                    ))))
                }
            },
        }
    }
    Message::deserialize(value).map_err(Opening::Body)
}

/// The body as the derive writes it (its inherent function, not this trait's).
struct Body<'a>(&'a Message);

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Message::serialize(self.0, serializer)
    }
}

/// The envelope on the way out: the body's fields (`type` first), then `protocol`.
#[derive(Serialize)]
struct Sealed<'a> {
    #[serde(flatten)]
    body: Body<'a>,
    protocol: u32,
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Sealed { body: Body(self), protocol: PROTOCOL_VERSION }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Through a JSON value: the version must be read before the body's shape.
        let value = Value::deserialize(deserializer)?;
        open(value).map_err(|e| match e {
            Opening::Version(found) => D::Error::custom(ProtocolError::VersionMismatch {
                expected: PROTOCOL_VERSION,
                found,
            }),
            Opening::Body(source) => D::Error::custom(source),
        })
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample_messages;

    #[test]
    fn the_version_is_written_once_at_the_top_level() {
        let value = serde_json::to_value(Message::Shutdown {}).unwrap();
        assert_eq!(value, serde_json::json!({"type": "shutdown", "protocol": PROTOCOL_VERSION}));
        let line = Message::LeaseRelease { id: "j".into() }.to_line();
        assert!(line.starts_with(r#"{"type":"lease_release""#), "{line}");
        assert_eq!(line.matches("\"protocol\"").count(), 1, "{line}");
    }

    #[test]
    fn every_sample_round_trips_through_the_envelope() {
        for m in sample_messages() {
            assert_eq!(Message::from_line(&m.to_line()).unwrap(), m);
            let via_serde: Message = serde_json::from_str(&m.to_line()).unwrap();
            assert_eq!(via_serde, m);
        }
    }

    #[test]
    fn a_line_without_a_version_is_malformed() {
        let err = Message::from_line(r#"{"type":"shutdown"}"#).unwrap_err();
        assert!(matches!(err, ProtocolError::Malformed { .. }), "{err}");
        assert!(err.to_string().contains("protocol"), "{err}");
        let err = Message::from_line(r#"{"type":"shutdown","protocol":"4"}"#).unwrap_err();
        assert!(matches!(err, ProtocolError::Malformed { .. }), "{err}");
    }

    #[test]
    fn the_version_is_checked_before_the_shape() {
        let err = Message::from_line(r#"{"type":"teleport","protocol":9}"#).unwrap_err();
        assert!(matches!(
            err,
            ProtocolError::VersionMismatch { expected: PROTOCOL_VERSION, found: 9 }
        ));
        let err =
            serde_json::from_str::<Message>(r#"{"type":"shutdown","protocol":4}"#).unwrap_err();
        assert!(err.to_string().contains("version mismatch"), "{err}");
    }

    #[test]
    fn unknown_fields_stay_refused_at_every_level() {
        let line = format!(r#"{{"type":"shutdown","protocol":{PROTOCOL_VERSION},"x":1}}"#);
        assert!(matches!(Message::from_line(&line), Err(ProtocolError::Malformed { .. })));
    }

    #[test]
    fn a_value_outside_a_closed_set_is_named_not_panicked_on() {
        let setup = sample_messages()
            .into_iter()
            .find(|m| matches!(m, Message::TrainSetup { .. }))
            .unwrap();
        let mut v = serde_json::to_value(&setup).unwrap();
        v["setup"]["dtype"] = serde_json::json!("fp16");
        let err = Message::from_line(&v.to_string()).unwrap_err();
        assert!(matches!(err, ProtocolError::Malformed { .. }));
        assert!(err.to_string().contains("fp16"), "{err}");
    }
}

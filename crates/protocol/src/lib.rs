//! The seam between `tritonforge` and its Python children.
//!
//! Messages are newline-delimited JSON objects tagged by `type`, the protocol version in
//! their envelope. These definitions are the source of truth;
//! `python/tritonforge_worker/protocol.py` mirrors them and the crate's tests
//! round-trip every message through it. Tensors never cross: only numbers and text.
//!
//! One module per concern: [`executor`] (evaluating candidates and checking problems),
//! [`generation`] and [`trainer`] (the policy worker), [`envelope`] (the line format and
//! its version), and [`record`]: the evaluation record lives here too, because the
//! executor's verdict is a part of it and every other crate (store, eval, cli) reads it.
//! Everything is re-exported at the root, where the rest of the workspace imports it.

/// A closed set of wire names as a `Copy` enum: serde reads and writes exactly the names
/// given, `as_str`/`Display` print them, and `FromStr` parses them with an [`UnknownName`]
/// error (for configuration). Keeping the name once per variant keeps the three in step.
macro_rules! closed_set {
    (
        $(#[$meta:meta])*
        pub enum $name:ident($what:literal) {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::UnknownName {
                        what: $what,
                        value: s.to_owned(),
                        expected: &[$($text),+],
                    }),
                }
            }
        }
    };
}

pub mod envelope;
pub mod executor;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod generation;
pub mod record;
pub mod trainer;

pub use envelope::{Message, ProtocolError, PROTOCOL_VERSION};
pub use executor::*;
#[cfg(any(test, feature = "fixtures"))]
pub use fixtures::sample_messages;
pub use generation::{ChatTurn, GenerateJob, Generated};
pub use record::{
    EvalConfig, EvalRecord, FindingSeverity, GuardFinding, MemoryUse, PreflightFound, PreflightUse,
    SourceRef,
};
pub use trainer::{
    Attention, Compile, DeviceUse, EngineUse, LoraSetup, MicroBatch, Precision, RlBatch, RlLoss,
    RlMicroBatch, RlStats, SaveJob, ScoreJob, Scores, StepStats, TrainBatch, TrainInfo, TrainSetup,
    WeightDtype,
};

/// A name outside one of the protocol's closed sets (parsed from configuration; on the
/// wire the same case is a [`ProtocolError::Malformed`] naming the value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {value:?}: expected one of {}", expected.join(", "))]
pub struct UnknownName {
    pub what: &'static str,
    pub value: String,
    pub expected: &'static [&'static str],
}

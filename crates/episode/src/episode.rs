//! The episode record: every turn's exact messages, completion, code, verdict and reward.
//! Stored as JSON in the store; `data build` turns solved episodes into training rows.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use tritonforge_protocol::Status;

use crate::message::{ChatMessage, Completion};

/// Why a reply yielded no candidate (its code could not be extracted). Not a verdict of
/// the evaluator: nothing was evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotExtracted {
    /// The reply holds no code block.
    NoCode,
    /// The reply's code defines no `class ModelNew`.
    NoModelNew,
}

impl NotExtracted {
    pub fn as_str(self) -> &'static str {
        match self {
            NotExtracted::NoCode => "no_code",
            NotExtracted::NoModelNew => "no_model_new",
        }
    }
}

/// How a turn ended: the evaluator's verdict, or no candidate at all. Serialised as the
/// bare name (`"correct"`, `"compile_error"`, `"no_code"`, ...), the strings stored
/// episodes have always carried, so old records load unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TurnOutcome {
    Evaluated(Status),
    NotExtracted(NotExtracted),
}

impl TurnOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnOutcome::Evaluated(s) => s.as_str(),
            TurnOutcome::NotExtracted(n) => n.as_str(),
        }
    }

    /// The evaluator found the candidate correct.
    pub fn is_correct(self) -> bool {
        self == TurnOutcome::Evaluated(Status::Correct)
    }
}

/// A turn not yet played has no code: the default exists for `Turn::default()` in
/// builders and tests, not as a verdict anyone records.
impl Default for TurnOutcome {
    fn default() -> Self {
        TurnOutcome::NotExtracted(NotExtracted::NoCode)
    }
}

impl From<Status> for TurnOutcome {
    fn from(s: Status) -> Self {
        TurnOutcome::Evaluated(s)
    }
}

impl From<NotExtracted> for TurnOutcome {
    fn from(n: NotExtracted) -> Self {
        TurnOutcome::NotExtracted(n)
    }
}

impl fmt::Display for TurnOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no turn outcome.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown turn outcome {0:?}")]
pub struct UnknownOutcome(pub String);

impl FromStr for TurnOutcome {
    type Err = UnknownOutcome;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(status) = Status::ALL.into_iter().find(|x| x.as_str() == s) {
            return Ok(TurnOutcome::Evaluated(status));
        }
        [NotExtracted::NoCode, NotExtracted::NoModelNew]
            .into_iter()
            .find(|x| x.as_str() == s)
            .map(TurnOutcome::NotExtracted)
            .ok_or_else(|| UnknownOutcome(s.to_string()))
    }
}

/// One turn: the exact messages sent, the completion, the code, the verdict, the reward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Turn {
    pub turn: u32,
    pub messages: Vec<ChatMessage>,
    pub completion: Completion,
    /// `None` when extraction failed.
    pub code: Option<String>,
    /// A status of the evaluator, or `no_code` / `no_model_new`.
    pub outcome: TurnOutcome,
    pub stage: Option<String>,
    pub message: String,
    /// The evaluation record's key in the store.
    pub record: Option<String>,
    pub speedup: Option<f64>,
    pub reward: f64,
    /// Discounted return from this turn on.
    pub ret: f64,
    /// Completions asked again because their code repeated an earlier turn's (the one
    /// kept is the last asked).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeats: u32,
    /// Where the turn's evaluation time went; all zero when nothing was evaluated.
    #[serde(default, skip_serializing_if = "TurnTimes::is_empty")]
    pub times: TurnTimes,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A turn's evaluation as the episode waited for it: the seconds from sending the
/// candidate to its verdict, and the parts of them the record names (waiting for a
/// started process, waiting for a GPU lease, holding the GPU alone to be timed). A step
/// of multi-turn RL lasts as long as its slowest chain of turns, and these say what
/// that chain waited on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct TurnTimes {
    pub evaluate_s: f64,
    #[serde(default)]
    pub start_wait_s: f64,
    #[serde(default)]
    pub lease_wait_s: f64,
    #[serde(default)]
    pub exclusive_s: f64,
    /// Waiting for a place among the candidates the pool runs at once.
    #[serde(default)]
    pub queue_wait_s: f64,
    /// Waiting for the problem's memory need to be measured (its first candidates).
    #[serde(default)]
    pub prepare_s: f64,
}

impl TurnTimes {
    pub fn is_empty(&self) -> bool {
        *self == TurnTimes::default()
    }

    /// Each part added: the turns of a chain, one after another.
    pub fn add(&mut self, o: &TurnTimes) {
        self.evaluate_s += o.evaluate_s;
        self.start_wait_s += o.start_wait_s;
        self.lease_wait_s += o.lease_wait_s;
        self.exclusive_s += o.exclusive_s;
        self.queue_wait_s += o.queue_wait_s;
        self.prepare_s += o.prepare_s;
    }

    /// Each part times `k` (a sum over chains into their mean).
    pub fn scaled(mut self, k: f64) -> TurnTimes {
        for part in [
            &mut self.evaluate_s,
            &mut self.start_wait_s,
            &mut self.lease_wait_s,
            &mut self.exclusive_s,
            &mut self.queue_wait_s,
            &mut self.prepare_s,
        ] {
            *part *= k;
        }
        self
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Episode {
    pub id: String,
    pub run: String,
    pub problem: String,
    pub problem_path: String,
    pub sample: u32,
    pub backend: String,
    pub turns: Vec<Turn>,
    /// Why the episode stopped before its turns were used, when it did not end normally
    /// (an unreachable backend, a broken problem).
    pub error: Option<String>,
}

impl Episode {
    /// The last turn's outcome (what the episode ended with).
    pub fn final_outcome(&self) -> &str {
        self.turns.last().map(|t| t.outcome.as_str()).unwrap_or("no_turn")
    }

    /// Correct at any turn.
    pub fn solved(&self) -> bool {
        self.turns.iter().any(|t| t.outcome.is_correct())
    }

    /// Best speedup among correct turns.
    pub fn best_speedup(&self) -> Option<f64> {
        self.turns
            .iter()
            .filter(|t| t.outcome.is_correct())
            .filter_map(|t| t.speedup)
            .fold(None, |acc: Option<f64>, s| Some(acc.map_or(s, |a| a.max(s))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stored episodes carry bare strings; each must load and write back unchanged.
    #[test]
    fn outcomes_keep_their_stored_names() {
        let names = [
            "rejected",
            "compile_error",
            "runtime_error",
            "timeout",
            "incorrect",
            "correct",
            "no_code",
            "no_model_new",
        ];
        for name in names {
            let o: TurnOutcome = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(serde_json::to_value(o).unwrap(), serde_json::json!(name));
            assert_eq!(o.as_str(), name);
            assert_eq!(name.parse::<TurnOutcome>().unwrap(), o);
        }
        assert!(serde_json::from_value::<TurnOutcome>(serde_json::json!("great")).is_err());
        assert!("correct".parse::<TurnOutcome>().unwrap().is_correct());
    }
}

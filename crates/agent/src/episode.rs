//! Multi-turn refinement: prompt → completion → code → evaluation → feedback, up to T
//! turns, stopping early once correct and at least the target speedup (or correct and
//! untimed, in CPU mode). Everything a turn saw and produced is kept in the episode.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tritonforge_bench::{Candidate, Problem};
use tritonforge_eval::Evaluator;
use tritonforge_protocol::{EvalConfig, EvalRecord, Status};

use crate::backend::{Backend, ChatMessage, Completion, Sampling};
use crate::extract::extract_code;
use crate::prompts::{Outcome, PromptError, Prompts, Target};
use crate::reward::RewardConfig;

#[derive(Debug, Clone)]
pub struct EpisodeConfig {
    pub turns: u32,
    pub target_speedup: f64,
    pub sampling: Sampling,
    pub reward: RewardConfig,
    pub target: Target,
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
    pub outcome: String,
    pub stage: Option<String>,
    pub message: String,
    /// The evaluation record's key in the store.
    pub record: Option<String>,
    pub speedup: Option<f64>,
    pub reward: f64,
    /// Discounted return from this turn on.
    pub ret: f64,
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
        self.turns
            .last()
            .map(|t| t.outcome.as_str())
            .unwrap_or("no_turn")
    }

    /// Correct at any turn.
    pub fn solved(&self) -> bool {
        self.turns.iter().any(|t| t.outcome == "correct")
    }

    /// Best speedup among correct turns.
    pub fn best_speedup(&self) -> Option<f64> {
        self.turns
            .iter()
            .filter(|t| t.outcome == "correct")
            .filter_map(|t| t.speedup)
            .fold(None, |acc: Option<f64>, s| {
                Some(acc.map_or(s, |a| a.max(s)))
            })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EpisodeError {
    #[error(transparent)]
    Prompt(#[from] PromptError),
}

/// Run one episode. Backend and evaluator failures end it with `error` set (the turns
/// already played are kept); only a broken prompt template is an `Err`.
#[allow(clippy::too_many_arguments)]
pub async fn run_episode(
    backend: &dyn Backend,
    evaluator: &Evaluator,
    prompts: &Prompts,
    problem: &Problem,
    eval: &EvalConfig,
    cfg: &EpisodeConfig,
    run: &str,
    sample: u32,
) -> Result<Episode, EpisodeError> {
    let mut messages = vec![
        ChatMessage::new("system", prompts.system()?),
        ChatMessage::new(
            "user",
            prompts.task(&problem.name, &problem.source, &cfg.target)?,
        ),
    ];
    let mut ep = Episode {
        id: crate::runner::episode_id(run, &problem.name, sample),
        run: run.to_string(),
        problem: problem.name.clone(),
        problem_path: problem.path.display().to_string(),
        sample,
        backend: backend.describe(),
        turns: Vec::new(),
        error: None,
    };
    let mut sampling = cfg.sampling.clone();
    for t in 0..cfg.turns {
        sampling.seed = cfg
            .sampling
            .seed
            .map(|s| s + u64::from(t) * 1_000_003 + u64::from(sample));
        let completion = match backend.complete(&messages, &sampling).await {
            Ok(c) => c,
            Err(e) => {
                ep.error = Some(format!("turn {t}: {e}"));
                break;
            }
        };
        let sent = messages.clone();
        let (turn, feedback, done) = match extract_code(&completion.text) {
            Err(e) => {
                let fb = prompts.feedback(&Outcome::NoCode(e.outcome()), cfg.target_speedup)?;
                let turn = Turn {
                    turn: t,
                    messages: sent,
                    completion: completion.clone(),
                    code: None,
                    outcome: e.outcome().to_string(),
                    stage: None,
                    message: e.to_string(),
                    record: None,
                    speedup: None,
                    reward: cfg.reward.no_code,
                    ret: 0.0,
                };
                (turn, fb, false)
            }
            Ok((code, _)) => {
                let candidate = Candidate {
                    name: format!("{}_s{sample}_t{t}", problem.name),
                    path: PathBuf::from(format!("{}_s{sample}_t{t}.py", problem.name)),
                    source: code.clone(),
                };
                let record: EvalRecord = match evaluator.evaluate(problem, &candidate, eval).await {
                    Ok(ev) => ev.record,
                    Err(e) => {
                        ep.error = Some(format!("turn {t}: evaluation failed: {e}"));
                        break;
                    }
                };
                let fb = prompts.feedback(&Outcome::Evaluated(&record), cfg.target_speedup)?;
                let speedup = record.verdict.timing.as_ref().map(|x| x.speedup);
                let correct = record.verdict.status == Status::Correct;
                let done = correct && speedup.is_none_or(|s| s >= cfg.target_speedup);
                let turn = Turn {
                    turn: t,
                    messages: sent,
                    completion: completion.clone(),
                    code: Some(code),
                    outcome: serde_json::to_value(record.verdict.status)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    stage: Some(record.verdict.stage.to_string()),
                    message: record.verdict.message.clone(),
                    record: Some(record.key.clone()),
                    speedup,
                    reward: cfg.reward.score(&record),
                    ret: 0.0,
                };
                (turn, fb, done)
            }
        };
        ep.turns.push(turn);
        if done {
            break;
        }
        messages.push(ChatMessage::new("assistant", completion.text));
        messages.push(ChatMessage::new("user", feedback));
    }
    let rewards: Vec<f64> = ep.turns.iter().map(|t| t.reward).collect();
    for (turn, r) in ep.turns.iter_mut().zip(cfg.reward.returns(&rewards)) {
        turn.ret = r;
    }
    Ok(ep)
}

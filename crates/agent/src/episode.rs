//! Multi-turn refinement: prompt → completion → code → evaluation → feedback, up to T
//! turns, stopping early once correct and at least the target speedup (or correct and
//! untimed, in CPU mode). Everything a turn saw and produced is kept in the episode.
//! The record types themselves ([`Episode`], [`Turn`]) live in `tritonforge-episode`,
//! below the evaluator, and are re-exported here at their old paths.

use std::path::PathBuf;
use std::time::Instant;

use tritonforge_eval::EvalService;
use tritonforge_protocol::{EvalConfig, EvalRecord, Status};
use tritonforge_suite::{Candidate, Problem};

use crate::backend::{Backend, ChatMessage, Sampling};
use crate::extract::extract_code;
use crate::prompts::{Attempt, PromptError, Prompts, Target};
use crate::reward::RewardConfig;

pub use tritonforge_episode::{Episode, NotExtracted, Turn, TurnOutcome, TurnTimes};

#[derive(Debug, Clone)]
pub struct EpisodeConfig {
    pub turns: u32,
    pub target_speedup: f64,
    pub sampling: Sampling,
    pub reward: RewardConfig,
    pub target: Target,
    /// How many more completions to ask for when a turn's code repeats an earlier turn's
    /// (whitespace aside), each warmer than the last: the same code earns the same
    /// verdict, so a repeat wastes the turn. 0 plays the policy as it samples (RL).
    pub repeat_retries: u32,
}

/// Temperature added per retry of a repeated answer, and the most it reaches.
const REPEAT_WARMING: f32 = 0.3;
const REPEAT_MAX_TEMPERATURE: f32 = 1.3;

/// Code with its whitespace runs collapsed: what "the same code" means for a repeat.
fn normalised(code: &str) -> String {
    code.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[derive(Debug, thiserror::Error)]
pub enum EpisodeError {
    #[error(transparent)]
    Prompt(#[from] PromptError),
}

/// Run one episode. Backend and evaluator failures end it with `error` set (the turns
/// already played are kept); only a broken prompt template is an `Err`.
///
/// The evaluator prepares for the problem (measures its memory need) while the first
/// completion is generated, so the first candidate does not wait for that. A failure
/// there is left for the candidate's own evaluation to report.
#[allow(clippy::too_many_arguments)]
pub async fn run_episode(
    backend: &dyn Backend,
    evaluator: &dyn EvalService,
    prompts: &Prompts,
    problem: &Problem,
    eval: &EvalConfig,
    cfg: &EpisodeConfig,
    run: &str,
    sample: u32,
) -> Result<Episode, EpisodeError> {
    let turns = async {
        let mut messages = vec![
            ChatMessage::new("system", prompts.system()?),
            ChatMessage::new("user", prompts.task(&problem.name, &problem.source, &cfg.target)?),
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
        let mut earlier: Vec<String> = Vec::new();
        'turns: for t in 0..cfg.turns {
            sampling.seed =
                cfg.sampling.seed.map(|s| s + u64::from(t) * 1_000_003 + u64::from(sample));
            sampling.temperature = cfg.sampling.temperature;
            let mut repeats = 0;
            let (completion, extracted) = loop {
                let completion = match backend.complete(&messages, &sampling).await {
                    Ok(c) => c,
                    Err(e) => {
                        ep.error = Some(format!("turn {t}: {e}"));
                        break 'turns;
                    }
                };
                let extracted = extract_code(&completion.text);
                let repeated =
                    extracted.as_ref().is_ok_and(|(code, _)| earlier.contains(&normalised(code)));
                if !repeated || repeats >= cfg.repeat_retries {
                    break (completion, extracted);
                }
                repeats += 1;
                sampling.seed = sampling.seed.map(|s| s.wrapping_add(7_919));
                sampling.temperature =
                    (sampling.temperature + REPEAT_WARMING).min(REPEAT_MAX_TEMPERATURE);
            };
            let sent = messages.clone();
            let (turn, feedback, done) = match extracted {
                Err(e) => {
                    let fb = prompts.feedback(&Attempt::NoCode(e.outcome()), cfg.target_speedup)?;
                    let turn = Turn {
                        turn: t,
                        messages: sent,
                        completion: completion.clone(),
                        code: None,
                        outcome: e.not_extracted().into(),
                        stage: None,
                        message: e.to_string(),
                        record: None,
                        speedup: None,
                        reward: cfg.reward.no_code,
                        ret: 0.0,
                        repeats,
                        times: TurnTimes::default(),
                    };
                    (turn, fb, false)
                }
                Ok((code, _)) => {
                    earlier.push(normalised(&code));
                    // Named by its content: the same code for the same problem (common:
                    // run 22's 1,149 correct training answers were 229 distinct sources)
                    // is one evaluation key, evaluated and timed once (identical pairs in
                    // flight wait for the first; later ones are the store's verdict).
                    let name = format!(
                        "{}_{}",
                        problem.name,
                        &tritonforge_eval::sha256_hex(code.as_bytes())[..12]
                    );
                    let candidate = Candidate {
                        path: PathBuf::from(format!("{name}.py")),
                        name,
                        source: code.clone(),
                    };
                    let sent_at = Instant::now();
                    let (record, cached): (EvalRecord, bool) =
                        match evaluator.evaluate(problem, &candidate, eval).await {
                            Ok(ev) => (ev.record, ev.cached),
                            Err(e) => {
                                ep.error = Some(format!("turn {t}: evaluation failed: {e}"));
                                break;
                            }
                        };
                    // A stored verdict's waits were another evaluation's: only the time here.
                    let part = |ms: f64| if cached { 0.0 } else { ms / 1000.0 };
                    let times = TurnTimes {
                        evaluate_s: sent_at.elapsed().as_secs_f64(),
                        start_wait_s: part(record.start_wait_ms),
                        lease_wait_s: part(record.lease_wait_ms),
                        exclusive_s: part(record.exclusive_ms),
                        queue_wait_s: part(record.queue_wait_ms),
                        prepare_s: part(record.prepare_ms),
                    };
                    let fb = prompts.feedback(&Attempt::Evaluated(&record), cfg.target_speedup)?;
                    let speedup = record.verdict.timing.as_ref().map(|x| x.speedup);
                    let correct = record.verdict.status == Status::Correct;
                    let done = correct && speedup.is_none_or(|s| s >= cfg.target_speedup);
                    let turn = Turn {
                        turn: t,
                        messages: sent,
                        completion: completion.clone(),
                        code: Some(code),
                        outcome: record.verdict.status.into(),
                        stage: Some(record.verdict.stage.to_string()),
                        message: record.verdict.message.clone(),
                        record: Some(record.key.clone()),
                        speedup,
                        reward: cfg.reward.score(&record),
                        ret: 0.0,
                        repeats,
                        times,
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
    };
    let (_, played) = tokio::join!(evaluator.prepare(problem, eval), turns);
    played
}

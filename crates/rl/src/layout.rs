//! Token layouts: an episode's turns as training sequences, with the exact ids the
//! generator saw and produced (never re-tokenised).
//!
//! Turn `t` is its prompt ids (the chat so far, as the generator rendered it) followed by
//! its completion ids. When turn `t + 1`'s prompt begins with everything of turn `t`
//! (prompt and completion, token for token), the two share one sequence: the feedback
//! tokens between them join with loss mask 0, and the forward pass over the shared prefix
//! is paid once. When it does not (a chat template that re-renders the previous answer
//! differently from the sampled ids), turn `t + 1` starts a sequence of its own. Only
//! completion tokens are targets: never the prompt, the system text or the feedback.

use tritonforge_agent::Episode;

/// One training sequence.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sequence {
    pub ids: Vec<u32>,
    /// 1 on the model's own tokens.
    pub mask: Vec<u8>,
    /// Per target token (the mask's ones after position 0, in order): its turn's
    /// advantage, the generator's log-probability, and the turn it belongs to.
    pub advantages: Vec<f32>,
    pub behaviour: Vec<f32>,
    pub turn_of: Vec<u32>,
}

impl Sequence {
    pub fn targets(&self) -> usize {
        self.advantages.len()
    }

    fn push_context(&mut self, ids: &[u32]) {
        self.ids.extend_from_slice(ids);
        self.mask.extend(std::iter::repeat_n(0, ids.len()));
    }

    fn push_completion(&mut self, ids: &[u32], logprobs: &[f32], advantage: f32, turn: u32) {
        for (&id, &lp) in ids.iter().zip(logprobs) {
            // Position 0 is never a target (nothing predicts it).
            if !self.ids.is_empty() {
                self.advantages.push(advantage);
                self.behaviour.push(lp);
                self.turn_of.push(turn);
                self.mask.push(1);
            } else {
                self.mask.push(0);
            }
            self.ids.push(id);
        }
    }
}

/// Which of a completion's log-probabilities the loss takes as the behaviour policy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// The model's own, untempered: right when the rollout sampled at temperature 1.
    Model,
    /// The sampling distribution's (temperature applied): the learner then scores the
    /// same tempered distribution, so ratio and importance weight compare like with like.
    Sampled,
}

/// Why an episode's turns cannot be trained on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LayoutError {
    #[error(
        "episode {episode} turn {turn}: the backend returned no token ids or log-probabilities; \
         reinforcement learning needs a generator that returns them (the embedded worker, \
         SGLang's native API)"
    )]
    NoTokens { episode: String, turn: u32 },
    #[error(
        "episode {episode} turn {turn}: the backend returned no sampling log-probabilities; \
         training at a rollout temperature other than 1 needs them (the embedded worker \
         returns them; with another backend set rollout.temperature = 1.0)"
    )]
    NoSamplingLogprobs { episode: String, turn: u32 },
    #[error(
        "episode {episode} turn {turn}: {ids} completion ids but {logprobs} log-probabilities"
    )]
    Mismatch { episode: String, turn: u32, ids: usize, logprobs: usize },
}

/// What laying out an episode did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Laid {
    pub sequences: Vec<Sequence>,
    /// Turns dropped because their sequence would exceed the length limit.
    pub too_long: usize,
    /// Turns that joined the sequence of the turn before.
    pub merged: usize,
    /// Turns cut at their token cap, laid out as context (no loss) under `mask_truncated`.
    pub masked: usize,
}

/// Lay out `ep`'s turns with `advantages[t]` per turn; sequences longer than `max_len`
/// tokens are not built (a turn that alone exceeds it is dropped and counted). With
/// `mask_truncated`, a turn whose completion stopped at its token cap stays in its
/// sequence as context, with no loss: the cap, not the policy, decided how it ended.
/// `behaviour` says which log-probabilities the loss compares against.
pub fn lay_out(
    ep: &Episode,
    advantages: &[f64],
    max_len: usize,
    mask_truncated: bool,
    behaviour: Behaviour,
) -> Result<Laid, LayoutError> {
    let mut out = Laid::default();
    let mut cur: Option<Sequence> = None;
    for (turn, adv) in ep.turns.iter().zip(advantages) {
        let c = &turn.completion;
        let (Some(prompt), Some(ids), Some(model_lps)) = (&c.prompt_ids, &c.token_ids, &c.logprobs)
        else {
            return Err(LayoutError::NoTokens { episode: ep.id.clone(), turn: turn.turn });
        };
        let lps = match behaviour {
            Behaviour::Model => model_lps,
            Behaviour::Sampled => match &c.sampling_logprobs {
                Some(v) => v,
                // Nothing was sampled: there is nothing to describe.
                None if ids.is_empty() => model_lps,
                None => {
                    return Err(LayoutError::NoSamplingLogprobs {
                        episode: ep.id.clone(),
                        turn: turn.turn,
                    })
                }
            },
        };
        if ids.len() != lps.len() {
            return Err(LayoutError::Mismatch {
                episode: ep.id.clone(),
                turn: turn.turn,
                ids: ids.len(),
                logprobs: lps.len(),
            });
        }
        let adv = *adv as f32;
        let masked = mask_truncated && c.finish_reason.as_deref() == Some("length");
        out.masked += usize::from(masked);
        let push = |seq: &mut Sequence| {
            if masked {
                seq.push_context(ids);
            } else {
                seq.push_completion(ids, lps, adv, turn.turn);
            }
        };
        if let Some(seq) = cur.as_mut() {
            let joins = prompt.len() >= seq.ids.len()
                && prompt[..seq.ids.len()] == seq.ids[..]
                && prompt.len() + ids.len() <= max_len;
            if joins {
                seq.push_context(&prompt[seq.ids.len()..]);
                push(seq);
                out.merged += 1;
                continue;
            }
            out.sequences.extend(cur.take());
        }
        if prompt.len() + ids.len() > max_len {
            out.too_long += 1;
            continue;
        }
        let mut seq = Sequence::default();
        seq.push_context(prompt);
        push(&mut seq);
        cur = Some(seq);
    }
    out.sequences.extend(cur);
    out.sequences.retain(|s| s.targets() > 0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tritonforge_agent::{Completion, Turn};

    fn turn(t: u32, prompt: &[u32], ids: &[u32]) -> Turn {
        Turn {
            turn: t,
            completion: Completion {
                prompt_ids: Some(prompt.to_vec()),
                token_ids: Some(ids.to_vec()),
                logprobs: Some(ids.iter().map(|&i| -(i as f32) / 100.0).collect()),
                ..Completion::default()
            },
            ..Turn::default()
        }
    }

    fn episode(turns: Vec<Turn>) -> Episode {
        Episode { id: "e".into(), turns, ..Episode::default() }
    }

    /// Three turns whose prompts extend the previous turn exactly: one sequence; the
    /// mask covers the three completions and nothing of the prompts or feedback.
    #[test]
    fn turns_that_extend_each_other_share_one_sequence() {
        // System+task = [1, 2, 3]; completions [10, 11], [20], [30, 31, 32]; feedback
        // tokens [7, 8] and [9].
        let ep = episode(vec![
            turn(0, &[1, 2, 3], &[10, 11]),
            turn(1, &[1, 2, 3, 10, 11, 7, 8], &[20]),
            turn(2, &[1, 2, 3, 10, 11, 7, 8, 20, 9], &[30, 31, 32]),
        ]);
        let laid = lay_out(&ep, &[0.5, -1.0, 2.0], 100, false, Behaviour::Model).unwrap();
        assert_eq!(laid.sequences.len(), 1);
        assert_eq!(laid.merged, 2);
        let s = &laid.sequences[0];
        assert_eq!(s.ids, vec![1, 2, 3, 10, 11, 7, 8, 20, 9, 30, 31, 32]);
        assert_eq!(s.mask, vec![0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1]);
        assert_eq!(s.advantages, vec![0.5, 0.5, -1.0, 2.0, 2.0, 2.0]);
        assert_eq!(s.turn_of, vec![0, 0, 1, 2, 2, 2]);
        assert_eq!(s.behaviour, vec![-0.1, -0.11, -0.2, -0.3, -0.31, -0.32]);
        // The mask's ones are exactly the per-token lists' entries.
        assert_eq!(s.mask.iter().skip(1).filter(|&&m| m == 1).count(), s.targets());
    }

    /// A template that re-renders the earlier answer differently: the next turn is a
    /// sequence of its own, with its own prompt as context.
    #[test]
    fn a_prompt_that_does_not_extend_starts_a_new_sequence() {
        let ep = episode(vec![
            turn(0, &[1, 2], &[10, 11]),
            turn(1, &[1, 2, 10, 99, 7], &[20, 21]), // 99: the answer re-tokenised
        ]);
        let laid = lay_out(&ep, &[1.0, -1.0], 100, false, Behaviour::Model).unwrap();
        assert_eq!(laid.merged, 0);
        assert_eq!(laid.sequences.len(), 2);
        assert_eq!(laid.sequences[1].ids, vec![1, 2, 10, 99, 7, 20, 21]);
        assert_eq!(laid.sequences[1].mask, vec![0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(laid.sequences[1].advantages, vec![-1.0, -1.0]);
    }

    /// The length limit: a turn that would make its sequence too long starts another; a
    /// turn too long alone is dropped and counted.
    #[test]
    fn the_length_limit_splits_or_drops() {
        let ep = episode(vec![
            turn(0, &[1, 2], &[10, 11]),
            turn(1, &[1, 2, 10, 11, 7], &[20, 21]), // 7 tokens: over a limit of 6
            turn(2, &[1, 2, 3, 4, 5, 6, 7], &[30]), // 8 alone
        ]);
        let laid = lay_out(&ep, &[1.0, 1.0, 1.0], 6, false, Behaviour::Model).unwrap();
        assert_eq!(laid.too_long, 2);
        assert_eq!(laid.sequences.len(), 1);
        assert_eq!(laid.sequences[0].ids, vec![1, 2, 10, 11]);
    }

    /// With `mask_truncated`, a turn cut at its cap stays in the sequence as context and
    /// is no target; without it, it is trained like the others.
    #[test]
    fn a_turn_cut_at_its_cap_is_context_when_masked() {
        let mut cut = turn(1, &[1, 2, 3, 10, 11, 7], &[20, 21]);
        cut.completion.finish_reason = Some("length".into());
        let ep = episode(vec![
            turn(0, &[1, 2, 3], &[10, 11]),
            cut,
            turn(2, &[1, 2, 3, 10, 11, 7, 20, 21, 9], &[30]),
        ]);
        let laid = lay_out(&ep, &[0.5, -1.0, 2.0], 100, true, Behaviour::Model).unwrap();
        assert_eq!((laid.sequences.len(), laid.merged, laid.masked), (1, 2, 1));
        let s = &laid.sequences[0];
        assert_eq!(s.ids, vec![1, 2, 3, 10, 11, 7, 20, 21, 9, 30]);
        assert_eq!(s.mask, vec![0, 0, 0, 1, 1, 0, 0, 0, 0, 1]);
        assert_eq!((s.advantages.clone(), s.turn_of.clone()), (vec![0.5, 0.5, 2.0], vec![0, 0, 2]));
        let plain = lay_out(&ep, &[0.5, -1.0, 2.0], 100, false, Behaviour::Model).unwrap();
        assert_eq!(plain.masked, 0);
        assert_eq!(plain.sequences[0].turn_of, vec![0, 0, 1, 1, 2]);
        // An episode whose only turn was cut leaves nothing to train.
        let mut only = turn(0, &[1], &[5, 6]);
        only.completion.finish_reason = Some("length".into());
        assert!(lay_out(&episode(vec![only]), &[1.0], 10, true, Behaviour::Model)
            .unwrap()
            .sequences
            .is_empty());
    }

    #[test]
    fn missing_ids_are_named() {
        let mut t = turn(0, &[1], &[2]);
        t.completion.token_ids = None;
        let err = lay_out(&episode(vec![t]), &[1.0], 10, false, Behaviour::Model).unwrap_err();
        assert!(err.to_string().contains("no token ids"), "{err}");
        let mut t = turn(0, &[1], &[2, 3]);
        t.completion.logprobs = Some(vec![0.0]);
        assert!(matches!(
            lay_out(&episode(vec![t]), &[1.0], 10, false, Behaviour::Model),
            Err(LayoutError::Mismatch { ids: 2, logprobs: 1, .. })
        ));
    }

    /// Sampled at a temperature, the behaviour log-probabilities are the sampling
    /// distribution's; a backend that gives none is named, not trained on the model's.
    #[test]
    fn tempered_rollouts_take_the_sampling_logprobs() {
        let mut t = turn(0, &[1], &[2, 3]);
        t.completion.sampling_logprobs = Some(vec![-0.5, -0.25]);
        let ep = episode(vec![t.clone()]);
        let sampled = lay_out(&ep, &[1.0], 10, false, Behaviour::Sampled).unwrap();
        assert_eq!(sampled.sequences[0].behaviour, vec![-0.5, -0.25]);
        let model = lay_out(&ep, &[1.0], 10, false, Behaviour::Model).unwrap();
        assert_eq!(model.sequences[0].behaviour, vec![-0.02, -0.03]);
        t.completion.sampling_logprobs = None;
        let err = lay_out(&episode(vec![t]), &[1.0], 10, false, Behaviour::Sampled).unwrap_err();
        assert!(
            matches!(err, LayoutError::NoSamplingLogprobs { turn: 0, .. })
                && err.to_string().contains("rollout.temperature"),
            "{err}"
        );
    }
}

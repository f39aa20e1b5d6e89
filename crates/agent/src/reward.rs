//! Per-turn rewards and discounted returns.
//!
//! Default (preset `default`): `0.3·compiled + 0.5·correct + 0.2·ln(speedup)·correct`,
//! with `ln(speedup)` clamped to `[-1, ln(10)]` (an implausible speedup earns no more than
//! 10×), a guard rejection scored `guard_penalty`, a reply with no usable code scored
//! `no_code`. Preset `tritonforge`: `0.1·compiled + 0.3·correct + min(max(speedup − 1, 0),
//! 2)·correct`, no guard penalty. In both, a speedup whose 95% interval holds 1 is within
//! the evaluator's noise and counts as exactly 1 (`noise_band`), so timing jitter is never
//! paid; without timing (CPU mode) only compile and correctness are rewarded.
//! Returns: `R_t = Σ_k γ^k r_{t+k}` with γ = 0.4.

use serde::{Deserialize, Serialize};
use tritonforge_protocol::{EvalRecord, Status};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RewardConfig {
    pub compiled: f64,
    pub correct: f64,
    pub speed: f64,
    pub guard_penalty: f64,
    pub no_code: f64,
    pub min_log_speedup: f64,
    pub max_log_speedup: f64,
    pub gamma: f64,
    /// How the speedup is paid.
    #[serde(skip_serializing_if = "SpeedTerm::is_log")]
    pub speed_term: SpeedTerm,
    /// `excess`: the most `speedup − 1` pays.
    #[serde(skip_serializing_if = "is_two")]
    pub max_excess: f64,
    /// A speedup whose 95% interval holds 1 counts as 1.
    #[serde(skip_serializing_if = "is_true")]
    pub noise_band: bool,
}

/// The form of the speed term. (The settings above left at their defaults are not
/// written, so a run's id, a hash of its settings, is what it was before they existed.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SpeedTerm {
    /// `speed · clamp(ln(speedup), min_log_speedup, max_log_speedup)`.
    #[default]
    Log,
    /// `speed · min(max(speedup − 1, 0), max_excess)`.
    Excess,
}

impl SpeedTerm {
    fn is_log(&self) -> bool {
        *self == SpeedTerm::Log
    }
}

fn is_two(x: &f64) -> bool {
    *x == 2.0
}

fn is_true(x: &bool) -> bool {
    *x
}

/// `R_t = Σ_k γ^k r_{t+k}`, one per turn: the return of each turn, not one scalar per
/// trajectory (what the episode records and what RL's advantages compare).
pub fn discounted_returns(rewards: &[f64], gamma: f64) -> Vec<f64> {
    let mut out = vec![0.0; rewards.len()];
    let mut acc = 0.0;
    for (i, r) in rewards.iter().enumerate().rev() {
        acc = r + gamma * acc;
        out[i] = acc;
    }
    out
}

/// The named reward settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RewardPreset {
    /// Ours: log speedup, guard penalty.
    #[default]
    Default,
    /// TritonForge's recipe: 0.1 compiled, 0.3 correct, excess speedup capped at 2.
    Tritonforge,
}

impl RewardPreset {
    pub fn config(self) -> RewardConfig {
        match self {
            RewardPreset::Default => RewardConfig::default(),
            RewardPreset::Tritonforge => RewardConfig {
                compiled: 0.1,
                correct: 0.3,
                speed: 1.0,
                guard_penalty: 0.0,
                speed_term: SpeedTerm::Excess,
                ..RewardConfig::default()
            },
        }
    }
}

impl Default for RewardConfig {
    fn default() -> Self {
        RewardConfig {
            compiled: 0.3,
            correct: 0.5,
            speed: 0.2,
            guard_penalty: -0.5,
            no_code: 0.0,
            min_log_speedup: -1.0,
            max_log_speedup: 10f64.ln(),
            gamma: 0.4,
            speed_term: SpeedTerm::Log,
            max_excess: 2.0,
            noise_band: true,
        }
    }
}

impl RewardConfig {
    /// Weights from a TOML file (any field left out keeps its default); errors name the file.
    pub fn load(path: &std::path::Path) -> Result<RewardConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The reward of one evaluated turn.
    pub fn score(&self, r: &EvalRecord) -> f64 {
        let timing = r.verdict.timing.as_ref().map(|t| (t.speedup, t.speedup_low, t.speedup_high));
        self.score_parts(r.verdict.status, timing)
    }

    /// The reward of a verdict `status` with `(speedup, low, high)` when it was timed.
    pub fn score_parts(&self, status: Status, timing: Option<(f64, f64, f64)>) -> f64 {
        if status == Status::Rejected {
            return self.guard_penalty;
        }
        let compiled = !matches!(status, Status::CompileError);
        let mut reward = self.compiled * f64::from(u8::from(compiled));
        if status != Status::Correct {
            return reward;
        }
        reward += self.correct;
        if let Some((speedup, low, high)) = timing {
            if speedup.is_finite() && speedup > 0.0 {
                let s = if self.noise_band && low <= 1.0 && high >= 1.0 { 1.0 } else { speedup };
                reward += self.speed
                    * match self.speed_term {
                        SpeedTerm::Log => s.ln().clamp(self.min_log_speedup, self.max_log_speedup),
                        SpeedTerm::Excess => (s - 1.0).clamp(0.0, self.max_excess),
                    };
            }
        }
        reward
    }

    /// Discounted returns, one per turn.
    pub fn returns(&self, rewards: &[f64]) -> Vec<f64> {
        discounted_returns(rewards, self.gamma)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(c: &RewardConfig, status: Status, speedup: f64, low: f64, high: f64) -> f64 {
        c.score_parts(status, Some((speedup, low, high)))
    }

    #[test]
    fn presets_pay_what_they_say() {
        let ours = RewardPreset::Default.config();
        let tf = RewardPreset::Tritonforge.config();
        // Correct and 1.5x, clearly outside the noise.
        let correct = Status::Correct;
        assert!((timed(&ours, correct, 1.5, 1.45, 1.55) - (0.8 + 0.2 * 1.5f64.ln())).abs() < 1e-12);
        assert!((timed(&tf, correct, 1.5, 1.45, 1.55) - 0.9).abs() < 1e-12);
        // Far faster: the excess is capped at 2.
        assert!((timed(&tf, correct, 9.0, 8.5, 9.5) - 2.4).abs() < 1e-12);
        // Within the noise band: exactly 1x, whichever side the median fell.
        for s in [0.97, 1.03] {
            assert!((timed(&ours, correct, s, 0.95, 1.05) - 0.8).abs() < 1e-12, "{s}");
            assert!((timed(&tf, correct, s, 0.95, 1.05) - 0.4).abs() < 1e-12, "{s}");
        }
        // Outside the band the median counts.
        assert!((timed(&tf, correct, 1.03, 1.02, 1.04) - 0.43).abs() < 1e-12);
        // Slower, outside the noise: ours pays less than correct alone, theirs no less.
        assert!(timed(&ours, correct, 0.5, 0.45, 0.55) < 0.8);
        assert!((timed(&tf, correct, 0.5, 0.45, 0.55) - 0.4).abs() < 1e-12);
        // Guard rejection: ours penalises, theirs scores nothing.
        assert_eq!(timed(&ours, Status::Rejected, 1.0, 1.0, 1.0), -0.5);
        assert_eq!(timed(&tf, Status::Rejected, 1.0, 1.0, 1.0), 0.0);
        // Compiled, wrong: the compile term only; not compiled: nothing.
        assert!((timed(&tf, Status::Incorrect, 1.0, 1.0, 1.0) - 0.1).abs() < 1e-12);
        assert_eq!(tf.score_parts(Status::CompileError, None), 0.0);
        // Untimed (CPU mode): compile and correctness only.
        assert!((tf.score_parts(correct, None) - 0.4).abs() < 1e-12);
        assert!((ours.score_parts(correct, None) - 0.8).abs() < 1e-12);
        // The default's new settings are not written: old run ids stay.
        let text = serde_json::to_string(&ours).unwrap();
        assert!(!text.contains("noise_band") && !text.contains("speed_term"), "{text}");
        let back: RewardConfig = toml::from_str("speed_term = \"excess\"").unwrap();
        assert_eq!(back.speed_term, SpeedTerm::Excess);
    }

    #[test]
    fn returns_discount_later_turns() {
        let c = RewardConfig::default();
        let r = c.returns(&[0.3, 0.0, 1.0]);
        assert!((r[2] - 1.0).abs() < 1e-12);
        assert!((r[1] - 0.4).abs() < 1e-12);
        assert!((r[0] - (0.3 + 0.4 * 0.4)).abs() < 1e-12);
        assert!(c.returns(&[]).is_empty());
    }
}

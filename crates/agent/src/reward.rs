//! Per-turn rewards and discounted returns.
//!
//! Default: `0.3·compiled + 0.5·correct + 0.2·ln(speedup)·correct`, with `ln(speedup)`
//! clamped to `[-1, ln(10)]` (an implausible speedup earns no more than 10×), a guard
//! rejection scored `guard_penalty`, a reply with no usable code scored `no_code`.
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
        if r.verdict.status == Status::Rejected {
            return self.guard_penalty;
        }
        let compiled = !matches!(r.verdict.status, Status::CompileError);
        let correct = r.verdict.status == Status::Correct;
        let mut reward = self.compiled * f64::from(u8::from(compiled));
        if correct {
            reward += self.correct;
            if let Some(t) = &r.verdict.timing {
                if t.speedup.is_finite() && t.speedup > 0.0 {
                    let ls = t.speedup.ln().clamp(self.min_log_speedup, self.max_log_speedup);
                    reward += self.speed * ls;
                }
            }
        }
        reward
    }

    /// Discounted returns, one per turn.
    pub fn returns(&self, rewards: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; rewards.len()];
        let mut acc = 0.0;
        for (i, r) in rewards.iter().enumerate().rev() {
            acc = r + self.gamma * acc;
            out[i] = acc;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

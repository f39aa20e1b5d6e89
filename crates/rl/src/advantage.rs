//! Per-turn returns and group-relative advantages.
//!
//! A group is the `G` episodes of one problem in one step. Turn `t` of every episode that
//! reached it is compared with turn `t` of the others (its return `R_t = Σ_k γ^k r_{t+k}`,
//! computed per turn, not once per episode): the estimator turns those returns into
//! advantages. A turn reached by fewer than two episodes has no baseline and gets 0. A
//! group whose advantages are all zero carries no signal and is skipped; no filter on the
//! reward's size ever drops a sample (a fast kernel's large reward is the point).

use serde::{Deserialize, Serialize};

/// How returns become advantages within a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Estimator {
    /// `(R − mean) / (std + ε)` over the group (population standard deviation).
    #[default]
    Grpo,
    /// `R − mean`: no division by the standard deviation (Dr. GRPO), so groups of nearly
    /// equal rewards do not have their noise blown up.
    DrGrpo,
    /// `R − mean of the others` (leave-one-out, RLOO; per turn, TRLOO).
    Rloo,
}

/// Added to the standard deviation before dividing (GRPO).
pub const STD_EPS: f64 = 1e-6;

/// Below this an advantage counts as zero (no signal).
pub const ZERO: f64 = 1e-9;

/// Advantages for one group: `returns[i][t]` is episode `i`'s return at turn `t` (episodes
/// may have different numbers of turns). The result has the same shape, or `None` when
/// every advantage is zero (the group carries no signal).
pub fn group_advantages(returns: &[Vec<f64>], estimator: Estimator) -> Option<Vec<Vec<f64>>> {
    let mut adv: Vec<Vec<f64>> = returns.iter().map(|r| vec![0.0; r.len()]).collect();
    let turns = returns.iter().map(Vec::len).max().unwrap_or(0);
    for t in 0..turns {
        let members: Vec<usize> = (0..returns.len()).filter(|&i| returns[i].len() > t).collect();
        let n = members.len();
        if n < 2 {
            continue;
        }
        let values: Vec<f64> = members.iter().map(|&i| returns[i][t]).collect();
        let sum: f64 = values.iter().sum();
        let mean = sum / n as f64;
        let std = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        for (&i, &v) in members.iter().zip(&values) {
            adv[i][t] = match estimator {
                Estimator::Grpo => (v - mean) / (std + STD_EPS),
                Estimator::DrGrpo => v - mean,
                Estimator::Rloo => v - (sum - v) / (n - 1) as f64,
            };
            if adv[i][t].abs() < ZERO {
                adv[i][t] = 0.0;
            }
        }
    }
    adv.iter().flatten().any(|a| *a != 0.0).then_some(adv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tritonforge_agent::reward::discounted_returns as returns;

    fn close(a: &[Vec<f64>], b: &[Vec<f64>]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert_eq!(x.len(), y.len(), "{a:?} vs {b:?}");
            for (u, v) in x.iter().zip(y) {
                assert!((u - v).abs() < 1e-9, "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn returns_are_per_turn() {
        // r = [0.3, 0.0, 1.0], γ = 0.4: R = [0.3 + 0.4·0 + 0.16·1, 0 + 0.4·1, 1].
        let r = returns(&[0.3, 0.0, 1.0], 0.4);
        close(&[r], &[vec![0.46, 0.4, 1.0]]);
        assert!(returns(&[], 0.4).is_empty());
        close(&[returns(&[2.0], 0.4)], &[vec![2.0]]);
    }

    /// One turn, four samples with returns 1, 0, 0, 1: mean 0.5, std 0.5.
    #[test]
    fn one_turn_by_hand() {
        let r = vec![vec![1.0], vec![0.0], vec![0.0], vec![1.0]];
        let s = 0.5 + STD_EPS;
        close(
            &group_advantages(&r, Estimator::Grpo).unwrap(),
            &[vec![0.5 / s], vec![-0.5 / s], vec![-0.5 / s], vec![0.5 / s]],
        );
        close(
            &group_advantages(&r, Estimator::DrGrpo).unwrap(),
            &[vec![0.5], vec![-0.5], vec![-0.5], vec![0.5]],
        );
        // Leave-one-out: 1 − (0+0+1)/3 = 2/3; 0 − (1+0+1)/3 = −2/3.
        let third = 2.0 / 3.0;
        close(
            &group_advantages(&r, Estimator::Rloo).unwrap(),
            &[vec![third], vec![-third], vec![-third], vec![third]],
        );
    }

    /// Three turns, episodes of different lengths: turn t compares only the episodes
    /// that reached it; a turn reached by one episode has no baseline.
    #[test]
    fn three_turns_by_hand() {
        // Episode A solved at turn 0 (reward 1): R = [1].
        // Episode B: rewards [0.1, 0.1, 1.0], γ = 0.4 → R = [0.1 + 0.04 + 0.16, 0.1 + 0.4, 1.0]
        //          = [0.3, 0.5, 1.0].
        // Episode C: rewards [0.1, 0.1, 0.1] → R = [0.1 + 0.04 + 0.016, 0.14, 0.1].
        let a = returns(&[1.0], 0.4);
        let b = returns(&[0.1, 0.1, 1.0], 0.4);
        let c = returns(&[0.1, 0.1, 0.1], 0.4);
        close(&[b.clone(), c.clone()], &[vec![0.3, 0.5, 1.0], vec![0.156, 0.14, 0.1]]);
        let adv = group_advantages(&[a, b, c], Estimator::DrGrpo).unwrap();
        // Turn 0: mean of (1, 0.3, 0.156) = 0.485333...
        let m0 = (1.0 + 0.3 + 0.156) / 3.0;
        // Turn 1: B and C, mean 0.32. Turn 2: B and C, mean 0.55.
        close(&adv, &[vec![1.0 - m0], vec![0.3 - m0, 0.18, 0.45], vec![0.156 - m0, -0.18, -0.45]]);
        // GRPO on turn 1: std of (0.5, 0.14) = 0.18 → ±1.
        let g = group_advantages(
            &[returns(&[1.0], 0.4), returns(&[0.1, 0.1, 1.0], 0.4), returns(&[0.1, 0.1, 0.1], 0.4)],
            Estimator::Grpo,
        )
        .unwrap();
        assert!((g[1][1] - 0.18 / (0.18 + STD_EPS)).abs() < 1e-9);
        assert!((g[2][1] + 0.18 / (0.18 + STD_EPS)).abs() < 1e-9);
        // A turn only one episode reached: no baseline, advantage 0.
        let lone = group_advantages(&[vec![1.0, 0.5], vec![0.0]], Estimator::Grpo).unwrap();
        assert_eq!(lone[0][1], 0.0);
        assert!(lone[0][0] > 0.0 && lone[1][0] < 0.0);
    }

    /// Equal rewards carry no signal: the group is skipped, whatever the estimator; a
    /// large reward is never dropped.
    #[test]
    fn equal_groups_are_skipped_and_large_rewards_kept() {
        for est in [Estimator::Grpo, Estimator::DrGrpo, Estimator::Rloo] {
            assert!(group_advantages(&[vec![0.4], vec![0.4], vec![0.4]], est).is_none());
            assert!(group_advantages(&[vec![0.1, 0.0], vec![0.1, 0.0]], est).is_none());
            assert!(group_advantages(&[vec![3.0]], est).is_none(), "one sample, no baseline");
            let big = group_advantages(&[vec![2.4], vec![0.4]], est).unwrap();
            assert!(big[0][0] > 0.0, "a reward above 1 is the best sample, kept");
        }
    }
}

//! What a candidate is expected to cost in its place, so that the pool starts the
//! costliest first (`places`).
//!
//! A problem already evaluated in this process (an RL loop evaluates the same problems
//! step after step; a batch, several candidates of one problem) is estimated by the mean
//! executor time of its evaluations so far. An unseen one by its candidate's length:
//! most of a fresh candidate's time is Triton compiling its kernels at each shape it is
//! tried at, and that grows with the code. On the H200's mixed 100 of 2026-11-30 the
//! executor time per source byte of the 56 correct suite solutions had a median of 7.5 ms
//! (deciles 4.0 to 10.5), and ordering by length alone came within 4 s of ordering by the
//! true times in replays of that set's batches (`docs/results/evaluator-load.md`).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::places::Priority;

/// Executor milliseconds per byte of an unseen candidate's source.
pub const MS_PER_SOURCE_BYTE: f64 = 7.5;

#[derive(Default)]
struct Seen {
    total_ms: f64,
    n: u32,
}

/// Executor times seen so far, by problem key (the problem, its shapes, whether timed).
#[derive(Default)]
pub(crate) struct Costs(Mutex<HashMap<String, Seen>>);

impl Costs {
    /// The expected executor milliseconds of `source` against the problem `key`.
    pub fn estimate_ms(&self, key: &str, source: &str) -> f64 {
        let seen = self.seen().get(key).map(|s| s.total_ms / s.n as f64);
        seen.unwrap_or(source.len() as f64 * MS_PER_SOURCE_BYTE)
    }

    /// The place queue's priority for that estimate.
    pub fn priority(&self, key: &str, source: &str) -> Priority {
        Priority::cost_ms(self.estimate_ms(key, source))
    }

    /// Record an evaluation's executor time (only answered ones: a timeout or crash says
    /// nothing of the problem's cost).
    pub fn observe(&self, key: &str, executor_ms: f64) {
        if !executor_ms.is_finite() || executor_ms < 0.0 {
            return;
        }
        let mut m = self.seen();
        let s = m.entry(key.to_string()).or_default();
        s.total_ms += executor_ms;
        s.n += 1;
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<String, Seen>> {
        // A panic elsewhere while holding it leaves whole sums behind: keep using them.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unseen_problems_go_by_length_and_seen_ones_by_their_mean() {
        let costs = Costs::default();
        assert_eq!(costs.estimate_ms("conv", &"x".repeat(3000)), 3000.0 * MS_PER_SOURCE_BYTE);
        assert!(costs.priority("conv", &"x".repeat(3000)) > costs.priority("relu", "short"));
        costs.observe("relu", 40_000.0);
        costs.observe("relu", 20_000.0);
        costs.observe("relu", f64::NAN);
        assert_eq!(costs.estimate_ms("relu", "short"), 30_000.0);
        assert!(costs.priority("relu", "short") > costs.priority("conv", &"x".repeat(3000)));
    }
}

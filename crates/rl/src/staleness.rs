//! One-step-off-policy bookkeeping. Rollout batch `b` (the batch trained at step `b`)
//! may start generating once the trainer has applied `b − max_staleness` updates: with
//! staleness 0 every batch comes from the newest weights; with 1 (the default) batch
//! `b + 1` is generated while step `b` trains, so its data is at most one update old
//! when trained on. The trainer corrects for that age per token with the truncated
//! importance weight against the generator's log-probabilities.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gate {
    pub max_staleness: u64,
}

impl Gate {
    /// May batch `b` start, the trainer having applied `version` updates?
    pub fn may_start(&self, b: u64, version: u64) -> bool {
        b <= version + self.max_staleness
    }

    /// The age of batch `b`'s data when trained at `version` updates, generation having
    /// started at `started`: an error past the bound (a scheduling bug, never silent).
    pub fn age(&self, b: u64, started: u64, version: u64) -> Result<u64, String> {
        let age = version.saturating_sub(started);
        if age > self.max_staleness {
            return Err(format!(
                "batch {b} was generated from weights {started} and would train at {version}: \
                 {age} updates old, over max_staleness {}",
                self.max_staleness
            ));
        }
        Ok(age)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated schedule: a producer starts each batch as soon as the gate allows, the
    /// trainer trains batches in order; no batch is ever older than the bound, and with
    /// staleness 1 generation of b + 1 overlaps training of b.
    #[test]
    fn the_gate_bounds_the_age_and_allows_the_overlap() {
        for max in [0u64, 1, 2] {
            let gate = Gate { max_staleness: max };
            let mut started: Vec<u64> = Vec::new();
            let mut overlapped = 0;
            for b in 0..10u64 {
                // Step b trains after steps 0..b did: `b` updates applied so far.
                let version = b;
                // The producer runs ahead as far as the gate lets it.
                while gate.may_start(started.len() as u64, version) && started.len() < 10 {
                    started.push(version);
                }
                assert!(started.len() as u64 > b, "batch {b} must have started");
                let age = gate.age(b, started[b as usize], version).unwrap();
                assert!(age <= max);
                if started.len() as u64 > b + 1 {
                    overlapped += 1;
                }
            }
            if max == 0 {
                assert_eq!(overlapped, 0, "staleness 0: nothing generated ahead");
            } else {
                assert!(overlapped >= 9, "batch b + 1 generated while b trains");
            }
        }
        let gate = Gate { max_staleness: 1 };
        assert!(!gate.may_start(3, 1));
        assert!(gate.age(3, 0, 2).is_err(), "two updates old is refused");
    }
}

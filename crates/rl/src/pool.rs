//! The prompt pool: the problems a run trains on (a suite's train split, synthetic
//! problems, or both, each source with a weight) and the draw of each step's problems,
//! optionally weighted by recent solve rate (a curriculum: problems solved about half the
//! time teach the most; always- and never-solved ones keep a floor so none is forgotten).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::rng::Rng;

/// One problem the pool can draw, by key (`source/name`).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    /// Index of its source (for the source's weight).
    pub source: usize,
}

/// What the pool remembers across steps (saved with a checkpoint).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolState {
    /// Exponential moving average of each drawn problem's solve rate.
    pub solve_rate: BTreeMap<String, f64>,
    /// Times each problem was drawn.
    pub drawn: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Curriculum {
    pub enabled: bool,
    /// Weight of a problem always or never solved, relative to one solved half the time.
    pub floor: f64,
    /// Weight of the newest solve rate in the moving average.
    pub alpha: f64,
}

impl Default for Curriculum {
    fn default() -> Self {
        Curriculum { enabled: false, floor: 0.1, alpha: 0.5 }
    }
}

#[derive(Debug, Clone)]
pub struct Pool {
    pub entries: Vec<Entry>,
    /// Each source's share of draws.
    pub source_weights: Vec<f64>,
    pub curriculum: Curriculum,
    pub state: PoolState,
}

impl Pool {
    /// The draw weight of entry `i`.
    fn weight(&self, i: usize) -> f64 {
        let e = &self.entries[i];
        let size = self.entries.iter().filter(|x| x.source == e.source).count().max(1);
        let base = self.source_weights.get(e.source).copied().unwrap_or(1.0) / size as f64;
        if !self.curriculum.enabled {
            return base;
        }
        let c = match self.state.solve_rate.get(&e.key) {
            None => 1.0,
            Some(p) => (4.0 * p * (1.0 - p)).max(self.curriculum.floor),
        };
        base * c
    }

    /// `n` distinct entries for draw `k` of stream `seed`, never one of `exclude`;
    /// fewer when the pool runs out. The same state, seed and `k` give the same draw.
    pub fn draw(&self, n: usize, seed: u64, k: u64, exclude: &[usize]) -> Vec<usize> {
        let mut rng = Rng::derive(seed, k);
        let mut left: Vec<usize> =
            (0..self.entries.len()).filter(|i| !exclude.contains(i)).collect();
        let mut out = Vec::new();
        while out.len() < n && !left.is_empty() {
            let weights: Vec<f64> = left.iter().map(|&i| self.weight(i)).collect();
            let total: f64 = weights.iter().sum();
            let mut x = rng.unit() * total;
            let mut pick = left.len() - 1;
            for (j, w) in weights.iter().enumerate() {
                if x < *w {
                    pick = j;
                    break;
                }
                x -= w;
            }
            out.push(left.remove(pick));
        }
        out
    }

    /// Record how often entry `i`'s samples were solved this step.
    pub fn observe(&mut self, i: usize, solved: usize, samples: usize) {
        let key = self.entries[i].key.clone();
        let rate = solved as f64 / samples.max(1) as f64;
        let a = self.curriculum.alpha;
        let next = match self.state.solve_rate.get(&key) {
            None => rate,
            Some(old) => a * rate + (1.0 - a) * old,
        };
        self.state.solve_rate.insert(key.clone(), next);
        *self.state.drawn.entry(key).or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize, curriculum: bool) -> Pool {
        Pool {
            entries: (0..n).map(|i| Entry { key: format!("p{i}"), source: i % 2 }).collect(),
            source_weights: vec![1.0, 1.0],
            curriculum: Curriculum { enabled: curriculum, ..Curriculum::default() },
            state: PoolState::default(),
        }
    }

    #[test]
    fn draws_are_distinct_seeded_and_respect_exclusions() {
        let p = pool(10, false);
        let a = p.draw(4, 3, 0, &[]);
        assert_eq!(a.len(), 4);
        let mut d = a.clone();
        d.sort();
        d.dedup();
        assert_eq!(d.len(), 4);
        assert_eq!(p.draw(4, 3, 0, &[]), a, "same seed and index, same draw");
        assert_ne!(p.draw(4, 3, 1, &[]), a);
        let more = p.draw(20, 3, 2, &a);
        assert_eq!(more.len(), 6, "only what is left");
        assert!(more.iter().all(|i| !a.contains(i)));
    }

    #[test]
    fn the_curriculum_favours_problems_solved_half_the_time() {
        let mut p = pool(3, true);
        // p0 always solved, p1 half the time, p2 never.
        for _ in 0..3 {
            p.observe(0, 8, 8);
            p.observe(1, 4, 8);
            p.observe(2, 0, 8);
        }
        let mut counts = [0usize; 3];
        for k in 0..3000 {
            counts[p.draw(1, 9, k, &[])[0]] += 1;
        }
        // Weights 0.1 : 1 : 0.1 → about 83% for p1.
        assert!(counts[1] > 2300, "{counts:?}");
        assert!(counts[0] > 50 && counts[2] > 50, "the floor keeps the others: {counts:?}");
        assert_eq!(p.state.drawn["p1"], 3);
        // Sources weigh by share: source 1 at weight 3 gets about 3/4 of the draws.
        let mut q = pool(4, false);
        q.source_weights = vec![1.0, 3.0];
        let ones = (0..2000).filter(|&k| q.draw(1, 5, k, &[])[0] % 2 == 1).count();
        assert!((1350..1650).contains(&ones), "{ones}");
    }
}

//! From sequences to what the trainer takes: optimizer steps (`updates` per rollout
//! batch) of micro-batches (rows of one sequence each, like lengths together, padded to
//! the longest, at most `micro_tokens` padded tokens), with per-target-token lists.

use tritonforge_protocol::{MicroBatch, RlBatch, RlLoss, RlMicroBatch, TrainBatch};

use crate::layout::Sequence;
use crate::rng::Rng;

/// Which sequences go where: `plan[update][micro]` lists sequence indices.
pub type Plan = Vec<Vec<Vec<usize>>>;

/// Split `seqs` into `updates` optimizer steps of about equal numbers of sequences (a
/// seeded shuffle first, so an update is not all of one problem), each packed into
/// micro-batches. Fewer sequences than updates: one sequence per update.
pub fn plan(seqs: &[Sequence], updates: usize, micro_tokens: usize, seed: u64) -> Plan {
    let mut order: Vec<usize> = (0..seqs.len()).collect();
    Rng::new(seed).shuffle(&mut order);
    let updates = updates.clamp(1, seqs.len().max(1));
    let (base, extra) = (order.len() / updates, order.len() % updates);
    let mut out = Vec::new();
    let mut at = 0;
    for u in 0..updates {
        let n = base + usize::from(u < extra);
        if n > 0 {
            out.push(pack(seqs, order[at..at + n].to_vec(), micro_tokens));
        }
        at += n;
    }
    out
}

/// Rows of like length together; a micro-batch grows while rows × longest row fits.
fn pack(seqs: &[Sequence], mut idx: Vec<usize>, micro_tokens: usize) -> Vec<Vec<usize>> {
    idx.sort_by_key(|&i| (seqs[i].ids.len(), i));
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    for i in idx {
        // Sorted ascending: this row is the longest so far.
        let width = seqs[i].ids.len();
        if !cur.is_empty() && (cur.len() + 1) * width > micro_tokens {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(i);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The rows of one micro-batch, padded (pad id `pad`, mask 0) to the longest.
pub fn rows(seqs: &[Sequence], idx: &[usize], pad: u32) -> MicroBatch {
    let width = idx.iter().map(|&i| seqs[i].ids.len()).max().unwrap_or(0);
    let mut mb = MicroBatch {
        input_ids: Vec::new(),
        loss_mask: Vec::new(),
        position_ids: Vec::new(),
        lengths: Vec::new(),
    };
    for &i in idx {
        let s = &seqs[i];
        let n = s.ids.len();
        let mut ids = s.ids.clone();
        ids.resize(width, pad);
        let mut mask = s.mask.clone();
        mask.resize(width, 0);
        mb.input_ids.push(ids);
        mb.loss_mask.push(mask);
        mb.position_ids.push((0..width as u32).collect());
        mb.lengths.push(n as u32);
    }
    mb
}

/// Every sequence of `plan`, for `score`: one micro-batch per planned micro-batch.
pub fn score_batch(seqs: &[Sequence], plan: &Plan, pad: u32) -> TrainBatch {
    TrainBatch { micro: plan.iter().flatten().map(|m| rows(seqs, m, pad)).collect() }
}

/// Scores (per micro-batch, per row) back to per-sequence lists, in `plan`'s order.
pub fn per_sequence(plan: &Plan, n: usize, scores: Vec<Vec<Vec<f32>>>) -> Vec<Vec<f32>> {
    let mut out = vec![Vec::new(); n];
    for (micro, rows) in plan.iter().flatten().zip(scores) {
        for (&i, row) in micro.iter().zip(rows) {
            out[i] = row;
        }
    }
    out
}

/// Update `u` of `plan` as an RL step; `proximal`/`reference` are per sequence.
pub fn rl_batch(
    seqs: &[Sequence],
    plan: &Plan,
    u: usize,
    proximal: Option<&[Vec<f32>]>,
    reference: Option<&[Vec<f32>]>,
    mut loss: RlLoss,
    pad: u32,
) -> RlBatch {
    let micros = &plan[u];
    loss.loss_tokens =
        micros.iter().flatten().map(|&i| seqs[i].targets() as u64).sum::<u64>().max(1);
    let pick = |lists: Option<&[Vec<f32>]>, m: &[usize]| {
        lists.map(|l| m.iter().map(|&i| l[i].clone()).collect::<Vec<_>>())
    };
    RlBatch {
        micro: micros
            .iter()
            .map(|m| RlMicroBatch {
                rows: rows(seqs, m, pad),
                advantages: m.iter().map(|&i| seqs[i].advantages.clone()).collect(),
                behaviour: m.iter().map(|&i| seqs[i].behaviour.clone()).collect(),
                proximal: pick(proximal, m),
                reference: pick(reference, m),
            })
            .collect(),
        loss,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(len: usize, targets: usize, tag: f32) -> Sequence {
        let mut mask = vec![0u8; len - targets];
        mask.extend(std::iter::repeat_n(1, targets));
        Sequence {
            ids: (0..len as u32).collect(),
            mask,
            advantages: vec![tag; targets],
            behaviour: vec![-tag; targets],
            turn_of: vec![0; targets],
        }
    }

    #[test]
    fn every_sequence_is_planned_once_within_the_token_budget() {
        let seqs: Vec<Sequence> = (0..13).map(|i| seq(5 + 3 * i, 2 + i % 3, i as f32)).collect();
        let p = plan(&seqs, 3, 64, 7);
        assert_eq!(p.len(), 3);
        let mut seen: Vec<usize> = p.iter().flatten().flatten().copied().collect();
        seen.sort();
        assert_eq!(seen, (0..13).collect::<Vec<_>>());
        for m in p.iter().flatten() {
            let width = m.iter().map(|&i| seqs[i].ids.len()).max().unwrap();
            assert!(m.len() == 1 || m.len() * width <= 64, "{m:?}");
        }
        // Same seed, same plan; another seed, another order.
        assert_eq!(plan(&seqs, 3, 64, 7), p);
        assert_ne!(plan(&seqs, 3, 64, 8), p);
        // More updates than sequences: one each at most.
        assert_eq!(plan(&seqs[..2], 5, 64, 1).len(), 2);
    }

    #[test]
    fn rows_pad_and_lists_follow_their_rows() {
        let seqs = vec![seq(4, 2, 1.0), seq(6, 3, 2.0)];
        let p: Plan = vec![vec![vec![1, 0]]];
        let loss = RlLoss {
            clip_low: 0.2,
            clip_high: 0.28,
            kl_coef: 0.0,
            entropy_coef: 0.0,
            tis_cap: 2.0,
            loss_tokens: 0,
            temperature: 1.0,
        };
        let prox = vec![vec![-0.5; 2], vec![-0.25; 3]];
        let b = rl_batch(&seqs, &p, 0, Some(&prox), None, loss, 2);
        assert_eq!(b.loss.loss_tokens, 5);
        let m = &b.micro[0];
        assert_eq!(m.rows.input_ids[1], vec![0, 1, 2, 3, 2, 2]);
        assert_eq!(m.rows.loss_mask[1], vec![0, 0, 1, 1, 0, 0]);
        assert_eq!(m.rows.lengths, vec![6, 4]);
        assert_eq!(m.advantages, vec![vec![2.0; 3], vec![1.0; 2]]);
        assert_eq!(m.proximal.as_ref().unwrap()[1], vec![-0.5; 2]);
        assert!(m.reference.is_none());
        // Scores come back per sequence.
        let sb = score_batch(&seqs, &p, 2);
        assert_eq!(sb.micro.len(), 1);
        let back = per_sequence(&p, 2, vec![vec![vec![1.0; 3], vec![2.0; 2]]]);
        assert_eq!(back, vec![vec![2.0; 2], vec![1.0; 3]]);
    }
}

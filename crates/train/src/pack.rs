//! Rows, micro-batches and the step plan. The order is a seeded shuffle per epoch, so a
//! run and its resumption see the same batches at the same steps.

use tritonforge_protocol::MicroBatch;

use crate::examples::Example;

/// One row: the examples it holds, in order.
pub type RowPlan = Vec<usize>;

/// Every optimizer step: its micro-batches, each a list of rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub steps: Vec<Vec<Vec<RowPlan>>>,
    /// The epoch each step belongs to.
    pub epoch: Vec<u32>,
}

/// splitmix64: a small, fixed generator (the order must never change under us).
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn shuffled(n: usize, seed: u64, epoch: u32) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = seed ^ (u64::from(epoch) << 32) ^ 0x5446_5346;
    for i in (1..n).rev() {
        let j = (next(&mut state) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// Rows kept open for packing at once: an example goes to the first open row it fits in.
const OPEN_ROWS: usize = 64;

/// Rows from examples in `order`: one example per row, or with packing as many as fit in
/// `seq_len`. Packing is first fit over the last few open rows (an example is never
/// split), which fills rows far better than filling one row at a time: conversations of
/// a third to a half of `seq_len` leave a third of a row empty otherwise.
pub fn rows(lens: &[usize], order: &[usize], seq_len: usize, packing: bool) -> Vec<RowPlan> {
    if !packing {
        return order.iter().map(|&i| vec![i]).collect();
    }
    let mut done: Vec<RowPlan> = Vec::new();
    let mut open: std::collections::VecDeque<(RowPlan, usize)> = std::collections::VecDeque::new();
    for &i in order {
        match open.iter_mut().find(|(_, used)| used + lens[i] <= seq_len) {
            Some((row, used)) => {
                row.push(i);
                *used += lens[i];
            }
            None => {
                if open.len() == OPEN_ROWS {
                    if let Some((row, _)) = open.pop_front() {
                        done.push(row);
                    }
                }
                open.push_back((vec![i], lens[i]));
            }
        }
    }
    done.extend(open.into_iter().map(|(row, _)| row));
    done
}

/// Steps of `grad_accum` micro-batches of `micro_batch` rows, epoch after epoch, until
/// `steps` (when set) or `epochs` passes. An epoch's last step may be short.
pub fn plan(lens: &[usize], t: &crate::config::TrainCfg) -> Plan {
    let mut plan = Plan {
        steps: Vec::new(),
        epoch: Vec::new(),
    };
    if lens.is_empty() {
        return plan;
    }
    let mut epoch = 0u32;
    loop {
        if t.steps == 0 && epoch >= t.epochs {
            break;
        }
        let order = shuffled(lens.len(), t.seed, epoch);
        let rows = rows(lens, &order, t.seq_len, t.packing);
        let micro: Vec<Vec<RowPlan>> = rows
            .chunks(t.micro_batch)
            .map(<[RowPlan]>::to_vec)
            .collect();
        for step in micro.chunks(t.grad_accum) {
            if t.steps > 0 && plan.steps.len() as u64 >= t.steps {
                return plan;
            }
            plan.steps.push(step.to_vec());
            plan.epoch.push(epoch);
        }
        epoch += 1;
    }
    plan
}

/// A micro-batch's tensors: rows padded on the right to the longest, positions restarting
/// at each packed example, the mask zero on padding and on each example's first token.
/// Also the examples' lengths (for the attention FLOPs).
pub fn materialise(examples: &[Example], rows: &[RowPlan], pad: u32) -> (MicroBatch, Vec<usize>) {
    let mut ids = Vec::with_capacity(rows.len());
    let mut mask = Vec::with_capacity(rows.len());
    let mut pos = Vec::with_capacity(rows.len());
    let mut docs = Vec::new();
    for row in rows {
        let (mut i, mut m, mut p) = (Vec::new(), Vec::new(), Vec::new());
        for &e in row {
            let ex = &examples[e];
            i.extend_from_slice(&ex.ids);
            let start = m.len();
            m.extend_from_slice(&ex.mask);
            if let Some(first) = m.get_mut(start) {
                *first = 0;
            }
            p.extend(0..ex.ids.len() as u32);
            docs.push(ex.ids.len());
        }
        ids.push(i);
        mask.push(m);
        pos.push(p);
    }
    let width = ids.iter().map(Vec::len).max().unwrap_or(0);
    let lengths = ids.iter().map(|r| r.len() as u32).collect();
    for ((i, m), p) in ids.iter_mut().zip(&mut mask).zip(&mut pos) {
        let mut next_pos = p.last().map_or(0, |l| l + 1);
        while i.len() < width {
            i.push(pad);
            m.push(0);
            // Padding continues the last example's positions: it sits after every real
            // token, so causal attention never lets a real token see it.
            p.push(next_pos);
            next_pos += 1;
        }
    }
    (
        MicroBatch {
            input_ids: ids,
            loss_mask: mask,
            position_ids: pos,
            lengths,
        },
        docs,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_fills_rows_in_order_without_splitting() {
        let lens = [5, 3, 4, 8, 1, 4];
        let rows = rows(&lens, &[0, 1, 2, 3, 4, 5], 8, true);
        // 4 does not fit beside 0 and 1 (8 used) but does beside 2; 5 fits in no open row.
        assert_eq!(rows, vec![vec![0, 1], vec![2, 4], vec![3], vec![5]]);
        assert_eq!(
            super::rows(&lens, &[0, 1], 8, false),
            vec![vec![0], vec![1]]
        );
    }

    #[test]
    fn the_order_is_a_seeded_permutation() {
        let a = shuffled(50, 7, 0);
        assert_eq!(a, shuffled(50, 7, 0));
        assert_ne!(a, shuffled(50, 7, 1));
        assert_ne!(a, shuffled(50, 8, 0));
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn a_plan_counts_steps_across_epochs() {
        let lens = vec![4; 10];
        let mut t: crate::config::TrainCfg = toml::from_str("").unwrap();
        (t.epochs, t.seq_len, t.micro_batch, t.grad_accum, t.packing) = (2, 4, 2, 2, false);
        let p = plan(&lens, &t);
        // 10 rows -> 5 micro-batches -> 3 steps per epoch (the last one short).
        assert_eq!(p.steps.len(), 6);
        assert_eq!(p.steps[2].len(), 1);
        assert_eq!(p.epoch, vec![0, 0, 0, 1, 1, 1]);
        (t.epochs, t.steps) = (1, 4);
        let capped = plan(&lens, &t);
        assert_eq!(capped.steps.len(), 4);
        assert_eq!(capped.epoch, vec![0, 0, 0, 1]);
    }

    #[test]
    fn packed_rows_restart_positions_and_mask_each_first_token() {
        let ex = vec![
            Example {
                ids: vec![10, 11, 12],
                mask: vec![0, 1, 1],
            },
            Example {
                ids: vec![20, 21],
                mask: vec![1, 1],
            },
            Example {
                ids: vec![30],
                mask: vec![0],
            },
        ];
        let (mb, docs) = materialise(&ex, &[vec![0, 1], vec![2]], 0);
        assert_eq!(
            mb.input_ids,
            vec![vec![10, 11, 12, 20, 21], vec![30, 0, 0, 0, 0]]
        );
        assert_eq!(mb.loss_mask, vec![vec![0, 1, 1, 0, 1], vec![0, 0, 0, 0, 0]]);
        assert_eq!(
            mb.position_ids,
            vec![vec![0, 1, 2, 0, 1], vec![0, 1, 2, 3, 4]]
        );
        assert_eq!(
            mb.lengths,
            vec![5, 1],
            "real tokens per row, padding left out"
        );
        assert_eq!(docs, vec![3, 2, 1]);
    }
}

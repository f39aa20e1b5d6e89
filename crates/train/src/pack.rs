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

/// Rows padded to a multiple of this many tokens when grouped by length: a run then
/// meets few distinct batch shapes, and cuDNN builds its attention plan once per shape
/// (a new plan per micro-batch would cost more than the attention itself).
pub const LENGTH_ALIGN: usize = 64;

/// Examples sorted by length together: as many as make about this many micro-batches.
const LENGTH_WINDOW: usize = 64;

/// The width rows are padded to a multiple of (1: the longest row).
pub fn align(t: &crate::config::TrainCfg) -> usize {
    if t.group_by_length {
        LENGTH_ALIGN
    } else {
        1
    }
}

/// The width a micro-batch whose longest row is `longest` is padded to: a multiple of
/// `align`, but never past `seq_len` unless the row itself is longer.
pub fn padded_width(longest: usize, align: usize, seq_len: usize) -> usize {
    longest.next_multiple_of(align.max(1)).min(seq_len.max(longest))
}

/// Micro-batches of one conversation per row, conversations of like length together, each
/// holding at most `budget` tokens counting padding (but always at least one row). The
/// shuffled `order` is cut into windows of about `LENGTH_WINDOW` micro-batches' tokens;
/// each window is sorted longest first and cut greedily, and its micro-batches are shuffled
/// again with `state` (when given), so the steps do not run from long to short.
pub fn by_length(
    lens: &[usize],
    order: &[usize],
    seq_len: usize,
    budget: usize,
    mut state: Option<&mut u64>,
) -> Vec<Vec<RowPlan>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let mut end = start;
        let mut tokens = 0;
        while end < order.len() && tokens < LENGTH_WINDOW * budget {
            tokens += lens[order[end]];
            end += 1;
        }
        let mut window = order[start..end].to_vec();
        // Stable: equal lengths keep their shuffled order.
        window.sort_by_key(|&i| std::cmp::Reverse(lens[i]));
        let mut batches: Vec<Vec<RowPlan>> = Vec::new();
        let mut width = 0;
        for i in window {
            let fits = batches.last().is_some_and(|b| (b.len() + 1) * width <= budget);
            if fits {
                if let Some(b) = batches.last_mut() {
                    b.push(vec![i]);
                }
            } else {
                // Longest first: the first row of a micro-batch sets its width.
                width = padded_width(lens[i], LENGTH_ALIGN, seq_len);
                batches.push(vec![vec![i]]);
            }
        }
        if let Some(state) = state.as_deref_mut() {
            for k in (1..batches.len()).rev() {
                let j = (next(state) % (k as u64 + 1)) as usize;
                batches.swap(k, j);
            }
        }
        out.extend(batches);
        start = end;
    }
    out
}

/// An epoch's micro-batches: packed or plain rows, `micro_batch` of them each, or
/// length-grouped rows of at most `micro_batch × seq_len` tokens each.
pub fn micro_batches(
    lens: &[usize],
    order: &[usize],
    t: &crate::config::TrainCfg,
    state: Option<&mut u64>,
) -> Vec<Vec<RowPlan>> {
    if t.group_by_length {
        return by_length(lens, order, t.seq_len, t.micro_batch * t.seq_len, state);
    }
    rows(lens, order, t.seq_len, t.packing).chunks(t.micro_batch).map(<[RowPlan]>::to_vec).collect()
}

/// Steps of `grad_accum` micro-batches, epoch after epoch, until `steps` (when set) or
/// `epochs` passes. An epoch's last step may be short.
pub fn plan(lens: &[usize], t: &crate::config::TrainCfg) -> Plan {
    let mut plan = Plan { steps: Vec::new(), epoch: Vec::new() };
    if lens.is_empty() {
        return plan;
    }
    let mut epoch = 0u32;
    loop {
        if t.steps == 0 && epoch >= t.epochs {
            break;
        }
        let order = shuffled(lens.len(), t.seed, epoch);
        let mut state = t.seed ^ (u64::from(epoch) << 32) ^ 0x4C45_4E47;
        let micro = micro_batches(lens, &order, t, Some(&mut state));
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

/// A micro-batch's tensors: rows padded on the right to the longest (rounded up to a
/// multiple of `align`, within `seq_len`: `padded_width`), positions restarting at each packed example, the mask zero on
/// padding and on each example's first token. Also the examples' lengths (for the
/// attention FLOPs).
pub fn materialise(
    examples: &[Example],
    rows: &[RowPlan],
    pad: u32,
    align: usize,
    seq_len: usize,
) -> (MicroBatch, Vec<usize>) {
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
    let width = padded_width(ids.iter().map(Vec::len).max().unwrap_or(0), align, seq_len);
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
    (MicroBatch { input_ids: ids, loss_mask: mask, position_ids: pos, lengths }, docs)
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
        assert_eq!(super::rows(&lens, &[0, 1], 8, false), vec![vec![0], vec![1]]);
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
    fn length_groups_keep_like_lengths_together_within_the_budget() {
        // Two lengths far apart, shuffled together: no micro-batch mixes them, each holds
        // as many rows as its padded width allows, and every example appears once.
        let lens: Vec<usize> = (0..40).map(|i| if i % 2 == 0 { 100 } else { 900 }).collect();
        let order = shuffled(lens.len(), 1, 0);
        let budget = 1024 * 2;
        let mut state = 9u64;
        let mbs = by_length(&lens, &order, 1024, budget, Some(&mut state));
        let mut seen: Vec<usize> = mbs.iter().flatten().flatten().copied().collect();
        seen.sort();
        assert_eq!(seen, (0..40).collect::<Vec<_>>());
        for mb in &mbs {
            let widths: Vec<usize> = mb.iter().map(|r| lens[r[0]]).collect();
            assert!(widths.iter().all(|&w| w == widths[0]), "{widths:?}");
            assert!(mb.iter().all(|r| r.len() == 1), "one conversation per row");
            let width = widths[0].next_multiple_of(LENGTH_ALIGN);
            assert!(mb.len() * width <= budget);
        }
        // 20 of 900 (width 960): 2 per micro-batch; 20 of 100 (width 128): 16, then 4.
        let mut sizes: Vec<usize> = mbs.iter().map(Vec::len).collect();
        sizes.sort();
        assert_eq!(sizes, [vec![2; 10], vec![4, 16]].concat());
        // The micro-batches are shuffled, not sorted longest first.
        assert!(mbs.windows(2).any(|w| lens[w[0][0][0]] < lens[w[1][0][0]]));
        // A row longer than the budget still gets a micro-batch of its own.
        assert_eq!(by_length(&[5000], &[0], 1024, budget, None), vec![vec![vec![0]]]);
    }

    #[test]
    fn length_grouped_rows_are_padded_to_the_alignment() {
        let ex = vec![
            Example { ids: vec![1; 70], mask: vec![1; 70] },
            Example { ids: vec![2; 65], mask: vec![1; 65] },
        ];
        let (mb, docs) = materialise(&ex, &[vec![0], vec![1]], 0, LENGTH_ALIGN, 4096);
        assert!(mb.input_ids.iter().all(|r| r.len() == 128));
        // Never past seq_len (unless a row is longer), so positions stay in range.
        assert_eq!(padded_width(70, LENGTH_ALIGN, 100), 100);
        assert_eq!(padded_width(70, LENGTH_ALIGN, 60), 70);
        let (capped, _) = materialise(&ex, &[vec![0], vec![1]], 0, LENGTH_ALIGN, 100);
        assert!(capped.input_ids.iter().all(|r| r.len() == 100));
        assert_eq!(mb.lengths, vec![70, 65]);
        assert_eq!(docs, vec![70, 65]);
        assert_eq!(mb.loss_mask[1][64..].iter().sum::<u8>(), 1, "padding never a target");
    }

    #[test]
    fn packed_rows_restart_positions_and_mask_each_first_token() {
        let ex = vec![
            Example { ids: vec![10, 11, 12], mask: vec![0, 1, 1] },
            Example { ids: vec![20, 21], mask: vec![1, 1] },
            Example { ids: vec![30], mask: vec![0] },
        ];
        let (mb, docs) = materialise(&ex, &[vec![0, 1], vec![2]], 0, 1, 8);
        assert_eq!(mb.input_ids, vec![vec![10, 11, 12, 20, 21], vec![30, 0, 0, 0, 0]]);
        assert_eq!(mb.loss_mask, vec![vec![0, 1, 1, 0, 1], vec![0, 0, 0, 0, 0]]);
        assert_eq!(mb.position_ids, vec![vec![0, 1, 2, 0, 1], vec![0, 1, 2, 3, 4]]);
        assert_eq!(mb.lengths, vec![5, 1], "real tokens per row, padding left out");
        assert_eq!(docs, vec![3, 2, 1]);
    }
}

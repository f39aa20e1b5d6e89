//! Where one device's time went over a stretch of a batch, from its lease events: held
//! exclusive (timing holds, and whole jobs run alone: retries after running out of memory,
//! or every job in exclusive mode), waited for by an exclusive request while nobody held it
//! so (the drain: shared holders finish, new shared requests wait; the hand-over between
//! two exclusive holds counts here too), held shared only, or idle.
//!
//! The mixed 100 ends at the same wall with 8 to 24 places while each candidate's time
//! grows with those beside it, the GPU busy under half the time
//! (`docs/results/evaluator-load.md`): something they share serialises them, and the
//! timing lane's drains are the first suspect. This says how long they are.

use std::time::{Duration, Instant};

use tritonforge_protocol::LeaseKind;

use crate::pool::LeaseEvent;

/// One device's time between two instants, split four ways (they add up to `wall`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaneSplit {
    pub wall: Duration,
    /// Some job held the device exclusively.
    pub exclusive: Duration,
    /// No exclusive hold, but an exclusive request waited (for shared holders to drain).
    pub draining: Duration,
    /// Only shared holders, nobody waiting for exclusive use.
    pub shared: Duration,
    /// Nobody held or waited for exclusive use of the device.
    pub idle: Duration,
    /// Exclusive holds that ended in the stretch.
    pub exclusive_holds: usize,
}

/// The split of `slot`'s time from `from` to `to`, from `events` (holds still held are not
/// in them, so the stretch should end after the batch's last job).
pub fn split(events: &[LeaseEvent], slot: usize, from: Instant, to: Instant) -> LaneSplit {
    if to <= from {
        return LaneSplit::default();
    }
    // Boundaries: (when, which counter, +1 or -1); counters: exclusive held, waiting, shared.
    let mut edges: Vec<(Instant, usize, i32)> = Vec::new();
    let mut holds = 0;
    let mut add = |a: Instant, b: Instant, which: usize| {
        let (a, b) = (a.clamp(from, to), b.clamp(from, to));
        if a < b {
            edges.push((a, which, 1));
            edges.push((b, which, -1));
        }
    };
    for e in events.iter().filter(|e| e.slot == slot) {
        match e.kind {
            LeaseKind::Exclusive => {
                add(e.asked, e.acquired, 1);
                add(e.acquired, e.released, 0);
                if from < e.released && e.released <= to {
                    holds += 1;
                }
            }
            LeaseKind::Shared | LeaseKind::Baseline => add(e.acquired, e.released, 2),
        }
    }
    // In time order (at one instant the order does not matter: the span between two
    // boundaries at the same instant is empty).
    edges.sort_by_key(|&(t, _, _)| t);
    let mut split = LaneSplit { exclusive_holds: holds, ..LaneSplit::default() };
    let mut counts = [0i64; 3];
    let mut at = from;
    for (t, which, d) in edges.into_iter().chain(std::iter::once((to, 0, 0))) {
        let span = t.saturating_duration_since(at);
        let bucket = match counts {
            [e, _, _] if e > 0 => &mut split.exclusive,
            [_, w, _] if w > 0 => &mut split.draining,
            [_, _, s] if s > 0 => &mut split.shared,
            _ => &mut split.idle,
        };
        *bucket += span;
        at = t;
        counts[which] += i64::from(d);
    }
    split.wall = to.saturating_duration_since(from);
    split
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: LeaseKind, t0: Instant, asked: u64, acquired: u64, released: u64) -> LeaseEvent {
        let at = |ms| t0 + Duration::from_millis(ms);
        LeaseEvent {
            job: "j".into(),
            slot: 0,
            kind,
            asked: at(asked),
            acquired: at(acquired),
            released: at(released),
        }
    }

    #[test]
    fn the_four_parts_add_up_and_an_exclusive_wait_is_a_drain() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let events = vec![
            // Shared 0-300 and 100-500; an exclusive asked at 200, granted at 500 (the drain
            // ran 200-500), held to 600; shared again 650-700; idle 600-650 and 700-1000.
            ev(LeaseKind::Shared, t0, 0, 0, 300),
            ev(LeaseKind::Baseline, t0, 100, 100, 500),
            ev(LeaseKind::Exclusive, t0, 200, 500, 600),
            ev(LeaseKind::Shared, t0, 650, 650, 700),
            // Another slot's hold counts for nothing here.
            LeaseEvent { slot: 1, ..ev(LeaseKind::Exclusive, t0, 0, 0, 900) },
        ];
        let s = split(&events, 0, t0, t0 + ms(1000));
        assert_eq!(s.exclusive, ms(100));
        assert_eq!(s.draining, ms(300));
        assert_eq!(s.shared, ms(250));
        assert_eq!(s.idle, ms(350));
        assert_eq!(s.exclusive + s.draining + s.shared + s.idle, s.wall);
        assert_eq!(s.exclusive_holds, 1);
    }

    #[test]
    fn holds_are_clipped_to_the_stretch_and_back_to_back_holds_leave_no_gap() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let events = vec![
            // Two exclusive holds handed over at 300; the first asked before the stretch.
            ev(LeaseKind::Exclusive, t0, 0, 0, 300),
            ev(LeaseKind::Exclusive, t0, 250, 300, 400),
            ev(LeaseKind::Shared, t0, 350, 350, 2000),
        ];
        let s = split(&events, 0, t0 + ms(100), t0 + ms(1100));
        assert_eq!(s.exclusive, ms(300));
        assert_eq!(s.exclusive_holds, 2);
        // A stretch that ends before the second hold does counts only the first.
        assert_eq!(split(&events, 0, t0, t0 + ms(350)).exclusive_holds, 1);
        assert_eq!(split(&events, 0, t0 + ms(10), t0), LaneSplit::default());
        assert_eq!(s.draining, Duration::ZERO, "granted at once on the handover");
        assert_eq!(s.shared, ms(700));
        assert_eq!(s.idle, Duration::ZERO);
        assert_eq!(s.wall, ms(1000));
    }
}

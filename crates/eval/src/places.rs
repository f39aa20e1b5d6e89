//! Places for running jobs on a device, handed out costliest first.
//!
//! A batch ends when its last job does. Granted in arrival order, a 40 s candidate that
//! arrives behind sixty short ones starts last and runs alone at the end; granted
//! costliest first (longest-processing-time scheduling), it starts while the short ones
//! fill the other places. Waiters carry a [`Priority`]; equal ones keep arrival order.
//!
//! A long-lived pool (`serve`) must not starve a cheap job behind costlier ones that keep
//! arriving, so a waiter's standing is its expected cost plus the time it has waited:
//! a job that has waited longer than the difference between its cost and a newcomer's
//! goes first. Since every waiter's wait grows alike, that order is fixed at arrival
//! (cost minus arrival time) and a heap keeps it.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::oneshot;

/// Which waiter a freed place goes to: the higher first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Priority(u64);

impl Priority {
    /// Work that others wait on (a problem's memory measurement or check, a retry alone
    /// after running out of memory): ahead of every candidate.
    pub const FIRST: Priority = Priority(u64::MAX);

    /// A job expected to hold its place about `ms` milliseconds.
    pub fn cost_ms(ms: f64) -> Priority {
        // `as` saturates, and NaN becomes 0; below FIRST whatever the estimate.
        Priority((ms.max(0.0) as u64).min(u64::MAX - 1))
    }
}

struct Waiter {
    /// Work others wait on, ahead of every candidate whatever its standing.
    first: bool,
    /// Expected cost less arrival, in ms since the places were made (see the module).
    standing: i128,
    seq: u64,
    tx: oneshot::Sender<Place>,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Waiter {}

impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Waiter {
    /// The max-heap's top: work others wait on, then the best standing, then the
    /// earliest arrival.
    fn cmp(&self, other: &Self) -> Ordering {
        (self.first, self.standing)
            .cmp(&(other.first, other.standing))
            .then(other.seq.cmp(&self.seq))
    }
}

struct State {
    free: usize,
    waiters: BinaryHeap<Waiter>,
    seq: u64,
    made: Instant,
}

/// A fixed number of places; cheap to clone (shared).
#[derive(Clone)]
pub struct Places(Arc<Mutex<State>>);

/// One place, held until dropped; then it goes to the best waiter, or back to the free.
pub struct Place {
    places: Option<Places>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(p) = self.places.take() {
            p.release();
        }
    }
}

impl Places {
    /// `n` places, all free.
    pub fn new(n: usize) -> Places {
        let state = State { free: n, waiters: BinaryHeap::new(), seq: 0, made: Instant::now() };
        Places(Arc::new(Mutex::new(state)))
    }

    /// Wait for a place. Dropping the future while it waits gives up its turn, and a place
    /// sent to it meanwhile goes on to the next waiter.
    pub async fn acquire(&self, priority: Priority) -> Place {
        loop {
            let rx = {
                let mut s = self.lock();
                if s.free > 0 {
                    s.free -= 1;
                    return Place { places: Some(self.clone()) };
                }
                let (tx, rx) = oneshot::channel();
                let seq = s.seq;
                s.seq += 1;
                let arrived = s.made.elapsed().as_millis() as i128;
                let first = priority == Priority::FIRST;
                s.waiters.push(Waiter { first, standing: priority.0 as i128 - arrived, seq, tx });
                rx
            };
            // The sender is only dropped unsent once its receiver is gone, which cannot
            // be while this awaits it; were it ever, waiting anew beats a panic.
            if let Ok(place) = rx.await {
                return place;
            }
        }
    }

    /// Places free now.
    #[cfg(test)]
    fn available(&self) -> usize {
        self.lock().free
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves the counts as they were: keep using them.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Free places only while nobody waits (a waiter is queued only when none was free),
    /// so a new arrival never overtakes the queue.
    fn release(&self) {
        let mut s = self.lock();
        while let Some(w) = s.waiters.pop() {
            match w.tx.send(Place { places: Some(self.clone()) }) {
                Ok(()) => return,
                // That waiter gave up: disarm the place (no release under this lock) and
                // offer it to the next.
                Err(mut unsent) => unsent.places = None,
            }
        }
        s.free += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn settle() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    /// Spawn a waiter that records its name when served and then holds its place briefly.
    fn waiter(
        places: &Places,
        priority: Priority,
        name: &'static str,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> tokio::task::JoinHandle<()> {
        let (places, order) = (places.clone(), order.clone());
        tokio::spawn(async move {
            let _p = places.acquire(priority).await;
            order.lock().unwrap().push(name);
            settle().await;
        })
    }

    #[tokio::test]
    async fn a_freed_place_goes_to_the_costliest_waiter_then_in_arrival_order() {
        let places = Places::new(1);
        let order = Arc::new(Mutex::new(Vec::new()));
        let held = places.acquire(Priority::cost_ms(1.0)).await;
        let mut tasks = Vec::new();
        for (p, name) in
            [(10.0, "cheap"), (500.0, "costly-a"), (10.0, "cheap-2"), (500.0, "costly-b")]
        {
            tasks.push(waiter(&places, Priority::cost_ms(p), name, &order));
            settle().await;
        }
        tasks.push(waiter(&places, Priority::FIRST, "first", &order));
        settle().await;
        assert_eq!(places.available(), 0);
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            vec!["first", "costly-a", "costly-b", "cheap", "cheap-2"]
        );
        assert_eq!(places.available(), 1, "every place came back");
    }

    #[tokio::test]
    async fn a_cheap_waiter_goes_before_a_costlier_one_that_came_much_later() {
        let places = Places::new(1);
        let order = Arc::new(Mutex::new(Vec::new()));
        let held = places.acquire(Priority::default()).await;
        let cheap = waiter(&places, Priority::cost_ms(10.0), "cheap, waited 300 ms", &order);
        tokio::time::sleep(Duration::from_millis(300)).await;
        // 100 ms costlier, but it arrives 300 ms later: the cheap one has waited longer.
        let later = waiter(&places, Priority::cost_ms(110.0), "costlier, later", &order);
        // 10 s costlier: that outweighs the wait (and any stall of a loaded machine).
        let much = waiter(&places, Priority::cost_ms(10_010.0), "much costlier, later", &order);
        settle().await;
        drop(held);
        for t in [cheap, later, much] {
            t.await.unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            vec!["much costlier, later", "cheap, waited 300 ms", "costlier, later"]
        );
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_does_not_take_a_place_with_it() {
        let places = Places::new(1);
        let held = places.acquire(Priority::default()).await;
        let p = places.clone();
        let gives_up = tokio::spawn(async move {
            let _ =
                tokio::time::timeout(Duration::from_millis(30), p.acquire(Priority::FIRST)).await;
        });
        gives_up.await.unwrap();
        let p = places.clone();
        let patient = tokio::spawn(async move { p.acquire(Priority::cost_ms(1.0)).await });
        settle().await;
        drop(held);
        let got = tokio::time::timeout(Duration::from_secs(5), patient).await;
        let place = got.expect("served").unwrap();
        assert_eq!(places.available(), 0);
        drop(place);
        assert_eq!(places.available(), 1);
    }

    #[test]
    fn estimates_stay_below_first_and_clamp_nonsense() {
        assert!(Priority::cost_ms(f64::INFINITY) < Priority::FIRST);
        assert_eq!(Priority::cost_ms(f64::NAN), Priority::cost_ms(0.0));
        assert_eq!(Priority::cost_ms(-5.0), Priority::cost_ms(0.0));
        assert!(Priority::cost_ms(2.0) > Priority::cost_ms(1.0));
    }
}

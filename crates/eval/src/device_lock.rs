//! The per-device lease lock: many shared holders or one exclusive holder.
//!
//! Unlike a FIFO reader-writer lock, waiting exclusive holders go in one batch:
//! once the shared holders have drained for the first of them, every exclusive
//! request already waiting runs before shared holders are let back in. Timing
//! holds are short and shared holds (correctness) long, so a FIFO lock would make
//! each timing wait for its own drain; batching shares one drain among all of them.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Debug, Default)]
struct State {
    readers: usize,
    writer: bool,
    waiting_writers: usize,
}

#[derive(Debug, Default)]
pub struct DeviceLock {
    state: Mutex<State>,
    changed: Notify,
}

/// A shared hold; released on drop.
#[derive(Debug)]
pub struct SharedHold(Arc<DeviceLock>);

/// An exclusive hold; released on drop.
#[derive(Debug)]
pub struct ExclusiveHold(Arc<DeviceLock>);

impl Drop for SharedHold {
    fn drop(&mut self) {
        self.0.update(|s| s.readers = s.readers.saturating_sub(1));
    }
}

impl Drop for ExclusiveHold {
    fn drop(&mut self) {
        self.0.update(|s| s.writer = false);
    }
}

/// Counts a waiting writer for as long as its request future lives (a cancelled
/// request must not keep readers out).
struct WaitingWriter<'a>(&'a DeviceLock, bool);

impl Drop for WaitingWriter<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.update(|s| s.waiting_writers = s.waiting_writers.saturating_sub(1));
        }
    }
}

impl DeviceLock {
    fn update(&self, f: impl FnOnce(&mut State)) {
        if let Ok(mut s) = self.state.lock() {
            f(&mut s);
        }
        self.changed.notify_waiters();
    }

    /// Try `f` under the state lock until it says yes, sleeping between changes.
    async fn wait_until(&self, mut f: impl FnMut(&mut State) -> bool) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before checking, so a change between the check and the
            // await still wakes us.
            notified.as_mut().enable();
            if let Ok(mut s) = self.state.lock() {
                if f(&mut s) {
                    return;
                }
            }
            notified.await;
        }
    }

    pub async fn shared(self: &Arc<Self>) -> SharedHold {
        self.wait_until(|s| {
            let ok = !s.writer && s.waiting_writers == 0;
            if ok {
                s.readers += 1;
            }
            ok
        })
        .await;
        SharedHold(self.clone())
    }

    pub async fn exclusive(self: &Arc<Self>) -> ExclusiveHold {
        if let Ok(mut s) = self.state.lock() {
            s.waiting_writers += 1;
        }
        let mut waiting = WaitingWriter(self, true);
        self.wait_until(|s| {
            let ok = !s.writer && s.readers == 0;
            if ok {
                s.writer = true;
                s.waiting_writers = s.waiting_writers.saturating_sub(1);
            }
            ok
        })
        .await;
        waiting.1 = false;
        ExclusiveHold(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn shared_holders_coexist_and_exclusive_waits_for_them() {
        let lock = Arc::new(DeviceLock::default());
        let a = lock.shared().await;
        let b = lock.shared().await;
        let l = lock.clone();
        let writer = tokio::spawn(async move { l.exclusive().await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!writer.is_finished(), "exclusive must wait for shared holders");
        // A new shared request waits behind the waiting writer.
        let l = lock.clone();
        let late = tokio::spawn(async move { l.shared().await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!late.is_finished());
        drop(a);
        drop(b);
        let w = writer.await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!late.is_finished(), "no shared hold beside an exclusive one");
        drop(w);
        let _r = late.await.unwrap();
    }

    #[tokio::test]
    async fn waiting_writers_go_in_one_batch() {
        let lock = Arc::new(DeviceLock::default());
        let r = lock.shared().await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for name in ["w1", "w2"] {
            let (l, o) = (lock.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _h = l.exclusive().await;
                o.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (l, o) = (lock.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let _h = l.shared().await;
            o.lock().unwrap().push("r");
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(r);
        for t in tasks {
            t.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        assert_eq!(order.last(), Some(&"r"), "{order:?}");
    }

    #[tokio::test]
    async fn a_cancelled_exclusive_request_does_not_block_readers() {
        let lock = Arc::new(DeviceLock::default());
        let r = lock.shared().await;
        let l = lock.clone();
        let writer = tokio::spawn(async move { l.exclusive().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        writer.abort();
        let _ = writer.await;
        let second = tokio::time::timeout(Duration::from_secs(1), lock.shared()).await;
        assert!(second.is_ok(), "a shared request must not wait for a cancelled writer");
        drop(r);
    }
}

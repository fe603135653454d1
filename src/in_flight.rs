//! A count of things in flight that someone may wait to see reach zero: the
//! outbox's requests queued or running (`Flush` waits for none), the texts a
//! turn's reply relay holds for the outbox (a stopping host waits for none
//! before it flushes the outbox), and the turns holding a `TurnSlot` (the
//! stop's drain waits for none).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// How many things are in flight; cheap to clone (every clone counts the
/// same things).
#[derive(Clone, Debug, Default)]
pub struct InFlight(Arc<Count>);

#[derive(Debug, Default)]
struct Count {
    /// Things in flight.
    n: AtomicUsize,
    /// Woken each time `n` drops to zero.
    zero: Notify,
}

impl InFlight {
    /// `n` more are in flight.
    pub fn add(&self, n: usize) {
        self.0.n.fetch_add(n, Ordering::SeqCst);
    }

    /// `n` are over: wakes whoever waits when none is left.
    pub fn done(&self, n: usize) {
        if n > 0 && self.0.n.fetch_sub(n, Ordering::SeqCst) == n {
            self.0.zero.notify_waiters();
        }
    }

    /// How many are in flight now.
    pub fn count(&self) -> usize {
        self.0.n.load(Ordering::SeqCst)
    }

    /// Resolves once none is in flight.
    pub async fn drained(&self) {
        loop {
            // Registered before the check, so a drop to zero in between is seen.
            let zero = self.0.zero.notified();
            if self.count() == 0 {
                return;
            }
            zero.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_waiter_is_woken_when_the_last_one_is_done_and_not_before() {
        let in_flight = InFlight::default();
        in_flight.drained().await;
        in_flight.add(3);
        let waiter = tokio::spawn({
            let in_flight = in_flight.clone();
            async move { in_flight.drained().await }
        });
        in_flight.done(2);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "woken with one still in flight");
        in_flight.done(0);
        assert_eq!(in_flight.count(), 1);
        in_flight.done(1);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken once none is left")
            .expect("the waiter");
    }
}

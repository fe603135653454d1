//! [`TurnSlots`]: the cap on concurrent turns (`dispatcher.max_concurrent_turns`)
//! and the one place that knows how many turns run, so a stop can wait for
//! the last one to end without asking anybody again.

use std::sync::Arc;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The shared part.
struct Inner {
    /// One permit per turn that may run.
    permits: Arc<Semaphore>,
    /// The cap.
    max: usize,
    /// Woken whenever a slot is given back.
    freed: Notify,
}

/// Slots for running turns; cheap to clone.
#[derive(Clone)]
pub struct TurnSlots {
    /// The semaphore and the wake-up.
    inner: Arc<Inner>,
}

/// One running turn's slot; dropping it frees the slot and wakes waiters.
pub struct TurnSlot {
    /// Held while the turn runs; given back first when dropped.
    permit: Option<OwnedSemaphorePermit>,
    /// Told when the slot is given back.
    inner: Arc<Inner>,
}

impl Drop for TurnSlot {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.inner.freed.notify_waiters();
    }
}

impl TurnSlots {
    /// `max` slots (at least one).
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            inner: Arc::new(Inner {
                permits: Arc::new(Semaphore::new(max)),
                max,
                freed: Notify::new(),
            }),
        }
    }

    /// Waits for a free slot; `None` once [`close`](Self::close)d.
    pub async fn acquire(&self) -> Option<TurnSlot> {
        let permit = Arc::clone(&self.inner.permits).acquire_owned().await.ok()?;
        Some(TurnSlot {
            permit: Some(permit),
            inner: Arc::clone(&self.inner),
        })
    }

    /// Turns running now.
    pub fn running(&self) -> usize {
        self.inner
            .max
            .saturating_sub(self.inner.permits.available_permits())
    }

    /// Free slots now.
    pub fn free(&self) -> usize {
        self.inner.permits.available_permits()
    }

    /// No more turns start (the host is stopping).
    pub fn close(&self) {
        self.inner.permits.close();
    }

    /// Resolves once no turn runs.
    pub async fn all_free(&self) {
        loop {
            let freed = self.inner.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.running() == 0 {
                return;
            }
            freed.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn all_free_resolves_when_the_last_slot_is_dropped() {
        let slots = TurnSlots::new(2);
        let a = slots.acquire().await.unwrap();
        let b = slots.acquire().await.unwrap();
        assert_eq!(slots.running(), 2);
        let waiter = tokio::spawn({
            let slots = slots.clone();
            async move { slots.all_free().await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one turn still runs");
        drop(b);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(slots.running(), 0);
    }

    #[tokio::test]
    async fn a_closed_pool_gives_no_slot() {
        let slots = TurnSlots::new(1);
        slots.close();
        assert!(slots.acquire().await.is_none());
    }
}

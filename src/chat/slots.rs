//! [`TurnSlots`]: the cap on concurrent turns (`dispatcher.max_concurrent_turns`)
//! and the one place that knows how many turns run, so a stop can wait for
//! the last one to end without asking anybody again. The turns running are
//! an [`InFlight`] count, the house's one wait-until-zero.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::in_flight::InFlight;

/// Slots for running turns; cheap to clone.
#[derive(Clone)]
pub struct TurnSlots {
    /// One permit per turn that may run.
    permits: Arc<Semaphore>,
    /// The turns holding a slot.
    running: InFlight,
}

/// One running turn's slot; dropping it frees the slot and wakes waiters.
pub struct TurnSlot {
    /// Held while the turn runs; given back first when dropped.
    permit: Option<OwnedSemaphorePermit>,
    /// Counts the slot down when it is given back.
    running: InFlight,
}

impl Drop for TurnSlot {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.running.done(1);
    }
}

impl TurnSlots {
    /// `max` slots (at least one).
    pub fn new(max: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max.max(1))),
            running: InFlight::default(),
        }
    }

    /// Waits for a free slot; `None` once [`close`](Self::close)d.
    pub async fn acquire(&self) -> Option<TurnSlot> {
        let permit = Arc::clone(&self.permits).acquire_owned().await.ok()?;
        self.running.add(1);
        Some(TurnSlot {
            permit: Some(permit),
            running: self.running.clone(),
        })
    }

    /// Turns running now.
    pub fn running(&self) -> usize {
        self.running.count()
    }

    /// Free slots now.
    pub fn free(&self) -> usize {
        self.permits.available_permits()
    }

    /// No more turns start (the host is stopping).
    pub fn close(&self) {
        self.permits.close();
    }

    /// Resolves once no turn runs.
    pub async fn all_free(&self) {
        self.running.drained().await;
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

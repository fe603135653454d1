//! A turn's claim on its chat's typing indicator: the [`TypingLease`] the
//! turn actor owns, and the [`TypingView`]s the typing actor and the outbox
//! read right before each `sendChatAction`. It sits below both sides (it
//! knows the bus, not the chat or the outbox), so neither imports the other
//! for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

use teloxide::types::ChatId;

use crate::events::{BotEvent, EventBus};
use crate::ids::TurnId;

/// One turn's claim on its chat's typing indicator, with one owner.
///
/// The supervisor makes one per turn and hands it to the turn actor (in
/// its `TurnSpec`); everyone else gets a [`TypingView`], which can only
/// read. The turn actor *ends* it, once and for good, first thing as the
/// turn ends (before TurnEnded is stamped and sent), or when the turn is
/// aborted at the hard deadline; dropping the lease ends it too, so a turn
/// actor that stops (or never starts) leaves no live lease behind. The
/// turn actor *pauses* it while a person decides a tool approval (the agent
/// is not working then) and resumes it after; an ended lease stays ended.
/// The outbox checks its view right before each `sendChatAction` leaves,
/// so no typing goes out for a turn that is over or paused, whatever is
/// still queued.
///
/// Typing has stopped when the lease ends: that is when
/// [`BotEvent::TypingStopped`] is published, not when the typing actor gets
/// round to cancelling its timers, whose next pulse would find the lease
/// ended anyway.
#[derive(Debug)]
pub struct TypingLease(Arc<LeaseState>);

/// A read-only look at a [`TypingLease`]: whether typing may be shown now.
#[derive(Debug, Clone)]
pub struct TypingView(Arc<LeaseState>);

#[derive(Debug)]
struct LeaseState {
    state: AtomicU8,
    /// Told when the lease ends.
    stopped: Option<(ChatId, TurnId, EventBus)>,
}

/// [`TypingLease`] states.
const LIVE: u8 = 0;
const PAUSED: u8 = 1;
const ENDED: u8 = 2;

impl Default for TypingLease {
    fn default() -> Self {
        Self::new()
    }
}

impl TypingLease {
    /// A live lease that tells no one when it ends.
    pub fn new() -> Self {
        Self(Arc::new(LeaseState {
            state: AtomicU8::new(LIVE),
            stopped: None,
        }))
    }

    /// A live lease of `turn` in `chat`: its end publishes
    /// [`BotEvent::TypingStopped`] on `events`.
    pub fn of_turn(chat: ChatId, turn: TurnId, events: EventBus) -> Self {
        Self(Arc::new(LeaseState {
            state: AtomicU8::new(LIVE),
            stopped: Some((chat, turn, events)),
        }))
    }

    /// Ends the lease (idempotent; it never comes back). The first end
    /// publishes `TypingStopped`.
    pub fn end(&self) {
        if self.0.state.swap(ENDED, Ordering::SeqCst) != ENDED
            && let Some((chat, turn, events)) = &self.0.stopped
        {
            events.publish(BotEvent::TypingStopped {
                chat: *chat,
                turn: *turn,
                at: Instant::now(),
            });
        }
    }

    /// Pauses a live lease (a person is deciding, not the agent).
    pub fn pause(&self) {
        let _ = self
            .0
            .state
            .compare_exchange(LIVE, PAUSED, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Resumes a paused lease; an ended one stays ended.
    pub fn resume(&self) {
        let _ = self
            .0
            .state
            .compare_exchange(PAUSED, LIVE, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Whether typing may be shown for its turn now.
    pub fn may_show(&self) -> bool {
        self.0.state.load(Ordering::SeqCst) == LIVE
    }

    /// A read-only view of the lease, for the typing actor and the outbox.
    pub fn view(&self) -> TypingView {
        TypingView(Arc::clone(&self.0))
    }

    /// Whether the lease ended for good.
    #[cfg(test)]
    fn is_ended(&self) -> bool {
        self.0.state.load(Ordering::SeqCst) == ENDED
    }
}

impl Drop for TypingLease {
    /// A lease nobody owns any more cannot be live: its turn is gone.
    fn drop(&mut self) {
        self.end();
    }
}

impl TypingView {
    /// Whether typing may be shown for its turn now.
    pub fn may_show(&self) -> bool {
        self.0.state.load(Ordering::SeqCst) == LIVE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_pauses_resumes_and_ends_for_good() {
        let lease = TypingLease::new();
        assert!(lease.may_show());
        lease.pause();
        assert!(!lease.may_show() && !lease.is_ended());
        lease.resume();
        assert!(lease.may_show());
        lease.pause();
        lease.end();
        lease.resume();
        assert!(
            lease.is_ended() && !lease.may_show(),
            "an ended lease stays ended"
        );
    }

    #[test]
    fn a_dropped_lease_is_ended_for_its_views_and_says_typing_stopped() {
        let events = EventBus::new();
        let mut rx = events.subscribe();
        let lease = TypingLease::of_turn(ChatId(7), TurnId(1), events.clone());
        let view = lease.view();
        lease.pause();
        assert!(!view.may_show(), "a view sees the pause");
        lease.resume();
        assert!(view.may_show());
        drop(lease);
        assert!(!view.may_show(), "a lease nobody owns is not live");
        match rx.try_recv() {
            Ok(BotEvent::TypingStopped { chat, .. }) => assert_eq!(chat, ChatId(7)),
            other => panic!("expected TypingStopped, got {other:?}"),
        }
    }
}

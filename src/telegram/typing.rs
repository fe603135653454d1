//! A turn's claim on its chat's typing indicator: the [`TypingLease`] the
//! chat's supervisor, turn and typing actor hold and the outbox reads right
//! before each `sendChatAction`. It sits below both sides (it knows the
//! bus, not the chat or the outbox), so neither imports the other for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

use teloxide::types::ChatId;

use crate::events::{BotEvent, EventBus};
use crate::ids::TurnId;

/// One turn's claim on its chat's typing indicator.
///
/// The supervisor makes one per turn and hands clones to the turn actor and
/// the typing actor. It is *ended*, once and for good, by whichever comes
/// first: the turn actor as the turn ends (before TurnEnded is stamped and
/// sent), the supervisor at the hard deadline or when the chat is retired,
/// the typing actor when its lease ends. The turn actor *pauses* it while a
/// person decides a tool approval (the agent is not working then) and
/// resumes it after; an ended lease stays ended. The outbox checks it right
/// before each `sendChatAction` leaves, so no typing goes out for a turn
/// that is over or paused, whatever is still queued.
///
/// Typing has stopped when the lease ends: that is when
/// [`BotEvent::TypingStopped`] is published (by whoever ends it), not when
/// the typing actor gets round to cancelling its timers, whose next pulse
/// would find the lease ended anyway.
#[derive(Debug, Clone)]
pub struct TypingLease(Arc<LeaseState>);

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
    pub fn is_live(&self) -> bool {
        self.0.state.load(Ordering::SeqCst) == LIVE
    }

    /// Whether the lease ended for good.
    #[cfg(test)]
    fn is_ended(&self) -> bool {
        self.0.state.load(Ordering::SeqCst) == ENDED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_pauses_resumes_and_ends_for_good() {
        let lease = TypingLease::new();
        assert!(lease.is_live());
        lease.pause();
        assert!(!lease.is_live() && !lease.is_ended());
        lease.resume();
        assert!(lease.is_live());
        lease.pause();
        lease.end();
        lease.resume();
        assert!(
            lease.is_ended() && !lease.is_live(),
            "an ended lease stays ended"
        );
    }
}

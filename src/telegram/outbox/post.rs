//! What every file of a lane's work shares, below them all: where a
//! message goes ([`Anchor`]) and comes from ([`Provenance`]), where a chat's
//! requests leave from ([`Post`]: its methods are in `send.rs` and
//! `resend.rs`), what a job may touch of its lane ([`LaneView`]), and the
//! lock that never fails.

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use teloxide::types::{ChatId, MessageId, ThreadId};

use super::deliver::Telegram;
use super::known::Known;
use super::live::ShownMessage;
use super::pacing::Pacing;
use super::requests::Slot;
use crate::events::EventBus;
use crate::ids::TurnId;

/// A mutex's guard, even after a panic while it was held (what it guards
/// stays consistent between statements).
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where in its chat a message goes.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Anchor {
    /// The forum topic.
    pub(super) topic: Option<ThreadId>,
    /// The message the first piece replies to.
    pub(super) reply_to: Option<MessageId>,
}

/// Where a message's first copy may already be: `Some(baseline)` for a
/// message that may have left before (recovered after a restart, or whose
/// request got no answer), with the highest id seen when it first left.
pub(super) type Prior = Option<Option<i32>>;

/// Where a message comes from: when it was first queued (its age bound
/// counts from there), the turn that sent it, and where its first copy may
/// already be.
#[derive(Debug, Clone, Copy)]
pub(super) struct Provenance {
    pub(super) born: Instant,
    pub(super) turn: Option<TurnId>,
    pub(super) prior: Prior,
}

impl Provenance {
    /// A message queued now, by `turn`.
    pub(super) fn now(turn: Option<TurnId>) -> Self {
        Self {
            born: Instant::now(),
            turn,
            prior: None,
        }
    }
}

/// What a job may touch of its lane.
pub(super) trait LaneView {
    /// Ends `slot`: its queued live text is dropped; the message it showed,
    /// if any.
    fn close(&mut self, slot: Slot) -> Option<ShownMessage>;
    /// Whether `/stop` stopped the turn that queued the job.
    fn stopped(&self) -> bool;
}

/// Where a chat's requests leave from: the client, the bus, the chat and
/// its pacing.
pub(super) struct Post<'a> {
    pub(super) telegram: &'a Telegram,
    pub(super) events: &'a EventBus,
    pub(super) chat: ChatId,
    pub(super) pacing: &'a mut Pacing,
    /// The chat's message ids the lane knows.
    pub(super) known: &'a std::sync::Mutex<Known>,
    /// When the latest answered `getUpdates` left (see `resend.rs`).
    pub(super) polls: &'a tokio::sync::watch::Sender<Option<Instant>>,
    /// The message an approval question was shown as, its buttons waiting
    /// for a press (set by the job that sent it).
    pub(super) shown: Option<MessageId>,
}

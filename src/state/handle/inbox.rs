//! What happens to an accepted message, in one place: the
//! [`StoreHandle`]'s jobs on the inbox.
//!
//! # The states of a message
//!
//! ```text
//!            accept                turn_started           replying
//! (update) ─────────▶ queued ─────────────────▶ running ─────────────▶ replied
//!                       │  ▲                       │                      │
//!              dropped  │  │ turn_finished(Requeue)│ turn_finished        │ turn_finished
//!   (refused, /stop,    ▼  └───────────────────────┤ (Done | Report)      │ (Done | Report)
//!    queue full)     dropped                       ▼                      ▼
//!                                           done / reported        done / reported
//! ```
//!
//! - **queued**: written by the intake before the update offset moves past
//!   it; a message already in the inbox (same update id) is not handed over
//!   again.
//! - **running**: its turn started ([`StoreHandle::turn_started`]).
//! - **replied**: something of its turn may have reached the chat; written
//!   *before* the first reply leaves ([`StoreHandle::replying`] resolves once it
//!   is written; WAL with `synchronous = NORMAL` survives a crash of the
//!   process, not a power loss), so after a crash it is reported, never run twice.
//! - **done**: its turn ended; **reported**: its chat was told it was
//!   interrupted; **dropped**: refused or cleared, and the chat was told.
//!
//! At start, [`StoreHandle::recover`] returns every queued, running and replied
//! message of the previous process: queued ones run again, running ones run
//! again with `dispatcher.on_interrupted = "retry"`, the rest are reported.

use std::future::Future;

use super::super::{InboxRow, InboxState};
use super::{ReadFailed, StoreHandle};
use crate::ids::TurnId;
use crate::incoming::Incoming;

/// How a turn leaves the messages it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Answered (or ended in a way already told to the chat).
    Done,
    /// Cut short by a stop before anything was sent, with retry on: the
    /// next process runs them again.
    Requeue,
    /// Cut short by a stop; the chat was told.
    Report,
}

impl Disposition {
    fn state(self) -> InboxState {
        match self {
            Self::Done => InboxState::Done,
            Self::Requeue => InboxState::Queued,
            Self::Report => InboxState::Reported,
        }
    }
}

impl StoreHandle {
    /// **accept**: writes newly received messages (queued) and then moves
    /// the update offset to `offset`, in one job. Resolves, per message,
    /// whether it is new (`false`: already in the inbox, a redelivery that
    /// must not be handled again). A failed write counts as new, so a store
    /// failure never loses a message.
    pub fn accept(
        &self,
        messages: Vec<Incoming>,
        offset: i64,
    ) -> impl Future<Output = Vec<bool>> + Send + 'static {
        let count = messages.len();
        let ask = self.ask("writing the inbox", move |store| {
            let mut fresh = Vec::with_capacity(messages.len());
            for m in &messages {
                fresh.push(store.accept(m).unwrap_or_else(|err| {
                    tracing::error!(update_id = m.update_id, cause = %err, "state store: writing the inbox failed");
                    true
                }));
            }
            store.set_offset(offset)?;
            Ok(fresh)
        });
        async move { ask.await.unwrap_or_else(|| vec![true; count]) }
    }

    /// **turn_started**: the messages' turn started (running).
    pub fn turn_started(&self, update_ids: Vec<i64>, turn: TurnId) {
        self.tell("marking messages running", move |store| {
            store.start_turn(&update_ids, turn.0)
        });
    }

    /// **replying**: something of the turn is about to reach the chat.
    /// Resolves once that is written (or failed, which is counted): only
    /// then may the reply leave.
    pub fn replying(&self, update_ids: Vec<i64>) -> impl Future<Output = ()> + Send + 'static {
        let ask = self.ask("marking a message replied", move |store| {
            store.mark(&update_ids, InboxState::Replied)
        });
        async move {
            ask.await;
        }
    }

    /// **turn_finished**: the messages' turn ended.
    pub fn turn_finished(&self, update_ids: Vec<i64>, how: Disposition) {
        self.tell("marking messages answered", move |store| {
            store.mark(&update_ids, how.state())
        });
    }

    /// **dropped**: refused (not allowed, queue full, stopping) or cleared
    /// by `/stop`; the chat was told. Also used for updates that carry
    /// nothing to answer (no sender, no text), which are simply done.
    pub fn dropped(&self, update_ids: Vec<i64>) {
        if update_ids.is_empty() {
            return;
        }
        self.tell("dropping messages", move |store| {
            store.mark(&update_ids, InboxState::Dropped)
        });
    }

    /// **done** without a turn: a command, or an update with nothing to
    /// answer.
    pub fn handled(&self, update_id: i64) {
        self.tell("marking a message handled", move |store| {
            store.mark(&[update_id], InboxState::Done)
        });
    }

    /// **reported**: the chat was told the message was interrupted.
    pub fn reported(&self, update_id: i64) {
        self.tell("marking a message reported", move |store| {
            store.mark(&[update_id], InboxState::Reported)
        });
    }

    /// **parked**: the messages' turn was refused for a usage limit; they
    /// run again at `due_at` (Unix ms), in this process or the next.
    pub fn park(&self, update_ids: Vec<i64>, due_at: i64) {
        if update_ids.is_empty() {
            return;
        }
        self.tell("parking messages", move |store| {
            store.park(&update_ids, due_at)
        });
    }

    /// **recover**: the messages a previous process left unfinished, oldest
    /// first.
    pub fn recover(
        &self,
    ) -> impl Future<Output = Result<Vec<InboxRow>, ReadFailed>> + Send + 'static {
        self.read("reading the inbox", |store| store.unfinished())
    }
}

//! Messages steered into a running turn (`dispatcher.busy = "steer"`): each
//! is written to the agent at once (after the prompt, while the turn is
//! still opening), acknowledged with 👀 when the agent reads it, and, when
//! the turn ends before the agent read it, handed back to the chat as its
//! next turn, which the agent is already running by itself.

use std::time::Instant;

use actix::{Context, Handler};

use super::link::Settled;
use super::phase::TurnPhase;
use super::{Carried, Sender, SteerTurn, TurnActor};
use crate::agent::SessionCommand;
use crate::chat::outcome::TurnEvent;
use crate::incoming::Incoming;
use crate::state::Disposition;
use crate::telegram::outbox::React;

pub use crate::chat::notices::READ_MARK;

/// A message steered into the turn.
#[derive(Debug)]
pub(super) struct Steered {
    message: Incoming,
    at: Instant,
    /// Written to the session attached now.
    written: bool,
    /// The agent read it (its receipt came).
    read: bool,
}

/// The turn's steered messages and what it still takes.
#[derive(Debug, Default)]
pub(super) struct Steering {
    steered: Vec<Steered>,
    /// `/stop` (or the host's stop) came: nothing more is taken, and what
    /// was steered and not read is dropped with the turn.
    closed: bool,
    /// The turn's own `result` came.
    pub(super) result_seen: bool,
    /// Rows read into the turn since its last reply: marked "replied" with
    /// the next text.
    pub(super) unmarked: Vec<i64>,
}

impl Steering {
    /// Whether a message was written and the agent has not read it: it
    /// runs it as its next turn once this one's `result` is out.
    pub(super) fn waiting(&self) -> bool {
        self.steered.iter().any(|s| s.written && !s.read)
    }

    /// The messages the agent read in this turn.
    pub(super) fn read(&self) -> Vec<Incoming> {
        self.steered
            .iter()
            .filter(|s| s.read)
            .map(|s| s.message.clone())
            .collect()
    }
}

impl TurnActor {
    /// Who sent the messages the turn answers so far, each once: its own,
    /// then those of the messages steered into it.
    pub(super) fn senders(&self) -> Vec<Sender> {
        let mut senders = self.spec.senders.clone();
        for steered in &self.steering.steered {
            Sender::add(&mut senders, &steered.message);
        }
        senders
    }

    /// Whether a message may still be steered into the turn: before it
    /// ends, or after an end that hands its session back, while the session
    /// is still attached.
    fn takes_steers(&self) -> bool {
        if self.steering.closed {
            return false;
        }
        match &self.phase {
            TurnPhase::Opening { .. } | TurnPhase::Running { .. } => true,
            TurnPhase::AwaitingSettle { .. } => true,
            TurnPhase::Closing { link, outcome } => link.is_some() && outcome.finished(),
            TurnPhase::Released { .. } => false,
        }
    }

    /// Writes every steered message the attached session has not had yet
    /// (all of them, after the session was replaced).
    pub(super) fn write_steers(&mut self) {
        let Some(link) = self.phase.link() else {
            return;
        };
        for steered in self
            .steering
            .steered
            .iter_mut()
            .filter(|s| !s.written && !s.read)
        {
            let command = SessionCommand::Steer {
                tag: steered.message.update_id,
                text: steered.message.for_agent(),
            };
            if link.commands.send(command).is_ok() {
                steered.written = true;
            }
        }
    }

    /// A fresh session replaces the one the messages were written to.
    pub(super) fn steers_unwritten(&mut self) {
        for steered in &mut self.steering.steered {
            steered.written = false;
        }
    }

    /// The agent read a steered message (`tag`): 👀 on it, and its row is
    /// answered with the turn's.
    pub(super) fn steer_read(&mut self, tag: i64) {
        let message = match self
            .steering
            .steered
            .iter_mut()
            .find(|s| s.message.update_id == tag)
        {
            Some(steered) if !steered.read => {
                steered.read = true;
                self.steering.unmarked.push(tag);
                Some(steered.message.message_id)
            }
            Some(_) => None,
            // This turn's own prompt, steered into the last one.
            None => self
                .spec
                .adopted
                .as_ref()
                .and_then(|list| list.iter().find(|(id, _)| *id == tag))
                .and_then(|(_, message)| *message),
        };
        tracing::info!(update_id = tag, "the agent read a steered message");
        if let Some(message_id) = message.filter(|m| m.0 != 0) {
            let (reply, _) = tokio::sync::oneshot::channel();
            self.deps.out.outbox.do_send(React {
                chat: self.spec.to.chat,
                message_id,
                emoji: READ_MARK.into(),
                reply,
            });
        }
    }

    /// The agent ended its turn's `result` with a steered message left to
    /// run: the turn is over (the answer to it is the next turn's).
    pub(super) fn continue_after_result(&mut self, ctx: &mut Context<Self>) -> bool {
        if !self.steering.waiting() {
            return false;
        }
        if let Some(link) = self.phase.link_mut() {
            link.settle(Settled::Continues);
        }
        if self.phase.holds_chat() {
            self.record(TurnEvent::Continued, ctx);
        } else {
            self.release(ctx);
        }
        true
    }

    /// `/stop` or the host's stop: nothing more is steered in.
    pub(super) fn close_steering(&mut self) {
        self.steering.closed = true;
    }

    /// What goes back to the chat when the session is let go: the messages
    /// the agent did not read. After `/stop` they are over (answered with
    /// the stopped turn) and the session, which would run them, is closed.
    pub(super) fn carried(&mut self, handing_back: bool) -> Vec<Carried> {
        let unread: Vec<Steered> = std::mem::take(&mut self.steering.steered)
            .into_iter()
            .filter(|s| !s.read)
            .collect();
        if self.steering.closed {
            let rows: Vec<i64> = unread.iter().map(|s| s.message.update_id).collect();
            if !rows.is_empty() {
                tracing::info!(
                    messages = rows.len(),
                    "steered messages stopped with the turn"
                );
                self.deps.books.inbox.turn_finished(rows, Disposition::Done);
            }
            return Vec::new();
        }
        unread
            .into_iter()
            .map(|s| Carried {
                message: s.message,
                at: s.at,
                written: s.written && handing_back,
            })
            .collect()
    }

    /// Whether the session may be handed back: not after `/stop` with a
    /// message written that the agent would still run.
    pub(super) fn may_hand_back(&self) -> bool {
        !(self.steering.closed && self.steering.waiting())
    }
}

impl Handler<SteerTurn> for TurnActor {
    type Result = bool;

    fn handle(&mut self, msg: SteerTurn, ctx: &mut Self::Context) -> bool {
        if !self.takes_steers() {
            return false;
        }
        let update_id = msg.message.update_id;
        self.deps
            .books
            .inbox
            .turn_started(vec![update_id], self.spec.turn);
        self.deps.books.events.metrics().steered();
        self.deps
            .books
            .events
            .publish(crate::events::BotEvent::Steered {
                chat: self.spec.to.chat,
                turn: self.spec.turn,
                update_id,
            });
        self.steering.steered.push(Steered {
            message: msg.message,
            at: msg.at,
            written: false,
            read: false,
        });
        // While opening, the prompt goes first: written when it attaches.
        if !matches!(self.phase, TurnPhase::Opening { .. }) {
            self.write_steers();
        }
        tracing::info!(update_id, "message steered into the running turn");
        // Past the turn's result: the agent runs it as its next turn now.
        if self.steering.result_seen {
            self.continue_after_result(ctx);
        }
        true
    }
}

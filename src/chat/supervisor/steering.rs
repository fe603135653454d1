//! Where a message for the conversation goes: into the running turn
//! (steered, `dispatcher.busy = "steer"`), or into the queue for the next
//! turn; and the messages a turn hands back unread, which are the next turn.

use std::collections::VecDeque;

use actix::{ActorFutureExt, AsyncContext, Context, WrapFuture};

use super::{ChatSupervisor, UserMessage};
use crate::chat::notices::queue_full;
use crate::chat::turn::{Carried, SteerTurn};

impl ChatSupervisor {
    /// Whether `msg` goes into the running turn: steering is on, a turn of
    /// this session runs (none after `/new`), and the message is plain text
    /// from a person (files are fetched at a turn's start; a schedule's run
    /// is a turn of its own).
    pub(super) fn steers(&self, msg: &UserMessage) -> bool {
        self.settings.steer
            && !msg.message.is_scheduled()
            && msg.message.files.is_empty()
            && !msg.message.text.trim().is_empty()
            && self
                .state
                .running()
                .is_some_and(|running| running.turn > self.forget_through.max(self.cold_through))
    }

    /// Routes `msg` (in a conversation handed off to the host, once it
    /// took it back: `handoff.rs`): into the running turn, or into the queue. While a
    /// turn has not yet answered whether it takes a message, the ones
    /// after it wait for that answer, so a message it does not take is
    /// queued before them: a chat's messages keep their order.
    pub(super) fn route(&mut self, msg: UserMessage, ctx: &mut Context<Self>) {
        if !self.takes_back(&msg) {
            return;
        }
        if let Some(held) = &mut self.awaiting {
            held.push_back(msg);
            return;
        }
        if self.steers(&msg) {
            return self.steer(msg, ctx);
        }
        self.enqueue(msg, ctx);
    }

    /// Hands `msg` to the running turn; one it does not take (it ended
    /// meanwhile, or `/stop` was asked) waits for the next turn, and the
    /// messages held behind it are routed after it.
    fn steer(&mut self, msg: UserMessage, ctx: &mut Context<Self>) {
        let Some(running) = self.state.running() else {
            return self.enqueue(msg, ctx);
        };
        let ask = running.addr.send(SteerTurn {
            message: msg.message.clone(),
            at: msg.at,
        });
        self.awaiting = Some(VecDeque::new());
        ctx.spawn(ask.into_actor(self).map(move |taken, act, ctx| {
            let held = act.awaiting.take().unwrap_or_default();
            if !matches!(taken, Ok(true)) {
                tracing::debug!(
                    update_id = msg.message.update_id,
                    "the turn did not take the message; it waits for the next"
                );
                act.enqueue(msg, ctx);
            }
            // Routed in order: should one be steered again, the rest wait
            // behind it once more.
            for next in held {
                act.route(next, ctx);
            }
            act.watch_idle(ctx);
        }));
    }

    /// Queues `msg` for the next turn (refused when the queue is full).
    pub(super) fn enqueue(&mut self, msg: UserMessage, ctx: &mut Context<Self>) {
        // A schedule's run is never refused for a busy conversation: it
        // waits its turn (schedules are few, and bounded per conversation).
        if !msg.message.is_scheduled() && self.queue.len() >= self.settings.queue_limit {
            tracing::warn!(queued = self.queue.len(), "queue full; message refused");
            self.inbox.dropped(vec![msg.message.update_id]);
            self.say(queue_full(self.queue.len()));
            return;
        }
        self.queue.push_back(msg);
        self.events.metrics().queued(1);
        self.try_start(ctx);
    }

    /// The messages a turn ended before the agent read them go first in
    /// the queue; with the session kept warm, the next turn adopts them
    /// (the agent is running them already).
    pub(super) fn carry(&mut self, carried: Vec<Carried>) {
        if carried.is_empty() {
            return;
        }
        let adopted = self.warm.is_some() && carried.iter().all(|c| c.written);
        tracing::info!(
            messages = carried.len(),
            adopted,
            "steered messages the turn did not read are the next turn"
        );
        self.events.metrics().queued(carried.len() as i64);
        for c in carried.into_iter().rev() {
            self.queue.push_front(UserMessage {
                message: c.message,
                at: c.at,
                rest_follows: false,
                delivery: None,
                adopted,
                parked_until: None,
            });
        }
    }
}

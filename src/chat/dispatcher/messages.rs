//! A message for the bot, new or recovered: a stranger's refused, a
//! command answered, text for the agent routed whole to its conversation
//! (marked as part of the intake's delivery, so the delivery is one turn).

use actix::Context;

use super::{Dispatcher, ForChat};
use crate::chat::notices::not_accepted;
use crate::chat::supervisor::UserMessage;
use crate::events::FeedItem;
use crate::incoming::{Ask, Incoming, Source};
use crate::ops::panics::contain;

impl Dispatcher {
    /// [`Dispatcher::message`]; should handling it panic, it is dropped
    /// with an ERROR log.
    pub(super) fn contained_message(&mut self, m: Incoming, ctx: &mut Context<Self>) {
        let update_id = m.update_id;
        if let Err(panic) = contain(|| self.message(m, ctx)) {
            tracing::error!(update_id, %panic, "handling the message panicked; dropped");
            self.inbox.dropped(vec![update_id]);
        }
    }

    /// One message for the bot, as the intake read it: a stranger's is
    /// refused, the rest acted on.
    fn message(&mut self, m: Incoming, ctx: &mut Context<Self>) {
        if !self.may_run(&m) {
            self.inbox.dropped(vec![m.update_id]);
            if m.is_scheduled() {
                tracing::warn!(
                    chat_id = m.to.chat.0,
                    user_id = m.from.0,
                    "a schedule's run dropped: the user who made it is no longer on the allowlist"
                );
            } else {
                self.refuse(m.to, m.from);
            }
            return;
        }
        self.act(m, ctx);
    }

    /// A recovered message that was parked for a usage limit until
    /// `due_at` (Unix ms): to its conversation, to wait out the rest.
    pub(super) fn act_parked(&mut self, m: Incoming, due_at: i64, ctx: &mut Context<Self>) {
        let to = m.to;
        let mut msg = UserMessage::new(m);
        msg.parked_until = Some(due_at);
        self.deliver(to, ForChat::Message(msg), ctx);
    }

    /// An admitted message, new or recovered: a command is answered, an
    /// unknown one pointed to `/help`, text for the agent routed to its
    /// conversation's supervisor (refused once the host is stopping).
    pub(super) fn act(&mut self, m: Incoming, ctx: &mut Context<Self>) {
        let update_id = m.update_id;
        match &m.ask {
            Ask::Command(command) => {
                self.command(*command, &m, ctx);
                self.inbox.handled(update_id);
            }
            Ask::Unknown(word) => {
                tracing::debug!(update_id, chat_id = m.to.chat.0, command = %word, "unknown command answered with a pointer to /help");
                self.say(m.to, crate::chat::notices::help::unknown(word));
                self.inbox.handled(update_id);
            }
            Ask::Agent if self.stopping && m.is_scheduled() => {
                // Left queued: the next start runs it (it was claimed).
                tracing::info!(update_id, "scheduled run left queued for the next start");
            }
            Ask::Agent if self.stopping => {
                self.inbox.dropped(vec![update_id]);
                self.say(m.to, not_accepted(self.shutdown.is_restarting()));
            }
            Ask::Agent => {
                let to = m.to;
                self.events.feed(
                    to,
                    FeedItem::Message {
                        from: sender(&m),
                        text: m.text.clone(),
                    },
                );
                let mut msg = UserMessage::new(m);
                if self.in_delivery {
                    // The rest of its delivery may join its turn.
                    msg.rest_follows = true;
                    msg.delivery = Some(self.deliveries);
                    if !self.delivery.contains(&to) {
                        self.delivery.push(to);
                    }
                }
                self.deliver(to, ForChat::Message(msg), ctx);
            }
        }
    }
}

/// Who wrote `m`, as a frontend shows it.
fn sender(m: &Incoming) -> String {
    match m.source {
        Source::Person if m.author.shown().is_empty() => format!("user {}", m.from.0),
        Source::Person => m.author.shown(),
        Source::Schedule | Source::Operator => "schedule".to_string(),
        Source::Terminal => "terminal".to_string(),
    }
}

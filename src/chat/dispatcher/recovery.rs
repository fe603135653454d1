//! Recovery: the inbox rows a previous process left, read back as the
//! intake read them (conversation, sender, place, what they ask, text,
//! files, album: nothing is guessed), go through the same path as a new
//! message, or are reported to their chat.

use std::collections::HashSet;

use actix::{ActorFutureExt, AsyncContext, Context, Handler, Message, WrapFuture};

use super::Dispatcher;
use crate::ids::Conversation;

use crate::chat::notices::bounded;
use crate::incoming::Incoming;
use crate::state::{InboxRow, InboxState, ReadFailed};

/// Sent once at start, before any update: the inbox rows a previous
/// process left (read on the store thread before the intake wrote anything).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Recover(
    pub  std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Vec<InboxRow>, ReadFailed>> + Send>,
    >,
);

impl Handler<Recover> for Dispatcher {
    type Result = ();

    fn handle(&mut self, Recover(rows): Recover, ctx: &mut Self::Context) {
        // Before any turn starts: the prewarm waits for the recovered ones.
        let events = self.events.subscribe();
        let handoffs = (self.inbox).read("reading the conversations handed off", |s| s.handoffs());
        let read = async move { (handoffs.await, rows.await) };
        // Nothing else is handled until the rows are routed, so a new message
        // never overtakes a recovered one; a conversation handed off to the
        // host knows it before any of its messages arrives.
        ctx.wait(read.into_actor(self).map(|(handoffs, rows), act, ctx| {
            let handoffs_known = act.handed_off_before(handoffs, ctx);
            let waiting = match rows {
                Ok(rows) => act.recover(rows, ctx),
                Err(ReadFailed) => {
                    // Nothing was marked: the rows stay as they are, for
                    // the next start that can read them.
                    tracing::error!(
                        "the inbox could not be read: the messages the previous process left \
                         unfinished are not recovered now; they stay in the state file for the next start"
                    );
                    HashSet::new()
                }
            };
            if handoffs_known {
                act.prewarm(events, waiting, ctx);
            } else {
                crate::agent::host::handover::release_unclaimed();
            }
        }));
    }
}

/// What recovery did, for its one log line.
#[derive(Debug, Default)]
struct Recovered {
    requeued: usize,
    parked: usize,
    retried: usize,
    reported: usize,
    refused: usize,
}

impl Dispatcher {
    /// Routes or reports each row; answers the conversations whose recovered
    /// messages wait for a turn.
    fn recover(&mut self, rows: Vec<InboxRow>, ctx: &mut Context<Self>) -> HashSet<Conversation> {
        let mut done = Recovered::default();
        let mut waiting = HashSet::new();
        for InboxRow {
            message: m,
            state,
            due_at,
        } in rows
        {
            // Stored in a private topic while the topics mode was on: with
            // it off now, the chat itself (`Topics::now`).
            let m = Incoming {
                to: self.topics.now(m.to),
                ..m
            };
            if !self.may_run(&m) {
                // Allowed when it was accepted, not any more: it never reaches an agent.
                done.refused += 1;
                tracing::warn!(
                    update_id = m.update_id,
                    chat_id = m.to.chat.0,
                    user_id = m.from.0,
                    "recovered message from a user no longer on the allowlist; dropped"
                );
                self.inbox.dropped(vec![m.update_id]);
                continue;
            }
            match state {
                InboxState::Parked => {
                    // It waits out its usage limit here as it did there.
                    done.parked += 1;
                    self.act_parked(m, due_at.unwrap_or(0), ctx);
                    continue;
                }
                InboxState::Queued => done.requeued += 1,
                InboxState::Running if self.retry_interrupted => done.retried += 1,
                _ => {
                    done.reported += 1;
                    self.report(state, &m.text, m.to);
                    self.inbox.reported(m.update_id);
                    continue;
                }
            }
            // The same way as a message just received.
            waiting.insert(m.to);
            self.act(m, ctx);
        }
        let Recovered {
            requeued,
            parked,
            retried,
            reported,
            refused,
        } = done;
        if requeued + parked + retried + reported + refused > 0 {
            tracing::info!(
                requeued,
                parked,
                retried,
                reported,
                refused,
                "recovered the inbox of the previous process"
            );
        }
        waiting
    }

    /// Tells the chat a restart cut its message's turn short.
    fn report(&self, state: InboxState, text: &str, to: Conversation) {
        let excerpt = bounded(text, 80);
        let text = if state == InboxState::Replied {
            crate::chat::notices::recovery::cut_while_answering(&excerpt)
        } else {
            crate::chat::notices::recovery::cut_before_answering(&excerpt)
        };
        self.say(to, text);
    }
}

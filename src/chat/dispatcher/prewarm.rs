//! Warm after a start: the conversations active within `agent.keep_warm`
//! have their sessions resumed in the background, most recent first, one
//! at a time, in the `agent.max_warm` slots a kept session uses. Never
//! ahead of a message that waits: it starts once the recovered messages'
//! turns have started, and a conversation with a message waiting is not
//! prewarmed (its turn starts the session; `supervisor/warm.rs`). A
//! conversation no one the current `[access]` admits could talk in is not
//! prewarmed either.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use actix::{ActorFutureExt, AsyncContext, Context, WrapFuture};
use teloxide::types::{ChatId, UserId};
use tokio::sync::broadcast;

use super::Dispatcher;
use crate::chat::supervisor::{Prewarm, Prewarmed};
use crate::events::BotEvent;
use crate::ids::Conversation;
use crate::state::{ReadFailed, now_ms};

/// The longest the prewarm waits for the recovered messages' turns to
/// start (one may wait for a turn slot, or never start: a `/stop`).
const RECOVERED_HEAD_START: Duration = Duration::from_secs(10);

/// A prewarm under way: who is left, and what was done, for its log line.
struct PrewarmRun {
    /// The conversations still to warm, most recent first.
    left: VecDeque<Conversation>,
    /// Kept warm.
    kept: usize,
    /// Skipped (each logged with why).
    skipped: usize,
    /// When it began.
    started: Instant,
}

impl Dispatcher {
    /// Starts the prewarm once the turns of the conversations in `waiting`
    /// (their recovered messages) have started, read on `events`
    /// (subscribed before they were routed).
    pub(super) fn prewarm(
        &mut self,
        events: broadcast::Receiver<BotEvent>,
        waiting: HashSet<Conversation>,
        ctx: &mut Context<Self>,
    ) {
        let keep_warm = self.chat_settings.keep_warm;
        if keep_warm.is_zero() {
            tracing::debug!("no prewarm: agent.keep_warm is 0");
            crate::agent::host::handover::release_unclaimed();
            return;
        }
        let since =
            now_ms().saturating_sub(i64::try_from(keep_warm.as_millis()).unwrap_or(i64::MAX));
        let inbox = self.inbox.clone();
        let found = async move {
            recovered_turns_started(events, waiting).await;
            inbox
                .read("reading the recent conversations", move |store| {
                    store.recent_sessions(since)
                })
                .await
        };
        ctx.spawn(found.into_actor(self).map(|found, act, ctx| match found {
            Ok(recent) if recent.is_empty() => {
                crate::agent::host::handover::release_unclaimed();
            }
            Ok(recent) => {
                tracing::info!(
                    conversations = recent.len(),
                    "prewarming the sessions active within agent.keep_warm"
                );
                let run = PrewarmRun {
                    left: recent.into(),
                    kept: 0,
                    skipped: 0,
                    started: Instant::now(),
                };
                act.prewarm_next(run, ctx);
            }
            Err(ReadFailed) => {
                tracing::warn!(
                    "the recent conversations could not be read; no session is prewarmed"
                );
                crate::agent::host::handover::release_unclaimed();
            }
        }));
    }

    /// Asks the next conversation of `run` to warm its session, then the
    /// one after once it answered.
    fn prewarm_next(&mut self, mut run: PrewarmRun, ctx: &mut Context<Self>) {
        let to = loop {
            let Some(to) = run.left.pop_front().filter(|_| !self.stopping) else {
                return run.done();
            };
            if self.may_resume(to.chat) {
                break to;
            }
            run.skipped += 1;
            tracing::info!(
                chat_id = to.chat.0,
                "session not prewarmed: no one the current [access] admits talks in this chat"
            );
        };
        let entry = self.supervisor(to, ctx);
        entry.routed += 1;
        let asked = entry.addr.send(Prewarm);
        ctx.spawn(asked.into_actor(self).map(move |answer, act, ctx| {
            match answer {
                Ok(Prewarmed::Kept) => run.kept += 1,
                Ok(Prewarmed::Skipped) => run.skipped += 1,
                Ok(Prewarmed::NoSlot) => {
                    run.left.push_front(to);
                    tracing::info!(
                        cold = run.left.len(),
                        "agent.max_warm slots are all taken; the other conversations start cold"
                    );
                    return run.done();
                }
                // The chat was retired meanwhile.
                Err(_) => run.skipped += 1,
            }
            act.prewarm_next(run, ctx);
        }));
    }
}

impl Dispatcher {
    /// Whether someone the current `[access]` admits could talk in `chat`:
    /// in a private chat (its id is its user's) that user; in a group an
    /// allowed chat, or any allowed user. Access may have changed since
    /// the session was last used.
    fn may_resume(&self, chat: ChatId) -> bool {
        match u64::try_from(chat.0) {
            Ok(user) => self.admits(UserId(user), chat),
            Err(_) => {
                self.access.is_allowed_chat(chat.0)
                    || !self.access.allowed_users.is_empty()
                    || !self.access.admins.is_empty()
            }
        }
    }
}

impl PrewarmRun {
    /// Its one log line; the agents handed over across `/restart` that no
    /// conversation took are closed.
    fn done(self) {
        crate::agent::host::handover::release_unclaimed();
        tracing::info!(
            kept = self.kept,
            skipped = self.skipped,
            cold = self.left.len(),
            ms = self.started.elapsed().as_millis() as u64,
            "prewarm done"
        );
    }
}

/// Resolves once a turn has started in each conversation of `waiting`
/// (chat and topic: two topics of one chat are two conversations), or
/// after [`RECOVERED_HEAD_START`].
async fn recovered_turns_started(
    mut events: broadcast::Receiver<BotEvent>,
    mut waiting: HashSet<Conversation>,
) {
    let started = async {
        while !waiting.is_empty() {
            match events.recv().await {
                Ok(BotEvent::TurnStarted { chat, topic, .. }) => {
                    waiting.remove(&Conversation::new(chat, topic));
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    };
    if tokio::time::timeout(RECOVERED_HEAD_START, started)
        .await
        .is_err()
    {
        tracing::info!("the recovered messages' turns did not all start in time; prewarming now");
    }
}

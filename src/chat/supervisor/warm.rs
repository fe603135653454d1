//! The chat's warm session: a settled session kept for the next turn
//! (`agent.keep_warm`, within `agent.max_warm`), one resumed in the
//! background after a start ([`Prewarm`]), or one that runs messages
//! steered into the last turn, kept for the turn that adopts them.

use std::sync::Arc;
use std::time::Instant;

use actix::{
    ActorFutureExt, AsyncContext, Context, Handler, Message, ResponseActFuture, SpawnHandle,
    WrapFuture,
};
use tokio::sync::OwnedSemaphorePermit;

use super::ChatSupervisor;
use crate::agent::{AgentError, AgentSession, SessionCommand};
use crate::events::BotEvent;

/// A settled session kept for the chat's next turn.
pub(super) struct Warm {
    pub(super) session: AgentSession,
    /// One of `agent.max_warm` (none for a session that runs a steered
    /// message for the next turn: it is that turn's, whatever the caps).
    slot: Option<OwnedSemaphorePermit>,
    /// `agent.keep_warm`: closes the session when it fires.
    pub(super) timer: SpawnHandle,
}

/// After a start, the dispatcher asks a conversation that was active
/// within `agent.keep_warm` to resume its session in the background and
/// keep it warm (in one of the `agent.max_warm` slots); answered once it
/// is kept, or why not.
#[derive(Message, Debug)]
#[rtype(result = "Prewarmed")]
pub struct Prewarm;

/// How a [`Prewarm`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prewarmed {
    /// The session is open and kept warm.
    Kept,
    /// Not warmed (the log says why); others may be.
    Skipped,
    /// Every `agent.max_warm` slot is taken: no other is warmed.
    NoSlot,
}

/// Whether a prewarm is opening the chat's session. A turn waits for it,
/// then takes the session: one process per session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Prewarming {
    /// None under way.
    No,
    /// The session is opening.
    Opening,
    /// It is opening, but the chat chose anew meanwhile (`/new`, a model,
    /// a session, a project) or the host began stopping: it is closed once
    /// open.
    Unwanted,
}

impl ChatSupervisor {
    /// Keeps a settled session for `agent.keep_warm`; dropping it closes it.
    pub(super) fn keep_warm(&mut self, session: Option<AgentSession>, ctx: &mut Context<Self>) {
        let Some(session) = session else {
            return;
        };
        if self.settings.keep_warm.is_zero() {
            return;
        }
        let Ok(slot) = Arc::clone(&self.settings.warm_slots).try_acquire_owned() else {
            tracing::debug!("agent.max_warm reached; session closed");
            return;
        };
        self.keep(session, slot, ctx);
    }

    /// Keeps `session` in `slot` until `agent.keep_warm` closes it.
    fn keep(&mut self, session: AgentSession, slot: OwnedSemaphorePermit, ctx: &mut Context<Self>) {
        if let Some(old) = self.warm.take() {
            ctx.cancel_future(old.timer);
        }
        let timer = ctx.run_later(self.settings.keep_warm, |act, ctx| {
            if act.warm.take().is_some() {
                tracing::debug!("warm session closed after agent.keep_warm");
            }
            act.watch_idle(ctx);
        });
        tracing::debug!(session = %session.label, "session kept warm");
        self.warm = Some(Warm {
            session,
            slot: Some(slot),
            timer,
        });
    }

    /// Keeps a session that runs messages steered into its last turn for
    /// the next turn, which adopts it, whatever `agent.keep_warm` and
    /// `agent.max_warm` say: closing it would lose the agent's work on them
    /// and cost a model call again. Closed if no turn takes it within the
    /// no-progress timeout.
    pub(super) fn keep_continuing(&mut self, session: AgentSession, ctx: &mut Context<Self>) {
        if let Some(old) = self.warm.take() {
            ctx.cancel_future(old.timer);
        }
        let timer = ctx.run_later(self.settings.no_progress_timeout, |act, ctx| {
            if act.warm.take().is_some() {
                tracing::warn!("a continuing session no turn took was closed");
            }
            act.watch_idle(ctx);
        });
        self.warm = Some(Warm {
            session,
            slot: None,
            timer,
        });
    }

    /// Closes the warm session, and one a prewarm is opening once it is
    /// open: the chat chose anew, or the host is stopping.
    pub(super) fn close_warm(&mut self, ctx: &mut Context<Self>) {
        if let Some(warm) = self.warm.take() {
            ctx.cancel_future(warm.timer);
        }
        if self.prewarming == Prewarming::Opening {
            self.prewarming = Prewarming::Unwanted;
        }
    }

    /// The host stops: the warm session is closed, or, when the stop is
    /// for `/restart`'s re-execution, handed to the next process if its
    /// backend can (an idle process survives the exec; the session task
    /// closes it otherwise).
    pub(super) fn release_warm_for_host(&mut self, ctx: &mut Context<Self>) {
        // Not one running messages steered into the last turn: the next
        // process would have no turn to take what it writes.
        if self.shutdown.is_restarting()
            && self.warm.as_ref().is_some_and(|warm| warm.slot.is_some())
            && let Some(warm) = self.warm.take()
        {
            ctx.cancel_future(warm.timer);
            let _ = warm.session.commands.send(SessionCommand::HandOver);
        }
        self.close_warm(ctx);
    }

    /// Why the chat's session is not prewarmed now, if it is not: a
    /// message waiting or a turn under way goes first, as it is.
    fn not_to_prewarm(&self) -> Option<&'static str> {
        if self.state.host_stopping() {
            Some("the host is stopping")
        } else if self.handed_off.is_some() {
            Some("the conversation is handed off to the host")
        } else if self.state.parked().is_some() {
            Some("messages wait out a usage limit")
        } else if !self.state.at_rest() {
            Some("a turn is under way")
        } else if !self.queue.is_empty() || self.awaiting.is_some() {
            Some("a message is waiting; its turn starts the session")
        } else if self.warm.is_some() || self.prewarming != Prewarming::No {
            Some("already warm")
        } else {
            None
        }
    }
}

impl Handler<Prewarm> for ChatSupervisor {
    type Result = ResponseActFuture<Self, Prewarmed>;

    fn handle(&mut self, _msg: Prewarm, ctx: &mut Self::Context) -> Self::Result {
        self.touched(ctx);
        let answer = |prewarmed| Box::pin(actix::fut::ready(prewarmed));
        if let Some(why) = self.not_to_prewarm() {
            tracing::info!(why, "session not prewarmed");
            self.watch_idle(ctx);
            return answer(Prewarmed::Skipped);
        }
        let Ok(slot) = Arc::clone(&self.settings.warm_slots).try_acquire_owned() else {
            self.watch_idle(ctx);
            return answer(Prewarmed::NoSlot);
        };
        self.prewarming = Prewarming::Opening;
        let backend = Arc::clone(&self.turns.agent.backend);
        let request = self.turns.session_request(self.to);
        let started = Instant::now();
        let open = async move {
            let mut request = request
                .await
                .ok_or("the conversation's session could not be read")?;
            request.warm_up = true;
            let id = request.resume.as_deref().ok_or("no session to resume")?;
            if let Some(why) = backend.cannot_resume(id) {
                return Err(why);
            }
            backend.open(request).await.map_err(|err| match err {
                AgentError::NotWarmed(cause) => {
                    tracing::info!(cause = %cause, "the agent cannot resume the session");
                    "the agent cannot resume the session"
                }
                err => {
                    tracing::warn!(cause = %err, "the agent could not start for a prewarm");
                    "the agent could not start"
                }
            })
        };
        Box::pin(open.into_actor(self).map(move |opened, act, ctx| {
            let wanted = std::mem::replace(&mut act.prewarming, Prewarming::No);
            let prewarmed = match opened {
                Ok(session) if wanted == Prewarming::Opening && act.warm.is_none() => {
                    let ms = started.elapsed().as_millis() as u64;
                    tracing::info!(session = %session.label, ms, "session prewarmed");
                    act.keep(session, slot, ctx);
                    act.events.publish(BotEvent::Prewarmed {
                        chat: act.to.chat,
                        at: Instant::now(),
                    });
                    Prewarmed::Kept
                }
                Ok(session) => {
                    tracing::info!(session = %session.label, "prewarmed session closed: the chat chose anew");
                    Prewarmed::Skipped
                }
                Err(why) => {
                    tracing::info!(why, "session not prewarmed");
                    Prewarmed::Skipped
                }
            };
            // A message that arrived meanwhile waited for the session.
            act.try_start(ctx);
            prewarmed
        }))
    }
}

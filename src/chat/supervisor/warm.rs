//! The chat's warm session: a settled session kept for the next turn
//! (`agent.keep_warm`, within `agent.max_warm`), or one that runs messages
//! steered into the last turn, kept for the turn that adopts them.

use std::sync::Arc;

use actix::{AsyncContext, Context, SpawnHandle};
use tokio::sync::OwnedSemaphorePermit;

use super::ChatSupervisor;
use crate::agent::AgentSession;

/// A settled session kept for the chat's next turn.
pub(super) struct Warm {
    pub(super) session: AgentSession,
    /// One of `agent.max_warm` (none for a session that runs a steered
    /// message for the next turn: it is that turn's, whatever the caps).
    _slot: Option<OwnedSemaphorePermit>,
    /// `agent.keep_warm`: closes the session when it fires.
    pub(super) timer: SpawnHandle,
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
        if let Some(old) = self.warm.take() {
            ctx.cancel_future(old.timer);
        }
        let timer = ctx.run_later(self.settings.keep_warm, |act, ctx| {
            if act.warm.take().is_some() {
                tracing::debug!("warm session closed after agent.keep_warm");
            }
            act.watch_idle(ctx);
        });
        self.warm = Some(Warm {
            session,
            _slot: Some(slot),
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
            _slot: None,
            timer,
        });
    }
}

//! The turn's clocks: the no-progress watchdog, the wall-clock budget and
//! the post-result grace. Each is an actor timer whose handle is kept and
//! cancelled when its reason goes away; all of them die with the actor.
//!
//! While a person decides a tool approval, the no-progress watchdog and the
//! budget stand still (the agent is waiting, not stalling); the chat's hard
//! deadline, owned by the supervisor, keeps running. While a tool call waits
//! on Telegram (a reaction, a file), the no-progress watchdog stands still
//! too: a slow or unreachable Telegram is not the agent's lack of progress.

use std::time::{Duration, Instant};

use actix::{AsyncContext, Context, Handler, Message, SpawnHandle};

use super::TurnActor;
use crate::chat::outcome::TurnEvent;

/// The turn's clocks; each handle is cancelled when its reason goes away.
#[derive(Default)]
pub(super) struct Watchdogs {
    /// No event for `turn.no_progress_timeout` before `result`.
    pub(super) no_progress: Option<SpawnHandle>,
    /// The wall-clock budget, `turn.max_duration`.
    pub(super) budget: Option<SpawnHandle>,
    /// The live view's clock: `progress.after`, then every `progress.interval`.
    pub(super) view: Option<SpawnHandle>,
    /// A preview waiting for `progress.preview_after`.
    pub(super) preview: Option<SpawnHandle>,
    /// `turn.post_result_grace`, armed once a result arrived or the turn
    /// ended with the session still open.
    pub(super) grace: Option<SpawnHandle>,
    /// The budget still left when it was last armed or paused.
    pub(super) budget_left: Option<Duration>,
    /// When the budget was last armed (its remaining time counts from here).
    pub(super) budget_armed: Option<Instant>,
    /// Approvals waiting for a person; the clocks stand still while any do.
    pub(super) waiting_for_person: usize,
    /// Tool calls waiting on Telegram's answer; the no-progress watchdog
    /// stands still while any do.
    pub(super) waiting_for_telegram: usize,
}

impl TurnActor {
    /// (Re)arms the no-progress watchdog while the prompt's result is due.
    pub(super) fn arm_no_progress(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.watchdogs.no_progress.take() {
            ctx.cancel_future(h);
        }
        if !self.phase.awaits_result()
            || self.watchdogs.waiting_for_person > 0
            || self.watchdogs.waiting_for_telegram > 0
        {
            return;
        }
        let timeout = self.deps.agent.config.no_progress_timeout;
        self.watchdogs.no_progress = Some(ctx.run_later(timeout, move |act, ctx| {
            act.watchdogs.no_progress = None;
            tracing::warn!(?timeout, "no progress from the agent");
            act.record(TurnEvent::NoProgress, ctx);
        }));
    }

    /// Arms `turn.post_result_grace` once.
    pub(super) fn arm_grace(&mut self, ctx: &mut Context<Self>) {
        if self.watchdogs.grace.is_some() {
            return;
        }
        let grace = self.deps.agent.config.post_result_grace;
        self.watchdogs.grace = Some(ctx.run_later(grace, move |act, ctx| {
            act.watchdogs.grace = None;
            if act.phase.holds_chat() {
                tracing::warn!(?grace, "agent did not settle after its result; force-closing");
                act.record(TurnEvent::GraceExpired, ctx);
            } else {
                tracing::warn!(session = %act.label(), "session did not settle after the turn ended; force-closing");
                act.kill(ctx);
            }
        }));
    }

    /// A person now decides: typing pauses, the no-progress watchdog and
    /// the budget stand still.
    pub(super) fn pause_for_person(&mut self, ctx: &mut Context<Self>) {
        self.watchdogs.waiting_for_person += 1;
        if self.watchdogs.waiting_for_person > 1 {
            return;
        }
        self.spec.typing.pause();
        if let Some(h) = self.watchdogs.no_progress.take() {
            ctx.cancel_future(h);
        }
        if let Some(h) = self.watchdogs.budget.take() {
            ctx.cancel_future(h);
            let used = self.watchdogs.budget_armed.map(|at| at.elapsed());
            let left = self.watchdogs.budget_left.unwrap_or_default();
            self.watchdogs.budget_left = Some(left.saturating_sub(used.unwrap_or_default()));
        }
    }

    /// The person decided: the clocks go on where they stood.
    pub(super) fn resume_after_person(&mut self, ctx: &mut Context<Self>) {
        if self.watchdogs.waiting_for_person == 0 {
            return;
        }
        self.watchdogs.waiting_for_person -= 1;
        if self.watchdogs.waiting_for_person > 0 || !self.phase.holds_chat() {
            return;
        }
        self.spec.typing.resume();
        self.arm_no_progress(ctx);
        if self.watchdogs.budget.is_none() && self.watchdogs.budget_left.is_some() {
            self.arm_budget(ctx);
        }
    }

    /// The live view's clock: the status first shows at `progress.after`,
    /// then the view refreshes every `progress.interval`.
    pub(super) fn arm_view(&mut self, ctx: &mut Context<Self>) {
        self.watchdogs.view = Some(ctx.run_later(self.view.after(), |act, ctx| {
            act.view.tick();
            let every = act.view.interval();
            act.watchdogs.view = Some(ctx.run_interval(every, |act, _ctx| act.view.tick()));
        }));
    }

    /// Shows the preview once `progress.preview_after` has passed since its
    /// text began, if it is still being written then.
    pub(super) fn arm_preview(&mut self, ctx: &mut Context<Self>) {
        if self.watchdogs.preview.is_some() {
            return;
        }
        let Some(wait) = self.view.preview_due_in() else {
            return;
        };
        // Once: later pieces of text show it themselves (and arm it again
        // for a text that replaced this one).
        self.watchdogs.preview = Some(ctx.run_later(wait, |act, _ctx| {
            act.watchdogs.preview = None;
            act.view.preview_due();
        }));
    }

    /// `turn.max_duration`: interrupt, then force-close, `BudgetExceeded`.
    /// Armed at start with the whole budget, again after a pause with what
    /// was left.
    pub(super) fn arm_budget(&mut self, ctx: &mut Context<Self>) {
        let budget = *self
            .watchdogs
            .budget_left
            .get_or_insert(self.deps.agent.config.max_duration);
        self.watchdogs.budget_armed = Some(Instant::now());
        self.watchdogs.budget = Some(ctx.run_later(budget, move |act, ctx| {
            act.watchdogs.budget = None;
            tracing::warn!(?budget, "turn ran past its budget");
            act.record(TurnEvent::BudgetExceeded, ctx);
        }));
    }

    /// Cancels the clocks that only run while the turn holds the chat.
    pub(super) fn disarm_live_clocks(&mut self, ctx: &mut Context<Self>) {
        for h in [
            self.watchdogs.no_progress.take(),
            self.watchdogs.budget.take(),
            self.watchdogs.view.take(),
            self.watchdogs.preview.take(),
        ]
        .into_iter()
        .flatten()
        {
            ctx.cancel_future(h);
        }
    }

    /// A tool call now waits on Telegram: the no-progress watchdog stands
    /// still until [`TelegramAnswered`].
    pub(super) fn wait_for_telegram(&mut self, ctx: &mut Context<Self>) {
        self.watchdogs.waiting_for_telegram += 1;
        self.disarm_no_progress(ctx);
    }

    /// Stops the no-progress watchdog (a result arrived).
    pub(super) fn disarm_no_progress(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.watchdogs.no_progress.take() {
            ctx.cancel_future(h);
        }
    }
}

/// Telegram answered a tool call's request (see
/// [`TurnActor::wait_for_telegram`]): the no-progress watchdog runs again
/// once none waits.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(super) struct TelegramAnswered;

impl Handler<TelegramAnswered> for TurnActor {
    type Result = ();

    fn handle(&mut self, _msg: TelegramAnswered, ctx: &mut Self::Context) {
        let waiting = &mut self.watchdogs.waiting_for_telegram;
        *waiting = waiting.saturating_sub(1);
        self.arm_no_progress(ctx);
    }
}

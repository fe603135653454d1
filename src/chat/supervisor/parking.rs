//! Usage limits: a turn the model API refused for a rate or usage limit
//! (`TurnOutcome::Limited`) parks its messages in the state store with a
//! due time; the chat is told once when they run again. New messages join
//! them; at the due time they run together as a new turn of the same
//! session. A further refusal doubles the wait (`agent.limit_retry`, up to
//! `agent.limit_retry_max`); the reset time the agent names wins. `/stop`
//! cancels; a restart keeps them (recovered with their due time).

use std::time::Duration;

use actix::{AsyncContext, Context, SpawnHandle};

use super::state::ChatStep;
use super::{ChatSupervisor, UserMessage};
use crate::chat::notices::parked;
use crate::incoming::Incoming;
use crate::state::{Disposition, now_ms};

/// The furthest reset a refusal may name (8 days: past a weekly limit).
const MAX_NAMED_WAIT_MS: i64 = 8 * 86_400 * 1000;

/// Messages waiting out a usage limit: the data of the chat's
/// [`Hold::Limit`](super::state::Hold::Limit).
#[derive(Debug)]
pub(super) struct Parked {
    messages: Vec<UserMessage>,
    /// When they run again (Unix ms).
    due_at: i64,
    timer: SpawnHandle,
}

impl Parked {
    /// The timer that runs them.
    pub(super) fn timer(&self) -> SpawnHandle {
        self.timer
    }
}

impl ChatSupervisor {
    /// Whether `msg` waits with the parked messages: some are parked, or it
    /// was parked by the previous process.
    pub(super) fn parks(&self, msg: &UserMessage) -> bool {
        self.state.parked().is_some() || msg.parked_until.is_some()
    }

    /// The model refused the turn of `messages` for a usage limit: they
    /// wait, and the chat is told until when.
    pub(super) fn park(
        &mut self,
        messages: Vec<Incoming>,
        resets_at: Option<i64>,
        ctx: &mut Context<Self>,
    ) {
        let settings = &self.settings;
        let wait = match self.limit_wait {
            None => settings.limit_retry,
            Some(last) => (last * 2).min(settings.limit_retry_max),
        };
        self.limit_wait = Some(wait);
        let now = now_ms();
        let by_wait = now.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX));
        // The reset the refusal names, when it names one, within a bound: the
        // text is the agent's, and a far-off date would park the chat for good.
        let latest = now.saturating_add(MAX_NAMED_WAIT_MS);
        let due_at = resets_at.map_or(by_wait, |at| at.saturating_mul(1000).clamp(now, latest));
        let ids: Vec<i64> = messages.iter().map(|m| m.update_id).collect();
        tracing::warn!(
            messages = ids.len(),
            wait_s = (due_at - now) / 1000,
            named_reset = resets_at.is_some(),
            "the model refused the turn for a usage limit; its messages are parked"
        );
        self.inbox.park(ids, due_at);
        let messages = messages.into_iter().map(UserMessage::new).collect();
        // The wait itself, not one recomputed from the wall clock's
        // milliseconds (the retry never comes before it).
        let left = match resets_at {
            Some(_) => Duration::from_millis(u64::try_from(due_at - now).unwrap_or(0)),
            None => wait,
        };
        self.hold(messages, due_at, left, ctx);
        if let Some(due) = chrono::DateTime::from_timestamp_millis(due_at) {
            self.say(parked(due, left));
        }
    }

    /// Keeps `messages` until `due_at`, `left` from now, then runs them.
    fn hold(
        &mut self,
        messages: Vec<UserMessage>,
        due_at: i64,
        left: Duration,
        ctx: &mut Context<Self>,
    ) {
        let timer = ctx.run_later(left, |act, ctx| act.unpark(ctx));
        if let Some(parked) = self.state.parked_mut() {
            ctx.cancel_future(parked.timer);
            parked.messages.extend(messages);
            parked.due_at = parked.due_at.min(due_at);
            parked.timer = timer;
            return;
        }
        let parked = Parked {
            messages,
            due_at,
            timer,
        };
        match self.step(ChatStep::Park(parked), ctx).parked() {
            // A chat whose host is stopping parks nothing: its rows stay
            // parked in the inbox, for the next process.
            Some(refused) => {
                ctx.cancel_future(refused.timer);
                tracing::debug!("the host is stopping; parked rows left for the next start");
            }
            None => self.events.metrics().parked(1),
        }
    }

    /// A message while messages are parked joins them (and one parked by
    /// the previous process is parked again until its time).
    pub(super) fn park_more(&mut self, msg: UserMessage, ctx: &mut Context<Self>) {
        let due_at = match (self.state.parked(), msg.parked_until) {
            (Some(parked), _) => parked.due_at,
            (None, Some(until)) => until,
            (None, None) => return self.enqueue(msg, ctx),
        };
        self.inbox.park(vec![msg.message.update_id], due_at);
        tracing::info!(
            update_id = msg.message.update_id,
            "message joins the parked ones"
        );
        let left = Duration::from_millis(u64::try_from(due_at - now_ms()).unwrap_or(0));
        self.hold(vec![msg], due_at, left, ctx);
    }

    /// Their time came: the parked messages run as one turn.
    fn unpark(&mut self, ctx: &mut Context<Self>) {
        let Some(parked) = self.step(ChatStep::Unpark, ctx).parked() else {
            return;
        };
        let metrics = self.events.metrics();
        metrics.parked(-1);
        metrics.limit_retried();
        tracing::info!(
            messages = parked.messages.len(),
            "parked messages run again"
        );
        metrics.queued(parked.messages.len() as i64);
        // One delivery: they are one turn.
        for mut msg in parked.messages.into_iter().rev() {
            msg.delivery = Some(u64::MAX);
            msg.parked_until = None;
            self.queue.push_front(msg);
        }
        self.try_start(ctx);
    }

    /// `/stop` while parked: the retry is cancelled; how many were waiting.
    pub(super) fn cancel_parked(&mut self, ctx: &mut Context<Self>) -> usize {
        let Some(parked) = self.step(ChatStep::Unpark, ctx).parked() else {
            return 0;
        };
        ctx.cancel_future(parked.timer);
        let metrics = self.events.metrics();
        metrics.parked(-1);
        metrics.limit_given_up();
        self.limit_wait = None;
        let ids: Vec<i64> = parked
            .messages
            .iter()
            .map(|m| m.message.update_id)
            .collect();
        self.inbox.turn_finished(ids.clone(), Disposition::Done);
        ids.len()
    }

    /// `/status`: until when messages are parked.
    pub(super) fn parked_line(&self) -> Option<String> {
        let parked = self.state.parked()?;
        let due = chrono::DateTime::from_timestamp_millis(parked.due_at)?;
        Some(format!(
            "{} parked for a usage limit until {} UTC",
            crate::chat::notices::counted(parked.messages.len(), "message", "messages"),
            due.format("%H:%M")
        ))
    }
}

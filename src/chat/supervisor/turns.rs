//! A turn's start and end: the front message's burst merged into one
//! [`TurnSpec`], the hard deadline, and what the supervisor writes when the
//! turn ends and its session settles.

use std::time::Instant;

use actix::{AsyncContext, Context, Handler};
use teloxide::types::{MessageId, UserId};

use super::state::{ChatState, ChatStep};
use super::{ChatSupervisor, Running};
use crate::attachment::Attachment;
use crate::chat::notices::FORCE_RELEASED;
use crate::chat::outcome::TurnOutcome;
use crate::chat::slots::TurnSlot;
use crate::chat::turn::{
    AbortTurn, Sender, SessionReleased, TurnActor, TurnEnded, TurnServices, TurnSpec,
};
use crate::chat::typing::{StartTyping, TypingLease};
use crate::events::{BotEvent, FeedItem};
use crate::ids::TurnId;
use crate::ops::logging::{StartInSpan, context_span};
use crate::state::Disposition;

/// The messages one turn answers: the front one and those merged with it.
struct Burst {
    /// Their texts as the agent reads them (in a group, each under its
    /// author's line), the empty ones left out, joined.
    text: String,
    /// Their own texts, the empty ones left out, joined.
    plain: String,
    /// Their files, in order.
    files: Vec<Attachment>,
    /// The last message, for reactions (none for a schedule's run).
    last: Option<MessageId>,
    /// Who sent the last one.
    from: UserId,
    /// Who sent them, each once.
    senders: Vec<Sender>,
    /// What the answer replies to: the front message, in a group.
    answer_to: Option<MessageId>,
    /// Their inbox rows.
    update_ids: Vec<i64>,
    /// The warm session is running them already.
    adopted: bool,
    /// The messages, as read.
    messages: Vec<crate::incoming::Incoming>,
}

impl ChatSupervisor {
    /// Takes the front message and every one merged with it: those
    /// accepted within its merge window, and the rest of its album.
    fn merge_burst(&mut self) -> Option<Burst> {
        let front = self.queue.pop_front()?;
        // A window too large to add to an Instant merges everything queued.
        let window_end = front.at.checked_add(self.settings.merge_window);
        let adopted = front.adopted;
        let delivery = front.delivery;
        let front = front.message;
        let album = front.album.clone();
        let mut burst = Burst {
            text: String::new(),
            plain: String::new(),
            files: Vec::new(),
            last: front.telegram_message(),
            from: front.from,
            senders: Vec::new(),
            answer_to: front.answer_to(),
            update_ids: Vec::new(),
            adopted,
            messages: Vec::new(),
        };
        let (mut texts, mut prompts) = (Vec::new(), Vec::new());
        let mut take = |m: crate::incoming::Incoming| {
            texts.push(m.text.clone());
            prompts.push(m.for_agent());
            burst.files.extend(m.files.iter().cloned());
            burst.last = m.telegram_message();
            burst.from = m.from;
            Sender::add(&mut burst.senders, &m);
            burst.update_ids.push(m.update_id);
            burst.messages.push(m);
        };
        take(front);
        // What the agent runs already is one turn of its own; the rest
        // merges by the window, the delivery and the album.
        while let Some(next) = self.queue.pop_front_if(|p| {
            p.adopted == adopted
                && (adopted
                    || window_end.is_none_or(|end| p.at <= end)
                    || (delivery.is_some() && p.delivery == delivery)
                    || (album.is_some() && p.message.album == album))
        }) {
            take(next.message);
        }
        texts.retain(|t| !t.trim().is_empty());
        prompts.retain(|t| !t.trim().is_empty());
        burst.plain = texts.join("\n\n");
        burst.text = prompts.join("\n\n");
        Some(burst)
    }

    /// Starts a turn on `slot` for the front message's burst, on the warm
    /// session if one is kept, under the hard deadline.
    pub(super) fn start_turn(&mut self, slot: TurnSlot, ctx: &mut Context<Self>) {
        if !matches!(self.state, ChatState::WaitingForSlot(_)) || self.queue.is_empty() {
            // `/stop` cleared the queue, or the host began stopping, while
            // the slot was on its way: it goes back unused.
            self.step(ChatStep::NoSlot, ctx);
            return self.watch_idle(ctx);
        }
        let Some(burst) = self.merge_burst() else {
            return;
        };
        let update_ids = burst.update_ids;
        self.inbox.note_opening(self.to, &burst.plain);
        self.events.metrics().queued(-(update_ids.len() as i64));
        let turn = self.turn_ids.next();
        self.inbox.turn_started(update_ids.clone(), turn);
        // Inside the chat's span, as is what the turn logs.
        let span = context_span!("turn", turn_id = turn.get());
        span.in_scope(|| tracing::info!(messages = update_ids.len(), "turn started"));
        let warm = self.warm.take().map(|warm| {
            ctx.cancel_future(warm.timer);
            warm.session
        });
        // Without the session that runs them, they are written afresh.
        let adopted = (burst.adopted && warm.is_some()).then(|| {
            burst
                .messages
                .iter()
                .map(|m| (m.update_id, Some(m.message_id)))
                .collect()
        });
        let typing = self.typing_actor();
        let lease = TypingLease::of_turn(self.to.chat, turn, self.events.clone());
        typing.do_send(StartTyping {
            turn,
            lease: lease.view(),
        });
        let me = ctx.address();
        let spec = TurnSpec {
            to: self.to,
            turn,
            text: burst.text,
            // A schedule's run has no message to react to.
            reply_to: burst.last,
            answer_to: burst.answer_to,
            files: burst.files,
            update_ids: update_ids.clone(),
            from: Some(burst.from),
            senders: burst.senders,
            typing: lease,
            adopted,
        };
        let addr = TurnActor::new(
            spec,
            TurnServices::clone(&self.turns),
            warm,
            vec![me.clone().recipient(), typing.recipient()],
            me.recipient(),
        )
        .start_in(span.clone());
        let deadline = ctx.run_later(self.settings.hard_deadline, move |act, ctx| {
            act.force_release(turn, ctx);
        });
        let running = Running {
            turn,
            update_ids,
            messages: burst.messages,
            addr,
            span,
            started: Instant::now(),
            deadline,
            _slot: slot,
        };
        self.step(ChatStep::Start(running), ctx);
    }

    /// The hard deadline: releases the chat from `turn` now, whatever its
    /// actors say; the session is killed and the chat told.
    fn force_release(&mut self, turn: TurnId, ctx: &mut Context<Self>) {
        let Some(running) = self.step(ChatStep::ForceReleased(turn), ctx).turn() else {
            return;
        };
        let at = Instant::now();
        running.span.in_scope(|| {
            tracing::error!(
                held_ms = running.started.elapsed().as_millis() as u64,
                "turn past its hard deadline; chat force-released"
            );
        });
        // The turn ends its typing lease as it takes this.
        running.addr.do_send(AbortTurn);
        self.inbox
            .turn_finished(running.update_ids.clone(), Disposition::Done);
        let ended = TurnEnded {
            turn,
            outcome: TurnOutcome::ForceReleased,
            session_id: None,
            replied: false,
            started: running.started,
            at,
            steered: Vec::new(),
        };
        if let Some(typing) = &self.typing {
            typing.do_send(ended);
        }
        self.events.publish(BotEvent::TurnEnded {
            chat: self.to.chat,
            turn,
            outcome: TurnOutcome::ForceReleased,
            session_id: None,
            at,
        });
        // The aborted turn ends without its own close: its followers are
        // told here, or they would see it running still.
        self.events.feed(
            self.to,
            FeedItem::TurnEnded {
                turn,
                outcome: TurnOutcome::ForceReleased,
            },
        );
        self.warm = None;
        self.say(FORCE_RELEASED);
        drop(running);
        self.try_start(ctx);
    }
}

impl Handler<TurnEnded> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, msg: TurnEnded, ctx: &mut Self::Context) {
        // Dropping the running turn gives its slot back: the chat is free.
        let Some(running) = self.step(ChatStep::Ended(msg.turn), ctx).turn() else {
            tracing::debug!(
                turn_id = msg.turn.get(),
                "TurnEnded for a turn no longer held; ignored"
            );
            return;
        };
        ctx.cancel_future(running.deadline);
        let how = match msg.outcome {
            // Retried after the restart, unless it already replied.
            TurnOutcome::HostStopping if self.settings.retry_interrupted && !msg.replied => {
                Disposition::Requeue
            }
            TurnOutcome::HostStopping => Disposition::Report,
            _ => Disposition::Done,
        };
        let inbox = &self.inbox;
        let mut rows = running.update_ids.clone();
        rows.extend(msg.steered.iter().map(|m| m.update_id));
        if let TurnOutcome::Limited { resets_at } = msg.outcome
            && !self.settings.limit_retry.is_zero()
            && !msg.replied
            && !self.state.host_stopping()
        {
            let mut messages = running.messages.clone();
            messages.extend(msg.steered.iter().cloned());
            self.park(messages, resets_at, ctx);
        } else {
            inbox.turn_finished(rows, how);
            if msg.outcome.finished() {
                // The next refusal waits the first wait again.
                self.limit_wait = None;
            }
        }
        let inbox = &self.inbox;
        let duration = msg.at.saturating_duration_since(msg.started);
        // Its API calls and cost are counted, and its record written, by
        // the turn once its session is done: after a terminator the
        // result comes later.
        let metrics = self.events.metrics();
        metrics.turn_ended(&msg.outcome, duration);
        // A schedule's run is delivered when its turn completed; requeued
        // for the next start, it is not over yet.
        let runs = running.messages.iter().filter(|m| m.is_scheduled()).count() as u64;
        if runs > 0 && how != Disposition::Requeue {
            let label = if msg.outcome.finished() {
                "delivered"
            } else {
                "failed"
            };
            metrics.schedule_runs(label, runs);
        }
        if msg.turn > self.forget_through
            && let Some(id) = msg.session_id
        {
            let to = self.to;
            inbox.tell("saving the session id", move |store| {
                store.set_session(to, Some(&id))
            });
        }
    }
}

impl Handler<SessionReleased> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, msg: SessionReleased, ctx: &mut Self::Context) {
        if !matches!(self.state, ChatState::Settling(turn, ..) if turn == msg.turn) {
            return;
        }
        self.step(ChatStep::Released(msg.turn), ctx);
        let continuing = !msg.carried.is_empty() && msg.carried.iter().all(|c| c.written);
        let stopping = self.state.host_stopping();
        if msg.turn > self.forget_through.max(self.cold_through) && !stopping {
            match msg.session {
                Some(session) if continuing => self.keep_continuing(session, ctx),
                session => self.keep_warm(session, ctx),
            }
        }
        if stopping {
            // Their rows stay running: the next start reports or retries
            // them (`dispatcher.on_interrupted`), as any cut message.
            if !msg.carried.is_empty() {
                tracing::info!(
                    messages = msg.carried.len(),
                    "steered messages left for the next start"
                );
            }
        } else {
            self.carry(msg.carried);
        }
        self.try_start(ctx);
    }
}

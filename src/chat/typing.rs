//! TypingActor: holds a chat's typing lease. `sendChatAction(typing)` at
//! once, then every `turn.typing_interval`, and nothing after [`TurnEnded`]
//! (or after `turn.hard_deadline`, whichever comes first).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use actix::{Actor, ActorContext, Addr, AsyncContext, Context, Handler, Message, SpawnHandle};
use teloxide::types::ChatId;

use crate::chat::turn::TurnEnded;
use crate::events::{BotEvent, EventBus, Gauges};
use crate::telegram::outbox::{Outbox, SendTyping};

/// Starts a lease for a turn (ending any earlier one).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StartTyping {
    /// The turn the lease belongs to.
    pub turn: u64,
    /// The lease flag, shared with the turn actor, which clears it the
    /// moment the turn ends (before TurnEnded reaches this actor's mailbox),
    /// so the outbox never sends typing for an ended turn.
    pub alive: Arc<AtomicBool>,
}

/// Ends any lease and stops the actor (the chat is being evicted).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct RetireTyping;

/// One live lease.
struct Lease {
    /// Whose.
    turn: u64,
    /// Read by the outbox right before each request leaves.
    alive: Arc<AtomicBool>,
    /// The renewal timer.
    pulse: SpawnHandle,
    /// The hard deadline.
    deadline: SpawnHandle,
}

/// The actor.
pub struct TypingActor {
    /// The chat.
    chat: ChatId,
    /// Where requests go.
    outbox: Addr<Outbox>,
    /// Renewal period.
    interval: Duration,
    /// A lease never outlives this.
    hard_deadline: Duration,
    /// The live lease.
    lease: Option<Lease>,
    /// Where it reports.
    events: EventBus,
    /// Live actor counts.
    gauges: Arc<Gauges>,
}

impl TypingActor {
    /// A typing actor for `chat`.
    pub fn new(
        chat: ChatId,
        outbox: Addr<Outbox>,
        interval: Duration,
        hard_deadline: Duration,
        events: EventBus,
        gauges: Arc<Gauges>,
    ) -> Self {
        gauges.typing.fetch_add(1, Ordering::SeqCst);
        Self {
            chat,
            outbox,
            interval,
            hard_deadline,
            lease: None,
            events,
            gauges,
        }
    }

    fn pulse(&mut self, _ctx: &mut Context<Self>) {
        if let Some(lease) = &self.lease
            && lease.alive.load(Ordering::SeqCst)
        {
            self.outbox.do_send(SendTyping {
                chat: self.chat,
                lease: Arc::clone(&lease.alive),
            });
        }
    }

    fn end_lease(&mut self, ctx: &mut Context<Self>) {
        if let Some(lease) = self.lease.take() {
            lease.alive.store(false, Ordering::SeqCst);
            ctx.cancel_future(lease.pulse);
            ctx.cancel_future(lease.deadline);
            self.events.publish(BotEvent::TypingStopped {
                chat: self.chat,
                turn: lease.turn,
                at: Instant::now(),
            });
        }
    }
}

impl Actor for TypingActor {
    type Context = Context<Self>;

    fn stopped(&mut self, ctx: &mut Self::Context) {
        self.end_lease(ctx);
    }
}

impl Drop for TypingActor {
    fn drop(&mut self) {
        self.gauges.leave(&self.gauges.typing);
    }
}

impl Handler<RetireTyping> for TypingActor {
    type Result = ();

    fn handle(&mut self, _msg: RetireTyping, ctx: &mut Self::Context) {
        self.end_lease(ctx);
        ctx.stop();
    }
}

impl Handler<StartTyping> for TypingActor {
    type Result = ();

    fn handle(&mut self, msg: StartTyping, ctx: &mut Self::Context) {
        self.end_lease(ctx);
        let pulse = ctx.run_interval(self.interval, Self::pulse);
        let deadline = ctx.run_later(self.hard_deadline, move |act, ctx| {
            if act.lease.as_ref().is_some_and(|l| l.turn == msg.turn) {
                tracing::warn!(
                    chat_id = act.chat.0,
                    turn = msg.turn,
                    "typing lease reached the hard deadline"
                );
                act.end_lease(ctx);
            }
        });
        self.lease = Some(Lease {
            turn: msg.turn,
            alive: msg.alive,
            pulse,
            deadline,
        });
        self.pulse(ctx);
    }
}

impl Handler<TurnEnded> for TypingActor {
    type Result = ();

    fn handle(&mut self, msg: TurnEnded, ctx: &mut Self::Context) {
        if self.lease.as_ref().is_some_and(|l| l.turn == msg.turn) {
            self.end_lease(ctx);
        }
    }
}

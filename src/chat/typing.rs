//! TypingActor: renews a chat's typing indicator. `sendChatAction(typing)`
//! at once, then every `turn.typing_interval` while the turn's lease is
//! live, and nothing after [`TurnEnded`] (or after `turn.hard_deadline`,
//! whichever comes first). It only reads the lease (a [`TypingView`]): the
//! turn actor owns the [`TypingLease`] and is the one that ends it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix::{Actor, ActorContext, Addr, AsyncContext, Context, Handler, Message, SpawnHandle};

use crate::chat::turn::TurnEnded;
use crate::events::Gauges;
use crate::ids::TurnId;
use crate::telegram::outbox::{Outbox, SendTyping};
pub use crate::telegram::{TypingLease, TypingView};

/// Starts a lease for a turn (ending any earlier one).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StartTyping {
    /// The turn the lease belongs to.
    pub turn: TurnId,
    /// A view of the turn's lease (see [`TypingLease`]).
    pub lease: TypingView,
}

/// Ends any lease and stops the actor (the chat is being evicted).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct RetireTyping;

/// One live lease.
struct Lease {
    /// Whose.
    turn: TurnId,
    /// The turn's lease, read here and by the outbox right before each
    /// request leaves.
    alive: TypingView,
    /// The renewal timer.
    pulse: SpawnHandle,
    /// The hard deadline.
    deadline: SpawnHandle,
}

/// The actor.
pub struct TypingActor {
    /// The conversation (a chat, or a forum topic of it) the indicator
    /// shows in.
    to: crate::ids::Conversation,
    /// Where requests go.
    outbox: Addr<Outbox>,
    /// Renewal period.
    interval: Duration,
    /// A lease never outlives this.
    hard_deadline: Duration,
    /// The live lease.
    lease: Option<Lease>,
    /// Live actor counts.
    gauges: Arc<Gauges>,
}

impl TypingActor {
    /// A typing actor for `chat`.
    pub fn new(
        to: crate::ids::Conversation,
        outbox: Addr<Outbox>,
        interval: Duration,
        hard_deadline: Duration,
        gauges: Arc<Gauges>,
    ) -> Self {
        gauges.typing.fetch_add(1, Ordering::SeqCst);
        Self {
            to,
            outbox,
            interval,
            hard_deadline,
            lease: None,
            gauges,
        }
    }

    fn pulse(&mut self, _ctx: &mut Context<Self>) {
        if let Some(lease) = &self.lease
            && lease.alive.may_show()
        {
            self.outbox.do_send(SendTyping {
                to: self.to,
                lease: lease.alive.clone(),
            });
        }
    }

    fn end_lease(&mut self, ctx: &mut Context<Self>) {
        if let Some(lease) = self.lease.take() {
            ctx.cancel_future(lease.pulse);
            ctx.cancel_future(lease.deadline);
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
                // The chat is the span's; the turn is the lease's.
                tracing::warn!(
                    turn_id = msg.turn.get(),
                    "typing lease reached the hard deadline"
                );
                act.end_lease(ctx);
            }
        });
        self.lease = Some(Lease {
            turn: msg.turn,
            alive: msg.lease,
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

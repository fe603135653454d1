//! TypingActor: holds a chat's typing lease. `sendChatAction(typing)` at
//! once, then every `turn.typing_interval`, and nothing after [`TurnEnded`]
//! (or after `turn.hard_deadline`, whichever comes first).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use actix::{Actor, ActorContext, Addr, AsyncContext, Context, Handler, Message, SpawnHandle};
use teloxide::types::ChatId;

use crate::chat::turn::TurnEnded;
use crate::events::{BotEvent, EventBus, Gauges};
use crate::ids::TurnId;
use crate::telegram::outbox::{Outbox, SendTyping};

/// One turn's claim on its chat's typing indicator.
///
/// The supervisor makes one per turn and hands clones to the turn actor and
/// the typing actor. It is *ended*, once and for good, by whichever comes
/// first: the turn actor as the turn ends (before TurnEnded is stamped and
/// sent), the supervisor at the hard deadline or when the chat is retired,
/// the typing actor when its lease ends. The turn actor *pauses* it while a
/// person decides a tool approval (the agent is not working then) and
/// resumes it after; an ended lease stays ended. The outbox checks it right
/// before each `sendChatAction` leaves, so no typing goes out for a turn
/// that is over or paused, whatever is still queued.
///
/// Typing has stopped when the lease ends: that is when
/// [`BotEvent::TypingStopped`] is published (by whoever ends it), not when
/// the typing actor gets round to cancelling its timers, whose next pulse
/// would find the lease ended anyway.
#[derive(Debug, Clone)]
pub struct TypingLease(Arc<LeaseState>);

#[derive(Debug)]
struct LeaseState {
    state: AtomicU8,
    /// Told when the lease ends.
    stopped: Option<(ChatId, TurnId, EventBus)>,
}

/// [`TypingLease`] states.
const LIVE: u8 = 0;
const PAUSED: u8 = 1;
const ENDED: u8 = 2;

impl Default for TypingLease {
    fn default() -> Self {
        Self::new()
    }
}

impl TypingLease {
    /// A live lease that tells no one when it ends.
    pub fn new() -> Self {
        Self(Arc::new(LeaseState {
            state: AtomicU8::new(LIVE),
            stopped: None,
        }))
    }

    /// A live lease of `turn` in `chat`: its end publishes
    /// [`BotEvent::TypingStopped`] on `events`.
    pub fn of_turn(chat: ChatId, turn: TurnId, events: EventBus) -> Self {
        Self(Arc::new(LeaseState {
            state: AtomicU8::new(LIVE),
            stopped: Some((chat, turn, events)),
        }))
    }

    /// Ends the lease (idempotent; it never comes back). The first end
    /// publishes `TypingStopped`.
    pub fn end(&self) {
        if self.0.state.swap(ENDED, Ordering::SeqCst) != ENDED
            && let Some((chat, turn, events)) = &self.0.stopped
        {
            events.publish(BotEvent::TypingStopped {
                chat: *chat,
                turn: *turn,
                at: Instant::now(),
            });
        }
    }

    /// Pauses a live lease (a person is deciding, not the agent).
    pub fn pause(&self) {
        let _ = self
            .0
            .state
            .compare_exchange(LIVE, PAUSED, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Resumes a paused lease; an ended one stays ended.
    pub fn resume(&self) {
        let _ = self
            .0
            .state
            .compare_exchange(PAUSED, LIVE, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Whether typing may be shown for its turn now.
    pub fn is_live(&self) -> bool {
        self.0.state.load(Ordering::SeqCst) == LIVE
    }

    /// Whether the lease ended for good.
    pub fn is_ended(&self) -> bool {
        self.0.state.load(Ordering::SeqCst) == ENDED
    }
}

/// Starts a lease for a turn (ending any earlier one).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StartTyping {
    /// The turn the lease belongs to.
    pub turn: TurnId,
    /// The turn's lease (see [`TypingLease`]).
    pub lease: TypingLease,
}

/// Ends any lease and stops the actor (the chat is being evicted).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct RetireTyping;

/// One live lease.
struct Lease {
    /// Whose.
    turn: TurnId,
    /// Read by the outbox right before each request leaves.
    alive: TypingLease,
    /// The renewal timer.
    pulse: SpawnHandle,
    /// The hard deadline.
    deadline: SpawnHandle,
}

/// The actor.
pub struct TypingActor {
    /// The chat.
    chat: ChatId,
    /// Its forum topic, where the indicator shows.
    topic: Option<teloxide::types::ThreadId>,
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
            chat: to.chat,
            topic: to.topic,
            outbox,
            interval,
            hard_deadline,
            lease: None,
            gauges,
        }
    }

    fn pulse(&mut self, _ctx: &mut Context<Self>) {
        if let Some(lease) = &self.lease
            && lease.alive.is_live()
        {
            self.outbox.do_send(SendTyping {
                chat: self.chat,
                topic: self.topic,
                lease: lease.alive.clone(),
            });
        }
    }

    fn end_lease(&mut self, ctx: &mut Context<Self>) {
        if let Some(lease) = self.lease.take() {
            // Publishes TypingStopped, unless the turn ended it first.
            lease.alive.end();
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
                tracing::warn!(
                    chat_id = act.chat.0,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_pauses_resumes_and_ends_for_good() {
        let lease = TypingLease::new();
        assert!(lease.is_live());
        lease.pause();
        assert!(!lease.is_live() && !lease.is_ended());
        lease.resume();
        assert!(lease.is_live());
        lease.pause();
        lease.end();
        lease.resume();
        assert!(
            lease.is_ended() && !lease.is_live(),
            "an ended lease stays ended"
        );
    }
}

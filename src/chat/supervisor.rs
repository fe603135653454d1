//! ChatSupervisor: one per chat. Owns the chat's FIFO of pending messages
//! (a burst inside `dispatcher.merge_window` becomes one turn), starts a
//! [`TurnActor`] per turn once a concurrency slot is free, owns the chat's
//! [`TypingActor`], and starts the next turn only after the current one has
//! ended and its session has settled or gone.
//!
//! It is also the chat's backstop: each turn runs under a hard-deadline
//! timer (`turn.hard_deadline`), armed when the turn starts and cancelled at
//! TurnEnded, that releases the chat whatever its actors do. Idle for
//! `dispatcher.idle_eviction`, it tells the dispatcher, which retires it.

mod commands;
pub(crate) mod handoff;
mod parking;
mod state;
mod steering;
mod switching;
mod turns;
mod warm;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, Recipient, SpawnHandle,
    WrapFuture,
};
use tokio::sync::Semaphore;
use tracing::Span;

use self::parking::Parked;
use self::state::{ChatState, ChatStep, Hold, HoldsTurn, Left};
pub use self::switching::{Choose, Chosen};
pub use self::warm::{Prewarm, Prewarmed};
use self::warm::{Prewarming, Warm};
use crate::chat::notices::not_accepted;
use crate::chat::slots::{TurnSlot, TurnSlots};
use crate::chat::turn::{AbortTurn, TurnActor, TurnServices};
use crate::chat::typing::{RetireTyping, TypingActor};
use crate::events::{EventBus, Gauges};
use crate::ids::{Conversation, TurnId};
use crate::incoming::{Command, Incoming, Source};
use crate::ops::logging::{StartInSpan, context_span};
use crate::shutdown::Shutdown;
use crate::state::StoreHandle;
use crate::state::TurnIds;
use crate::telegram::outbox::{Outbox, SendText};

/// A message for the chat's agent, as the intake read it.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct UserMessage {
    /// The message.
    pub message: Incoming,
    /// When it was accepted (its merge window opens then).
    pub at: Instant,
    /// More of the delivery it came in (one `getUpdates` batch) follows,
    /// then [`DeliveryEnd`]: a turn waits for the rest, so messages that
    /// arrive together are one turn.
    pub rest_follows: bool,
    /// Which delivery of the intake it came in (none for a recovered
    /// message or a schedule's run): the messages of one merge.
    pub delivery: Option<u64>,
    /// Steered into the last turn, which ended before the agent read it:
    /// the warm session is already running it.
    pub adopted: bool,
    /// Parked by a previous process until this time (Unix ms): its turn
    /// was refused for a usage limit.
    pub parked_until: Option<i64>,
}

impl UserMessage {
    /// A message just accepted, on its own.
    pub fn new(message: Incoming) -> Self {
        Self {
            message,
            at: Instant::now(),
            rest_follows: false,
            delivery: None,
            adopted: false,
            parked_until: None,
        }
    }
}

/// The delivery that the last messages came in is whole: the turn that
/// waited for it may start.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct DeliveryEnd;

/// A command for the chat, as the intake parsed it: `/stop`, `/new` and
/// `/handoff` (`commands.rs`).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ChatCommand {
    /// The command.
    pub command: Command,
    /// Where it was given: a stop typed at the terminal is said in the
    /// chat by the stop itself, after it dropped what was queued.
    pub source: Source,
}

/// The dispatcher retires an idle chat (after [`ChatReport::Idle`]).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct RetireChat;

/// The host is stopping: take no new turns; with `end_running`, also end
/// the running one (`HostStopping`).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopChatForHost {
    /// End the running turn now (the drain is over).
    pub end_running: bool,
}

/// A line for `/status`.
#[derive(Message, Debug)]
#[rtype(result = "String")]
pub struct DescribeChat;

/// What a supervisor reports to the dispatcher.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub enum ChatReport {
    /// The chat has been idle for `dispatcher.idle_eviction` and may be
    /// retired, provided nothing was routed to it after the `received`-th
    /// item.
    Idle {
        /// The conversation.
        chat: Conversation,
        /// How many items (messages and commands) it had received.
        received: u64,
    },
}

/// How long the first item of an album waits for the rest, whatever
/// `dispatcher.merge_window` says: an album is one turn.
const ALBUM_WAIT: Duration = Duration::from_millis(800);

/// The turn holding the chat.
struct Running {
    turn: TurnId,
    update_ids: Vec<i64>,
    /// The messages it answers, parked again should the model refuse them
    /// for a usage limit.
    messages: Vec<Incoming>,
    addr: Addr<TurnActor>,
    /// The turn's span, for what the supervisor logs of it.
    span: Span,
    started: Instant,
    /// The hard-deadline timer, cancelled at TurnEnded.
    deadline: SpawnHandle,
    /// Given back (dropped) when the turn ends.
    _slot: TurnSlot,
}

impl HoldsTurn for Running {
    fn turn(&self) -> TurnId {
        self.turn
    }
}

/// Settings a supervisor needs from `[dispatcher]` and `[turn]`.
#[derive(Debug, Clone)]
pub struct ChatSettings {
    /// `dispatcher.merge_window`.
    pub merge_window: Duration,
    /// `dispatcher.queue_limit`.
    pub queue_limit: usize,
    /// `dispatcher.idle_eviction`.
    pub idle_eviction: Duration,
    /// `agent.keep_warm`.
    pub keep_warm: Duration,
    /// Messages for a running turn are steered into it
    /// (`dispatcher.busy = "steer"` and a backend that steers).
    pub steer: bool,
    /// `agent.max_warm` slots shared by all chats.
    pub warm_slots: Arc<Semaphore>,
    /// `turn.hard_deadline`: the chat is released from a turn then.
    pub hard_deadline: Duration,
    /// `turn.typing_interval`, for the chat's typing actor.
    pub typing_interval: Duration,
    /// `turn.no_progress_timeout`: how long a session running steered
    /// messages waits for the next turn to take it.
    pub no_progress_timeout: Duration,
    /// `dispatcher.on_interrupted == "retry"`.
    pub retry_interrupted: bool,
    /// `agent.limit_retry`: the first wait after a usage limit (zero:
    /// reported, not retried).
    pub limit_retry: Duration,
    /// `agent.limit_retry_max`: the longest such wait.
    pub limit_retry_max: Duration,
}

/// The actor.
pub struct ChatSupervisor {
    /// The conversation: the chat, or one forum topic of it.
    to: Conversation,
    /// What its turns use (one for every chat), a copy handed to each
    /// turn it starts.
    turns: Arc<TurnServices>,
    /// The way out to Telegram.
    outbox: Addr<Outbox>,
    /// The inbox and session ids.
    inbox: StoreHandle,
    /// Where it reports.
    events: EventBus,
    /// Live actor counts.
    gauges: Arc<Gauges>,
    /// Whether the host is stopping or restarting.
    shutdown: Shutdown,
    /// Queue and merge settings.
    settings: ChatSettings,
    /// Where reports go.
    dispatcher: Recipient<ChatReport>,
    /// The global cap on concurrent turns.
    slots: TurnSlots,
    /// Numbers turns, on from the previous processes' ids.
    turn_ids: Arc<TurnIds>,
    /// Where the chat is, and what holds its next turn back.
    state: ChatState<Running, Parked>,
    /// Messages waiting, oldest first.
    queue: VecDeque<UserMessage>,
    /// A message was handed to the running turn, which has not answered
    /// yet whether it takes it; the messages accepted meanwhile wait here,
    /// oldest first, and are routed once it answers. Beside the state, not
    /// in `Running`: the answer can come after the turn has ended (its
    /// TurnEnded, even its SessionReleased, may be handled first), and the
    /// messages held behind it must still wait for it, whatever the chat
    /// is doing by then, or they would overtake the one it did not take.
    awaiting: Option<VecDeque<UserMessage>>,
    /// A settled session kept for the next turn.
    warm: Option<Warm>,
    /// A prewarm is opening the session the next turn takes.
    prewarming: Prewarming,
    /// Turns up to this one must not keep their session (after `/new`).
    forget_through: TurnId,
    /// Turns up to this one keep their session id but not their process
    /// (after `/model`: the next turn resumes with the new model).
    cold_through: TurnId,
    /// The chat's typing actor.
    typing: Option<Addr<TypingActor>>,
    /// Items received from the dispatcher, for [`ChatReport::Idle`].
    received: u64,
    /// Fires `dispatcher.idle_eviction` after the chat became idle.
    idle_timer: Option<SpawnHandle>,
    /// The last usage-limit refusal's wait, doubled for the next one until
    /// a turn finishes: the chat's history across turns, not where it is
    /// (the messages waiting one out are the state's [`Hold::Limit`]).
    limit_wait: Option<Duration>,
    /// The session handed off to the host (`/handoff`), till taken back.
    handed_off: Option<String>,
}

impl ChatSupervisor {
    /// A supervisor for `chat`, whose turns use `turns`.
    pub fn new(
        to: Conversation,
        turns: Arc<TurnServices>,
        settings: ChatSettings,
        dispatcher: Recipient<ChatReport>,
        slots: TurnSlots,
        turn_ids: Arc<TurnIds>,
    ) -> Self {
        turns
            .books
            .gauges
            .supervisors
            .fetch_add(1, Ordering::SeqCst);
        Self {
            to,
            outbox: turns.out.outbox.clone(),
            inbox: turns.books.inbox.clone(),
            events: turns.books.events.clone(),
            gauges: Arc::clone(&turns.books.gauges),
            shutdown: turns.books.shutdown.clone(),
            turns,
            settings,
            dispatcher,
            slots,
            turn_ids,
            state: ChatState::Idle(Hold::Open),
            queue: VecDeque::new(),
            awaiting: None,
            warm: None,
            prewarming: Prewarming::No,
            forget_through: TurnId(0),
            cold_through: TurnId(0),
            typing: None,
            received: 0,
            idle_timer: None,
            limit_wait: None,
            handed_off: None,
        }
    }

    /// The span the chat logs in, its turns and typing actor inside it:
    /// `chat{chat_id, topic}`, a root whoever starts the supervisor.
    pub fn span(&self) -> Span {
        let topic = self.to.topic.map(|t| t.0.0);
        context_span!(parent: None, "chat", chat_id = self.to.chat.0, topic)
    }

    fn say(&self, text: impl Into<String>) {
        self.outbox.do_send(SendText::new(self.to, text));
    }

    /// Moves the chat on `step`; a merge window the step closed, or one
    /// the state did not take, is cancelled here, the rest of what it took
    /// out is the caller's.
    fn step(
        &mut self,
        step: ChatStep<Running, Parked>,
        ctx: &mut Context<Self>,
    ) -> Left<Running, Parked> {
        let (state, left) = std::mem::replace(&mut self.state, ChatState::Stopped).after(step);
        self.state = state;
        if let Left::Window(handle) = left {
            ctx.cancel_future(handle);
            return Left::Nothing;
        }
        left
    }

    /// Something arrived from the dispatcher: the chat is not idle.
    fn touched(&mut self, ctx: &mut Context<Self>) {
        self.received += 1;
        if let Some(timer) = self.idle_timer.take() {
            ctx.cancel_future(timer);
        }
    }

    /// Arms the idle timer when nothing is queued, running or kept warm.
    fn watch_idle(&mut self, ctx: &mut Context<Self>) {
        if self.queue.is_empty() {
            // An idle chat keeps no buffer for its queue.
            self.queue.shrink_to_fit();
        }
        if !self.state.at_rest()
            || !self.queue.is_empty()
            || self.warm.is_some()
            || self.prewarming != Prewarming::No
            || self.awaiting.is_some()
            || self.handed_off.is_some()
        {
            return;
        }
        if let Some(timer) = self.idle_timer.take() {
            ctx.cancel_future(timer);
        }
        let received = self.received;
        self.idle_timer = Some(
            ctx.run_later(self.settings.idle_eviction, move |act, _ctx| {
                act.idle_timer = None;
                act.dispatcher.do_send(ChatReport::Idle {
                    chat: act.to,
                    received,
                });
            }),
        );
    }

    /// Starts the next turn when the chat is free and nothing holds it.
    fn try_start(&mut self, ctx: &mut Context<Self>) {
        if !matches!(self.state, ChatState::Idle(_)) {
            return;
        }
        let Some(front) = self.queue.front() else {
            return self.watch_idle(ctx);
        };
        if self.prewarming != Prewarming::No {
            // The turn takes the session a prewarm is opening ([`Prewarm`]).
            return;
        }
        if !self.state.may_start(front.adopted) {
            // The rest of a delivery joins this turn ([`DeliveryEnd`]), or
            // messages wait out a usage limit: everything runs together then.
            return;
        }
        let open_for = front.at.elapsed();
        let window = if front.adopted {
            // The agent is already running it.
            Duration::ZERO
        } else if front.message.album.is_some() {
            self.settings.merge_window.max(ALBUM_WAIT)
        } else {
            self.settings.merge_window
        };
        if open_for < window {
            let handle = ctx.run_later(window - open_for, |act, ctx| {
                act.step(ChatStep::WindowClosed, ctx);
                act.try_start(ctx);
            });
            self.step(ChatStep::Merge(handle), ctx);
            return;
        }
        let adopted = front.adopted;
        self.step(ChatStep::Acquire { adopted }, ctx);
        let slots = self.slots.clone();
        ctx.spawn(
            async move { slots.acquire().await }.into_actor(self).map(
                |slot, act, ctx| match slot {
                    Some(slot) => act.start_turn(slot, ctx),
                    None => {
                        act.step(ChatStep::NoSlot, ctx);
                        tracing::debug!("no more turns: the host is stopping");
                    }
                },
            ),
        );
    }

    fn typing_actor(&mut self) -> Addr<TypingActor> {
        if let Some(addr) = &self.typing {
            return addr.clone();
        }
        let settings = &self.settings;
        let addr = TypingActor::new(
            self.to,
            self.outbox.clone(),
            settings.typing_interval,
            settings.hard_deadline,
            Arc::clone(&self.gauges),
        )
        .start_in(context_span!("typing"));
        self.typing = Some(addr.clone());
        addr
    }
}

impl Actor for ChatSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.watch_idle(ctx);
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        if let Some(typing) = self.typing.take() {
            typing.do_send(RetireTyping);
        }
        let (state, left) =
            std::mem::replace(&mut self.state, ChatState::Stopped).after(ChatStep::HostStopping);
        if left.parked().is_some() {
            // Their rows stay parked in the inbox, for the next process.
            self.events.metrics().parked(-1);
        }
        if let ChatState::Running(running, ..) = state {
            running.addr.do_send(AbortTurn);
        }
        self.warm = None;
    }
}

impl Drop for ChatSupervisor {
    fn drop(&mut self) {
        self.events.metrics().queued(-(self.queue.len() as i64));
        if self.state.parked().is_some() {
            self.events.metrics().parked(-1);
        }
        self.gauges.leave(&self.gauges.supervisors);
    }
}

impl Handler<UserMessage> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, msg: UserMessage, ctx: &mut Self::Context) {
        self.touched(ctx);
        let run = msg.message.is_scheduled();
        if self.state.host_stopping() {
            // A schedule's run stays queued for the next start, untold.
            if !run {
                self.say(not_accepted(self.shutdown.is_restarting()));
            }
            return;
        }
        if msg.rest_follows {
            self.step(ChatStep::DeliveryBegins, ctx);
        }
        if self.parks(&msg) {
            return self.park_more(msg, ctx);
        }
        self.route(msg, ctx);
    }
}

impl Handler<DeliveryEnd> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, _msg: DeliveryEnd, ctx: &mut Self::Context) {
        self.touched(ctx);
        self.step(ChatStep::DeliveryEnded, ctx);
        self.try_start(ctx);
    }
}

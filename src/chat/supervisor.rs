//! ChatSupervisor: one per chat. Owns the chat's FIFO of pending messages
//! (a burst inside `dispatcher.merge_window` becomes one turn), starts a
//! [`TurnActor`] per turn once a concurrency permit is free, owns the chat's
//! [`TypingActor`], and starts the next turn only after the current one has
//! ended and its session has settled or gone.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, Recipient,
    SpawnHandle, WrapFuture,
};
use teloxide::types::{ChatId, MessageId};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::agent::AgentSession;
use crate::chat::outcome::TurnOutcome;
use crate::chat::turn::{
    AbortTurn, InterruptTurn, SessionReleased, SessionSource, StopForHost, TurnActor, TurnDeps,
    TurnEnded, TurnSpec,
};
use crate::chat::typing::{RetireTyping, StartTyping, TypingActor};
use crate::events::BotEvent;
use crate::state::{InboxState, TurnRecord, log_failure, now_ms};
use crate::telegram::outbox::SendText;

/// A user's message for the chat's agent.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct UserMessage {
    /// The text.
    pub text: String,
    /// The Telegram message, for reactions.
    pub message_id: MessageId,
    /// Its inbox row.
    pub update_id: i64,
    /// When it was accepted.
    pub at: Instant,
}

/// `/stop`: interrupt the running turn and drop what is queued.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopChat;

/// `/new`: forget the agent session; the next turn starts fresh.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct NewSession;

/// The backstop: release the chat from `turn` now, whatever its actors say.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ForceRelease {
    /// The turn past its hard deadline.
    pub turn: u64,
}

/// Asks an idle supervisor to stop; answers whether it did.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub struct Evict;

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
    /// A turn took the chat.
    TurnStarted {
        /// The chat.
        chat: ChatId,
        /// The turn.
        turn: u64,
        /// When.
        at: Instant,
    },
    /// The chat's turn ended; the chat is released.
    TurnFinished {
        /// The chat.
        chat: ChatId,
        /// The turn.
        turn: u64,
    },
}

/// A message waiting for its turn.
#[derive(Debug, Clone)]
struct Pending {
    text: String,
    message_id: MessageId,
    update_id: i64,
    at: Instant,
}

/// The turn holding the chat.
struct Running {
    turn: u64,
    update_ids: Vec<i64>,
    /// Cleared by the backstop at once, like the turn actor does at its end.
    typing_lease: Arc<AtomicBool>,
    addr: Addr<TurnActor>,
    started: Instant,
    /// Released (dropped) when the turn ends.
    _permit: OwnedSemaphorePermit,
}

/// Why no turn is starting right now.
enum Gate {
    /// Free to start.
    Open,
    /// Waiting for the merge window of the front message to close.
    Merging(SpawnHandle),
    /// Waiting for a concurrency permit.
    Acquiring,
}

/// Settings a supervisor needs from `[dispatcher]` and `[turn]`.
#[derive(Debug, Clone)]
pub struct ChatSettings {
    /// `dispatcher.merge_window`.
    pub merge_window: Duration,
    /// `dispatcher.queue_limit`.
    pub queue_limit: usize,
    /// `agent.keep_warm`.
    pub keep_warm: Duration,
    /// `agent.max_warm` slots shared by all chats.
    pub warm_slots: Arc<Semaphore>,
}

/// The actor.
pub struct ChatSupervisor {
    /// The chat.
    chat: ChatId,
    /// What turns need.
    deps: TurnDeps,
    /// Queue and merge settings.
    settings: ChatSettings,
    /// Where reports go.
    dispatcher: Recipient<ChatReport>,
    /// The global cap on concurrent turns.
    permits: Arc<Semaphore>,
    /// Numbers turns across the process.
    next_turn: Arc<AtomicU64>,
    /// Messages waiting, oldest first.
    queue: VecDeque<Pending>,
    /// Why nothing is starting.
    gate: Gate,
    /// The turn holding the chat.
    running: Option<Running>,
    /// A turn that ended but is still closing its session.
    settling: Option<u64>,
    /// A settled session kept for the next turn, with its warm slot.
    warm: Option<(AgentSession, OwnedSemaphorePermit)>,
    /// Counts sessions kept warm, so a keep-warm timer closes only its own.
    warm_generation: u64,
    /// The keep-warm timer of the current warm session.
    warm_timer: Option<SpawnHandle>,
    /// The agent session id to resume.
    session_id: Option<String>,
    /// Turns up to this one must not hand back their session (after `/new`).
    forget_through: u64,
    /// The chat's typing actor.
    typing: Option<Addr<TypingActor>>,
    /// No new turns once the host is stopping.
    stopping: bool,
}

impl ChatSupervisor {
    /// A supervisor for `chat`.
    pub fn new(
        chat: ChatId,
        deps: TurnDeps,
        settings: ChatSettings,
        dispatcher: Recipient<ChatReport>,
        permits: Arc<Semaphore>,
        next_turn: Arc<AtomicU64>,
    ) -> Self {
        deps.gauges.supervisors.fetch_add(1, Ordering::SeqCst);
        let session_id =
            log_failure(deps.store.session(chat.0), "loading the session id").flatten();
        Self {
            chat,
            deps,
            settings,
            dispatcher,
            permits,
            next_turn,
            queue: VecDeque::new(),
            gate: Gate::Open,
            running: None,
            settling: None,
            warm: None,
            warm_generation: 0,
            warm_timer: None,
            session_id,
            forget_through: 0,
            typing: None,
            stopping: false,
        }
    }

    fn say(&self, text: impl Into<String>) {
        self.deps.outbox.do_send(SendText::new(self.chat, text));
    }

    fn is_idle(&self) -> bool {
        // A warm session keeps the chat until `agent.keep_warm` drops it.
        self.warm.is_none()
            && self.running.is_none()
            && self.settling.is_none()
            && self.queue.is_empty()
            && matches!(self.gate, Gate::Open)
    }

    /// Starts the next turn when the chat is free.
    fn try_start(&mut self, ctx: &mut Context<Self>) {
        if self.stopping
            || self.running.is_some()
            || self.settling.is_some()
            || !matches!(self.gate, Gate::Open)
        {
            return;
        }
        let Some(front) = self.queue.front() else {
            return;
        };
        let open_for = front.at.elapsed();
        if open_for < self.settings.merge_window {
            let handle = ctx.run_later(self.settings.merge_window - open_for, |act, ctx| {
                act.gate = Gate::Open;
                act.try_start(ctx);
            });
            self.gate = Gate::Merging(handle);
            return;
        }
        self.gate = Gate::Acquiring;
        let permits = Arc::clone(&self.permits);
        ctx.spawn(
            permits
                .acquire_owned()
                .into_actor(self)
                .map(|permit, act, ctx| {
                    act.gate = Gate::Open;
                    match permit {
                        Ok(permit) => act.start_turn(permit, ctx),
                        Err(_) => tracing::debug!(
                            chat_id = act.chat.0,
                            "no more turns: the host is stopping"
                        ),
                    }
                }),
        );
    }

    fn start_turn(&mut self, permit: OwnedSemaphorePermit, ctx: &mut Context<Self>) {
        if self.stopping || self.running.is_some() || self.settling.is_some() {
            return;
        }
        let Some(front) = self.queue.pop_front() else {
            return;
        };
        // A window too large to add to an Instant merges everything queued.
        let window_end = front.at.checked_add(self.settings.merge_window);
        let mut texts = vec![front.text];
        let mut reply_to = front.message_id;
        let mut update_ids = vec![front.update_id];
        while self
            .queue
            .front()
            .is_some_and(|p| window_end.is_none_or(|end| p.at <= end))
        {
            if let Some(next) = self.queue.pop_front() {
                texts.push(next.text);
                reply_to = next.message_id;
                update_ids.push(next.update_id);
            }
        }
        let turn = self.next_turn.fetch_add(1, Ordering::SeqCst) + 1;
        log_failure(
            self.deps.store.start_turn(&update_ids, turn),
            "marking messages running",
        );
        let source = SessionSource {
            warm: self.warm.take().map(|(session, _slot)| session),
            resume: self.session_id.clone(),
        };
        let typing = self.typing_actor();
        let typing_lease = Arc::new(AtomicBool::new(true));
        typing.do_send(StartTyping {
            turn,
            alive: Arc::clone(&typing_lease),
        });
        let me = ctx.address();
        let spec = TurnSpec {
            chat: self.chat,
            turn,
            text: texts.join("\n\n"),
            reply_to: Some(reply_to),
            update_ids: update_ids.clone(),
            typing_lease: Arc::clone(&typing_lease),
        };
        let addr = TurnActor::new(
            spec,
            self.deps.clone(),
            source,
            vec![me.clone().recipient(), typing.recipient()],
            me.recipient(),
        )
        .start();
        let started = Instant::now();
        self.running = Some(Running {
            turn,
            update_ids,
            typing_lease,
            addr,
            started,
            _permit: permit,
        });
        self.dispatcher.do_send(ChatReport::TurnStarted {
            chat: self.chat,
            turn,
            at: started,
        });
    }

    /// Keeps a settled session for `agent.keep_warm`; dropping it closes it.
    fn keep_warm(&mut self, session: Option<AgentSession>, ctx: &mut Context<Self>) {
        let Some(session) = session else {
            return;
        };
        if self.settings.keep_warm.is_zero() {
            drop(session);
            return;
        }
        let Ok(slot) = Arc::clone(&self.settings.warm_slots).try_acquire_owned() else {
            tracing::debug!(
                chat_id = self.chat.0,
                "agent.max_warm reached; session closed"
            );
            return;
        };
        self.warm = Some((session, slot));
        self.warm_generation += 1;
        let generation = self.warm_generation;
        if let Some(timer) = self.warm_timer.take() {
            ctx.cancel_future(timer);
        }
        self.warm_timer = Some(ctx.run_later(self.settings.keep_warm, move |act, _ctx| {
            if act.warm_generation == generation && act.warm.take().is_some() {
                tracing::debug!(
                    chat_id = act.chat.0,
                    "warm session closed after agent.keep_warm"
                );
            }
        }));
    }

    fn typing_actor(&mut self) -> Addr<TypingActor> {
        if let Some(addr) = &self.typing {
            return addr.clone();
        }
        let config = &self.deps.config;
        let addr = TypingActor::new(
            self.chat,
            self.deps.outbox.clone(),
            config.typing_interval,
            config.hard_deadline,
            self.deps.events.clone(),
            Arc::clone(&self.deps.gauges),
        )
        .start();
        self.typing = Some(addr.clone());
        addr
    }
}

impl Actor for ChatSupervisor {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        if let Some(typing) = self.typing.take() {
            typing.do_send(RetireTyping);
        }
        if let Some(running) = self.running.take() {
            running.typing_lease.store(false, Ordering::SeqCst);
            running.addr.do_send(AbortTurn);
        }
        self.warm = None;
    }
}

impl Drop for ChatSupervisor {
    fn drop(&mut self) {
        self.deps.gauges.leave(&self.deps.gauges.supervisors);
    }
}

impl Handler<UserMessage> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, msg: UserMessage, ctx: &mut Self::Context) {
        if self.stopping {
            self.say(
                "⚠️ The bot is stopping; this message was not accepted. Send it again in a moment.",
            );
            return;
        }
        if self.queue.len() >= self.settings.queue_limit {
            tracing::warn!(
                chat_id = self.chat.0,
                queued = self.queue.len(),
                "queue full; message refused"
            );
            log_failure(
                self.deps.store.mark(&[msg.update_id], InboxState::Dropped),
                "dropping a message",
            );
            self.say(format!(
                "⚠️ {} messages are already waiting; this one was not queued. Send it again once I have answered.",
                self.queue.len()
            ));
            return;
        }
        self.queue.push_back(Pending {
            text: msg.text,
            message_id: msg.message_id,
            update_id: msg.update_id,
            at: msg.at,
        });
        self.try_start(ctx);
    }
}

impl Handler<TurnEnded> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, msg: TurnEnded, _ctx: &mut Self::Context) {
        if self.running.as_ref().map(|r| r.turn) != Some(msg.turn) {
            tracing::debug!(
                chat_id = self.chat.0,
                turn = msg.turn,
                "TurnEnded for a turn no longer held; ignored"
            );
            return;
        }
        // Dropping the running turn releases its permit: the chat is free.
        let update_ids = self
            .running
            .take()
            .map(|r| r.update_ids)
            .unwrap_or_default();
        self.settling = Some(msg.turn);
        let store = &self.deps.store;
        let state = match msg.outcome {
            // Retried after the restart, unless it already replied.
            TurnOutcome::HostStopping if self.deps.retry_interrupted && !msg.replied => {
                InboxState::Queued
            }
            TurnOutcome::HostStopping => InboxState::Reported,
            _ => InboxState::Done,
        };
        log_failure(store.mark(&update_ids, state), "marking messages answered");
        let now = now_ms();
        let took =
            i64::try_from(msg.at.duration_since(msg.started).as_millis()).unwrap_or(i64::MAX);
        log_failure(
            store.record_turn(&TurnRecord {
                chat_id: self.chat.0,
                turn: msg.turn,
                started_at: now.saturating_sub(took),
                ended_at: now,
                outcome: msg.outcome.label().to_string(),
                finished: msg.outcome.finished(),
                api_calls: msg.api_calls,
                cost_usd: msg.cost_usd,
            }),
            "recording a turn",
        );
        if msg.turn > self.forget_through
            && let Some(id) = msg.session_id
        {
            log_failure(
                store.set_session(self.chat.0, Some(&id)),
                "saving the session id",
            );
            self.session_id = Some(id);
        }
        self.dispatcher.do_send(ChatReport::TurnFinished {
            chat: self.chat,
            turn: msg.turn,
        });
    }
}

impl Handler<SessionReleased> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, msg: SessionReleased, ctx: &mut Self::Context) {
        if self.settling != Some(msg.turn) {
            return;
        }
        self.settling = None;
        if msg.turn > self.forget_through && !self.stopping {
            self.keep_warm(msg.session, ctx);
        }
        self.try_start(ctx);
    }
}

impl Handler<StopChat> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, _msg: StopChat, ctx: &mut Self::Context) {
        let dropped = self.queue.len();
        let ids: Vec<i64> = self.queue.drain(..).map(|p| p.update_id).collect();
        log_failure(
            self.deps.store.mark(&ids, InboxState::Dropped),
            "dropping queued messages",
        );
        // A pending permit stays pending: with the queue empty it starts nothing.
        if matches!(self.gate, Gate::Merging(_))
            && let Gate::Merging(handle) = std::mem::replace(&mut self.gate, Gate::Open)
        {
            ctx.cancel_future(handle);
        }
        match &self.running {
            Some(running) => {
                running.addr.do_send(InterruptTurn);
                self.say(if dropped > 0 {
                    format!("⏹ Stopped. {dropped} queued message(s) dropped.")
                } else {
                    "⏹ Stopped.".to_string()
                });
            }
            None if dropped > 0 => self.say(format!("⏹ {dropped} queued message(s) dropped.")),
            None => self.say("Nothing to stop."),
        }
    }
}

impl Handler<NewSession> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, _msg: NewSession, _ctx: &mut Self::Context) {
        self.session_id = None;
        log_failure(
            self.deps.store.set_session(self.chat.0, None),
            "forgetting the session id",
        );
        self.warm = None;
        self.forget_through = self.next_turn.load(Ordering::SeqCst);
        self.say("🆕 The next message starts a fresh conversation.");
    }
}

impl Handler<ForceRelease> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, msg: ForceRelease, ctx: &mut Self::Context) {
        if self.running.as_ref().map(|r| r.turn) != Some(msg.turn) {
            return;
        }
        let Some(running) = self.running.take() else {
            return;
        };
        let at = Instant::now();
        tracing::error!(
            chat_id = self.chat.0,
            turn = msg.turn,
            held_ms = running.started.elapsed().as_millis() as u64,
            "turn past its hard deadline; chat force-released"
        );
        running.typing_lease.store(false, Ordering::SeqCst);
        running.addr.do_send(AbortTurn);
        log_failure(
            self.deps.store.mark(&running.update_ids, InboxState::Done),
            "marking messages answered",
        );
        let ended = TurnEnded {
            chat: self.chat,
            turn: msg.turn,
            outcome: TurnOutcome::ForceReleased,
            session_id: None,
            delivered: false,
            replied: false,
            api_calls: 0,
            cost_usd: 0.0,
            started: running.started,
            at,
        };
        if let Some(typing) = &self.typing {
            typing.do_send(ended);
        }
        self.deps.events.publish(BotEvent::TurnEnded {
            chat: self.chat,
            turn: msg.turn,
            outcome: TurnOutcome::ForceReleased,
            session_id: None,
            at,
        });
        self.dispatcher.do_send(ChatReport::TurnFinished {
            chat: self.chat,
            turn: msg.turn,
        });
        self.settling = None;
        self.warm = None;
        self.say("⚠️ This turn took too long and was ended.");
        self.try_start(ctx);
    }
}

impl Handler<Evict> for ChatSupervisor {
    type Result = bool;

    fn handle(&mut self, _msg: Evict, ctx: &mut Self::Context) -> bool {
        if !self.is_idle() {
            return false;
        }
        ctx.stop();
        true
    }
}

impl Handler<StopChatForHost> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, msg: StopChatForHost, _ctx: &mut Self::Context) {
        // Queued messages stay queued in the inbox: the next process runs them.
        self.stopping = true;
        self.warm = None;
        if msg.end_running
            && let Some(running) = &self.running
        {
            running.addr.do_send(StopForHost);
        }
    }
}

impl Handler<DescribeChat> for ChatSupervisor {
    type Result = String;

    fn handle(&mut self, _msg: DescribeChat, _ctx: &mut Self::Context) -> String {
        let state = match (&self.running, self.settling) {
            (Some(r), _) => format!(
                "turn {} running for {:.1}s",
                r.turn,
                r.started.elapsed().as_secs_f64()
            ),
            (None, Some(turn)) => format!("turn {turn} ended, session closing"),
            (None, None) => "idle".to_string(),
        };
        format!("chat {}: {state}, {} queued", self.chat.0, self.queue.len())
    }
}

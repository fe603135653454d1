//! TurnActor: runs one turn against an agent session, serves the chat tools,
//! runs the turn's watchdogs and sends [`TurnEnded`] exactly once.
//!
//! After TurnEnded the actor keeps closing its session: it waits (up to
//! `turn.post_result_grace`) for the agent to settle and hands a settled
//! session back for the chat's next turn, or force-closes it. Late events
//! are logged and dropped, never delivered to the chat.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, Recipient,
    SpawnHandle, WrapFuture,
};
use serde_json::Value;
use teloxide::types::{ChatId, MessageId};
use tokio::sync::mpsc;

use crate::agent::{
    AgentBackend, AgentEvent, AgentSession, HookReply, OpenSession, Responder, SessionCommand,
    ToolCall, ToolReply,
};
use crate::chat::outcome::{TurnEvent, TurnOutcome, decide};
use crate::chat::tools::{ToolRegistry, bare_tool_name};
use crate::config::TurnConfig;
use crate::events::{BotEvent, EventBus, Gauges};
use crate::shutdown::Shutdown;
use crate::state::{InboxState, Store, log_failure};
use crate::telegram::outbox::{Outbox, React, SendText};

/// Sent once per turn, to the supervisor and to the typing actor, when the
/// turn is over.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct TurnEnded {
    /// The chat.
    pub chat: ChatId,
    /// The turn.
    pub turn: u64,
    /// How it ended.
    pub outcome: TurnOutcome,
    /// The agent's session id, kept for `--resume`.
    pub session_id: Option<String>,
    /// Whether anything reached the chat during the turn.
    pub delivered: bool,
    /// Whether a reply may have left (sent or still on its way): such a
    /// turn is never run again.
    pub replied: bool,
    /// Model turns the agent reported (0 without a result).
    pub api_calls: u32,
    /// What the turn cost, as the agent reported it.
    pub cost_usd: f64,
    /// When the turn started.
    pub started: Instant,
    /// When the turn ended.
    pub at: Instant,
}

/// Sent once per turn, after [`TurnEnded`], when the session is settled (and
/// handed back for reuse) or gone.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SessionReleased {
    /// The turn.
    pub turn: u64,
    /// A settled session the chat's next turn may reuse.
    pub session: Option<AgentSession>,
}

/// `/stop`: interrupt the turn.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct InterruptTurn;

/// The host is stopping: end the turn with `HostStopping` and close.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopForHost;

/// The backstop released the chat: kill the session and stop, silently.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct AbortTurn;

/// What a turn is for.
#[derive(Debug, Clone)]
pub struct TurnSpec {
    /// The chat.
    pub chat: ChatId,
    /// Numbers the turn within the process.
    pub turn: u64,
    /// The user's text (merged messages joined).
    pub text: String,
    /// The user's last message, for reactions.
    pub reply_to: Option<MessageId>,
    /// The inbox rows (update ids) this turn answers.
    pub update_ids: Vec<i64>,
    /// The chat's typing lease for this turn, cleared at TurnEnded.
    pub typing_lease: Arc<AtomicBool>,
}

/// What every turn of every chat shares.
#[derive(Clone)]
pub struct TurnDeps {
    /// Opens sessions.
    pub backend: Arc<dyn AgentBackend>,
    /// The way out to Telegram.
    pub outbox: Addr<Outbox>,
    /// The chat tools and terminators.
    pub tools: Arc<ToolRegistry>,
    /// The clocks.
    pub config: Arc<TurnConfig>,
    /// Where the turn reports what happened.
    pub events: EventBus,
    /// Live actor counts.
    pub gauges: Arc<Gauges>,
    /// The durable inbox.
    pub store: Arc<Store>,
    /// Set once the host is stopping: agent requests are then refused.
    pub shutdown: Shutdown,
    /// `dispatcher.on_interrupted == "retry"`.
    pub retry_interrupted: bool,
}

/// Where the turn's session comes from.
#[derive(Debug)]
pub struct SessionSource {
    /// A settled session the chat kept warm, if any.
    pub warm: Option<AgentSession>,
    /// The agent session id to resume when a new session is opened (also
    /// when the warm one turns out to be dead).
    pub resume: Option<String>,
}

/// A delivery from the turn reached Telegram.
#[derive(Message, Debug)]
#[rtype(result = "()")]
struct Delivered;

impl Handler<Delivered> for TurnActor {
    type Result = ();

    fn handle(&mut self, _msg: Delivered, _ctx: &mut Self::Context) {
        self.mark_delivered();
    }
}

/// A tool call waiting for its work (a Telegram request) to finish.
struct PendingTool {
    chat: ChatId,
    id: String,
    tool: String,
    reply: Responder<ToolReply>,
    /// False once the turn has ended.
    live: Arc<AtomicBool>,
    shutdown: Shutdown,
}

impl PendingTool {
    /// Answers the agent, or, when the turn ended or the host began stopping
    /// meanwhile, logs the result and drops it.
    fn finish(self, value: ToolReply) {
        if self.live.load(Ordering::SeqCst) && !self.shutdown.is_closing() {
            self.reply.answer(value);
            return;
        }
        let (ok, error) = match &value {
            ToolReply::Ok(_) => (true, String::new()),
            ToolReply::Error(e) | ToolReply::Refused(e) | ToolReply::Failed(e) => {
                (false, bounded(e, 500))
            }
        };
        tracing::warn!(
            chat_id = self.chat.0,
            call_id = %self.id,
            tool = %self.tool,
            ok,
            error = %error,
            "tool result arrived after the turn ended; dropped (the agent may run it again)"
        );
        self.reply.refuse("the turn has ended");
    }
}

/// The longest wait for a warm session's first sign of life.
const WARM_ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The text sent when an agent ends with nothing delivered and no text.
pub const REPROMPT: &str = "[turnstile] Your last turn ended without a reply to the user. Reply with the `send` tool, then call `end_turn`.";

/// The stop reason given to the agent after a terminator (it reads it at the
/// start of its next turn).
pub const STOP_REASON: &str =
    "You ended the previous turn with end_turn; the user has seen your reply.";

/// The actor.
pub struct TurnActor {
    /// What the turn is for.
    spec: TurnSpec,
    /// Shared services.
    deps: TurnDeps,
    /// Where the session comes from; taken at start.
    source: Option<SessionSource>,
    /// The session id to resume if a warm session turns out dead.
    resume: Option<String>,
    /// Whether the session in use is a warm one that has not yet shown life.
    warm_unproven: bool,
    /// The pending read of the session's next event.
    pump: Option<SpawnHandle>,
    /// Counts sessions attached, so a read from a replaced one is ignored.
    generation: u64,
    /// True until TurnEnded; read by tool work finishing outside the actor.
    live_flag: Arc<AtomicBool>,
    /// Who gets TurnEnded.
    ended_to: Vec<Recipient<TurnEnded>>,
    /// Who gets the session back.
    released_to: Recipient<SessionReleased>,
    /// Commands to the session, while it lives.
    commands: Option<mpsc::UnboundedSender<SessionCommand>>,
    /// The session's events, while the actor is not awaiting one.
    events: Option<mpsc::UnboundedReceiver<AgentEvent>>,
    /// The session's label, for logs.
    label: String,
    /// The agent's session id.
    session_id: Option<String>,
    /// What bears on the outcome, in order (fed to [`decide`]).
    log: Vec<TurnEvent>,
    /// Set once TurnEnded went out.
    outcome: Option<TurnOutcome>,
    /// Whether any text reached the chat.
    delivered: bool,
    /// Whether the inbox rows were marked replied (before the first send).
    replying: bool,
    /// Whether the agent called a terminator tool (its batch may still run).
    ended_explicitly: bool,
    /// Whether the one re-prompt was used.
    reprompted: bool,
    /// Whether `result` arrived (for the current prompt).
    result_seen: bool,
    /// Whether the session settled (idle) or is gone (exited).
    settled: Option<Settled>,
    /// Whether SessionReleased went out.
    released: bool,
    /// The no-progress watchdog.
    no_progress: Option<SpawnHandle>,
    /// The wall-clock budget.
    budget: Option<SpawnHandle>,
    /// The post-result grace.
    grace: Option<SpawnHandle>,
    /// When the turn started.
    started: Instant,
}

/// How a session settled.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Settled {
    Idle,
    Gone,
}

impl TurnActor {
    /// A turn; it starts when the actor starts.
    pub fn new(
        spec: TurnSpec,
        deps: TurnDeps,
        source: SessionSource,
        ended_to: Vec<Recipient<TurnEnded>>,
        released_to: Recipient<SessionReleased>,
    ) -> Self {
        deps.gauges
            .turns
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self {
            spec,
            deps,
            resume: source.resume.clone(),
            warm_unproven: false,
            pump: None,
            generation: 0,
            live_flag: Arc::new(AtomicBool::new(true)),
            source: Some(source),
            ended_to,
            released_to,
            commands: None,
            events: None,
            label: String::new(),
            session_id: None,
            log: Vec::new(),
            outcome: None,
            delivered: false,
            replying: false,
            ended_explicitly: false,
            reprompted: false,
            result_seen: false,
            settled: None,
            released: false,
            no_progress: None,
            budget: None,
            grace: None,
            started: Instant::now(),
        }
    }

    fn chat_id(&self) -> i64 {
        self.spec.chat.0
    }

    /// Drops a warm session that is dead or silent and opens a fresh one.
    fn replace_warm(&mut self, ctx: &mut Context<Self>) {
        self.warm_unproven = false;
        self.send(SessionCommand::Kill);
        if let Some(pump) = self.pump.take() {
            ctx.cancel_future(pump);
        }
        self.commands = None;
        self.events = None;
        self.open(ctx);
    }

    /// Opens a fresh session (resuming the chat's agent session id).
    fn open(&mut self, ctx: &mut Context<Self>) {
        let open = self.deps.backend.open(OpenSession {
            chat: self.spec.chat,
            resume: self.resume.clone(),
            shutdown: self.deps.shutdown.clone(),
        });
        ctx.spawn(open.into_actor(self).map(|result, act, ctx| match result {
            Ok(session) if act.outcome.is_none() => act.attach(session, ctx),
            Ok(session) => drop(session),
            Err(err) => {
                act.settled = Some(Settled::Gone);
                act.record(
                    TurnEvent::Exited {
                        code: None,
                        detail: err.to_string(),
                    },
                    ctx,
                );
            }
        }));
    }

    fn attach(&mut self, session: AgentSession, ctx: &mut Context<Self>) {
        let AgentSession {
            commands,
            events,
            label,
        } = session;
        self.label = label;
        self.generation += 1;
        if commands
            .send(SessionCommand::UserTurn(self.spec.text.clone()))
            .is_err()
        {
            tracing::warn!(chat_id = self.chat_id(), session = %self.label, "session closed before the turn started");
        }
        self.commands = Some(commands);
        self.events = Some(events);
        self.pump(ctx);
    }

    /// Awaits the session's next event.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        let Some(mut rx) = self.events.take() else {
            return;
        };
        let generation = self.generation;
        let fut = async move {
            let event = rx.recv().await;
            (rx, event)
        };
        self.pump = Some(
            ctx.spawn(fut.into_actor(self).map(move |(rx, event), act, ctx| {
                act.pump = None;
                if act.generation != generation {
                    return;
                }
                act.events = Some(rx);
                let event = event.unwrap_or_else(|| AgentEvent::Exited {
                    code: None,
                    detail: "the agent's event stream closed".into(),
                });
                act.on_event(event, ctx);
                if act.settled != Some(Settled::Gone) && !act.released {
                    act.pump(ctx);
                }
            })),
        );
    }

    fn send(&self, command: SessionCommand) {
        if let Some(tx) = &self.commands
            && tx.send(command.clone()).is_err()
        {
            tracing::debug!(chat_id = self.chat_id(), ?command, "session already closed");
        }
    }

    fn arm_no_progress(&mut self, ctx: &mut Context<Self>) {
        if let Some(h) = self.no_progress.take() {
            ctx.cancel_future(h);
        }
        if self.outcome.is_some() || self.result_seen {
            return;
        }
        self.no_progress = Some(ctx.run_later(self.deps.config.no_progress_timeout, |act, ctx| {
            act.no_progress = None;
            tracing::warn!(chat_id = act.chat_id(), timeout = ?act.deps.config.no_progress_timeout, "no progress from the agent");
            act.record(TurnEvent::NoProgress, ctx);
        }));
    }

    fn arm_grace(&mut self, ctx: &mut Context<Self>) {
        if self.grace.is_some() {
            return;
        }
        self.grace = Some(ctx.run_later(self.deps.config.post_result_grace, |act, ctx| {
            act.grace = None;
            if act.outcome.is_none() {
                tracing::warn!(chat_id = act.chat_id(), grace = ?act.deps.config.post_result_grace, "agent did not settle after its result; force-closing");
                act.record(TurnEvent::GraceExpired, ctx);
            } else {
                tracing::warn!(chat_id = act.chat_id(), session = %act.label, "session did not settle after the turn ended; force-closing");
                act.kill(ctx);
            }
        }));
    }

    /// Records an event and ends the turn when it decides the outcome.
    fn record(&mut self, event: TurnEvent, ctx: &mut Context<Self>) {
        if self.outcome.is_some() {
            return;
        }
        self.log.push(event);
        if let Some(outcome) = decide(&self.log, &self.deps.tools) {
            self.finish(outcome, ctx);
        }
    }

    fn on_event(&mut self, event: AgentEvent, ctx: &mut Context<Self>) {
        if self.outcome.is_some() {
            return self.on_late_event(event, ctx);
        }
        self.arm_no_progress(ctx);
        if self.warm_unproven {
            match &event {
                AgentEvent::Exited { detail, .. } => {
                    tracing::info!(chat_id = self.chat_id(), session = %self.label, cause = %detail, "warm session was dead; opening a fresh one");
                    self.replace_warm(ctx);
                    return;
                }
                AgentEvent::Init { .. } | AgentEvent::ToolCall(_) | AgentEvent::Result(_) => {
                    self.warm_unproven = false
                }
                _ => {}
            }
        }
        match event {
            AgentEvent::Init { session_id } => self.session_id = Some(session_id),
            AgentEvent::Text(text) => {
                tracing::debug!(
                    chat_id = self.chat_id(),
                    chars = text.len(),
                    "assistant text"
                );
            }
            AgentEvent::Progress => {}
            AgentEvent::ToolCall(call) => self.serve_tool(call, ctx),
            AgentEvent::BatchResolved(batch) => {
                let tools = batch.calls.iter().map(|c| c.name.clone()).collect();
                let inputs = batch.calls.iter().map(|c| c.input.clone()).collect();
                let reply = batch.reply;
                self.record(TurnEvent::ToolBatch { tools, inputs }, ctx);
                let answer = if self.deps.shutdown.is_closing() {
                    HookReply::Refused("the host is stopping".into())
                } else if matches!(self.outcome, Some(TurnOutcome::Terminated { .. })) {
                    HookReply::Stop {
                        reason: STOP_REASON.into(),
                    }
                } else {
                    HookReply::Continue
                };
                reply.answer(answer);
            }
            AgentEvent::Result(result) => {
                self.result_seen = true;
                if let Some(h) = self.no_progress.take() {
                    ctx.cancel_future(h);
                }
                let deliverable = !result.is_error && result.subtype == "success";
                let text = result.text.clone();
                let num_turns = result.num_turns;
                self.record(TurnEvent::Result(result), ctx);
                if self.outcome.is_some() || self.delivered || self.ended_explicitly || !deliverable
                {
                    if self.outcome.is_none() {
                        self.arm_grace(ctx);
                    }
                    return;
                }
                if !text.trim().is_empty() {
                    self.deliver(text);
                    self.arm_grace(ctx);
                } else if !self.reprompted && num_turns > 0 {
                    tracing::info!(
                        chat_id = self.chat_id(),
                        "the agent ended with nothing delivered; re-prompting once"
                    );
                    self.reprompted = true;
                    self.result_seen = false;
                    self.log.push(TurnEvent::Reprompted);
                    self.send(SessionCommand::UserTurn(REPROMPT.into()));
                    self.arm_no_progress(ctx);
                } else {
                    self.arm_grace(ctx);
                }
            }
            AgentEvent::Idle => {
                if self.reprompted
                    && !self.result_seen
                    && matches!(self.log.last(), Some(TurnEvent::Reprompted))
                {
                    // The idle that closed the first prompt; the re-prompt runs next.
                    return;
                }
                self.settled = Some(Settled::Idle);
                self.record(TurnEvent::Idle, ctx);
            }
            AgentEvent::Exited { code, detail } => {
                self.settled = Some(Settled::Gone);
                self.commands = None;
                self.record(TurnEvent::Exited { code, detail }, ctx);
            }
            AgentEvent::Unknown(raw) => {
                let shown: String = raw.chars().take(200).collect();
                tracing::warn!(chat_id = self.chat_id(), event = %shown, "unknown agent event skipped");
            }
        }
    }

    /// An event after TurnEnded: closing the session, never delivering.
    fn on_late_event(&mut self, event: AgentEvent, ctx: &mut Context<Self>) {
        match event {
            AgentEvent::ToolCall(call) => {
                tracing::warn!(chat_id = self.chat_id(), call_id = %call.id, tool = %call.name, "tool call after the turn ended; refused and dropped");
                call.reply
                    .answer(ToolReply::Error("the turn has already ended".into()));
            }
            AgentEvent::BatchResolved(batch) => {
                batch.reply.answer(HookReply::Stop {
                    reason: STOP_REASON.into(),
                });
            }
            AgentEvent::Result(result) => {
                tracing::debug!(chat_id = self.chat_id(), subtype = %result.subtype, "result after the turn ended; not delivered");
                self.result_seen = true;
                self.arm_grace(ctx);
            }
            AgentEvent::Idle => {
                self.settled = Some(Settled::Idle);
                self.release(ctx);
            }
            AgentEvent::Exited { .. } => {
                self.settled = Some(Settled::Gone);
                self.commands = None;
                self.release(ctx);
            }
            AgentEvent::Text(_) | AgentEvent::Progress | AgentEvent::Init { .. } => {}
            AgentEvent::Unknown(raw) => {
                let shown: String = raw.chars().take(200).collect();
                tracing::debug!(chat_id = self.chat_id(), event = %shown, "late unknown event dropped");
            }
        }
    }

    /// Queues text for the chat; the outbox sends it even if this actor stops.
    fn deliver(&mut self, text: String) {
        self.mark_delivered();
        self.deps
            .outbox
            .do_send(SendText::new(self.spec.chat, text));
    }

    /// Records that the chat got something from this turn.
    fn mark_delivered(&mut self) {
        self.mark_replying();
        self.delivered = true;
    }

    /// Records durably, before a reply leaves, that this turn's messages may
    /// have been answered: after a crash they are reported, never run again.
    fn mark_replying(&mut self) {
        if !self.replying {
            self.replying = true;
            log_failure(
                self.deps
                    .store
                    .mark(&self.spec.update_ids, InboxState::Replied),
                "marking a message replied",
            );
        }
    }

    /// A tool call whose work runs outside the actor (so its result is
    /// seen even when the turn has ended by then).
    fn pending_tool(&self, id: String, tool: String, reply: Responder<ToolReply>) -> PendingTool {
        PendingTool {
            chat: self.spec.chat,
            id,
            tool,
            reply,
            live: Arc::clone(&self.live_flag),
            shutdown: self.deps.shutdown.clone(),
        }
    }

    fn serve_tool(&mut self, call: ToolCall, ctx: &mut Context<Self>) {
        let ToolCall {
            id,
            name,
            input,
            reply,
        } = call;
        if self.deps.shutdown.is_closing() {
            tracing::info!(chat_id = self.chat_id(), call_id = %id, tool = %name, "tool call refused: the host is stopping");
            reply.answer(ToolReply::Refused("the host is stopping".into()));
            return;
        }
        let bare = bare_tool_name(&name).to_string();
        if self.deps.tools.get(&bare).is_none() {
            tracing::warn!(chat_id = self.chat_id(), call_id = %id, tool = %name, "unknown tool called");
            reply.answer(ToolReply::Error(format!("unknown tool `{name}`")));
            return;
        }
        if self.deps.tools.ends_turn(&bare, &input) {
            self.ended_explicitly = true;
        }
        let text = input
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let chat = self.spec.chat;
        match bare.as_str() {
            "react" => {
                let Some(emoji) = input
                    .get("emoji")
                    .and_then(Value::as_str)
                    .filter(|e| !e.is_empty())
                else {
                    reply.answer(ToolReply::Error("`emoji` is required".into()));
                    return;
                };
                let Some(message_id) = self.spec.reply_to else {
                    reply.answer(ToolReply::Error(
                        "there is no user message to react to".into(),
                    ));
                    return;
                };
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.deps.outbox.do_send(React {
                    chat,
                    message_id,
                    emoji: emoji.to_string(),
                    reply: tx,
                });
                let pending = self.pending_tool(id, bare.clone(), reply);
                actix::spawn(async move {
                    pending.finish(match rx.await {
                        Ok(Ok(())) => ToolReply::Ok("reacted".into()),
                        Ok(Err(err)) => ToolReply::Error(err.to_string()),
                        Err(_) => ToolReply::Failed("the outbox has stopped".into()),
                    });
                });
            }
            "end_turn" if text.trim().is_empty() => {
                reply.answer(ToolReply::Ok(
                    "the turn will end once this batch is done".into(),
                ));
            }
            _ if text.trim().is_empty() => {
                reply.answer(ToolReply::Error("`text` is empty".into()));
            }
            _ => {
                self.mark_replying();
                let (send, rx) = SendText::tracked(chat, text);
                self.deps.outbox.do_send(send);
                let pending = self.pending_tool(id, bare.clone(), reply);
                let addr = ctx.address();
                actix::spawn(async move {
                    pending.finish(match rx.await {
                        Ok(Ok(ids)) => {
                            // Recorded before the agent hears back, so the
                            // result text is never sent again.
                            addr.do_send(Delivered);
                            ToolReply::Ok(format!("delivered as {} message(s)", ids.len()))
                        }
                        Ok(Err(err)) => ToolReply::Error(err.to_string()),
                        Err(_) => ToolReply::Failed("the outbox has stopped".into()),
                    });
                });
            }
        }
    }

    /// Sends TurnEnded and starts closing the session.
    fn finish(&mut self, outcome: TurnOutcome, ctx: &mut Context<Self>) {
        let at = Instant::now();
        for h in [self.no_progress.take(), self.budget.take()]
            .into_iter()
            .flatten()
        {
            ctx.cancel_future(h);
        }
        self.outcome = Some(outcome.clone());
        self.live_flag.store(false, Ordering::SeqCst);
        // Typing stops now, not when TurnEnded reaches the typing actor.
        self.spec.typing_lease.store(false, Ordering::SeqCst);
        let (api_calls, cost_usd) = self
            .log
            .iter()
            .filter_map(|e| match e {
                TurnEvent::Result(r) => Some((r.num_turns, r.total_cost_usd)),
                _ => None,
            })
            .fold((0u32, 0.0), |(n, c), (dn, dc)| {
                (n.saturating_add(dn), c + dc)
            });
        let ended = TurnEnded {
            chat: self.spec.chat,
            turn: self.spec.turn,
            outcome: outcome.clone(),
            session_id: self.session_id.clone(),
            delivered: self.delivered,
            replied: self.delivered || self.replying,
            api_calls,
            cost_usd,
            started: self.started,
            at,
        };
        for to in &self.ended_to {
            to.do_send(ended.clone());
        }
        self.deps.events.publish(BotEvent::TurnEnded {
            chat: self.spec.chat,
            turn: self.spec.turn,
            outcome: outcome.clone(),
            session_id: self.session_id.clone(),
            at,
        });
        tracing::info!(
            chat_id = self.chat_id(),
            turn = self.spec.turn,
            outcome = outcome.label(),
            finished = outcome.finished(),
            delivered = self.delivered,
            elapsed_ms = self.started.elapsed().as_millis() as u64,
            "turn ended"
        );
        if let Some(notice) = notice_for(
            &outcome,
            self.delivered || self.replying,
            self.deps.retry_interrupted,
        ) {
            self.deliver(notice);
        }
        match (&outcome, self.settled) {
            (_, Some(_)) => self.release(ctx),
            (TurnOutcome::NoProgress | TurnOutcome::ForceClosedAfterResult, None) => self.kill(ctx),
            (TurnOutcome::Interrupted | TurnOutcome::BudgetExceeded, None) => {
                self.send(SessionCommand::Interrupt);
                self.arm_grace(ctx);
            }
            (TurnOutcome::HostStopping, None) => {
                self.send(SessionCommand::Close);
                self.arm_grace(ctx);
            }
            (_, None) => self.arm_grace(ctx),
        }
    }

    /// Force-closes the session and releases nothing.
    fn kill(&mut self, ctx: &mut Context<Self>) {
        self.send(SessionCommand::Kill);
        self.commands = None;
        self.events = None;
        self.settled = Some(Settled::Gone);
        self.deps.events.publish(BotEvent::SessionKilled {
            chat: self.spec.chat,
            turn: self.spec.turn,
        });
        self.release(ctx);
    }

    /// Hands the session back (when settled) and stops.
    fn release(&mut self, ctx: &mut Context<Self>) {
        if self.released {
            return;
        }
        self.released = true;
        let session = match (self.settled, self.commands.take(), self.events.take()) {
            (Some(Settled::Idle), Some(commands), Some(events)) => Some(AgentSession {
                commands,
                events,
                label: std::mem::take(&mut self.label),
            }),
            _ => None,
        };
        self.released_to.do_send(SessionReleased {
            turn: self.spec.turn,
            session,
        });
        ctx.stop();
    }
}

/// What the chat is told when a turn ends without a reply.
fn notice_for(outcome: &TurnOutcome, delivered: bool, retry: bool) -> Option<String> {
    if let TurnOutcome::HostStopping = outcome {
        return Some(if retry && !delivered {
            "⏸ The bot is restarting; your message will be answered once it is back.".to_string()
        } else {
            "⚠️ The bot is restarting and this turn was cut short. Send your message again if you still need an answer.".to_string()
        });
    }
    if delivered {
        return None;
    }
    let text = match outcome {
        TurnOutcome::NoProgress => "⚠️ The agent stopped responding, so this turn was ended. Send your message again to retry.".to_string(),
        TurnOutcome::BudgetExceeded => "⚠️ This turn ran past its time budget and was stopped.".to_string(),
        TurnOutcome::ForceClosedAfterResult => "⚠️ The agent finished without a reply and did not close; the turn was ended.".to_string(),
        TurnOutcome::AgentFailed { detail } => format!("⚠️ The agent failed: {}", bounded(detail, 300)),
        TurnOutcome::AgentError { reason } => format!("⚠️ The agent stopped with an error ({reason})."),
        TurnOutcome::Unrecognized { reason } => format!("⚠️ The agent stopped ({reason}) without a reply."),
        _ => return None,
    };
    Some(text)
}

/// At most `max` characters of `text`.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

impl Actor for TurnActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.deps.events.publish(BotEvent::TurnStarted {
            chat: self.spec.chat,
            turn: self.spec.turn,
            at: self.started,
        });
        self.budget = Some(ctx.run_later(self.deps.config.max_duration, |act, ctx| {
            act.budget = None;
            tracing::warn!(chat_id = act.chat_id(), budget = ?act.deps.config.max_duration, "turn ran past its budget");
            act.record(TurnEvent::BudgetExceeded, ctx);
        }));
        self.arm_no_progress(ctx);
        match self.source.take().and_then(|s| s.warm) {
            Some(session) => {
                self.warm_unproven = true;
                self.attach(session, ctx);
                // A warm process answers a user line within milliseconds; one
                // that stays silent is replaced rather than waited out.
                let patience = (self.deps.config.no_progress_timeout / 2).min(WARM_ANSWER_TIMEOUT);
                ctx.run_later(patience, |act, ctx| {
                    if act.warm_unproven && act.outcome.is_none() {
                        tracing::warn!(chat_id = act.chat_id(), session = %act.label, "warm session did not answer; replacing it");
                        act.replace_warm(ctx);
                    }
                });
            }
            None => self.open(ctx),
        }
    }
}

impl Drop for TurnActor {
    fn drop(&mut self) {
        self.deps.gauges.leave(&self.deps.gauges.turns);
    }
}

impl Handler<InterruptTurn> for TurnActor {
    type Result = ();

    fn handle(&mut self, _msg: InterruptTurn, ctx: &mut Self::Context) {
        self.record(TurnEvent::Interrupt, ctx);
    }
}

impl Handler<StopForHost> for TurnActor {
    type Result = ();

    fn handle(&mut self, _msg: StopForHost, ctx: &mut Self::Context) {
        if self.outcome.is_none() {
            self.record(TurnEvent::HostStopping, ctx);
        } else {
            self.send(SessionCommand::Close);
        }
    }
}

impl Handler<AbortTurn> for TurnActor {
    type Result = ();

    fn handle(&mut self, _msg: AbortTurn, ctx: &mut Self::Context) {
        tracing::warn!(
            chat_id = self.chat_id(),
            turn = self.spec.turn,
            "turn aborted by the backstop"
        );
        if self.outcome.is_none() {
            self.outcome = Some(TurnOutcome::ForceReleased);
        }
        self.live_flag.store(false, Ordering::SeqCst);
        self.spec.typing_lease.store(false, Ordering::SeqCst);
        self.kill(ctx);
    }
}

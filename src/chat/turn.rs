//! TurnActor: runs one turn against an agent session, serves the chat tools,
//! runs the turn's watchdogs and sends [`TurnEnded`] exactly once.
//!
//! Where the turn is lives in one [`TurnPhase`](phase::TurnPhase) value;
//! every handler is a `match` on it. After TurnEnded the actor keeps
//! closing its session: it waits (up to `turn.post_result_grace`) for the
//! agent to settle and hands a settled session back for the chat's next
//! turn, or force-closes it. Late events are logged and dropped, never
//! delivered to the chat.

pub(crate) mod approval;
mod closing;
pub(crate) mod live;
mod phase;
mod serve;
mod watchdogs;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use actix::{
    Actor, ActorContext, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, Recipient,
    SpawnHandle, WrapFuture,
};
use teloxide::types::{MessageId, UserId};
use tokio::sync::mpsc;

use self::approval::Approvals;
pub use self::approval::ButtonPressed;
pub(crate) use self::approval::describe_rule;
use self::live::LiveView;
use self::phase::{Step, TurnPhase};
pub use self::serve::Forwarding;
use self::serve::ReplyLane;
use self::watchdogs::Watchdogs;
use crate::agent::{
    Activity, AgentBackend, AgentError, AgentEvent, AgentSession, HookReply, OpenSession,
    SessionCommand, ToolBatch,
};
use crate::attachment::Attachment;
use crate::chat::notices::{REPROMPT, STOP_REASON};
use crate::chat::outcome::{TurnEvent, TurnOutcome, decide};
use crate::config::{ProgressConfig, TurnConfig};
use crate::events::{BotEvent, EventBus, Gauges};
use crate::ids::{Conversation, TurnId};
use crate::shutdown::Shutdown;
use crate::state::Inbox;
use crate::telegram::TypingLease;
use crate::telegram::files::Files;
use crate::telegram::outbox::{Outbox, SendText};

/// Sent once per turn, to the supervisor and to the typing actor, when the
/// turn is over.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct TurnEnded {
    /// The turn.
    pub turn: TurnId,
    /// How it ended.
    pub outcome: TurnOutcome,
    /// The agent's session id, kept for `--resume`.
    pub session_id: Option<String>,
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
    pub turn: TurnId,
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

/// The hard deadline released the chat: kill the session and stop, silently.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct AbortTurn;

/// What a turn is for.
#[derive(Debug, Clone)]
pub struct TurnSpec {
    /// The conversation (the chat, or one forum topic of it): replies,
    /// typing and questions go there, and it has its own session and workdir.
    pub to: Conversation,
    /// Numbers the turn within the process.
    pub turn: TurnId,
    /// The user's text (merged messages joined).
    pub text: String,
    /// The user's last message, for reactions.
    pub reply_to: Option<MessageId>,
    /// The message the turn's answer replies to (in groups, the message
    /// that started the turn; in private chats none).
    pub answer_to: Option<MessageId>,
    /// Files the messages carried, fetched into the workdir before the
    /// agent hears of the turn.
    pub files: Vec<Attachment>,
    /// The inbox rows (update ids) this turn answers.
    pub update_ids: Vec<i64>,
    /// Who sent the message the turn answers (the last one, when merged):
    /// besides an admin, only they may answer its approval questions.
    pub from: Option<UserId>,
    /// The chat's typing lease for this turn, ended at TurnEnded.
    pub typing: TypingLease,
}

/// What every turn of every chat shares.
#[derive(Clone)]
pub struct TurnDeps {
    /// Opens sessions.
    pub backend: Arc<dyn AgentBackend>,
    /// The way out to Telegram.
    pub outbox: Addr<Outbox>,
    /// The clocks.
    pub config: Arc<TurnConfig>,
    /// What the chat sees while a turn works.
    pub progress: Arc<ProgressConfig>,
    /// Where the turn reports what happened.
    pub events: EventBus,
    /// Live actor counts.
    pub gauges: Arc<Gauges>,
    /// The durable inbox (and session ids, turn records).
    pub inbox: Inbox,
    /// Set once the host is stopping: agent requests are then refused.
    pub shutdown: Shutdown,
    /// `dispatcher.on_interrupted == "retry"`.
    pub retry_interrupted: bool,
    /// Fetches the files users send.
    pub files: Files,
    /// `agent.workdir`, absolute, with its `{chat}` placeholder: where each
    /// conversation's files are.
    pub workdir: std::path::PathBuf,
    /// The reply lanes' texts not yet handed to the outbox.
    pub forwarding: Forwarding,
}

impl TurnDeps {
    /// The working directory of `to`.
    pub fn workdir_of(&self, to: Conversation) -> std::path::PathBuf {
        crate::agent::claude::seal::chat_path(&self.workdir, &to.key())
    }
}

/// The session the turn talks to.
struct Link {
    /// Commands to the session.
    commands: mpsc::UnboundedSender<SessionCommand>,
    /// Its events, while the actor is not awaiting one.
    events: Option<mpsc::UnboundedReceiver<AgentEvent>>,
    /// Its label, for logs.
    label: String,
    /// Set once it reported itself idle (settled, reusable).
    idle: bool,
}

/// The longest wait for a warm session's first sign of life.
const WARM_ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The actor.
pub struct TurnActor {
    /// What the turn is for.
    spec: TurnSpec,
    /// Shared services.
    deps: TurnDeps,
    /// Where the turn is.
    phase: TurnPhase,
    /// A warm session handed over by the supervisor; taken at start.
    warm: Option<AgentSession>,
    /// The session in use; `None` before one is open and once it is gone.
    link: Option<Link>,
    /// The pending read of the session's next event.
    pump: Option<SpawnHandle>,
    /// Counts sessions attached, so a read from a replaced one is ignored.
    generation: u64,
    /// True until TurnEnded; read by tool work finishing outside the actor.
    live: Arc<AtomicBool>,
    /// Who gets TurnEnded.
    ended_to: Vec<Recipient<TurnEnded>>,
    /// Who gets the session back.
    released_to: Recipient<SessionReleased>,
    /// The agent's session id.
    session_id: Option<String>,
    /// What bears on the outcome, in order (fed to [`decide`]).
    log: Vec<TurnEvent>,
    /// Whether any text reached the chat.
    delivered: bool,
    /// The turn's way out, opened (and "replied" recorded) at the first text.
    lane: Option<ReplyLane>,
    /// Whether the agent called a terminator tool (its batch may still run).
    ended_explicitly: bool,
    /// The clocks.
    watchdogs: Watchdogs,
    /// Tool approvals waiting for a person.
    approvals: Approvals,
    /// When the turn started.
    started: Instant,
    /// The status message and the answer's preview.
    view: LiveView,
    /// What the agent sent this turn, against `turn.max_messages` and
    /// `turn.max_output`.
    sent: serve::Sent,
}

impl TurnActor {
    /// A turn; it starts when the actor starts, on `warm` when the chat kept
    /// a settled session, else on a fresh one.
    pub fn new(
        spec: TurnSpec,
        deps: TurnDeps,
        warm: Option<AgentSession>,
        ended_to: Vec<Recipient<TurnEnded>>,
        released_to: Recipient<SessionReleased>,
    ) -> Self {
        deps.gauges.turns.fetch_add(1, Ordering::SeqCst);
        let to = spec.to;
        let view = LiveView::new(
            (*deps.progress).clone(),
            to,
            deps.outbox.clone(),
            deps.workdir_of(to).to_string_lossy().into_owned(),
            spec.answer_to,
        );
        Self {
            spec,
            deps,
            phase: TurnPhase::Opening,
            warm,
            link: None,
            pump: None,
            generation: 0,
            live: Arc::new(AtomicBool::new(true)),
            ended_to,
            released_to,
            session_id: None,
            log: Vec::new(),
            delivered: false,
            lane: None,
            ended_explicitly: false,
            watchdogs: Watchdogs::default(),
            approvals: Approvals::default(),
            started: Instant::now(),
            view,
            sent: serve::Sent::default(),
        }
    }

    fn chat_id(&self) -> i64 {
        self.spec.to.chat.0
    }

    /// The conversation the turn is in.
    fn to(&self) -> Conversation {
        self.spec.to
    }

    /// Fetches the turn's files into the workdir, tells the chat about any
    /// that could not be taken, puts what arrived in front of the text, then
    /// starts the agent.
    fn receive_files(&mut self, ctx: &mut Context<Self>) {
        let files = self.deps.files.clone();
        let chat = self.to().key();
        let attachments = std::mem::take(&mut self.spec.files);
        let fetch = async move { files.receive(&chat, &attachments).await };
        ctx.spawn(fetch.into_actor(self).map(|received, act, ctx| {
            for notice in received.notices {
                act.deps
                    .outbox
                    .do_send(SendText::new(act.to(), notice).replying_to(act.spec.answer_to));
            }
            let mut text = received.notes.join("\n");
            if !act.spec.text.trim().is_empty() {
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(&act.spec.text);
            }
            act.spec.text = text;
            if act.phase.is_live() {
                act.begin(ctx);
            }
        }));
    }

    /// Starts the agent on the turn: the warm session, else a fresh one.
    fn begin(&mut self, ctx: &mut Context<Self>) {
        match self.warm.take() {
            Some(session) => {
                self.attach(session, true, ctx);
                // A warm process answers a user line within milliseconds; one
                // that stays silent is replaced rather than waited out.
                let patience = (self.deps.config.no_progress_timeout / 2).min(WARM_ANSWER_TIMEOUT);
                ctx.run_later(patience, |act, ctx| {
                    if act.phase.is_proving() {
                        tracing::warn!(chat_id = act.chat_id(), session = %act.label(), "warm session did not answer; replacing it");
                        act.replace_warm(ctx);
                    }
                });
            }
            None => self.open(ctx),
        }
    }

    fn label(&self) -> &str {
        self.link.as_ref().map_or("", |l| l.label.as_str())
    }

    fn step(&mut self, step: Step) {
        self.phase = std::mem::replace(&mut self.phase, TurnPhase::Opening).after(step);
    }

    /// Drops a warm session that is dead or silent and opens a fresh one.
    fn replace_warm(&mut self, ctx: &mut Context<Self>) {
        self.step(Step::ReplacingWarm);
        self.send(SessionCommand::Kill);
        if let Some(pump) = self.pump.take() {
            ctx.cancel_future(pump);
        }
        self.link = None;
        self.open(ctx);
    }

    /// Opens a fresh session, resuming the chat's agent session id (read
    /// after every store write asked before, so a `/new` is seen).
    fn open(&mut self, ctx: &mut Context<Self>) {
        let backend = Arc::clone(&self.deps.backend);
        let resume = self.deps.inbox.session(self.to());
        let conversation = self.to();
        let shutdown = self.deps.shutdown.clone();
        let open = async move {
            let resume = resume.await;
            backend
                .open(OpenSession {
                    conversation,
                    resume,
                    shutdown,
                })
                .await
        };
        ctx.spawn(open.into_actor(self).map(|result, act, ctx| match result {
            Ok(session) if act.phase.is_live() => act.attach(session, false, ctx),
            Ok(session) => drop(session),
            Err(err) => {
                act.start_failed(&err);
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

    /// The backend could not start the agent: the operator's log says what
    /// and why (the chat is told only that it failed, at the turn's end).
    fn start_failed(&self, err: &AgentError) {
        let (chat_id, turn_id) = (self.chat_id(), self.spec.turn.get());
        match err {
            AgentError::Spawn { command, source } => tracing::error!(
                chat_id,
                turn_id,
                command = %command,
                error = %source,
                "the agent could not start; check agent.command (a path, or a name on the agent's PATH) and that it is executable"
            ),
            AgentError::Directory { dir, source } => tracing::error!(
                chat_id,
                turn_id,
                dir = %dir.display(),
                error = %source,
                "the agent could not start: its directory could not be made"
            ),
            other => tracing::error!(chat_id, turn_id, cause = %other, "the agent could not start"),
        }
    }

    fn attach(&mut self, session: AgentSession, warm: bool, ctx: &mut Context<Self>) {
        let AgentSession {
            commands,
            events,
            label,
        } = session;
        self.generation += 1;
        if commands
            .send(SessionCommand::UserTurn(self.spec.text.clone()))
            .is_err()
        {
            tracing::warn!(chat_id = self.chat_id(), turn_id = self.spec.turn.get(), session = %label, "session closed before the turn started");
        }
        self.link = Some(Link {
            commands,
            events: Some(events),
            label,
            idle: false,
        });
        self.step(Step::Attached { warm });
        self.pump(ctx);
    }

    /// Awaits the session's next event.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        let Some(mut rx) = self.link.as_mut().and_then(|l| l.events.take()) else {
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
                if let Some(link) = act.link.as_mut() {
                    link.events = Some(rx);
                }
                let event = event.unwrap_or_else(|| AgentEvent::Exited {
                    code: None,
                    detail: "the agent's event stream closed".into(),
                });
                act.on_event(event, ctx);
                if act.link.is_some() && !act.phase.is_released() {
                    act.pump(ctx);
                }
            })),
        );
    }

    fn send(&self, command: SessionCommand) {
        if let Some(link) = &self.link
            && link.commands.send(command.clone()).is_err()
        {
            tracing::debug!(
                chat_id = self.chat_id(),
                turn_id = self.spec.turn.get(),
                ?command,
                "session already closed"
            );
        }
    }

    /// Records an event and ends the turn when it decides the outcome.
    fn record(&mut self, event: TurnEvent, ctx: &mut Context<Self>) {
        if !self.phase.is_live() {
            return;
        }
        self.log.push(event);
        if let Some(outcome) = decide(&self.log) {
            self.finish(outcome, ctx);
        }
    }

    fn on_event(&mut self, event: AgentEvent, ctx: &mut Context<Self>) {
        if !self.phase.is_live() {
            return self.on_late_event(event, ctx);
        }
        self.arm_no_progress(ctx);
        if self.phase.is_proving() {
            match &event {
                AgentEvent::Exited { detail, .. } => {
                    tracing::info!(chat_id = self.chat_id(), turn_id = self.spec.turn.get(), session = %self.label(), cause = %detail, "warm session was dead; opening a fresh one");
                    self.replace_warm(ctx);
                    return;
                }
                AgentEvent::Init { .. } | AgentEvent::ToolCall(_) | AgentEvent::Result(_) => {
                    self.step(Step::ShowedLife);
                }
                _ => {}
            }
        }
        match event {
            AgentEvent::Init { session_id } => self.session_id = Some(session_id),
            AgentEvent::Text(text) => {
                tracing::debug!(
                    chat_id = self.chat_id(),
                    turn_id = self.spec.turn.get(),
                    chars = text.len(),
                    "assistant text"
                );
            }
            AgentEvent::Progress => {}
            AgentEvent::Activity(Activity::ToolStarted { name, input, .. }) => {
                self.view.tool_started(&name, &input);
            }
            AgentEvent::Activity(Activity::Writing {
                stream, appended, ..
            }) => self.view.writing(&stream, &appended),
            AgentEvent::ToolCall(call) => self.serve_tool(call, ctx),
            AgentEvent::BatchResolved(ToolBatch { calls, reply }) => {
                self.record(TurnEvent::ToolBatch { calls }, ctx);
                let answer = match self.phase.outcome() {
                    _ if self.deps.shutdown.is_closing() => {
                        HookReply::Refused("the host is stopping".into())
                    }
                    Some(TurnOutcome::Terminated { .. }) => HookReply::Stop {
                        reason: STOP_REASON.into(),
                    },
                    _ => HookReply::Continue,
                };
                reply.answer(answer);
            }
            AgentEvent::Result(result) => self.on_result(result, ctx),
            AgentEvent::Idle => {
                if matches!(self.phase, TurnPhase::Running { .. })
                    && matches!(self.log.last(), Some(TurnEvent::Reprompted))
                {
                    // The idle that closed the first prompt; the re-prompt runs next.
                    return;
                }
                if let Some(link) = self.link.as_mut() {
                    link.idle = true;
                }
                self.record(TurnEvent::Idle, ctx);
            }
            AgentEvent::Exited { code, detail } => {
                self.link = None;
                self.record(TurnEvent::Exited { code, detail }, ctx);
            }
            AgentEvent::PermissionAsk(ask) => self.ask_permission(ask, ctx),
            AgentEvent::Unknown(raw) => {
                let shown: String = raw.chars().take(200).collect();
                tracing::warn!(chat_id = self.chat_id(), turn_id = self.spec.turn.get(), event = %shown, "unknown agent event skipped");
            }
        }
    }

    /// The agent's `result` for the prompt: deliver its text, re-prompt
    /// once, or wait for the session to settle.
    fn on_result(&mut self, result: crate::agent::AgentResult, ctx: &mut Context<Self>) {
        self.step(Step::ResultArrived);
        self.disarm_no_progress(ctx);
        let deliverable = !result.is_error && result.subtype == "success";
        let text = result.text.clone();
        let num_turns = result.num_turns;
        self.record(TurnEvent::Result(result), ctx);
        if !self.phase.is_live() {
            return;
        }
        let reprompted = self.log.iter().any(|e| matches!(e, TurnEvent::Reprompted));
        if self.delivered || self.ended_explicitly || !deliverable {
            self.arm_grace(ctx);
        } else if !text.trim().is_empty() {
            self.deliver_answer(text);
            self.arm_grace(ctx);
        } else if !reprompted && num_turns > 0 {
            tracing::info!(
                chat_id = self.chat_id(),
                turn_id = self.spec.turn.get(),
                "the agent ended with nothing delivered; re-prompting once"
            );
            self.step(Step::Reprompted);
            self.log.push(TurnEvent::Reprompted);
            self.send(SessionCommand::UserTurn(REPROMPT.into()));
            self.arm_no_progress(ctx);
        } else {
            self.arm_grace(ctx);
        }
    }

    /// Whether the session settled: idle (reusable) or gone.
    fn settled(&self) -> bool {
        self.link.as_ref().is_none_or(|l| l.idle)
    }
}

impl Actor for TurnActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.deps.events.publish(BotEvent::TurnStarted {
            chat: self.spec.to.chat,
            turn: self.spec.turn,
            at: self.started,
        });
        self.arm_budget(ctx);
        self.arm_no_progress(ctx);
        self.arm_view(ctx);
        if self.spec.files.is_empty() {
            self.begin(ctx);
        } else {
            self.receive_files(ctx);
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
        match self.phase {
            TurnPhase::Opening | TurnPhase::Running { .. } | TurnPhase::AwaitingSettle => {
                self.record(TurnEvent::HostStopping, ctx);
            }
            TurnPhase::Closing { .. } => self.send(SessionCommand::Close),
            TurnPhase::Released { .. } => {}
        }
    }
}

impl Handler<AbortTurn> for TurnActor {
    type Result = ();

    fn handle(&mut self, _msg: AbortTurn, ctx: &mut Self::Context) {
        tracing::warn!(
            chat_id = self.chat_id(),
            turn_id = self.spec.turn.get(),
            "turn aborted at the hard deadline"
        );
        self.live.store(false, Ordering::SeqCst);
        self.spec.typing.end();
        self.close_approvals("the turn took too long", ctx);
        self.send(SessionCommand::Kill);
        self.link = None;
        self.deps.events.publish(BotEvent::SessionKilled {
            chat: self.spec.to.chat,
            turn: self.spec.turn,
        });
        self.step(Step::Aborted);
        // The supervisor already let go of this turn: nothing is handed back.
        ctx.stop();
    }
}

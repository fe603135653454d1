//! TurnActor: runs one turn against an agent session, serves the chat tools,
//! runs the turn's watchdogs and sends [`TurnEnded`] exactly once.
//!
//! Where the turn is lives in one [`TurnPhase`](phase::TurnPhase) value,
//! which also holds what only some phases have (the warm session while
//! opening, the session's [`Link`](link::Link) once attached); every
//! handler is a `match` on it. After TurnEnded the actor keeps
//! closing its session: it waits (up to `turn.post_result_grace`) for the
//! agent to settle and hands a settled session back for the chat's next
//! turn, or force-closes it. Late events are logged and dropped, never
//! delivered to the chat.

pub(crate) mod approval;
mod closing;
mod contract;
mod link;
pub(crate) mod live;
mod opening;
mod pending;
mod phase;
mod scheduling;
mod serve;
mod steering;
mod watchdogs;

use std::sync::atomic::Ordering;
use std::time::Instant;

use actix::fut::wrap_future;
use actix::{Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, Recipient};

use self::approval::Approvals;
pub use self::approval::ButtonPressed;
pub(crate) use self::approval::describe_rule;
pub use self::contract::{
    AbortTurn, AgentSetup, Books, Carried, InterruptTurn, Sender, SessionReleased, SteerTurn,
    StopForHost, TurnEnded, TurnServices, TurnSpec, WayOut,
};
use self::link::{Link, Settled};
use self::live::LiveView;
use self::phase::{Leftover, TurnPhase, TurnStep};
pub use self::serve::Forwarding;
use self::serve::Said;
use self::watchdogs::Watchdogs;
use crate::agent::{Activity, AgentEvent, AgentSession, HookReply, SessionCommand, ToolBatch};
use crate::chat::notices::{REPROMPT, STOP_REASON};
use crate::chat::outcome::{TurnEvent, TurnOutcome, decide};
use crate::events::{BotEvent, FeedItem};
use crate::ids::Conversation;

/// Where a turn is, with the warm session and the session's link.
type Phase = TurnPhase<AgentSession, Link>;

/// The actor.
pub struct TurnActor {
    /// What the turn is for.
    spec: TurnSpec,
    /// Shared services.
    deps: TurnServices,
    /// Where the turn is, with the session it holds there: the warm one
    /// handed over by the supervisor while opening, the link once attached.
    phase: Phase,
    /// Counts sessions attached, so a read from a replaced one is ignored.
    generation: u64,
    /// Who gets TurnEnded.
    ended_to: Vec<Recipient<TurnEnded>>,
    /// Who gets the session back.
    released_to: Recipient<SessionReleased>,
    /// The agent's session id.
    session_id: Option<String>,
    /// What bears on the outcome, in order (fed to [`decide`]).
    log: Vec<TurnEvent>,
    /// What the turn said to the chat, with its reply relay once it has.
    said: Said,
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
    output: serve::TurnOutput,
    /// Messages steered into the turn.
    steering: steering::Steering,
    /// The conversation's project and the root of its working directories,
    /// once read (as the turn starts, beside it: a turn on a warm session
    /// waits for no store).
    root: Option<opening::Root>,
    /// What the turn's results used, and its record.
    accounting: closing::Account,
}

impl TurnActor {
    /// A turn; it starts when the actor starts, on `warm` when the chat kept
    /// a settled session, else on a fresh one.
    pub fn new(
        spec: TurnSpec,
        deps: TurnServices,
        warm: Option<AgentSession>,
        ended_to: Vec<Recipient<TurnEnded>>,
        released_to: Recipient<SessionReleased>,
    ) -> Self {
        deps.books.gauges.turns.fetch_add(1, Ordering::SeqCst);
        let to = spec.to;
        let view = LiveView::new(
            deps.agent.progress.clone(),
            &spec,
            deps.out.outbox.clone(),
            deps.workdir_of(to).to_string_lossy().into_owned(),
            deps.books.events.clone(),
        );
        Self {
            spec,
            deps,
            phase: TurnPhase::Opening { warm },
            generation: 0,
            ended_to,
            released_to,
            session_id: None,
            log: Vec::new(),
            said: Said::Nothing,
            watchdogs: Watchdogs::default(),
            approvals: Approvals::default(),
            started: Instant::now(),
            view,
            output: serve::TurnOutput::default(),
            steering: steering::Steering::default(),
            root: None,
            accounting: closing::Account::default(),
        }
    }

    /// The conversation the turn is in.
    fn to(&self) -> Conversation {
        self.spec.to
    }

    fn label(&self) -> &str {
        self.phase.link().map_or("", |l| l.label.as_str())
    }

    /// Moves the turn on; answers what it no longer holds.
    fn step(&mut self, step: TurnStep<Link>) -> Option<Leftover<AgentSession, Link>> {
        let phase = std::mem::replace(&mut self.phase, TurnPhase::Opening { warm: None });
        let (phase, left) = phase.after(step);
        self.phase = phase;
        left
    }

    /// Awaits the session's next event, unless a read is pending.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        let Some(link) = self.phase.link_mut() else {
            return;
        };
        let generation = link.generation();
        link.read(|mut rx| {
            let fut = async move {
                let event = rx.recv().await;
                (rx, event)
            };
            ctx.spawn(
                wrap_future::<_, Self>(fut).map(move |(rx, event), act, ctx| {
                    if !act.phase.read_back(generation, rx) {
                        return;
                    }
                    let event = event.unwrap_or_else(|| AgentEvent::Exited {
                        code: None,
                        detail: "the agent's event stream closed".into(),
                    });
                    act.on_event(event, ctx);
                    act.pump(ctx);
                }),
            )
        });
    }

    fn send(&self, command: SessionCommand) {
        self.send_to(self.phase.link(), command);
    }

    fn send_to(&self, link: Option<&Link>, command: SessionCommand) {
        if let Some(link) = link
            && link.commands.send(command.clone()).is_err()
        {
            tracing::debug!(?command, "session already closed");
        }
    }

    /// Records an event and ends the turn when it decides the outcome.
    fn record(&mut self, event: TurnEvent, ctx: &mut Context<Self>) {
        if !self.phase.holds_chat() {
            return;
        }
        self.log.push(event);
        if let Some(outcome) = decide(&self.log) {
            self.finish(outcome, ctx);
        }
    }

    fn on_event(&mut self, event: AgentEvent, ctx: &mut Context<Self>) {
        if let AgentEvent::Result(result) = &event {
            self.account(result);
        }
        if !self.phase.holds_chat() {
            return self.on_late_event(event, ctx);
        }
        self.arm_no_progress(ctx);
        if self.phase.is_proving() && self.warm_was_dead(&event, ctx) {
            return;
        }
        match event {
            AgentEvent::Init { session_id } => self.session_id = Some(session_id),
            AgentEvent::Text(text) => {
                tracing::debug!(chars = text.len(), "assistant text");
            }
            AgentEvent::Progress => {}
            AgentEvent::Activity(Activity::ToolStarted { name, input, .. }) => {
                self.view.tool_started(&name, &input);
            }
            AgentEvent::Activity(Activity::Writing {
                stream, appended, ..
            }) => {
                self.view.writing(&stream, &appended);
                self.arm_preview(ctx);
            }
            AgentEvent::ToolCall(call) => self.serve_tool(call, ctx),
            AgentEvent::BatchResolved(ToolBatch { calls, reply }) => {
                self.record(TurnEvent::ToolBatch { calls }, ctx);
                let answer = match self.phase.outcome() {
                    _ if self.deps.books.shutdown.is_closing() => {
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
            AgentEvent::SteerRead(tag) => self.steer_read(tag),
            AgentEvent::Idle => {
                if matches!(self.phase, TurnPhase::Running { .. })
                    && matches!(self.log.last(), Some(TurnEvent::Reprompted))
                {
                    // The idle that closed the first prompt; the re-prompt runs next.
                    return;
                }
                if let Some(link) = self.phase.link_mut() {
                    link.settle(Settled::Idle);
                }
                self.record(TurnEvent::Idle, ctx);
            }
            AgentEvent::Exited { code, detail } => {
                if let Some(link) = self.phase.link_mut() {
                    link.settle(Settled::Exited);
                }
                self.record(TurnEvent::Exited { code, detail }, ctx);
            }
            AgentEvent::PermissionAsk(ask) => self.ask_permission(ask, ctx),
            AgentEvent::AuthFailed(failure) => {
                tracing::error!(
                    refused = failure.refused,
                    cause = %failure.detail,
                    "the agent could not authenticate with its model API"
                );
                self.record(TurnEvent::AuthFailed(failure), ctx);
            }
            AgentEvent::Unknown(raw) => {
                let shown: String = raw.chars().take(200).collect();
                tracing::warn!(event = %shown, "unknown agent event skipped");
            }
        }
    }

    /// While a warm session has yet to show life: an exit replaces it with
    /// a fresh one (true: `event` is spent), a sign of life proves it.
    fn warm_was_dead(&mut self, event: &AgentEvent, ctx: &mut Context<Self>) -> bool {
        match event {
            AgentEvent::Exited { detail, .. } => {
                tracing::info!(session = %self.label(), cause = %detail, "warm session was dead; opening a fresh one");
                self.replace_warm(ctx);
                return true;
            }
            AgentEvent::Init { .. } | AgentEvent::ToolCall(_) | AgentEvent::Result(_) => {
                self.step(TurnStep::ShowedLife);
            }
            _ => {}
        }
        false
    }

    /// The agent's `result` for the prompt: deliver its text, re-prompt
    /// once, or wait for the session to settle.
    fn on_result(&mut self, result: crate::agent::AgentResult, ctx: &mut Context<Self>) {
        self.step(TurnStep::ResultArrived);
        self.steering.result_seen = true;
        self.disarm_no_progress(ctx);
        let deliverable = result.succeeded();
        let text = result.text.clone();
        let num_turns = result.num_turns;
        self.record(TurnEvent::Result(result), ctx);
        if !self.phase.holds_chat() {
            return;
        }
        if self.steering.waiting() {
            // A steered message is the agent's next turn: this one is over,
            // its text delivered as usual, and nothing re-prompted.
            if !self.said.delivered()
                && !self.phase.ended_by_call()
                && deliverable
                && !text.trim().is_empty()
            {
                self.deliver_answer(text);
            }
            self.continue_after_result(ctx);
            return;
        }
        let reprompted = self.log.iter().any(|e| matches!(e, TurnEvent::Reprompted));
        if self.said.delivered() || self.phase.ended_by_call() || !deliverable {
            self.arm_grace(ctx);
        } else if !text.trim().is_empty() {
            self.deliver_answer(text);
            self.arm_grace(ctx);
        } else if !reprompted && num_turns > 0 {
            tracing::info!("the agent ended with nothing delivered; re-prompting once");
            self.step(TurnStep::Reprompted);
            self.log.push(TurnEvent::Reprompted);
            self.send(SessionCommand::UserTurn(REPROMPT.into()));
            self.arm_no_progress(ctx);
        } else {
            self.arm_grace(ctx);
        }
    }

    /// Whether the session settled: idle (reusable) or gone.
    fn settled(&self) -> bool {
        self.phase.link().is_none_or(Link::is_settled)
    }
}

impl Actor for TurnActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.deps.books.events.publish(BotEvent::TurnStarted {
            chat: self.spec.to.chat,
            topic: self.spec.to.topic,
            turn: self.spec.turn,
            at: self.started,
        });
        let turn = self.spec.turn;
        (self.deps.books.events).feed(self.spec.to, FeedItem::TurnStarted { turn });
        self.arm_budget(ctx);
        self.arm_no_progress(ctx);
        self.arm_view(ctx);
        // Files are fetched into the conversation's directory: its root
        // first. Otherwise the agent starts at once.
        let files = !self.spec.files.is_empty();
        if !files {
            self.begin(ctx);
        }
        self.find_root(ctx, move |act, ctx| {
            if files && act.phase.holds_chat() {
                act.receive_files(ctx);
            }
        });
    }
}

impl Drop for TurnActor {
    fn drop(&mut self) {
        // Stopped without a release (the system going away): what the
        // results used is still written.
        self.close_account();
        self.deps.books.gauges.leave(&self.deps.books.gauges.turns);
    }
}

impl Handler<InterruptTurn> for TurnActor {
    type Result = ();

    fn handle(&mut self, _msg: InterruptTurn, ctx: &mut Self::Context) {
        self.close_steering();
        self.record(TurnEvent::Interrupt, ctx);
    }
}

impl Handler<StopForHost> for TurnActor {
    type Result = ();

    fn handle(&mut self, _msg: StopForHost, ctx: &mut Self::Context) {
        match self.phase {
            TurnPhase::Opening { .. }
            | TurnPhase::Running { .. }
            | TurnPhase::AwaitingSettle { .. } => {
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
        tracing::warn!("turn aborted at the hard deadline");
        self.spec.typing.end();
        // What was steered in ends with the turn.
        self.close_steering();
        self.carried(false);
        self.close_approvals("the turn took too long", ctx);
        self.send(SessionCommand::Kill);
        self.deps.books.events.publish(BotEvent::SessionKilled {
            chat: self.spec.to.chat,
            turn: self.spec.turn,
        });
        // The session (or a warm one never begun on) is dropped, and no
        // result comes any more.
        self.step(TurnStep::Aborted);
        self.close_account();
        // The supervisor already let go of this turn: nothing is handed back.
        ctx.stop();
    }
}

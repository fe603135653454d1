//! The session driver: the claude protocol the host's session task runs
//! ([`Protocol`]): it reads the CLI's lines, answers its requests exactly
//! once, writes the host's commands and names the close steps.

mod answers;
pub(crate) mod live;
mod requests;

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::ClaudeSettings;
use super::protocol::{self, CliLine, ControlResponse, Line, SessionState, SystemLine};
use crate::agent::host::lines::Frame;
use crate::agent::host::session::{Protocol, SessionIo};
use crate::agent::tools::ToolRegistry;
use crate::agent::{AgentEvent, SessionCommand};
use crate::shutdown::Shutdown;
use answers::Answers;
use live::Live;

/// User messages remembered while the CLI has not echoed them.
const MAX_UNREAD: usize = 64;

/// The id of the host's `initialize` request.
const INITIALIZE_ID: &str = "init_1";

/// What a session's driver is started with.
pub(super) struct Start {
    /// How the CLI was started (the grace, the allowed tools).
    pub(super) settings: Arc<ClaudeSettings>,
    /// The chat tools, served over MCP and parsed with.
    pub(super) tools: Arc<ToolRegistry>,
    /// Set once the host stops: requests are then refused.
    pub(super) shutdown: Shutdown,
    /// Told once the CLI answered `initialize`: it has started and would
    /// take a first message at once.
    pub(super) ready: oneshot::Sender<()>,
    /// The session the process holds until its first turn says otherwise:
    /// the one it resumes (none for a new session or a fork).
    pub(super) session_id: Option<String>,
}

/// The `initialize` request the host sends a fresh CLI.
pub(super) fn initialize(settings: &ClaudeSettings) -> Value {
    protocol::initialize(INITIALIZE_ID, settings.batch_hook, &settings.system_prompt)
}

impl Driver {
    /// The protocol of a freshly spawned process: sends `initialize`.
    pub(super) fn new(start: Start, link: SessionIo) -> Self {
        let _ = link.out.send(initialize(&start.settings));
        Self::with(start, link)
    }

    /// The protocol of a process handed over across `/restart`'s exec: it
    /// answered `initialize` long ago and is idle, so it is ready now.
    pub(super) fn adopted(start: Start, link: SessionIo) -> Self {
        let mut driver = Self::with(start, link);
        driver.ready.take().map(|ready| ready.send(()));
        driver
    }

    fn with(start: Start, link: SessionIo) -> Self {
        let Start {
            settings,
            tools,
            shutdown,
            ready,
            session_id,
        } = start;
        Self {
            shutdown,
            settings,
            tools,
            pid: link.pid,
            answers: Answers::new(link.out, link.pid),
            events: link.events,
            next_request: 1,
            live: Live::default(),
            unread: VecDeque::new(),
            ready: Some(ready),
            session_id,
            in_turn: false,
        }
    }
}

/// The steps of a graceful close, in order; each waits out its share of
/// the grace for the process to exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CloseStep {
    /// Refuse what is pending and send `end_session`; stdin stays open, so
    /// requests the agent still makes are answered.
    EndSession,
    /// Close stdin.
    CloseStdin,
}

impl CloseStep {
    /// This step's share of the grace.
    fn wait(self, grace: std::time::Duration) -> std::time::Duration {
        match self {
            Self::EndSession => grace / 2,
            Self::CloseStdin => grace - grace / 2,
        }
    }
}

/// Owns one CLI session's protocol.
pub(super) struct Driver {
    /// Set once the host stops: requests are then refused.
    shutdown: Shutdown,
    /// The allowed tools.
    settings: Arc<ClaudeSettings>,
    /// The chat tools, served over MCP.
    tools: Arc<ToolRegistry>,
    /// For logs.
    pid: u32,
    /// Stdin and the pending requests.
    answers: Answers,
    /// Everything the session reports.
    events: mpsc::UnboundedSender<AgentEvent>,
    /// The last host request id used.
    next_request: u64,
    /// What the agent is writing and which tool calls were reported.
    live: Live,
    /// The user messages written and not yet echoed back as read, oldest
    /// first: `None` for a turn's prompt, the tag of a steered one.
    unread: VecDeque<Option<i64>>,
    /// Told when the CLI answers `initialize` (see [`Start::ready`]).
    ready: Option<oneshot::Sender<()>>,
    /// The session the process holds (see [`Start::session_id`]).
    session_id: Option<String>,
    /// A turn was written and its `result` has not come yet.
    in_turn: bool,
}

impl Protocol for Driver {
    type Line = Line;
    type Wake = std::convert::Infallible;
    type CloseStep = CloseStep;

    const CLOSE_STEPS: &'static [CloseStep] = &[CloseStep::EndSession, CloseStep::CloseStdin];
    const NOT_CLOSED: &'static str = "did not exit after end_session";

    fn parse(frame: Frame) -> Line {
        match frame {
            Frame::Line(line) => Line::parse(&line),
            Frame::Oversized { bytes, .. } => Line::Oversized(bytes),
        }
    }

    fn on_line(&mut self, line: Line) -> Result<(), String> {
        self.read(line);
        Ok(())
    }

    fn on_command(&mut self, command: SessionCommand) {
        match command {
            SessionCommand::UserTurn(text) => {
                self.in_turn = true;
                self.write_user(None, &text);
            }
            SessionCommand::Steer { tag, text } => self.write_user(Some(tag), &text),
            SessionCommand::Interrupt => self.request(protocol::interrupt()),
            // The session task's own.
            SessionCommand::Close | SessionCommand::Kill | SessionCommand::HandOver => {}
        }
    }

    fn close_step(&mut self, step: CloseStep, grace: std::time::Duration) -> std::time::Duration {
        match step {
            CloseStep::EndSession => {
                self.answers.refuse_pending("the host is stopping");
                self.request(protocol::end_session("turnstile closed the session"));
            }
            CloseStep::CloseStdin => self.answers.close(),
        }
        step.wait(grace)
    }

    fn on_exit(&mut self) {
        self.answers.close();
    }

    fn hand_over(&self) -> Option<String> {
        // (`unread` is not asked: a CLI that never echoes leaves it full; a
        // message steered and not read is the host's to know, whose session
        // running it is never handed over.)
        let idle = self.ready.is_none() && !self.in_turn && self.answers.is_idle();
        self.session_id.clone().filter(|_| idle)
    }
}

impl Driver {
    fn write(&self, line: Value) {
        if !self.answers.write(line) {
            tracing::debug!(pid = self.pid, "agent stdin closed; line dropped");
        }
    }

    fn emit(&self, event: AgentEvent) {
        let _ = self.events.send(event);
    }

    /// Writes a user message; the CLI echoes it (`isReplay`) when it reads
    /// it, in the order written.
    fn write_user(&mut self, tag: Option<i64>, text: &str) {
        self.unread.push_back(tag);
        // A CLI that never echoes must not make the list grow without end.
        while self.unread.len() > MAX_UNREAD {
            self.unread.pop_front();
        }
        self.write(protocol::user_message(text));
    }

    fn request(&mut self, request: Value) {
        self.next_request += 1;
        let id = format!("req_{}", self.next_request);
        self.write(protocol::control_request(&id, request));
    }

    /// The CLI read a user message it was written: the oldest not yet
    /// read. A steered one's receipt goes to the turn.
    fn on_echo(&mut self) {
        match self.unread.pop_front() {
            Some(Some(tag)) => self.emit(AgentEvent::SteerRead(tag)),
            Some(None) => self.emit(AgentEvent::Progress),
            None => {
                tracing::debug!(
                    pid = self.pid,
                    "echo of a user message never written; skipped"
                );
                self.emit(AgentEvent::Progress);
            }
        }
    }

    fn read(&mut self, line: Line) {
        let line = match line {
            Line::Cli(line) => line,
            Line::Unknown(shown) => {
                tracing::debug!(pid = self.pid, line = %shown, "line of an unknown type from the agent skipped");
                return self.emit(AgentEvent::Unknown(shown));
            }
            Line::Malformed(start) => {
                tracing::warn!(pid = self.pid, line = %start, "malformed line from the agent skipped");
                return self.emit(AgentEvent::Unknown(start));
            }
            Line::Oversized(bytes) => {
                tracing::warn!(
                    pid = self.pid,
                    bytes,
                    "oversized line from the agent skipped"
                );
                return self.emit(AgentEvent::Unknown(format!("a line of {bytes} bytes")));
            }
        };
        if let Some(failure) = line.auth_failure() {
            return self.emit(AgentEvent::AuthFailed(failure));
        }
        match line {
            CliLine::System(SystemLine::Init { session_id }) => {
                self.session_id = Some(session_id.clone());
                self.emit(AgentEvent::Init { session_id });
            }
            CliLine::System(SystemLine::SessionStateChanged {
                state: SessionState::Idle,
            }) => self.emit(AgentEvent::Idle),
            CliLine::System(_) => self.emit(AgentEvent::Progress),
            CliLine::Assistant { message, .. } => {
                let started = self.live.on_assistant(&message);
                let told = !started.is_empty();
                for activity in started {
                    self.emit(AgentEvent::Activity(activity));
                }
                match message.text() {
                    Some(text) => self.emit(AgentEvent::Text(text)),
                    None if !told => self.emit(AgentEvent::Progress),
                    None => {}
                }
            }
            // A subagent's text never reaches the chat: only a sign of life.
            CliLine::StreamEvent {
                parent_tool_use_id: Some(_),
                ..
            } => self.emit(AgentEvent::Progress),
            CliLine::StreamEvent {
                event,
                parent_tool_use_id: None,
            } => match self.live.on_stream(event) {
                Some(activity) => self.emit(AgentEvent::Activity(activity)),
                None => self.emit(AgentEvent::Progress),
            },
            CliLine::User { is_replay: true } => self.on_echo(),
            CliLine::User { is_replay: false } | CliLine::RateLimitEvent {} => {
                self.emit(AgentEvent::Progress);
            }
            CliLine::Result(result) => {
                self.in_turn = false;
                self.live.turn_ended();
                self.emit(AgentEvent::Result(result.into()));
            }
            CliLine::ControlRequest {
                request_id,
                request,
            } => self.on_request(request_id, request),
            CliLine::ControlResponse { response } => self.on_response(response),
            // `Line::parse` never yields it; skipped all the same.
            CliLine::Unknown => self.emit(AgentEvent::Unknown(String::new())),
        }
    }

    /// The CLI's answer to a host request: `initialize`'s tells that the
    /// CLI has started; a refusal is logged.
    fn on_response(&mut self, response: ControlResponse) {
        if response.request_id() == Some(INITIALIZE_ID) {
            self.ready.take().map(|ready| ready.send(()));
        }
        if let ControlResponse::Error { request_id, error } = response {
            tracing::warn!(
                pid = self.pid,
                request_id = request_id.as_deref().unwrap_or_default(),
                %error,
                "the agent refused a host request"
            );
        }
        self.emit(AgentEvent::Progress);
    }
}

#[cfg(test)]
mod tests;

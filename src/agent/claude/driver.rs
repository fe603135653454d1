//! The session driver: one task per CLI process that reads its lines,
//! answers its requests exactly once, writes the host's commands and closes
//! the session step by step.

mod answers;
pub(crate) mod live;
mod requests;

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::mpsc;

use super::ClaudeSettings;
use super::protocol::{self, CliLine, ControlResponse, Line, SessionState, SystemLine};
use crate::agent::host::lines::{Frame, KEPT_BYTES, LineReader, MAX_LINE_BYTES};
use crate::agent::host::process::AgentProcess;
use crate::agent::tools::ToolRegistry;
use crate::agent::{AgentEvent, AgentSession, SessionCommand};
use crate::shutdown::Shutdown;
use answers::Answers;
use live::Live;

/// User messages remembered while the CLI has not echoed them.
const MAX_UNREAD: usize = 64;

/// What a session's driver is started with.
pub(super) struct Start {
    /// How the CLI was started (the grace, the allowed tools).
    pub(super) settings: Arc<ClaudeSettings>,
    /// The chat tools, served over MCP and parsed with.
    pub(super) tools: Arc<ToolRegistry>,
    /// Set once the host stops: requests are then refused.
    pub(super) shutdown: Shutdown,
    /// The process.
    pub(super) process: AgentProcess,
    /// Its stdin.
    pub(super) stdin: ChildStdin,
    /// Its stdout.
    pub(super) stdout: ChildStdout,
    /// For logs.
    pub(super) label: String,
}

/// Starts the driver of a freshly spawned process: sends `initialize` and
/// hands back the session handle.
pub(super) fn start(start: Start) -> AgentSession {
    let Start {
        settings,
        tools,
        shutdown,
        process,
        stdin,
        stdout,
        label,
    } = start;
    let pid = process.pid();
    let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
    let (ev_tx, ev_rx) = mpsc::unbounded_channel();
    let (out_tx, out_rx) = mpsc::unbounded_channel::<Value>();
    let (line_tx, line_rx) = mpsc::unbounded_channel();
    tokio::spawn(write_lines(stdin, out_rx, pid));
    tokio::spawn(read_lines(stdout, line_tx, pid));
    let _ = out_tx.send(protocol::initialize(
        "init_1",
        settings.batch_hook,
        &settings.system_prompt,
    ));
    let driver = Driver {
        shutdown,
        settings,
        tools,
        process,
        pid,
        answers: Answers::new(out_tx, pid),
        events: ev_tx,
        next_request: 1,
        live: Live::default(),
        unread: VecDeque::new(),
    };
    tokio::spawn(driver.run(cmd_rx, line_rx));
    AgentSession {
        commands: cmd_tx,
        events: ev_rx,
        label,
    }
}

/// Writes lines to the CLI's stdin; closing the channel closes stdin.
async fn write_lines(mut stdin: ChildStdin, mut rx: mpsc::UnboundedReceiver<Value>, pid: u32) {
    while let Some(line) = rx.recv().await {
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        if let Err(err) = stdin.write_all(&bytes).await {
            tracing::debug!(pid, cause = %err, "agent stdin closed");
            return;
        }
        let _ = stdin.flush().await;
    }
}

/// Reads stdout line by line ([`LineReader`]), parsing each.
async fn read_lines(stdout: impl AsyncRead + Unpin, tx: mpsc::UnboundedSender<Line>, pid: u32) {
    let stdout = BufReader::with_capacity(64 << 10, stdout);
    let mut reader = LineReader::new(stdout, MAX_LINE_BYTES, KEPT_BYTES);
    loop {
        let parsed = match reader.next().await {
            Ok(None) => return,
            Ok(Some(frame)) if frame.is_blank() => continue,
            Ok(Some(Frame::Line(line))) => Line::parse(&line),
            Ok(Some(Frame::Oversized { bytes, .. })) => Line::Oversized(bytes),
            Err(err) => {
                tracing::warn!(pid, cause = %err, "agent stdout broke");
                return;
            }
        };
        if tx.send(parsed).is_err() {
            return;
        }
    }
}

/// The steps of a graceful close, in order; each waits out its share of
/// the grace for the process to exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CloseStep {
    /// Refuse what is pending and send `end_session`; stdin stays open, so
    /// requests the agent still makes are answered.
    EndSession,
    /// Close stdin.
    CloseStdin,
}

impl CloseStep {
    /// Every step, in order.
    const ALL: [Self; 2] = [Self::EndSession, Self::CloseStdin];

    /// This step's share of the grace.
    fn wait(self, grace: std::time::Duration) -> std::time::Duration {
        match self {
            Self::EndSession => grace / 2,
            Self::CloseStdin => grace - grace / 2,
        }
    }
}

/// Owns one CLI process.
struct Driver {
    /// Set once the host stops: requests are then refused.
    shutdown: Shutdown,
    /// The grace and the allowed tools.
    settings: Arc<ClaudeSettings>,
    /// The chat tools, served over MCP.
    tools: Arc<ToolRegistry>,
    /// The process.
    process: AgentProcess,
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

    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<SessionCommand>,
        mut lines: mpsc::UnboundedReceiver<Line>,
    ) {
        let mut stdout_open = true;
        loop {
            tokio::select! {
                line = lines.recv(), if stdout_open => match line {
                    Some(line) => self.on_line(line),
                    None => stdout_open = false,
                },
                command = commands.recv() => match command {
                    Some(SessionCommand::UserTurn(text)) => self.write_user(None, &text),
                    Some(SessionCommand::Steer { tag, text }) => self.write_user(Some(tag), &text),
                    Some(SessionCommand::Interrupt) => self.request(protocol::interrupt()),
                    Some(SessionCommand::Close) => return self.close(lines).await,
                    Some(SessionCommand::Kill) => return self.kill("killed").await,
                    // The host dropped the session: close it gracefully.
                    None => return self.close(lines).await,
                },
                status = self.process.wait() => {
                    // Drain what the process wrote before it exited.
                    while let Ok(line) = lines.try_recv() {
                        self.on_line(line);
                    }
                    let status = status.ok();
                    let detail = self.process.exit_detail(status);
                    return self.finish(status.and_then(|s| s.code()), detail);
                }
            }
        }
    }

    fn finish(mut self, code: Option<i32>, detail: String) {
        self.process.reaped();
        self.answers.close();
        tracing::info!(pid = self.pid, ?code, "agent process ended");
        self.emit(AgentEvent::Exited { code, detail });
    }

    /// Closes step by step ([`CloseStep`]), each after its share of the
    /// grace; then kills.
    async fn close(mut self, mut lines: mpsc::UnboundedReceiver<Line>) {
        let grace = self.settings.process.kill_grace;
        for step in CloseStep::ALL {
            match step {
                CloseStep::EndSession => {
                    self.answers.refuse_pending("the host is stopping");
                    self.request(protocol::end_session("turnstile closed the session"));
                }
                CloseStep::CloseStdin => self.answers.close(),
            }
            let waited = tokio::time::timeout(step.wait(grace), async {
                loop {
                    tokio::select! {
                        line = lines.recv() => match line {
                            Some(line) => self.on_line(line),
                            None => return self.process.wait().await,
                        },
                        status = self.process.wait() => return status,
                    }
                }
            })
            .await;
            if let Ok(status) = waited {
                let detail = self.process.exit_detail(status.as_ref().ok().copied());
                return self.finish(status.ok().and_then(|s| s.code()), detail);
            }
        }
        tracing::warn!(
            pid = self.pid,
            ?grace,
            "agent did not exit after end_session; killing"
        );
        self.kill("did not exit after end_session").await;
    }

    /// SIGTERM to the group, SIGKILL after the grace.
    async fn kill(mut self, why: &str) {
        self.answers.close();
        let status = self
            .process
            .terminate(self.settings.process.kill_grace)
            .await;
        self.finish(
            status.and_then(|s| s.code()),
            format!("the agent was force-closed ({why})"),
        );
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

    fn on_line(&mut self, line: Line) {
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
                self.live.turn_ended();
                self.emit(AgentEvent::Result(result.into()));
            }
            CliLine::ControlRequest {
                request_id,
                request,
            } => self.on_request(request_id, request),
            CliLine::ControlResponse { response } => {
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
            // `Line::parse` never yields it; skipped all the same.
            CliLine::Unknown => self.emit(AgentEvent::Unknown(String::new())),
        }
    }
}

#[cfg(test)]
mod tests;

//! The session driver: one task per agent process that reads its lines,
//! answers each of its requests exactly once, opens the ACP session, runs
//! one `session/prompt` per turn and closes: stdin closed, then SIGTERM and
//! SIGKILL to the process group, each after the grace.

mod opening;
mod prompting;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::mpsc;

use super::AcpSettings;
use super::permission::Ask;
use super::updates::Answer;
use super::wire;
use crate::agent::host::jsonrpc::{self, Message};
use crate::agent::host::lines::{Frame, KEPT_BYTES, LineReader, MAX_LINE_BYTES};
use crate::agent::host::process::AgentProcess;
use crate::agent::network::ToolsDir;
use crate::agent::tools::ToolRegistry;
use crate::agent::{AgentEvent, AgentSession, Permission, SessionCommand};
use crate::shutdown::Shutdown;

/// The longest session id kept and resumed.
const MAX_SESSION_ID: usize = 256;

/// How long a loaded session waits for the answer to
/// [`wire::REPLAY_SYNC`]. ACP has agents answer an unknown request at once
/// ("method not found"), and Gemini CLI answers it once its replay is
/// written; an agent that never answers would otherwise hold every first
/// turn after a load until `turn.no_progress_timeout`, and the next
/// process, loading again, the same.
pub(super) const REPLAY_SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Whether `id` can be a session id an ACP agent gave (and so be sent back
/// in `session/load`): 1 to 256 characters, none a control character.
pub(super) fn is_session_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_SESSION_ID && !id.chars().any(char::is_control)
}

/// What a session's driver is started with.
pub(super) struct Start {
    /// The grace, the permission rules, the authentication method.
    pub(super) settings: Arc<AcpSettings>,
    /// The chat tools, served to the agent over MCP.
    pub(super) tools: Arc<ToolRegistry>,
    /// Set once the host stops: requests are then refused.
    pub(super) shutdown: Shutdown,
    /// The process.
    pub(super) process: AgentProcess,
    /// Its stdin.
    pub(super) stdin: ChildStdin,
    /// Its stdout.
    pub(super) stdout: ChildStdout,
    /// The session to load, when the conversation had one.
    pub(super) resume: Option<String>,
    /// The conversation's working directory (`cwd`).
    pub(super) cwd: PathBuf,
    /// The process's chat tools directory, when it runs in a network of
    /// its own (kept while the driver runs).
    pub(super) tools_dir: Option<ToolsDir>,
    /// For logs.
    pub(super) label: String,
}

/// Where the session is.
enum Stage {
    /// `initialize` (and `authenticate`) sent; no session yet.
    Starting,
    /// `session/new` or `session/load` sent, or a loaded session's
    /// replay not known to be over (its replayed updates are no turn's).
    Opening,
    /// The session is open and no prompt runs.
    Ready,
    /// A `session/prompt` runs.
    Prompting {
        /// Its request id.
        id: u64,
        /// Its answer so far.
        answer: Answer,
        /// Whether `session/cancel` was sent for it.
        cancelled: bool,
    },
}

/// What one of the host's requests was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Initialize,
    Authenticate,
    NewSession,
    LoadSession,
    /// [`wire::REPLAY_SYNC`], after a load.
    ReplaySync,
    Prompt,
}

/// A permission request waiting for the chat: its id as the agent sent it,
/// and the request.
struct Waiting {
    /// The agent's request id.
    id: Value,
    /// The request.
    ask: Ask,
}

/// Starts the driver of a freshly spawned process: sends `initialize` and
/// hands back the session handle.
pub(super) fn start(start: Start) -> AgentSession {
    let pid = start.process.pid();
    let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
    let (ev_tx, ev_rx) = mpsc::unbounded_channel();
    let (out_tx, out_rx) = mpsc::unbounded_channel::<Value>();
    let (line_tx, line_rx) = mpsc::unbounded_channel();
    let (decided_tx, decided_rx) = mpsc::unbounded_channel();
    tokio::spawn(write_lines(start.stdin, out_rx, pid));
    tokio::spawn(read_lines(start.stdout, line_tx));
    let mut driver = Driver {
        settings: start.settings,
        tools: start.tools,
        shutdown: start.shutdown,
        process: start.process,
        pid,
        out: Some(out_tx),
        events: ev_tx,
        decided: decided_tx,
        next_id: 0,
        requests: HashMap::new(),
        stage: Stage::Starting,
        resume: start.resume,
        can_load: false,
        tool_server: None,
        tools_dir: start.tools_dir,
        cwd: start.cwd,
        session: None,
        queued: VecDeque::new(),
        settle_when_ready: false,
        notice: None,
        waiting: HashMap::new(),
        cost: None,
        replay_due: None,
    };
    driver.request(Purpose::Initialize, "initialize", wire::initialize());
    tokio::spawn(driver.run(cmd_rx, line_rx, decided_rx));
    AgentSession {
        commands: cmd_tx,
        events: ev_rx,
        label: start.label,
    }
}

/// Writes lines to the agent's stdin; closing the channel closes stdin.
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
async fn read_lines(stdout: impl AsyncRead + Unpin, tx: mpsc::UnboundedSender<Message>) {
    let stdout = BufReader::with_capacity(64 << 10, stdout);
    let mut reader = LineReader::new(stdout, MAX_LINE_BYTES, KEPT_BYTES);
    while let Ok(Some(frame)) = reader.next().await {
        let parsed = match frame {
            _ if frame.is_blank() => continue,
            Frame::Line(line) => Message::parse(&String::from_utf8_lossy(&line)),
            Frame::Oversized { bytes, .. } => Message::Oversized(bytes),
        };
        if tx.send(parsed).is_err() {
            return;
        }
    }
}

/// Resolves at `due` (never without one).
async fn until(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// Owns one agent process.
struct Driver {
    /// The grace and the permission rules.
    settings: Arc<AcpSettings>,
    /// The chat tools.
    tools: Arc<ToolRegistry>,
    /// Set once the host stops: requests are then refused.
    shutdown: Shutdown,
    /// The process.
    process: AgentProcess,
    /// For logs.
    pid: u32,
    /// Lines to the agent; `None` once stdin is closed.
    out: Option<mpsc::UnboundedSender<Value>>,
    /// Everything the session reports.
    events: mpsc::UnboundedSender<AgentEvent>,
    /// The chat's answers to permission requests, by request key.
    decided: mpsc::UnboundedSender<(String, Permission)>,
    /// The last host request id used.
    next_id: u64,
    /// The host's requests not answered yet.
    requests: HashMap<u64, Purpose>,
    /// Where the session is.
    stage: Stage,
    /// The session to load.
    resume: Option<String>,
    /// Whether the agent offers `session/load`.
    can_load: bool,
    /// The chat tools' MCP server, when it is served.
    tool_server: Option<super::mcp::ToolServer>,
    /// The process's chat tools directory, in a network of its own.
    tools_dir: Option<ToolsDir>,
    /// The working directory.
    cwd: PathBuf,
    /// The open session's id.
    session: Option<String>,
    /// Turns waiting for the session to open or the prompt before them.
    queued: VecDeque<String>,
    /// A turn was stopped before its prompt went out: report idle once
    /// the session is open.
    settle_when_ready: bool,
    /// Told the chat in front of the next answer (a conversation that
    /// could not be resumed).
    notice: Option<String>,
    /// Permission requests waiting for the chat, by request key.
    waiting: HashMap<String, Waiting>,
    /// The session's cumulative cost in USD, as last reported.
    cost: Option<f64>,
    /// When a loaded session stops waiting for the answer to
    /// [`wire::REPLAY_SYNC`] ([`REPLAY_SYNC_WAIT`]).
    replay_due: Option<tokio::time::Instant>,
}

impl Driver {
    fn write(&self, line: Value) {
        let sent = self.out.as_ref().is_some_and(|out| out.send(line).is_ok());
        if !sent {
            tracing::debug!(pid = self.pid, "agent stdin closed; line dropped");
        }
    }

    fn emit(&self, event: AgentEvent) {
        let _ = self.events.send(event);
    }

    fn request(&mut self, purpose: Purpose, method: &str, params: impl Serialize) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.requests.insert(id, purpose);
        self.write(jsonrpc::request(id, method, params));
        id
    }

    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<SessionCommand>,
        mut lines: mpsc::UnboundedReceiver<Message>,
        mut decided: mpsc::UnboundedReceiver<(String, Permission)>,
    ) {
        let mut stdout_open = true;
        loop {
            tokio::select! {
                // The host's commands first: a `/stop` that also answered
                // a waiting permission (denied, as the turn closes its
                // questions) cancels it rather than rejecting it.
                biased;
                command = commands.recv() => match command {
                    Some(SessionCommand::UserTurn(text)) => self.user_turn(text),
                    // Never sent: ACP has no message into a running prompt,
                    // and the backend says it does not steer.
                    Some(SessionCommand::Steer { tag, .. }) => {
                        tracing::error!(pid = self.pid, update_id = tag, "a steered message reached an ACP session; not written");
                    }
                    Some(SessionCommand::Interrupt) => self.interrupt(),
                    Some(SessionCommand::Close) | None => return self.close(lines).await,
                    Some(SessionCommand::Kill) => return self.kill("killed").await,
                },
                line = lines.recv(), if stdout_open => match line {
                    Some(line) => {
                        if let Err(why) = self.on_line(line) {
                            tracing::warn!(pid = self.pid, cause = %why, "the agent's session could not be opened; killing it");
                            return self.kill(&why).await;
                        }
                    }
                    None => stdout_open = false,
                },
                Some((key, permission)) = decided.recv() => self.decided(&key, &permission),
                () = until(self.replay_due), if self.replay_due.is_some() => self.replay_not_answered(),
                status = self.process.wait() => {
                    // What the process wrote before it exited still counts.
                    while let Ok(line) = lines.try_recv() {
                        let _ = self.on_line(line);
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
        self.cancel_waiting();
        self.out = None;
        tracing::info!(pid = self.pid, ?code, "agent process ended");
        self.emit(AgentEvent::Exited { code, detail });
    }

    /// Closes: every waiting permission answered `cancelled`, a running
    /// prompt cancelled, stdin closed; killed when the process has not
    /// exited within the grace.
    async fn close(mut self, mut lines: mpsc::UnboundedReceiver<Message>) {
        self.cancel_prompt();
        self.out = None;
        let grace = self.settings.grace;
        let waited = tokio::time::timeout(grace, async {
            loop {
                tokio::select! {
                    line = lines.recv() => match line {
                        Some(line) => { let _ = self.on_line(line); }
                        None => return self.process.wait().await,
                    },
                    status = self.process.wait() => return status,
                }
            }
        })
        .await;
        match waited {
            Ok(status) => {
                let status = status.ok();
                let detail = self.process.exit_detail(status);
                self.finish(status.and_then(|s| s.code()), detail);
            }
            Err(_) => {
                tracing::warn!(
                    pid = self.pid,
                    ?grace,
                    "agent did not exit after its stdin closed; killing"
                );
                self.kill("did not exit after its stdin closed").await;
            }
        }
    }

    /// SIGTERM to the group, SIGKILL after the grace.
    async fn kill(mut self, why: &str) {
        self.cancel_waiting();
        self.out = None;
        let status = self
            .process
            .terminate(self.settings.process.kill_grace)
            .await;
        self.finish(
            status.and_then(|s| s.code()),
            format!("the agent was force-closed ({why})"),
        );
    }

    /// Reads one line. `Err` when the session cannot be opened.
    fn on_line(&mut self, line: Message) -> Result<(), String> {
        match line {
            Message::Response { id, outcome } => match self.requests.remove(&id) {
                Some(purpose) => return self.on_response(purpose, id, outcome),
                None => {
                    tracing::warn!(
                        pid = self.pid,
                        id,
                        "answer to no request of the host's skipped"
                    );
                    self.emit(AgentEvent::Unknown(format!("an answer to request {id}")));
                }
            },
            Message::Request { id, method, params } => self.on_request(id, &method, &params),
            Message::Notification { method, params } => self.on_notification(&method, &params),
            Message::Malformed(start) => {
                tracing::warn!(pid = self.pid, line = %start, "malformed line from the agent skipped");
                self.emit(AgentEvent::Unknown(start));
            }
            Message::Oversized(bytes) => {
                tracing::warn!(
                    pid = self.pid,
                    bytes,
                    "oversized line from the agent skipped"
                );
                self.emit(AgentEvent::Unknown(format!("a line of {bytes} bytes")));
            }
        }
        Ok(())
    }

    fn on_response(
        &mut self,
        purpose: Purpose,
        id: u64,
        outcome: Result<Value, jsonrpc::RpcError>,
    ) -> Result<(), String> {
        match purpose {
            Purpose::Initialize => self.initialized(outcome),
            Purpose::Authenticate => self.authenticated(outcome),
            Purpose::NewSession => self.opened_new(outcome),
            Purpose::LoadSession => {
                self.loaded(outcome);
                Ok(())
            }
            Purpose::ReplaySync => {
                self.replayed();
                Ok(())
            }
            Purpose::Prompt => {
                self.prompted(id, outcome);
                Ok(())
            }
        }
    }

    fn on_request(&mut self, id: Value, method: &str, params: &Value) {
        if method == "session/request_permission" {
            return self.permission(id, params);
        }
        // No file system, no terminal was offered; nothing else is served.
        tracing::warn!(pid = self.pid, method = %method.escape_debug(), "agent request for a method the host does not offer; refused");
        self.write(jsonrpc::error(
            &id,
            jsonrpc::METHOD_NOT_FOUND,
            "method not offered by this client",
        ));
        self.emit(AgentEvent::Progress);
    }

    fn on_notification(&mut self, method: &str, params: &Value) {
        if method == "session/update" {
            return self.on_update(params);
        }
        tracing::debug!(pid = self.pid, method = %method.escape_debug(), "notification of an unknown method skipped");
        self.emit(AgentEvent::Unknown(format!("notification {method}")));
    }
}

//! The session driver: the ACP protocol the host's session task runs
//! ([`Protocol`]): it reads the agent's lines, answers each of its requests
//! exactly once, opens the ACP session, runs one `session/prompt` per turn
//! and closes with one step: stdin closed (then the host's SIGTERM and
//! SIGKILL to the process group, each after the grace).

mod opening;
mod prompting;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::AcpSettings;
use super::permission::PermissionRequest;
use super::updates::PromptAnswer;
use super::wire;
use crate::agent::host::jsonrpc::{self, Message};
use crate::agent::host::lines::Frame;
use crate::agent::host::session::{Protocol, SessionIo};
use crate::agent::network::ToolsDir;
use crate::agent::tools::ToolRegistry;
use crate::agent::{AgentEvent, Permission, SessionCommand};
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
    /// The session to load, when the conversation had one.
    pub(super) resume: Option<String>,
    /// The conversation's working directory (`cwd`).
    pub(super) cwd: PathBuf,
    /// The process's chat tools directory, when it runs in a network of
    /// its own (kept while the driver runs).
    pub(super) tools_dir: Option<ToolsDir>,
    /// Set for a prewarm ([`crate::agent::OpenSession::warm_up`]): told
    /// once the stored session is loaded, or why it will not be.
    pub(super) warm_up: Option<WarmUp>,
}

/// Where a prewarm hears how its load went: `Ok` once the loaded session
/// is ready, else why it is not. A prewarm opens no new session: one that
/// cannot load ends there, and the conversation's next message starts it
/// (saying so, as a cold start does).
pub(super) type WarmUp = oneshot::Sender<Result<(), String>>;

/// Where the session is, with what each stage holds.
enum Stage {
    /// `initialize` (and `authenticate`) sent; no session yet.
    Starting {
        /// The session to load, when the agent can load one.
        resume: Option<String>,
        /// A turn was stopped before its prompt went out: report idle
        /// once the session is open.
        settle: bool,
        /// Told in front of the first answer ([`crate::agent::notices::CANNOT_RESUME`]).
        notice: Option<&'static str>,
    },
    /// `session/new` or `session/load` sent, or a loaded session's
    /// replay not known to be over (its replayed updates are no turn's).
    Opening {
        /// The session being loaded (`None`: a new one).
        loading: Option<String>,
        /// When a loaded session stops waiting for the answer to
        /// [`wire::REPLAY_SYNC`] ([`REPLAY_SYNC_WAIT`]); set once the load
        /// is answered.
        replay_due: Option<tokio::time::Instant>,
        /// As in `Starting`.
        settle: bool,
        /// As in `Starting`, or [`crate::agent::notices::NOT_RESUMED`] once a load failed.
        notice: Option<&'static str>,
    },
    /// The session is open and no prompt runs.
    Ready {
        /// The open session's id.
        session: String,
        /// Told in front of the next answer: the opening's notice, until
        /// the first prompt takes it.
        notice: Option<&'static str>,
    },
    /// A `session/prompt` runs.
    Prompting {
        /// The open session's id.
        session: String,
        /// Its request id.
        id: u64,
        /// Its answer so far.
        answer: PromptAnswer,
        /// Whether `session/cancel` was sent for it.
        cancelled: bool,
        /// Its permission requests waiting for the chat, by request key
        /// (asked only while a prompt runs; answered `cancelled` when it
        /// ends).
        waiting: HashMap<String, AskedChat>,
    },
}

impl Stage {
    /// The session the agent's updates belong to: the open one, or the
    /// one being loaded.
    fn session(&self) -> Option<&str> {
        match self {
            Self::Starting { .. } | Self::Opening { loading: None, .. } => None,
            Self::Opening {
                loading: Some(session),
                ..
            }
            | Self::Ready { session, .. }
            | Self::Prompting { session, .. } => Some(session),
        }
    }

    /// Whether a stopped turn waits for the session to open, to report
    /// idle then.
    fn settles(&self) -> bool {
        matches!(
            self,
            Self::Starting { settle: true, .. } | Self::Opening { settle: true, .. }
        )
    }

    /// The notice the opening left for the first answer.
    fn notice(&self) -> Option<&'static str> {
        match self {
            Self::Starting { notice, .. }
            | Self::Opening { notice, .. }
            | Self::Ready { notice, .. } => *notice,
            Self::Prompting { .. } => None,
        }
    }
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
struct AskedChat {
    /// The agent's request id.
    id: Value,
    /// The request.
    ask: PermissionRequest,
}

/// What wakes a session besides its lines and the host's commands.
pub(super) enum Wake {
    /// The chat answered a permission request (by its key).
    Decided(String, Permission),
    /// A loaded session's wait for the answer to [`wire::REPLAY_SYNC`] is
    /// over.
    ReplayDue,
}

impl Driver {
    /// The protocol of a freshly spawned process: sends `initialize`.
    pub(super) fn new(start: Start, link: SessionIo) -> Self {
        let (decided_tx, decided_rx) = mpsc::unbounded_channel();
        let mut driver = Self {
            settings: start.settings,
            tools: start.tools,
            shutdown: start.shutdown,
            pid: link.pid,
            out: Some(link.out),
            events: link.events,
            decided: decided_tx,
            answers: decided_rx,
            next_id: 0,
            requests: HashMap::new(),
            stage: Stage::Starting {
                resume: start.resume,
                settle: false,
                notice: None,
            },
            tool_server: None,
            tools_dir: start.tools_dir,
            cwd: start.cwd,
            queued: VecDeque::new(),
            cost: None,
            warm_up: start.warm_up,
        };
        driver.request(Purpose::Initialize, "initialize", wire::initialize());
        driver
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
pub(super) struct Driver {
    /// The grace and the permission rules.
    settings: Arc<AcpSettings>,
    /// The chat tools.
    tools: Arc<ToolRegistry>,
    /// Set once the host stops: requests are then refused.
    shutdown: Shutdown,
    /// For logs.
    pid: u32,
    /// Lines to the agent; `None` once stdin is closed.
    out: Option<mpsc::UnboundedSender<Value>>,
    /// Everything the session reports.
    events: mpsc::UnboundedSender<AgentEvent>,
    /// The chat's answers to permission requests, by request key.
    decided: mpsc::UnboundedSender<(String, Permission)>,
    /// Where those answers come in.
    answers: mpsc::UnboundedReceiver<(String, Permission)>,
    /// The last host request id used.
    next_id: u64,
    /// The host's requests not answered yet. Not a stage's: an id is
    /// matched to its answer whenever it comes, and a late answer (to a
    /// replay sync given up on, or to a prompt of an earlier stage) must be
    /// known as one to no request.
    requests: HashMap<u64, Purpose>,
    /// Where the session is.
    stage: Stage,
    /// The chat tools' MCP server, when it is served.
    tool_server: Option<super::mcp::ToolServer>,
    /// The process's chat tools directory, in a network of its own.
    tools_dir: Option<ToolsDir>,
    /// The working directory.
    cwd: PathBuf,
    /// Turns the host sent that no prompt took yet: they wait for the
    /// session to open or for the prompt before them. Not a stage's: a
    /// turn sent while starting is carried through opening, and one sent
    /// while prompting through the next `Ready`; it is input not yet read,
    /// not what the session is doing.
    queued: VecDeque<String>,
    /// The session's cumulative cost in USD, as last reported. Not a
    /// stage's: it is reported between prompts too (a loaded session's
    /// replay), and each prompt's answer starts from it.
    cost: Option<f64>,
    /// A prewarm's: told once, when the loaded session is ready or cannot
    /// be ([`Start::warm_up`]).
    warm_up: Option<WarmUp>,
}

impl Protocol for Driver {
    type Line = Message;
    type Wake = Wake;
    type CloseStep = ();

    const CLOSE_STEPS: &'static [()] = &[()];
    const NOT_CLOSED: &'static str = "did not exit after its stdin closed";

    fn parse(frame: Frame) -> Message {
        match frame {
            Frame::Line(line) => Message::parse(&String::from_utf8_lossy(&line)),
            Frame::Oversized { bytes, .. } => Message::Oversized(bytes),
        }
    }

    fn on_line(&mut self, line: Message) -> Result<(), String> {
        self.read(line)
    }

    fn on_command(&mut self, command: SessionCommand) {
        match command {
            SessionCommand::UserTurn(text) => self.user_turn(text),
            // Never sent: ACP has no message into a running prompt, and the
            // backend says it does not steer.
            SessionCommand::Steer { tag, .. } => {
                tracing::error!(
                    pid = self.pid,
                    update_id = tag,
                    "a steered message reached an ACP session; not written"
                );
            }
            SessionCommand::Interrupt => self.interrupt(),
            // The session task's own.
            SessionCommand::Close | SessionCommand::Kill | SessionCommand::HandOver => {}
        }
    }

    fn wake(&mut self) -> impl Future<Output = Wake> + Send + '_ {
        let due = match self.stage {
            Stage::Opening { replay_due, .. } => replay_due,
            _ => None,
        };
        let answers = &mut self.answers;
        async move {
            tokio::select! {
                Some((key, permission)) = answers.recv() => Wake::Decided(key, permission),
                () = until(due), if due.is_some() => Wake::ReplayDue,
                else => std::future::pending().await,
            }
        }
    }

    fn on_wake(&mut self, wake: Wake) {
        match wake {
            Wake::Decided(key, permission) => self.decided(&key, &permission),
            Wake::ReplayDue => self.replay_not_answered(),
        }
    }

    /// Closing: every waiting permission answered `cancelled`, a running
    /// prompt cancelled, stdin closed; killed when the process has not
    /// exited within `agent`'s own grace.
    fn close_step(&mut self, (): (), _grace: std::time::Duration) -> std::time::Duration {
        self.cancel_prompt();
        self.out = None;
        self.settings.grace
    }

    fn on_exit(&mut self) {
        self.cancel_waiting();
        self.out = None;
    }
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

    /// Reads one line. `Err` when the session cannot be opened.
    fn read(&mut self, line: Message) -> Result<(), String> {
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

//! Agent backends: the [`AgentBackend`] trait, the [`AgentSession`] handle a turn drives, the
//! [`AgentEvent`]s a session yields and the [`Responder`] that answers each request exactly once.
//!
//! Everything a session yields is agent-neutral: a backend reads its own protocol and parses each
//! tool call once, with the [`tools::ToolRegistry`] it was made with, into the typed values of
//! [`tools`]; the turn sees no protocol and compares no tool names.

pub mod acp;
pub mod backends;
pub mod claude;
pub mod host;
pub mod network;
mod notices;
#[doc(hidden)]
pub mod partial_json;
mod result;
pub mod scripted;
mod shown;
pub mod tools;

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use teloxide::types::ChatId;
use tokio::sync::{mpsc, oneshot};

pub use result::{AgentResult, ResultStatus, TerminalReason, TokenUsage};
pub use scripted::{
    AfterResult, Scenario, ScenarioError, ScriptLog, ScriptRule, ScriptTool, ScriptTurn,
    ScriptedBackend, Step,
};
pub use shown::{Shown, shown_content};
pub use tools::{BatchCall, ChatCall, ChatTool, ToolName, ToolRegistry};

/// A boxed future, as backends return from [`AgentBackend::open`].
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Opens agent sessions for chats.
pub trait AgentBackend: Send + Sync + 'static {
    /// Opens a session for `chat`, resuming `resume` when given.
    fn open(&self, request: OpenSession) -> BoxFuture<Result<AgentSession, AgentError>>;

    /// Resolves once every session this backend opened has ended (bounded
    /// by the backend's own grace); the host awaits it before exiting.
    fn closed(&self) -> BoxFuture<()> {
        Box::pin(async {})
    }

    /// From now on, record the processes this backend starts in the state
    /// file (so a next start can kill what a crash left); none by default.
    fn record_processes_in(&self, _inbox: crate::state::StoreHandle) {}

    /// Whether its sessions take [`SessionCommand::Steer`]: a message
    /// written into the running turn, read at the agent's next tool
    /// boundary (or run as the next turn by the agent itself), with a
    /// [`AgentEvent::SteerRead`] receipt. A backend that cannot steer gets
    /// mid-turn messages as the next turn, as with `dispatcher.busy = "queue"`.
    fn steers(&self) -> bool {
        false
    }

    /// Why a session stored as `id` would not be resumed (the agent would
    /// start anew), if it would not: a start does not warm it again.
    fn cannot_resume(&self, _id: &str) -> Option<&'static str> {
        None
    }

    /// For `/handoff`: the agent's own way to go on with `request`'s session at the host (none by default, as for ACP).
    fn handoff(&self, _request: &OpenSession) -> String {
        notices::ONLY_THROUGH_ATTACH.to_owned()
    }
}

/// What a session is opened for.
#[derive(Debug, Clone)]
pub struct OpenSession {
    /// The conversation the session serves (a chat or a topic): its workdir.
    pub conversation: crate::ids::Conversation,
    /// The agent's own session id to resume, when the chat had one.
    pub resume: Option<String>,
    /// The model the conversation chose (`/model`); `None`: the configured one.
    pub model: Option<String>,
    /// Resume a copy of `resume` (`/fork`): the agent gives it a new id.
    pub fork: bool,
    /// The conversation's project (`/project`): its workdir and tools.
    pub project: Option<ProjectPlace>,
    /// Set once the host stops: the backend then refuses the agent's requests.
    pub shutdown: crate::shutdown::Shutdown,
    /// Opened ahead of any message (a prewarm): the session comes back once
    /// its agent could take a first message at once, or [`AgentError::NotWarmed`].
    pub warm_up: bool,
}

impl OpenSession {
    /// A new session of `chat` itself (no topic), resuming nothing, under a
    /// host that is not stopping.
    pub fn fresh(chat: ChatId) -> Self {
        Self {
            conversation: chat.into(),
            resume: None,
            model: None,
            fork: false,
            project: None,
            shutdown: crate::shutdown::Shutdown::new(),
            warm_up: false,
        }
    }
}

/// Where a conversation's project puts its agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectPlace {
    /// The project's name.
    pub name: String,
    /// Its working directory, absolute, `{chat}` unfilled (checked as
    /// `agent.workdir` is).
    pub workdir: std::path::PathBuf,
    /// Tools allowed without asking there, besides the backend's own.
    pub allowed_tools: Vec<String>,
}

/// Errors at the backend boundary; each message names its cause too, since
/// the turn shows only the top-level message to the chat.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The agent's executable could not be started.
    #[error("could not start the agent: {command}: {source}")]
    Spawn {
        /// The executable.
        command: String,
        /// Why it could not be started.
        #[source]
        source: std::io::Error,
    },
    /// A directory the agent needs (its working directory, its home under
    /// the sandbox) could not be made.
    #[error("could not start the agent: creating {dir}: {source}")]
    Directory {
        /// The directory.
        dir: std::path::PathBuf,
        /// Why it could not be made.
        #[source]
        source: std::io::Error,
    },
    /// The agent's network proxy could not start.
    #[error("could not start the agent: its network proxy: {0}")]
    Network(String),
    /// The agent started without the pipes its protocol runs over.
    #[error("could not start the agent: the agent's pipes are missing")]
    MissingPipes,
    /// A prewarm's agent cannot resume the session; its process is closed.
    #[error("the session was not prewarmed: {0}")]
    NotWarmed(String),
}

/// The host's side of one agent session: commands in, events out; dropping
/// the handle kills the session (the backend sees its command channel close).
#[derive(Debug)]
pub struct AgentSession {
    /// Commands to the agent, in order.
    pub commands: mpsc::UnboundedSender<SessionCommand>,
    /// Everything the agent reports, in order.
    pub events: mpsc::UnboundedReceiver<AgentEvent>,
    /// A label for logs: which backend and process this is.
    pub label: String,
}

/// What the host asks of a session.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionCommand {
    /// Run a turn with this user text.
    UserTurn(String),
    /// A message written while a turn runs: the agent reads it at its next
    /// tool boundary, or, with none left, runs it as the next turn by
    /// itself. `tag` comes back in [`AgentEvent::SteerRead`] once read.
    Steer {
        /// Names the message in the receipt (its inbox row).
        tag: i64,
        /// The user's text.
        text: String,
    },
    /// Stop the running turn (the agent still emits its `result`).
    Interrupt,
    /// Finish gracefully: end the session and let the process exit.
    Close,
    /// Force-close now (SIGTERM, then SIGKILL to the process group).
    Kill,
    /// `/restart` re-executes the host: hand an idle process to the next one, else `Close`.
    HandOver,
}

/// How the scripted backend's session ids begin (found by another backend after a switch).
pub const SCRIPTED_SESSION_PREFIX: &str = "scripted-";

/// Everything a session reports, in order.
#[derive(Debug)]
pub enum AgentEvent {
    /// The agent started a turn in this session.
    Init {
        /// The agent's own session id, kept for `--resume`.
        session_id: String,
    },
    /// A text block from the assistant (not delivered by itself).
    Text(String),
    /// A sign of life that carries nothing the turn acts on (status lines,
    /// stream deltas, results of the agent's own tools).
    Progress,
    /// The agent calls one of the host's chat tools; answer through `reply`.
    ToolCall(ToolCall),
    /// Every tool of one assistant message has resolved (PostToolBatch).
    BatchResolved(ToolBatch),
    /// The agent asks whether it may run a tool (`can_use_tool`) that
    /// neither `agent.allowed_tools` nor `agent.denied_tools` decides, with
    /// `agent.permission_mode = "ask"`; answer through `reply`.
    PermissionAsk(PermissionAsk),
    /// The agent's `result` line.
    Result(AgentResult),
    /// The session reported itself idle.
    Idle,
    /// The agent read the message written with [`SessionCommand::Steer`]
    /// under this tag: before the running turn's `result` when it joined
    /// that turn, after it when the agent runs it as the next turn.
    SteerRead(i64),
    /// The agent process exited or its stream broke.
    Exited {
        /// The exit code, when there is one.
        code: Option<i32>,
        /// What happened, for logs and the chat.
        detail: String,
    },
    /// What the agent is doing or writing right now, for the chat's live
    /// view; a sign of life like [`AgentEvent::Progress`], never more.
    Activity(Activity),
    /// The agent could not authenticate with its model API: it is not
    /// logged in, or the API refused its credentials. Retrying cannot help,
    /// so the turn ends now rather than at its time budget.
    AuthFailed(AuthFailure),
    /// An event the backend did not understand (logged and skipped).
    Unknown(String),
}

/// Why an agent could not authenticate, in its own words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthFailure {
    /// The model API answered and refused the credentials (a 401); false
    /// when the agent had none to send (not logged in).
    pub refused: bool,
    /// What the agent said, for the log and the chat.
    pub detail: String,
}

/// What the agent is doing or writing right now, for the chat's live view.
/// Never decides anything about the turn; also a sign of life for the
/// no-progress watchdog.
#[derive(Debug, Clone, PartialEq)]
pub enum Activity {
    /// The model called a tool (its own, like Bash/Read/WebSearch, or a host
    /// tool), as soon as the call is known: from the `assistant` line's
    /// tool_use blocks (every tool_use block, once each).
    ToolStarted {
        /// The tool-use id the agent gave the call.
        id: String,
        /// The tool's name.
        name: ToolName,
        /// The tool's input object.
        input: Value,
    },
    /// Text being written, appended piece by piece.
    Writing {
        /// Identifies one growing text (`<message id>:<block index>`).
        stream: String,
        /// Where the text will end up.
        source: WritingSource,
        /// The text written since the last piece of this stream.
        appended: String,
    },
}

/// Where a text being written ([`Activity::Writing`]) will end up.
#[derive(Debug, Clone, PartialEq)]
pub enum WritingSource {
    /// Assistant text (a plain-text answer; reaches the chat at `result`
    /// today).
    Text,
    /// The `text` argument of a chat tool call being written (`send`,
    /// `end_turn`, [`tools::STREAMED_TOOLS`]): the tool's bare name.
    ToolText(String),
}

/// A call of one of the host's chat tools.
#[derive(Debug)]
pub struct ToolCall {
    /// The tool-use id the agent gave the call.
    pub id: String,
    /// The call, parsed.
    pub call: ChatCall,
    /// Answers the call exactly once.
    pub reply: Responder<ToolReply>,
}

/// A resolved tool batch, waiting for the hook's answer.
#[derive(Debug)]
pub struct ToolBatch {
    /// The calls of the batch, in order.
    pub calls: Vec<BatchCall>,
    /// Answers the hook exactly once.
    pub reply: Responder<HookReply>,
}

impl ToolBatch {
    /// The first call of the batch that ends the turn: its bare name.
    pub fn terminator(&self) -> Option<&str> {
        tools::terminator(&self.calls)
    }
}

/// A tool the agent wants to run, waiting for a person's decision.
#[derive(Debug)]
pub struct PermissionAsk {
    /// The tool-use id the agent gave the call.
    pub id: String,
    /// The tool's name (`Bash`, `mcp__server__tool`).
    pub tool: ToolName,
    /// The tool's input object, as the agent would run it.
    pub input: Value,
    /// What "always in this chat" may remember of it.
    pub remember: Remember,
    /// Answers the ask exactly once; dropped unanswered, it denies.
    pub reply: Responder<Permission>,
}

/// What "always in this chat" may remember of a [`PermissionAsk`], by who
/// names its tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remember {
    /// The agent's CLI names the tool (claude's `can_use_tool`): a Bash
    /// call is remembered by its exact command, any other tool by name.
    ByTool,
    /// The name is the agent's own words (an ACP request's title): only
    /// the whole request, exactly (`input`, byte for byte).
    Exactly,
    /// The request cannot be named exactly (it carries what a question
    /// cannot show): no "always" is offered.
    Never,
    /// Shown as [`Remember::ByTool`], asked every time: each is its own
    /// (a schedule the agent asks to make).
    Once,
}

/// The answer to a [`PermissionAsk`].
#[derive(Debug, Clone, PartialEq)]
pub enum Permission {
    /// Run the tool with this input (the agent's own, or for a question
    /// tool such as `AskUserQuestion`, with the answer filled in).
    Allow {
        /// The input the tool runs with.
        input: Value,
    },
    /// Do not run it; the text goes back to the model.
    Deny {
        /// Worded for the model.
        message: String,
    },
}

impl Unanswered for Permission {
    fn unanswered(why: &str) -> Self {
        Self::Deny {
            message: why.to_string(),
        }
    }

    fn refused(why: &str) -> Self {
        Self::Deny {
            message: why.to_string(),
        }
    }
}

/// The answer to a tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolReply {
    /// The tool ran; the text goes back to the model.
    Ok(String),
    /// The tool failed; the text goes back to the model as a tool error.
    Error(String),
    /// The host is stopping and refuses the call (JSON-RPC -32000).
    Refused(String),
    /// The host's handler failed (JSON-RPC -32603 with this message).
    Failed(String),
}

/// The answer to a PostToolBatch hook.
#[derive(Debug, Clone, PartialEq)]
pub enum HookReply {
    /// Let the agent loop go on.
    Continue,
    /// End the agent loop; the reason is shown to the model next turn.
    Stop {
        /// Worded for the model.
        reason: String,
    },
    /// The host is stopping and refuses the request.
    Refused(String),
}

/// A reply that can be produced without the handler: what a request gets
/// when its responder is dropped unanswered.
pub trait Unanswered {
    /// The answer for a request that nobody answered (a failed handler).
    fn unanswered(why: &str) -> Self;

    /// The answer for a request refused on purpose (the host is stopping,
    /// the turn has ended).
    fn refused(why: &str) -> Self;
}

impl Unanswered for ToolReply {
    fn unanswered(why: &str) -> Self {
        Self::Failed(why.to_string())
    }

    fn refused(why: &str) -> Self {
        Self::Refused(why.to_string())
    }
}

impl Unanswered for HookReply {
    fn unanswered(why: &str) -> Self {
        Self::Refused(why.to_string())
    }

    fn refused(why: &str) -> Self {
        Self::Refused(why.to_string())
    }
}

/// Answers one agent request exactly once.
///
/// [`Responder::answer`] consumes it, so a second answer cannot be written;
/// a responder dropped unanswered answers with [`Unanswered::unanswered`] and
/// logs it, so the agent is never left waiting.
pub struct Responder<T: Unanswered> {
    /// The agent side's waiting receiver; `None` once answered.
    tx: Option<oneshot::Sender<T>>,
    /// Names the request in logs.
    what: String,
}

impl<T: Unanswered> Responder<T> {
    /// A responder and the receiver that gets its answer.
    pub fn new(what: impl Into<String>) -> (Self, oneshot::Receiver<T>) {
        let (tx, rx) = oneshot::channel();
        (
            Self {
                tx: Some(tx),
                what: what.into(),
            },
            rx,
        )
    }

    /// Answers the request. Returns `false` when the asker is gone.
    pub fn answer(mut self, value: T) -> bool {
        match self.tx.take() {
            Some(tx) => tx.send(value).is_ok(),
            None => false,
        }
    }

    /// Refuses the request on purpose (quietly: the caller logged why).
    pub fn refuse(mut self, why: &str) -> bool {
        match self.tx.take() {
            Some(tx) => tx.send(T::refused(why)).is_ok(),
            None => false,
        }
    }
}

impl<T: Unanswered> Drop for Responder<T> {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            tracing::warn!(request = %self.what, "request dropped unanswered; refusing it");
            let _ = tx.send(T::unanswered("the request was dropped unanswered"));
        }
    }
}

impl<T: Unanswered> fmt::Debug for Responder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("what", &self.what)
            .field("answered", &self.tx.is_none())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_consumes_the_responder() {
        let (responder, mut rx) = Responder::<ToolReply>::new("t");
        assert!(responder.answer(ToolReply::Ok("done".into())));
        assert_eq!(rx.try_recv().unwrap(), ToolReply::Ok("done".into()));
    }

    #[test]
    fn a_handler_that_fails_to_answer_still_answers_failed() {
        let (responder, mut rx) = Responder::<ToolReply>::new("tools/call send");
        drop(responder);
        assert!(
            matches!(rx.try_recv().unwrap(), ToolReply::Failed(_)),
            "maps to JSON-RPC -32603"
        );
        let (hook, mut rx) = Responder::<HookReply>::new("hook");
        drop(hook);
        assert!(matches!(rx.try_recv().unwrap(), HookReply::Refused(_)));
    }

    #[test]
    fn a_refusal_is_an_answer() {
        let (responder, mut rx) = Responder::<ToolReply>::new("t");
        assert!(responder.refuse("the turn has ended"));
        assert_eq!(
            rx.try_recv().unwrap(),
            ToolReply::Refused("the turn has ended".into())
        );
    }
}

//! The `acp` backend: drives an agent that speaks the Agent Client
//! Protocol (ACP v1: JSON-RPC 2.0, one object a line, on its stdio), such
//! as `gemini --acp`.
//!
//! One process per session, started and sealed by the host
//! ([`crate::agent::host`]: clean environment, per-chat workdir and home,
//! bubblewrap, launcher, process group) as every backend's is, and kept
//! warm between turns. The host's side of the protocol:
//! `initialize` offering no file-system and no terminal capability,
//! `authenticate` with `agent.auth_method` when the agent offers it, then
//! `session/load` of the stored session id when the agent can load
//! sessions, else `session/new` (with one notice in the answer when an
//! earlier conversation could not be resumed). A prewarm
//! ([`OpenSession::warm_up`]) only loads: its session is warm once loaded,
//! and an agent that cannot load it is closed with nothing said to the
//! chat and no new session (the next message starts one). A turn is one
//! `session/prompt`; its `stopReason` is its result. The agent's answer is
//! its `agent_message_chunk` text: streamed into the chat's live preview
//! and delivered as the result's text. `session/request_permission` is
//! decided by `agent.denied_tools` (a call's whole title) and
//! `agent.permission_mode`, asking the chat by default; a title is the
//! agent's own words, so it never makes a call a chat tool or one of
//! `agent.allowed_tools`.
//!
//! Layout: this file holds the settings and the backend; `wire` the
//! JSON-RPC lines and the requests built from the
//! `agent-client-protocol-schema` types; `updates` what a `session/update`
//! and a `stopReason` mean; `permission` the answer to a permission
//! request; `driver` the per-session task.

mod bridge;
mod driver;
mod mcp;
mod permission;
mod updates;
mod wire;

use std::path::PathBuf;

pub use bridge::{BRIDGE_COMMAND, run_bridge};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::host::ProcessSpec;
use super::host::process::RunningProcesses;
use super::host::session::launch;
use super::tools::ToolRegistry;
use super::{AgentBackend, AgentError, AgentSession, BoxFuture, OpenSession};
use crate::config::{Config, PermissionMode};

/// How long a prewarm waits for the stored session to be loaded (the
/// agent's start, `initialize`, the load and its replay); past it the
/// process is closed and the next message starts the session.
const WARM_UP_LIMIT: Duration = Duration::from_secs(20);

/// How to start and speak to an ACP agent.
#[derive(Debug, Clone)]
pub struct AcpSettings {
    /// How the process starts and what it can reach; its `args`
    /// (`agent.args`) are the agent's whole argument list (`--acp`).
    pub process: ProcessSpec,
    /// `agent.auth_method`: authenticate with it when the agent offers it.
    pub auth_method: String,
    /// Requests that never run, by their whole title.
    pub denied_tools: Vec<String>,
    /// What answers every other permission request.
    pub permission_mode: PermissionMode,
    /// How long the agent has to exit once its stdin is closed.
    pub grace: Duration,
    /// The `turnstile` executable an agent without HTTP MCP starts as the
    /// chat tools' stdio server (`turnstile mcp-bridge SOCKET`): this one.
    pub bridge: PathBuf,
}

impl AcpSettings {
    /// The settings in a config.
    pub fn from_config(config: &Config) -> Self {
        let agent = &config.agent;
        Self {
            process: ProcessSpec::from_config(config),
            auth_method: agent.auth_method.clone(),
            denied_tools: agent.denied_tools.clone(),
            permission_mode: agent.permission_mode,
            grace: config.turn.post_result_grace,
            bridge: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("turnstile")),
        }
    }

    /// As [`ProcessSpec::probe_sandbox`]: bubblewrap must work when
    /// asked for.
    ///
    /// # Errors
    ///
    /// bwrap is missing or cannot make its namespaces.
    pub fn probe_sandbox(&mut self) -> Result<(), String> {
        self.process.probe_sandbox()
    }

    /// The conversation's working directory, absolute (`session/new`'s
    /// `cwd`): where the sealed process starts.
    fn cwd(&self, key: &str) -> PathBuf {
        self.process.cwd(key)
    }
}

/// The backend.
#[derive(Debug)]
pub struct AcpBackend {
    /// How to start the agent.
    settings: Arc<AcpSettings>,
    /// The chat tools (their names are never an agent's tool here).
    tools: Arc<ToolRegistry>,
    /// Processes not yet reaped; [`AgentBackend::closed`] waits for none.
    running: RunningProcesses,
}

impl AcpBackend {
    /// A backend starting the agent with `settings`.
    pub fn new(settings: AcpSettings, tools: Arc<ToolRegistry>) -> Self {
        Self {
            settings: Arc::new(settings),
            tools,
            running: RunningProcesses::new(),
        }
    }

    /// Processes started and not yet reaped.
    pub fn running(&self) -> i64 {
        self.running.get()
    }

    /// Spawns the agent for one session and starts its driver; `warm_up`
    /// is told how a prewarm's load went.
    fn start_session(
        &self,
        request: OpenSession,
        warm_up: Option<driver::WarmUp>,
    ) -> Result<AgentSession, AgentError> {
        let key = request.conversation.key();
        // A project's session works in the project's directory, made,
        // sealed and bound as a workdir is, as the claude backend's does
        // (its `allowed_tools` name tools, which no ACP request is).
        let mut settings = match &request.project {
            Some(project) => Arc::new(AcpSettings {
                process: self.settings.process.for_project(project),
                ..(*self.settings).clone()
            }),
            None => Arc::clone(&self.settings),
        };
        // In a network of its own the agent can make no UNIX socket: its
        // chat tools are relayed from a directory of this process's own.
        let tools_dir = match &settings.process.seal.network {
            Some(isolation) if settings.process.seal.isolates_network() => {
                let dir = isolation.tools_dir().map_err(AgentError::Network)?;
                let mut own = (*settings).clone();
                own.process.seal.tools = Some(dir.path().to_owned());
                settings = Arc::new(own);
                Some(dir)
            }
            _ => None,
        };
        let resume = request.resume.filter(|id| {
            let fits = driver::is_session_id(id);
            if !fits {
                tracing::warn!(session_id = %id.escape_debug(), "stored agent session id is not one an ACP agent gave; starting a new session");
            }
            fits
        });
        let start = driver::Start {
            cwd: settings.cwd(&key),
            settings: Arc::clone(&settings),
            tools: Arc::clone(&self.tools),
            shutdown: request.shutdown,
            resume: resume.clone(),
            tools_dir,
            warm_up,
        };
        let argv = &settings.process.args;
        let session = launch(
            "acp",
            &settings.process,
            &key,
            argv,
            &self.running,
            |link| driver::Driver::new(start, link),
        )?;
        let project = request.project.as_ref().map(|p| p.name.as_str());
        tracing::info!(session = %session.label, resume = ?resume, project, "agent process started (acp)");
        Ok(session)
    }
}

impl AgentBackend for AcpBackend {
    fn cannot_resume(&self, id: &str) -> Option<&'static str> {
        // As `start_session` reads it. Whether the agent loads sessions is
        // in its answer to `initialize`: a prewarm of an agent that does
        // not ends there, opening no new session.
        (!driver::is_session_id(id)).then_some("the stored session id is not one an ACP agent gave")
    }

    fn record_processes_in(&self, inbox: crate::state::StoreHandle) {
        self.running.record_in(inbox);
    }

    fn closed(&self) -> BoxFuture<()> {
        self.running.closed(self.settings.grace)
    }

    fn open(&self, request: OpenSession) -> BoxFuture<Result<AgentSession, AgentError>> {
        let warm_up = request.warm_up;
        let (told, loaded) = oneshot::channel();
        let result = self.start_session(request, warm_up.then_some(told));
        Box::pin(async move {
            let session = result?;
            if !warm_up {
                return Ok(session);
            }
            // A prewarm's session is kept once loaded; one that is not
            // is dropped here (its process closed), unseen by the chat.
            let why = match tokio::time::timeout(WARM_UP_LIMIT, loaded).await {
                Ok(Ok(Ok(()))) => return Ok(session),
                Ok(Ok(Err(why))) => why,
                Ok(Err(_)) => "the agent's session ended before it was loaded".to_owned(),
                Err(_) => format!("the session was not loaded within {WARM_UP_LIMIT:?}"),
            };
            Err(AgentError::NotWarmed(why))
        })
    }
}

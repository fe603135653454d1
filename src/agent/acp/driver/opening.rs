//! Opening the session: `initialize`, `authenticate` when the agent offers
//! the configured method, then `session/load` of the stored id when the
//! agent can load sessions, else `session/new`. A prewarm only loads: it
//! opens no new session, and says why not to its caller.

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{InitializeResponse, NewSessionResponse};
use std::sync::Arc;

use agent_client_protocol_schema::v1::McpServer;
use serde_json::Value;

use super::{Driver, Purpose, Stage, is_session_id};
use crate::agent::AgentEvent;
use crate::agent::acp::mcp::ToolServer;
use crate::agent::acp::wire;
use crate::agent::host::jsonrpc::RpcError;
use crate::agent::network;
use crate::agent::notices::{CANNOT_RESUME, NOT_RESUMED};

impl Driver {
    /// The answer to `initialize`: authenticate, or open the session.
    pub(super) fn initialized(&mut self, outcome: Result<Value, RpcError>) -> Result<(), String> {
        let result = outcome.map_err(|e| format!("the agent refused initialize: {e}"))?;
        let response = serde_json::from_value::<InitializeResponse>(result)
            .map_err(|e| format!("the agent's answer to initialize is not ACP: {e}"))?;
        if response.protocol_version != ProtocolVersion::V1 {
            return Err(format!(
                "the agent speaks ACP version {}, turnstile speaks 1",
                serde_json::to_value(response.protocol_version).unwrap_or(Value::Null)
            ));
        }
        let can_load = response.agent_capabilities.load_session;
        tracing::info!(
            pid = self.pid,
            load_session = can_load,
            auth_methods = response.auth_methods.len(),
            "agent initialized (acp)"
        );
        if !can_load && self.warm_up.is_some() {
            self.not_warmed("the agent does not load sessions (no loadSession)".into());
            return Ok(());
        }
        self.emit(AgentEvent::Progress);
        let method = &self.settings.auth_method;
        let offered = !method.is_empty()
            && response
                .auth_methods
                .iter()
                .any(|m| &*m.id().0 == method.as_str());
        if !method.is_empty() && !offered {
            tracing::info!(pid = self.pid, method = %method, "the agent does not offer agent.auth_method; not authenticating");
        }
        if !can_load && let Stage::Starting { resume, notice, .. } = &mut self.stage {
            // Nothing to load: the conversation starts anew, and says so.
            if resume.take().is_some() {
                *notice = Some(CANNOT_RESUME);
            }
        }
        self.tool_server = self.tool_server(response.agent_capabilities.mcp_capabilities.http);
        if offered {
            let method = method.clone();
            self.request(
                Purpose::Authenticate,
                "authenticate",
                wire::authenticate(&method),
            );
        } else {
            self.open_session();
        }
        Ok(())
    }

    /// The answer to `authenticate`: open the session.
    pub(super) fn authenticated(&mut self, outcome: Result<Value, RpcError>) -> Result<(), String> {
        outcome.map_err(|e| format!("the agent refused authentication: {e}"))?;
        self.emit(AgentEvent::Progress);
        self.open_session();
        Ok(())
    }

    /// `session/load` of the stored session when the agent can (else
    /// there is none to load), else `session/new`.
    fn open_session(&mut self) {
        let resume = match &mut self.stage {
            Stage::Starting { resume, .. } => resume.take(),
            _ => None,
        };
        let notice = self.stage.notice();
        match resume {
            Some(id) => {
                let params = wire::load_session(&id, &self.cwd, self.servers());
                self.request(Purpose::LoadSession, "session/load", params);
                self.stage = Stage::Opening {
                    loading: Some(id),
                    replay_due: None,
                    settle: self.stage.settles(),
                    notice,
                };
            }
            None => self.new_session(notice),
        }
    }

    /// A prewarm's session will not be loaded: its caller is told why (and
    /// closes the session). Nothing reaches the chat; the conversation's
    /// next message starts the session as a cold start does.
    fn not_warmed(&mut self, why: String) {
        tracing::info!(pid = self.pid, why = %why, "the stored session is not loaded for a prewarm");
        if let Some(warm_up) = self.warm_up.take() {
            let _ = warm_up.send(Err(why));
        }
    }

    /// `session/new`, with the notice for the first answer.
    fn new_session(&mut self, notice: Option<&'static str>) {
        let params = wire::new_session(&self.cwd, self.servers());
        self.request(Purpose::NewSession, "session/new", params);
        self.stage = Stage::Opening {
            loading: None,
            replay_due: None,
            settle: self.stage.settles(),
            notice,
        };
    }

    /// The answer to `session/new`.
    pub(super) fn opened_new(&mut self, outcome: Result<Value, RpcError>) -> Result<(), String> {
        let result = outcome.map_err(|e| format!("the agent refused session/new: {e}"))?;
        let response = serde_json::from_value::<NewSessionResponse>(result)
            .map_err(|e| format!("the agent's answer to session/new is not ACP: {e}"))?;
        let id = response.session_id.0.to_string();
        if !is_session_id(&id) {
            return Err(
                "the agent's session id is empty, too long or has control characters".into(),
            );
        }
        tracing::info!(pid = self.pid, session_id = %id, "agent session opened (acp)");
        self.ready(id);
        Ok(())
    }

    /// The answer to `session/load`: the session, or a new one and a
    /// notice. A loaded session is ready once the answer to
    /// [`wire::REPLAY_SYNC`] came: the spec has the agent replay the
    /// conversation before it answers the load, but Gemini CLI 0.61.0
    /// answers first and replays after, writing the whole replay before it
    /// reads its next line; so what it replays comes before the answer to
    /// that request, sent once the load is answered, and is no turn's.
    pub(super) fn loaded(&mut self, outcome: Result<Value, RpcError>) {
        match outcome {
            Ok(_) => {
                let session = self.stage.session().unwrap_or_default().to_owned();
                tracing::info!(pid = self.pid, session_id = %session, "agent session loaded (acp)");
                self.emit(AgentEvent::Progress);
                self.request(
                    Purpose::ReplaySync,
                    wire::REPLAY_SYNC,
                    wire::replay_sync(&session),
                );
                if let Stage::Opening { replay_due, .. } = &mut self.stage {
                    *replay_due = Some(tokio::time::Instant::now() + super::REPLAY_SYNC_WAIT);
                }
            }
            Err(error) if self.warm_up.is_some() => {
                self.not_warmed(format!("the agent could not load the session: {error}"));
            }
            Err(error) => {
                tracing::warn!(pid = self.pid, cause = %error, "the agent could not load the stored session; opening a new one");
                self.new_session(Some(NOT_RESUMED));
            }
        }
    }

    /// The chat tools' server: over HTTP when the agent takes it and
    /// shares turnstile's network, else over stdio through the bridge
    /// (every ACP agent takes stdio): in a network of its own, through the
    /// relay to the socket in the process's chat tools directory (the
    /// agent can make no UNIX socket); else over a socket in its workdir,
    /// unless a launcher may start the agent where that socket is not.
    fn tool_server(&self, http: bool) -> Option<ToolServer> {
        let serve = (
            Arc::clone(&self.tools),
            self.events.clone(),
            self.shutdown.clone(),
        );
        let bridge = self.settings.bridge.clone();
        if self.settings.process.seal.isolates_network() {
            let Some(dir) = &self.tools_dir else {
                tracing::warn!(
                    pid = self.pid,
                    "no chat tools directory for an agent in a network of its own; no tools"
                );
                return None;
            };
            let relay = format!("127.0.0.1:{}", network::TOOLS_PORT);
            return ToolServer::start_relayed(dir.socket(), relay, bridge, serve);
        }
        if http {
            let (tools, events, shutdown) = serve;
            return ToolServer::start(tools, events, shutdown);
        }
        if !self.settings.process.seal.launcher.is_empty() {
            tracing::info!(
                pid = self.pid,
                "agent.launcher is set: no stdio MCP server for the chat tools"
            );
            return None;
        }
        ToolServer::start_stdio(&self.cwd, bridge, serve)
    }

    /// The MCP servers offered: the chat tools, when they are served.
    fn servers(&self) -> Vec<McpServer> {
        self.tool_server.iter().map(ToolServer::describe).collect()
    }

    /// The answer to [`wire::REPLAY_SYNC`], whatever it is: the loaded
    /// session's replay is over.
    pub(super) fn replayed(&mut self) {
        tracing::debug!(pid = self.pid, "the loaded session's replay is over");
        self.loaded_ready();
    }

    /// No answer to [`wire::REPLAY_SYNC`] within [`super::REPLAY_SYNC_WAIT`]:
    /// the replay is taken as over (a late answer is skipped as one to no
    /// request).
    pub(super) fn replay_not_answered(&mut self) {
        self.requests
            .retain(|_, purpose| *purpose != Purpose::ReplaySync);
        tracing::warn!(
            pid = self.pid,
            wait = ?super::REPLAY_SYNC_WAIT,
            "the agent did not answer {}; its replay is taken as over",
            wire::REPLAY_SYNC
        );
        self.loaded_ready();
    }

    /// The loaded session is open.
    fn loaded_ready(&mut self) {
        let session = self.stage.session().unwrap_or_default().to_owned();
        self.ready(session);
    }

    /// The session is open: run what waits.
    fn ready(&mut self, session: String) {
        let settle = self.stage.settles();
        let notice = self.stage.notice();
        self.stage = Stage::Ready { session, notice };
        self.emit(AgentEvent::Progress);
        if let Some(warm_up) = self.warm_up.take() {
            let _ = warm_up.send(Ok(()));
        }
        if let Some(text) = self.queued.pop_front() {
            self.prompt(text);
        } else if settle {
            self.emit(AgentEvent::Idle);
        }
    }
}

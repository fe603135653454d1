//! The `claude` backend: drives the Claude Code CLI over stream-json.
//!
//! One child process per session, in its own process group. The host
//! speaks the CLI's control protocol both ways: `initialize` with a
//! PostToolBatch hook and the in-process MCP server `telegram-tools`;
//! `mcp_message`, `can_use_tool` and `hook_callback` from the CLI are each
//! answered exactly once. Closing is data: `end_session`, close stdin, then
//! SIGTERM and SIGKILL to the process group, each after a grace.
//!
//! Layout: this file holds the settings and the backend; [`protocol`] the
//! wire format, parsed into typed enums at the boundary; `process` the child
//! (spawn, process group, signals, reaping); `driver` the per-session task
//! (reading lines, dispatching requests, writing answers, closing);
//! `permissions` what answers `can_use_tool`.

mod driver;
mod permissions;
mod process;
// The wire types; public (hidden) for the benchmarks' minimal direct driver.
#[doc(hidden)]
pub mod protocol;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{AgentBackend, AgentError, AgentSession, BoxFuture, OpenSession};
use crate::chat::tools::{TOOL_SERVER, ToolRegistry};
use crate::config::{Config, PermissionMode};
use process::{AgentProcess, LiveProcesses};

pub use driver::MAX_LINE_BYTES;

/// How to start the CLI.
#[derive(Debug, Clone)]
pub struct ClaudeSettings {
    /// The executable.
    pub command: String,
    /// Arguments after the protocol's own.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Working directory (empty: inherit).
    pub workdir: PathBuf,
    /// The system prompt.
    pub system_prompt: String,
    /// Other tools the agent may use.
    pub allowed_tools: Vec<String>,
    /// Tools the agent may never use; they beat `allowed_tools`.
    pub denied_tools: Vec<String>,
    /// What answers a tool neither list names (`can_use_tool`).
    pub permission_mode: PermissionMode,
    /// `--model`, when set.
    pub model: String,
    /// `--max-turns`, when non-zero.
    pub max_turns: u32,
    /// Register the PostToolBatch hook.
    pub batch_hook: bool,
    /// Between SIGTERM and SIGKILL, and for a graceful close.
    pub kill_grace: Duration,
}

impl ClaudeSettings {
    /// The settings in a config.
    pub fn from_config(config: &Config) -> Self {
        let agent = &config.agent;
        Self {
            command: agent.command.clone(),
            args: agent.args.clone(),
            env: agent.env.clone(),
            workdir: agent.workdir.clone(),
            system_prompt: agent.system_prompt.clone(),
            allowed_tools: agent.allowed_tools.clone(),
            denied_tools: agent.denied_tools.clone(),
            permission_mode: agent.permission_mode,
            model: agent.model.clone(),
            max_turns: agent.max_turns,
            batch_hook: agent.batch_hook,
            kill_grace: config.turn.post_result_grace,
        }
    }

    /// The full argument list for a session.
    pub fn argv(&self, tools: &ToolRegistry, resume: Option<&str>) -> Vec<String> {
        let mut argv: Vec<String> = [
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "stream-json",
            "--permission-prompt-tool=stdio",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if !self.model.is_empty() {
            argv.extend(["--model".into(), self.model.clone()]);
        }
        if self.max_turns > 0 {
            argv.extend(["--max-turns".into(), self.max_turns.to_string()]);
        }
        let mut allowed: Vec<String> = tools
            .tools()
            .iter()
            .map(|t| format!("mcp__{TOOL_SERVER}__{}", t.name))
            .collect();
        allowed.extend(self.allowed_tools.iter().cloned());
        argv.extend(["--allowedTools".into(), allowed.join(",")]);
        if let Some(id) = resume {
            argv.extend(["--resume".into(), id.to_string()]);
        }
        argv.extend(self.args.iter().cloned());
        argv
    }
}

/// The backend.
#[derive(Debug)]
pub struct ClaudeBackend {
    /// How to start the CLI.
    settings: Arc<ClaudeSettings>,
    /// The chat tools.
    tools: Arc<ToolRegistry>,
    /// Processes spawned so far.
    spawned: AtomicU64,
    /// Processes not yet reaped; [`AgentBackend::closed`] waits for none.
    live: LiveProcesses,
}

impl ClaudeBackend {
    /// A backend starting the CLI with `settings`.
    pub fn new(settings: ClaudeSettings, tools: Arc<ToolRegistry>) -> Self {
        Self {
            settings: Arc::new(settings),
            tools,
            spawned: AtomicU64::new(0),
            live: LiveProcesses::new(),
        }
    }

    /// Processes started and not yet reaped.
    pub fn live(&self) -> i64 {
        self.live.get()
    }

    /// Processes spawned so far.
    pub fn spawned(&self) -> u64 {
        self.spawned.load(Ordering::Relaxed)
    }

    /// Spawns the CLI for one session and starts its driver.
    fn start_session(&self, request: OpenSession) -> Result<AgentSession, AgentError> {
        let argv = self.settings.argv(&self.tools, request.resume.as_deref());
        let spawned = AgentProcess::spawn(&self.settings, &argv, &self.live)?;
        let pid = spawned.process.pid();
        tracing::info!(chat_id = request.chat.0, pid, resume = ?request.resume, "agent process started");
        Ok(driver::start(driver::Start {
            settings: Arc::clone(&self.settings),
            tools: Arc::clone(&self.tools),
            shutdown: request.shutdown,
            process: spawned.process,
            stdin: spawned.stdin,
            stdout: spawned.stdout,
            label: format!("claude pid {pid}"),
        }))
    }
}

impl AgentBackend for ClaudeBackend {
    fn closed(&self) -> BoxFuture<()> {
        let live = self.live.clone();
        let wait = self
            .settings
            .kill_grace
            .saturating_mul(2)
            .saturating_add(Duration::from_secs(1));
        Box::pin(async move {
            let _ = tokio::time::timeout(wait, live.all_reaped()).await;
        })
    }

    fn open(&self, request: OpenSession) -> BoxFuture<Result<AgentSession, AgentError>> {
        let result = self.start_session(request);
        if result.is_ok() {
            self.spawned.fetch_add(1, Ordering::Relaxed);
        }
        Box::pin(async move { result })
    }
}

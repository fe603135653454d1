//! The `claude` backend: drives the Claude Code CLI over stream-json.
//!
//! One child process per session, in its own process group. The host
//! speaks the CLI's control protocol both ways: `initialize` with a
//! PostToolBatch hook and the in-process MCP server `telegram-tools`;
//! `mcp_message`, `can_use_tool` and `hook_callback` from the CLI are each
//! answered exactly once. Closing is data: `end_session`, close stdin, then
//! SIGTERM and SIGKILL to the process group, each after a grace.
//!
//! This is where a tool call crosses into the host: the MCP server, the
//! batch hook, `can_use_tool` and the stream are read here, and every tool
//! name and call is parsed once (with the backend's
//! [`ToolRegistry`](crate::agent::tools::ToolRegistry)) into the
//! agent-neutral values of [`crate::agent::tools`] before an
//! [`AgentEvent`](crate::agent::AgentEvent) leaves the driver.
//!
//! Layout: this file holds the settings and the backend; [`protocol`] the
//! wire format, parsed into typed enums at the boundary; `driver` the
//! per-session task (reading lines, dispatching requests, writing answers,
//! closing); `permissions` what answers `can_use_tool`. The process itself
//! (spawn, seal, process group, reaping) is the host's
//! ([`crate::agent::host`]).

pub(crate) mod driver;
pub mod limits;
pub(crate) mod permissions;
// The wire types; public (hidden) for the benchmarks' minimal direct driver.
#[doc(hidden)]
pub mod protocol;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use super::host::ProcessSpec;
use super::host::handover;
use super::host::process::{self, RunningProcesses};
use super::host::seal::{homes, is_session_id, shell_word};
use super::host::session::{launch_handable, start_adopted};
use super::tools::{TOOL_SERVER, ToolName, ToolRegistry};
use super::{AgentBackend, AgentError, AgentSession, BoxFuture, OpenSession};
use crate::config::{Config, PermissionMode, SettingSource};

#[doc(hidden)]
pub use permissions::permission;

/// How long a prewarm waits for the CLI to answer `initialize`.
const WARM_UP_LIMIT: Duration = Duration::from_secs(20);

/// How to start the CLI.
#[derive(Debug, Clone)]
pub struct ClaudeSettings {
    /// How the CLI's process starts (its `args` go after the protocol's
    /// own).
    pub process: ProcessSpec,
    /// `--setting-sources`: which of the operator's Claude settings apply.
    pub setting_sources: Vec<SettingSource>,
    /// The operator's MCP servers, beside turnstile's own
    /// (`--strict-mcp-config --mcp-config`).
    pub mcp_servers: BTreeMap<String, serde_json::Value>,
    /// The system prompt.
    pub system_prompt: String,
    /// Other tools the agent may use without asking: names, or the CLI's
    /// own patterns (`Bash(cargo test:*)`), passed on unchanged.
    pub allowed_tools: Vec<String>,
    /// Tools the agent may never use (`--disallowedTools`, and denied if
    /// the CLI asks); they beat `allowed_tools`.
    pub denied_tools: Vec<String>,
    /// What answers a tool neither list names (`can_use_tool`).
    pub permission_mode: PermissionMode,
    /// `--model`, when set.
    pub model: String,
    /// `--max-turns`, when non-zero.
    pub max_turns: u32,
    /// Register the PostToolBatch hook.
    pub batch_hook: bool,
}

/// The CLI's own scheduling tools: they live inside one CLI process, die
/// when turnstile closes it, and would start turns nobody in the chat
/// asked for. Schedules are turnstile's (the `schedule` chat tool).
pub const CLI_SCHEDULING_TOOLS: [&str; 4] =
    ["CronCreate", "CronList", "CronDelete", "ScheduleWakeup"];

/// `agent.denied_tools`, plus each of [`CLI_SCHEDULING_TOOLS`] the
/// operator did not list in `agent.allowed_tools`.
fn denied_tools(allowed: &[String], denied: &[String]) -> Vec<String> {
    let mut all = denied.to_vec();
    for tool in CLI_SCHEDULING_TOOLS {
        if !allowed.iter().any(|a| a == tool) && !all.iter().any(|d| d == tool) {
            all.push(tool.to_owned());
        }
    }
    all
}

impl ClaudeSettings {
    /// The settings in a config.
    pub fn from_config(config: &Config) -> Self {
        let agent = &config.agent;
        Self {
            process: ProcessSpec::from_config(config),
            setting_sources: agent.setting_sources.clone(),
            mcp_servers: agent.mcp_servers.clone(),
            system_prompt: agent.system_prompt.clone(),
            allowed_tools: agent.allowed_tools.clone(),
            denied_tools: denied_tools(&agent.allowed_tools, &agent.denied_tools),
            permission_mode: agent.permission_mode,
            model: agent.model.clone(),
            max_turns: agent.max_turns,
            batch_hook: agent.batch_hook,
        }
    }

    /// As [`ProcessSpec::probe_sandbox`]: bubblewrap must work when asked
    /// for.
    ///
    /// # Errors
    ///
    /// bwrap is missing or cannot make its namespaces.
    pub fn probe_sandbox(&mut self) -> Result<(), String> {
        self.process.probe_sandbox()
    }

    /// The full argument list for a session (the CLI's, after the command).
    /// `resume` must be a session id ([`is_session_id`]); it goes as one
    /// argument, `--resume=<id>`. Options that take lists are written
    /// `--flag=value` so that no later argument is read as one of their
    /// values.
    pub fn argv(&self, tools: &ToolRegistry, resume: Option<&str>) -> Vec<String> {
        self.session_argv(tools, resume, None, false)
    }

    /// [`ClaudeSettings::argv`] for a session of a conversation that chose
    /// its `model` (instead of `agent.model`), resuming a copy of `resume`
    /// with `fork` (`--fork-session`).
    pub fn session_argv(
        &self,
        tools: &ToolRegistry,
        resume: Option<&str>,
        model: Option<&str>,
        fork: bool,
    ) -> Vec<String> {
        let mut argv: Vec<String> = [
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "stream-json",
            "--permission-prompt-tool=stdio",
            // `stream_event` lines: what the agent writes, as it writes it.
            "--include-partial-messages",
            // Each user message is echoed when the CLI reads it: the
            // receipt of a message steered into a running turn.
            "--replay-user-messages",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        match model.filter(|m| crate::config::is_model_name(m)) {
            Some(model) => argv.extend(["--model".into(), model.to_owned()]),
            None if !self.model.is_empty() => argv.extend(["--model".into(), self.model.clone()]),
            None => {}
        }
        if self.max_turns > 0 {
            argv.extend(["--max-turns".into(), self.max_turns.to_string()]);
        }
        let mut allowed: Vec<String> = tools
            .tools()
            .iter()
            .map(|t| ToolName::served_here(t.name).to_string())
            .collect();
        allowed.extend(self.allowed_tools.iter().cloned());
        argv.push(format!("--allowedTools={}", allowed.join(",")));
        if !self.denied_tools.is_empty() {
            argv.push(format!("--disallowedTools={}", self.denied_tools.join(",")));
        }
        let sources: Vec<&str> = self.setting_sources.iter().map(|s| s.as_str()).collect();
        argv.push(format!("--setting-sources={}", sources.join(",")));
        argv.push("--strict-mcp-config".into());
        argv.push(format!("--mcp-config={}", self.mcp_config()));
        if let Some(id) = resume {
            argv.push(format!("--resume={id}"));
            if fork {
                argv.push("--fork-session".into());
            }
        }
        argv.extend(self.process.args.iter().cloned());
        argv
    }
}

impl ClaudeSettings {
    /// The settings of a session in `project`: its workdir instead of
    /// `agent.workdir`, its tools allowed too. The directory holding the
    /// default workdirs stays hidden under the sandbox (as a secret's
    /// directory is), so a project's agent sees no chat's default workdir.
    pub fn for_project(&self, project: &crate::agent::ProjectPlace) -> Self {
        let mut settings = self.clone();
        settings.process = self.process.for_project(project);
        settings
            .allowed_tools
            .extend(project.allowed_tools.iter().cloned());
        settings
    }

    /// The `--mcp-config` JSON: turnstile's own in-process server (answered
    /// over the control protocol) and the operator's servers.
    fn mcp_config(&self) -> serde_json::Value {
        let mut servers = serde_json::Map::new();
        servers.insert(
            TOOL_SERVER.to_owned(),
            serde_json::json!({"type": "sdk", "name": TOOL_SERVER}),
        );
        for (name, server) in &self.mcp_servers {
            servers.insert(name.clone(), server.clone());
        }
        serde_json::json!({ "mcpServers": servers })
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
    running: RunningProcesses,
}

impl ClaudeBackend {
    /// A backend starting the CLI with `settings`.
    pub fn new(settings: ClaudeSettings, tools: Arc<ToolRegistry>) -> Self {
        Self {
            settings: Arc::new(settings),
            tools,
            spawned: AtomicU64::new(0),
            running: RunningProcesses::new(),
        }
    }

    /// Processes started and not yet reaped.
    pub fn running(&self) -> i64 {
        self.running.get()
    }

    /// Processes spawned so far.
    pub fn spawned(&self) -> u64 {
        self.spawned.load(Ordering::Relaxed)
    }

    /// Spawns the CLI for one session and starts its driver. Logs in the
    /// caller's span (the turn's, which names the chat).
    fn start_session(
        &self,
        request: OpenSession,
        ready: oneshot::Sender<()>,
    ) -> Result<AgentSession, AgentError> {
        let resume = match request.resume {
            // Left by the scripted backend (the Quick Start's echo agent
            // before this one): expected, nothing to warn about.
            Some(id) if id.starts_with(crate::agent::SCRIPTED_SESSION_PREFIX) => {
                tracing::info!(
                    session_id = %id.escape_debug(),
                    "stored session id is the scripted agent's; starting a fresh session"
                );
                None
            }
            Some(id) if !is_session_id(&id) => {
                tracing::warn!(
                    session_id = %id.escape_debug(),
                    "stored agent session id is not a UUID; starting a fresh session"
                );
                None
            }
            other => other,
        };
        // A project's session works in the project's directory (made,
        // sealed and bound as a workdir is) with its tools allowed.
        let settings = match &request.project {
            Some(project) => Arc::new(self.settings.for_project(project)),
            None => Arc::clone(&self.settings),
        };
        let argv = settings.session_argv(
            &self.tools,
            resume.as_deref(),
            request.model.as_deref(),
            request.fork,
        );
        let key = request.conversation.key();
        // What the process is started with, resume aside: one handed over
        // across `/restart`'s exec is taken only if it is the same. Only a
        // process that re-executes itself hands over or takes over.
        let started_as = handover::enabled().then(|| {
            process::started_as(
                &settings.process,
                &key,
                &settings.session_argv(&self.tools, None, request.model.as_deref(), false),
                &driver::initialize(&settings),
            )
        });
        let start = driver::Start {
            settings: Arc::clone(&settings),
            tools: Arc::clone(&self.tools),
            shutdown: request.shutdown,
            ready,
            session_id: resume.clone().filter(|_| !request.fork),
        };
        if let (Some(id), Some(started_as)) = (start.session_id.clone(), &started_as)
            && let Some(handed) = handover::claim(&key, &id, started_as)
        {
            let pid = handed.pid;
            // Its sandbox reaches the model through the proxy, on the
            // socket this process took over.
            settings
                .process
                .seal
                .start_network()
                .map_err(AgentError::Network)?;
            match process::AgentProcess::adopt(handed, &self.running) {
                Ok(adopted) => {
                    let session =
                        start_adopted("claude", adopted, settings.process.kill_grace, |link| {
                            driver::Driver::adopted(start, link)
                        });
                    tracing::info!(session = %session.label, session_id = %id, "agent process taken over from before the restart");
                    return Ok(session);
                }
                Err(err) => {
                    tracing::warn!(pid, cause = %err, "the handed-over agent could not be taken over; starting anew");
                }
            }
        }
        let session = launch_handable(
            "claude",
            &settings.process,
            &key,
            (&argv, started_as),
            &self.running,
            |link| driver::Driver::new(start, link),
        )?;
        let project = request.project.as_ref().map(|p| p.name.as_str());
        tracing::info!(session = %session.label, resume = ?resume, model = ?request.model, fork = request.fork, project, "agent process started");
        Ok(session)
    }
}

impl AgentBackend for ClaudeBackend {
    fn steers(&self) -> bool {
        true
    }

    fn cannot_resume(&self, id: &str) -> Option<&'static str> {
        // As `start_session` reads it: such an id starts a fresh session.
        if id.starts_with(crate::agent::SCRIPTED_SESSION_PREFIX) {
            Some("the stored session is the scripted agent's")
        } else if !is_session_id(id) {
            Some("the stored session id is not a UUID")
        } else {
            None
        }
    }

    fn record_processes_in(&self, inbox: crate::state::StoreHandle) {
        self.running.record_in(inbox);
    }

    fn closed(&self) -> BoxFuture<()> {
        self.running.closed(self.settings.process.kill_grace)
    }

    fn handoff(&self, request: &OpenSession) -> String {
        let Some(id) = request.resume.as_deref() else {
            return super::notices::ONLY_THROUGH_ATTACH.to_owned();
        };
        if let Some(why) = self.cannot_resume(id) {
            return super::notices::claude_cannot_resume(why);
        }
        let process = match &request.project {
            Some(project) => self.settings.process.for_project(project),
            None => self.settings.process.clone(),
        };
        let key = request.conversation.key();
        let workdir = process.cwd(&key);
        let mut line = format!("cd {} &&", shell_word(&workdir.to_string_lossy()));
        for (var, value) in homes(&process.seal, &key, std::env::vars_os(), &process.env) {
            line.push_str(&format!(" {var}={}", shell_word(&value.to_string_lossy())));
        }
        line.push_str(&format!(" {} --resume {id}", shell_word(&process.command)));
        super::notices::resume_in_claude_code(&line)
    }

    fn open(&self, request: OpenSession) -> BoxFuture<Result<AgentSession, AgentError>> {
        let warm_up = request.warm_up;
        let (ready, started) = oneshot::channel();
        let result = self.start_session(request, ready);
        if result.is_ok() {
            self.spawned.fetch_add(1, Ordering::Relaxed);
        }
        Box::pin(async move {
            // A prewarm's session is kept once the CLI has started (it
            // answered `initialize`), so the first message does not wait for
            // that; one that exits first is the first turn's to report.
            if warm_up
                && let Ok(session) = &result
                && tokio::time::timeout(WARM_UP_LIMIT, started).await.is_err()
            {
                tracing::warn!(session = %session.label, limit = ?WARM_UP_LIMIT, "the agent did not answer initialize in time; kept as it is");
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Sandbox;

    #[test]
    fn the_sandbox_hides_systemds_credentials_folder() {
        // Under systemd the token may be a credential the agent's user could
        // read: its folder is one of the secrets the sandbox hides.
        let vars = BTreeMap::from([
            ("TELEGRAM_BOT_TOKEN".to_string(), "1:x".to_string()),
            (
                crate::config::CREDENTIALS_ENV.to_string(),
                "/run/credentials/turnstile.service".to_string(),
            ),
        ]);
        let config = Config::load(None, &vars).expect("loads");
        let mut settings = ClaudeSettings::from_config(&config);
        settings.process.seal.sandbox = Sandbox::Bubblewrap;
        let plan = crate::agent::host::seal::plan(
            &settings.process.seal,
            "1",
            "claude",
            &[],
            Vec::new(),
            &BTreeMap::new(),
            |_| true,
        );
        let argv = plan.argv.join(" ");
        assert!(
            argv.contains("--tmpfs /run/credentials/turnstile.service "),
            "{argv}"
        );
    }

    #[test]
    fn allowed_tools_patterns_reach_the_cli_unchanged() {
        // The CLI enforces these patterns itself (`Bash(cargo test:*)`
        // allows that prefix only, and it understands `&&`, `;` and pipes);
        // turnstile passes them on as written, from the file and from the
        // environment alike.
        let patterns = ["Bash(cargo test:*)", "Bash(git log --oneline:*)", "Read"];
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("turnstile.toml");
        let listed: Vec<String> = patterns.iter().map(|p| format!("{p:?}")).collect();
        std::fs::write(
            &file,
            format!("[agent]\nallowed_tools = [{}]\n", listed.join(", ")),
        )
        .expect("config written");
        let token = ("TELEGRAM_BOT_TOKEN".to_string(), "1:x".to_string());
        let from_file = Config::load(Some(&file), &BTreeMap::from([token.clone()]));
        let from_env = Config::load(
            None,
            &BTreeMap::from([
                token,
                (
                    "TURNSTILE_AGENT_ALLOWED_TOOLS".to_string(),
                    patterns.join(","),
                ),
            ]),
        );
        for config in [from_file, from_env] {
            let config = config.expect("loads");
            assert_eq!(config.agent.allowed_tools, patterns);
            let settings = ClaudeSettings::from_config(&config);
            let argv = settings.argv(&ToolRegistry::new(&config.turn.terminator_tools), None);
            let allowed = argv
                .iter()
                .find_map(|a| a.strip_prefix("--allowedTools="))
                .unwrap_or_else(|| panic!("no --allowedTools in {argv:?}"));
            let tail = patterns.join(",");
            assert!(
                allowed.ends_with(&format!(",{tail}")),
                "{allowed} does not end with {tail}"
            );
        }
    }

    #[test]
    fn the_clis_own_scheduling_tools_are_denied_unless_allowed() {
        let mut config = Config::default();
        let tools = ToolRegistry::new(&config.turn.terminator_tools);
        let disallowed = |config: &Config| {
            let argv = ClaudeSettings::from_config(config).argv(&tools, None);
            argv.iter()
                .find_map(|a| a.strip_prefix("--disallowedTools="))
                .map(str::to_owned)
                .unwrap_or_default()
        };
        assert_eq!(
            disallowed(&config),
            "CronCreate,CronList,CronDelete,ScheduleWakeup"
        );
        config.agent.allowed_tools = vec!["ScheduleWakeup".into()];
        config.agent.denied_tools = vec!["WebFetch".into()];
        assert_eq!(
            disallowed(&config),
            "WebFetch,CronCreate,CronList,CronDelete"
        );
        assert!(
            ClaudeSettings::from_config(&config)
                .denied_tools
                .contains(&"CronCreate".to_owned()),
            "denied when the CLI asks, too"
        );
    }

    #[test]
    fn a_conversations_model_and_fork_reach_the_argv() {
        let mut config = Config::default();
        config.agent.model = "sonnet".into();
        let settings = ClaudeSettings::from_config(&config);
        let tools = ToolRegistry::new(&config.turn.terminator_tools);
        let id = "0b5c7e1e-3a8f-4a47-9a57-2f1e3a4d5b6c";
        let after = |argv: &[String], flag: &str| {
            argv.iter()
                .position(|a| a == flag)
                .and_then(|at| argv.get(at + 1).cloned())
        };
        let argv = settings.session_argv(&tools, Some(id), Some("opus"), true);
        assert_eq!(after(&argv, "--model").as_deref(), Some("opus"));
        assert_eq!(argv.iter().filter(|a| *a == "--model").count(), 1);
        let resumed = argv.iter().position(|a| *a == format!("--resume={id}"));
        let forked = argv.iter().position(|a| a == "--fork-session");
        assert!(
            resumed.is_some() && forked == resumed.map(|at| at + 1),
            "{argv:?}"
        );
        let argv = settings.session_argv(&tools, None, None, true);
        assert_eq!(after(&argv, "--model").as_deref(), Some("sonnet"));
        assert!(
            !argv.contains(&"--fork-session".to_owned()),
            "nothing to fork"
        );
        let argv =
            settings.session_argv(&tools, None, Some("--dangerously-skip-permissions"), false);
        assert_eq!(
            after(&argv, "--model").as_deref(),
            Some("sonnet"),
            "not a model name"
        );
    }

    #[test]
    fn a_projects_session_works_in_its_directory_and_hides_the_default_ones() {
        let mut config = Config::default();
        config.agent.workdir = "/srv/chats/{chat}".into();
        config.agent.allowed_tools = vec!["Read".into()];
        let settings = ClaudeSettings::from_config(&config);
        let project = crate::agent::ProjectPlace {
            name: "beta".into(),
            workdir: "/srv/beta/{chat}".into(),
            allowed_tools: vec!["Bash(make:*)".into()],
        };
        let there = settings.for_project(&project);
        assert_eq!(there.process.seal.workdir, project.workdir);
        assert_eq!(there.allowed_tools, ["Read", "Bash(make:*)"]);
        assert!(
            there
                .process
                .seal
                .secrets
                .iter()
                .any(|s| s.parent() == Some(std::path::Path::new("/srv/chats"))),
            "{:?}",
            there.process.seal.secrets
        );
        let tools = ToolRegistry::new(&config.turn.terminator_tools);
        let argv = there.argv(&tools, None);
        assert!(
            argv.iter()
                .any(|a| a.starts_with("--allowedTools=") && a.ends_with(",Read,Bash(make:*)")),
            "{argv:?}"
        );
    }

    #[test]
    fn argv_always_asks_for_partial_messages() {
        let mut config = Config::default();
        config.agent.args = vec!["--extra".into()];
        let settings = ClaudeSettings::from_config(&config);
        let tools = ToolRegistry::new(&config.turn.terminator_tools);
        for resume in [None, Some("0b5c7e1e-3a8f-4a47-9a57-2f1e3a4d5b6c")] {
            let argv = settings.argv(&tools, resume);
            let at = argv
                .iter()
                .position(|a| a == "--include-partial-messages")
                .unwrap_or_else(|| panic!("no --include-partial-messages in {argv:?}"));
            assert_eq!(
                argv.iter()
                    .filter(|a| *a == "--include-partial-messages")
                    .count(),
                1
            );
            assert!(
                at < argv.iter().position(|a| a == "--extra").unwrap_or(0),
                "the protocol's own flags come before agent.args: {argv:?}"
            );
            assert_eq!(&argv[..2], ["--output-format", "stream-json"]);
        }
    }
}

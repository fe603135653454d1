//! The `claude` backend: drives the Claude Code CLI over stream-json.
//!
//! One child process per session, in its own process group. The host
//! speaks the CLI's control protocol both ways: `initialize` with a
//! PostToolBatch hook and the in-process MCP server `telegram-tools`;
//! `mcp_message`, `can_use_tool` and `hook_callback` from the CLI are each
//! answered exactly once. Closing is data: `end_session`, close stdin, then
//! SIGTERM and SIGKILL to the process group, each after a grace.

pub mod protocol;

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::{
    AgentBackend, AgentError, AgentEvent, AgentSession, BoxFuture, OpenSession, Responder,
    SessionCommand, ToolBatch, ToolCall,
};
use crate::chat::tools::{TOOL_SERVER, ToolRegistry};
use crate::config::Config;
use protocol::McpRequest;

/// A line longer than this is dropped (logged), never buffered whole.
pub const MAX_LINE_BYTES: usize = 8 << 20;
/// Stderr lines logged per session before the rest are only counted.
const STDERR_LINES_LOGGED: usize = 200;
/// Characters of one stderr line kept.
const STDERR_LINE_CHARS: usize = 500;

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
    /// Processes not yet reaped.
    live: Arc<AtomicI64>,
}

impl ClaudeBackend {
    /// A backend starting the CLI with `settings`.
    pub fn new(settings: ClaudeSettings, tools: Arc<ToolRegistry>) -> Self {
        Self {
            settings: Arc::new(settings),
            tools,
            spawned: AtomicU64::new(0),
            live: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Processes started and not yet reaped.
    pub fn live(&self) -> i64 {
        self.live.load(Ordering::SeqCst)
    }

    /// Processes spawned so far.
    pub fn spawned(&self) -> u64 {
        self.spawned.load(Ordering::Relaxed)
    }
}

impl AgentBackend for ClaudeBackend {
    fn closed(&self) -> BoxFuture<()> {
        let live = Arc::clone(&self.live);
        let wait = self
            .settings
            .kill_grace
            .saturating_mul(2)
            .saturating_add(Duration::from_secs(1));
        Box::pin(async move {
            let now = tokio::time::Instant::now();
            let deadline = now.checked_add(wait).unwrap_or(now);
            while live.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    }

    fn open(&self, request: OpenSession) -> BoxFuture<Result<AgentSession, AgentError>> {
        let settings = Arc::clone(&self.settings);
        let tools = Arc::clone(&self.tools);
        let result = spawn(&settings, &tools, request, Arc::clone(&self.live));
        if result.is_ok() {
            self.spawned.fetch_add(1, Ordering::Relaxed);
        }
        Box::pin(async move { result })
    }
}

fn spawn(
    settings: &Arc<ClaudeSettings>,
    tools: &Arc<ToolRegistry>,
    request: OpenSession,
    live: Arc<AtomicI64>,
) -> Result<AgentSession, AgentError> {
    let argv = settings.argv(tools, request.resume.as_deref());
    let mut command = Command::new(&settings.command);
    command
        .args(&argv)
        .envs(&settings.env)
        .env("CLAUDE_CODE_ENTRYPOINT", "sdk-ts")
        .env("CLAUDE_CODE_SDK_READS_SESSION_STATE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if !settings.workdir.as_os_str().is_empty() {
        command.current_dir(&settings.workdir);
    }
    // SAFETY: prctl is async-signal-safe; it only asks the kernel to kill
    // the child if turnstile dies, so no agent outlives it.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| AgentError::Spawn(format!("{}: {e}", settings.command)))?;
    let pid = child.id().unwrap_or(0);
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(AgentError::Spawn("the agent's pipes are missing".into()));
    };
    let label = format!("claude pid {pid}");
    tracing::info!(chat_id = request.chat.0, pid, resume = ?request.resume, "agent process started");

    let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
    let (ev_tx, ev_rx) = mpsc::unbounded_channel();
    let (out_tx, out_rx) = mpsc::unbounded_channel::<Value>();
    let (line_tx, line_rx) = mpsc::unbounded_channel();
    tokio::spawn(write_lines(stdin, out_rx, pid));
    tokio::spawn(read_lines(stdout, line_tx, pid));
    let stderr_tail = Arc::new(std::sync::Mutex::new(VecDeque::new()));
    tokio::spawn(log_stderr(stderr, pid, Arc::clone(&stderr_tail)));

    let _ = out_tx.send(protocol::initialize(
        "init_1",
        settings.batch_hook,
        &settings.system_prompt,
    ));
    live.fetch_add(1, Ordering::SeqCst);
    let answers = Answers::new(out_tx, pid);
    let driver = Driver {
        shutdown: request.shutdown.clone(),
        reaped: false,
        live,
        settings: Arc::clone(settings),
        tools: Arc::clone(tools),
        child,
        pid,
        answers,
        events: ev_tx,
        next_request: 1,
        stderr_tail,
    };
    tokio::spawn(driver.run(cmd_rx, line_rx));
    Ok(AgentSession {
        commands: cmd_tx,
        events: ev_rx,
        label,
    })
}

/// Writes lines to the CLI's stdin; closing the channel closes stdin.
async fn write_lines(
    mut stdin: tokio::process::ChildStdin,
    mut rx: mpsc::UnboundedReceiver<Value>,
    pid: u32,
) {
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

/// One line from stdout, or why there is none.
enum Line {
    Json(Value),
    Malformed(String),
    Oversized(usize),
}

/// Reads stdout line by line without ever buffering more than
/// [`MAX_LINE_BYTES`] of one line.
async fn read_lines(stdout: impl AsyncRead + Unpin, tx: mpsc::UnboundedSender<Line>, pid: u32) {
    let mut reader = BufReader::with_capacity(64 << 10, stdout);
    let mut line = Vec::new();
    let mut dropped = 0usize;
    loop {
        let (done, used) = match reader.fill_buf().await {
            Ok([]) => return,
            Ok(buf) => match buf.iter().position(|b| *b == b'\n') {
                Some(at) => {
                    if dropped == 0 {
                        line.extend_from_slice(&buf[..at]);
                    }
                    (true, at + 1)
                }
                None => {
                    if dropped == 0 && line.len() + buf.len() <= MAX_LINE_BYTES {
                        line.extend_from_slice(buf);
                    } else {
                        dropped += line.len() + buf.len();
                        line.clear();
                    }
                    (false, buf.len())
                }
            },
            Err(err) => {
                tracing::warn!(pid, cause = %err, "agent stdout broke");
                return;
            }
        };
        reader.consume(used);
        if !done {
            continue;
        }
        let event = if dropped > 0 {
            Line::Oversized(dropped)
        } else if line.iter().all(u8::is_ascii_whitespace) {
            line.clear();
            continue;
        } else {
            match serde_json::from_slice::<Value>(&line) {
                Ok(value) => Line::Json(value),
                Err(_) => Line::Malformed(
                    String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned(),
                ),
            }
        };
        line.clear();
        dropped = 0;
        if tx.send(event).is_err() {
            return;
        }
    }
}

/// Logs the CLI's stderr, bounded, keeping the last lines for exit reports.
async fn log_stderr(
    stderr: impl AsyncRead + Unpin,
    pid: u32,
    tail: Arc<std::sync::Mutex<VecDeque<String>>>,
) {
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = 0usize;
    while let Ok(Some(line)) = lines.next_line().await {
        seen += 1;
        let line: String = line.chars().take(STDERR_LINE_CHARS).collect();
        if seen <= STDERR_LINES_LOGGED {
            tracing::info!(pid, stderr = %line, "agent stderr");
        }
        if let Ok(mut tail) = tail.lock() {
            if tail.len() == 5 {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
    if seen > STDERR_LINES_LOGGED {
        tracing::info!(
            pid,
            suppressed = seen - STDERR_LINES_LOGGED,
            "agent stderr lines not logged"
        );
    }
}

/// The way into the CLI's stdin, and the requests from the CLI still
/// waiting for an answer: each is answered at most once, and one whose
/// answer could not be written stays pending, so the close path answers it.
#[derive(Clone)]
struct Answers {
    inner: Arc<std::sync::Mutex<AnswersInner>>,
    pid: u32,
}

struct AnswersInner {
    /// Lines to stdin; `None` once stdin is closed.
    out: Option<mpsc::UnboundedSender<Value>>,
    /// Request ids from the CLI not yet answered.
    pending: std::collections::HashSet<String>,
}

impl Answers {
    fn new(out: mpsc::UnboundedSender<Value>, pid: u32) -> Self {
        Self {
            inner: Arc::new(std::sync::Mutex::new(AnswersInner {
                out: Some(out),
                pending: std::collections::HashSet::new(),
            })),
            pid,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AnswersInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes a host line; `false` when stdin is closed.
    fn write(&self, line: Value) -> bool {
        match &self.lock().out {
            Some(out) => out.send(line).is_ok(),
            None => false,
        }
    }

    /// Notes a request from the CLI that needs an answer.
    fn expect(&self, id: &str) {
        if !self.lock().pending.insert(id.to_string()) {
            tracing::warn!(
                pid = self.pid,
                request_id = id,
                "the agent reused a pending request id"
            );
        }
    }

    /// Answers a request once; a second answer is refused and logged.
    fn answer(&self, id: &str, line: Value) -> bool {
        let mut inner = self.lock();
        if !inner.pending.remove(id) {
            tracing::warn!(
                pid = self.pid,
                request_id = id,
                "second answer to a request refused"
            );
            return false;
        }
        let sent = inner.out.as_ref().is_some_and(|out| out.send(line).is_ok());
        if !sent {
            // Still unanswered: the close path refuses it.
            inner.pending.insert(id.to_string());
            tracing::debug!(
                pid = self.pid,
                request_id = id,
                "answer not written; request left pending"
            );
        }
        sent
    }

    /// Refuses every pending request (before closing stdin).
    fn refuse_pending(&self, why: &str) {
        let mut inner = self.lock();
        let ids: Vec<String> = inner.pending.drain().collect();
        for id in ids {
            tracing::info!(pid = self.pid, request_id = %id, "pending agent request refused: {why}");
            if let Some(out) = &inner.out {
                let _ = out.send(protocol::control_error(&id, why));
            }
        }
    }

    /// Closes stdin.
    fn close(&self) {
        self.lock().out = None;
    }
}

/// Owns one CLI process.
struct Driver {
    /// Set once the host stops: requests are then refused.
    shutdown: crate::shutdown::Shutdown,
    /// Set once the process is reaped and its group killed.
    reaped: bool,
    /// Decremented once the process is reaped.
    live: Arc<AtomicI64>,
    settings: Arc<ClaudeSettings>,
    tools: Arc<ToolRegistry>,
    child: Child,
    pid: u32,
    /// Stdin and the pending requests.
    answers: Answers,
    events: mpsc::UnboundedSender<AgentEvent>,
    next_request: u64,
    stderr_tail: Arc<std::sync::Mutex<VecDeque<String>>>,
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
                    Some(SessionCommand::UserTurn(text)) => self.write(protocol::user_message(&text)),
                    Some(SessionCommand::Interrupt) => self.request(serde_json::json!({"subtype": "interrupt"})),
                    Some(SessionCommand::Close) => return self.close(lines).await,
                    Some(SessionCommand::Kill) => return self.kill("killed").await,
                    // The host dropped the session: close it gracefully.
                    None => return self.close(lines).await,
                },
                status = self.child.wait() => {
                    // Drain what the process wrote before it exited.
                    while let Ok(line) = lines.try_recv() {
                        self.on_line(line);
                    }
                    let status = status.ok();
                    let detail = self.exit_detail(status);
                    return self.finish(status.and_then(|s| s.code()), detail);
                }
            }
        }
    }

    fn exit_detail(&self, status: Option<std::process::ExitStatus>) -> String {
        let tail = self
            .stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect::<Vec<_>>().join(" | "))
            .unwrap_or_default();
        let base = match status {
            Some(s) => format!("the agent process exited ({s})"),
            None => "the agent process could not be waited for".into(),
        };
        if tail.is_empty() {
            base
        } else {
            format!("{base}: {tail}")
        }
    }

    fn finish(mut self, code: Option<i32>, detail: String) {
        kill_group(self.pid, libc::SIGKILL);
        self.reaped = true;
        self.live.fetch_sub(1, Ordering::SeqCst);
        self.answers.close();
        tracing::info!(pid = self.pid, ?code, "agent process ended");
        self.emit(AgentEvent::Exited { code, detail });
    }

    /// `end_session`, close stdin, wait; then kill.
    /// `end_session` (stdin stays open, so requests the agent still makes
    /// are answered), then close stdin, then signals, each after part of
    /// the grace.
    async fn close(mut self, mut lines: mpsc::UnboundedReceiver<Line>) {
        self.answers.refuse_pending("the host is stopping");
        self.request(
            serde_json::json!({"subtype": "end_session", "reason": "turnstile closed the session"}),
        );
        let grace = self.settings.kill_grace;
        for (step, wait) in [
            ("end_session", grace / 2),
            ("closing stdin", grace - grace / 2),
        ] {
            if step == "closing stdin" {
                self.answers.close();
            }
            let waited = tokio::time::timeout(wait, async {
                loop {
                    tokio::select! {
                        line = lines.recv() => match line {
                            Some(line) => self.on_line(line),
                            None => return self.child.wait().await,
                        },
                        status = self.child.wait() => return status,
                    }
                }
            })
            .await;
            if let Ok(status) = waited {
                let detail = self.exit_detail(status.as_ref().ok().copied());
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
        kill_group(self.pid, libc::SIGTERM);
        let status = match tokio::time::timeout(self.settings.kill_grace, self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                tracing::warn!(pid = self.pid, "agent ignored SIGTERM; SIGKILL");
                kill_group(self.pid, libc::SIGKILL);
                self.child.wait().await.ok()
            }
        };
        self.finish(
            status.and_then(|s| s.code()),
            format!("the agent was force-closed ({why})"),
        );
    }

    fn on_line(&mut self, line: Line) {
        let value = match line {
            Line::Json(value) => value,
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
        let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "system" => match value.get("subtype").and_then(Value::as_str) {
                Some("init") => {
                    let session_id = value
                        .get("session_id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    self.emit(AgentEvent::Init { session_id });
                }
                Some("session_state_changed")
                    if value.get("state").and_then(Value::as_str) == Some("idle") =>
                {
                    self.emit(AgentEvent::Idle);
                }
                _ => self.emit(AgentEvent::Progress),
            },
            "assistant" => {
                let blocks = value.pointer("/message/content").and_then(Value::as_array);
                let text: Vec<&str> = blocks
                    .into_iter()
                    .flatten()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                    .filter_map(|b| b.get("text").and_then(Value::as_str))
                    .collect();
                if text.is_empty() {
                    self.emit(AgentEvent::Progress);
                } else {
                    self.emit(AgentEvent::Text(text.join("\n")));
                }
            }
            "user" | "stream_event" | "rate_limit_event" => self.emit(AgentEvent::Progress),
            "result" => self.emit(AgentEvent::Result(protocol::result(&value))),
            "control_request" => self.on_request(&value),
            "control_response" => {
                let response = value.get("response").cloned().unwrap_or(Value::Null);
                if response.get("subtype").and_then(Value::as_str) == Some("error") {
                    tracing::warn!(
                        pid = self.pid,
                        ?response,
                        "the agent refused a host request"
                    );
                }
                self.emit(AgentEvent::Progress);
            }
            _ => {
                let shown: String = value.to_string().chars().take(200).collect();
                self.emit(AgentEvent::Unknown(shown));
            }
        }
    }

    /// Answers a request from the CLI, exactly once.
    /// Answers a request from the CLI, exactly once.
    fn on_request(&mut self, value: &Value) {
        let Some(request_id) = value
            .get("request_id")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            tracing::warn!(pid = self.pid, "control request without an id skipped");
            return;
        };
        self.answers.expect(&request_id);
        let request = value.get("request").cloned().unwrap_or(Value::Null);
        let subtype = request.get("subtype").and_then(Value::as_str).unwrap_or("");
        let stopping = self.shutdown.is_closing();
        let answers = self.answers.clone();
        let reply = move |line: Value| {
            answers.answer(&request_id, line);
        };
        let id = value
            .get("request_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        match subtype {
            "mcp_message" => {
                let server = request
                    .get("server_name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let message = request.get("message").cloned().unwrap_or(Value::Null);
                if server != TOOL_SERVER {
                    return reply(protocol::control_error(
                        &id,
                        &format!("unknown MCP server `{server}`"),
                    ));
                }
                let mcp = |answer: Value| {
                    protocol::control_success(&id, serde_json::json!({"mcp_response": answer}))
                };
                match protocol::mcp(&message, &self.tools) {
                    McpRequest::Answer(answer) => reply(mcp(answer)),
                    McpRequest::Call {
                        rpc_id,
                        tool,
                        tool_use_id,
                        ..
                    } if stopping => {
                        tracing::info!(pid = self.pid, call_id = %tool_use_id, tool = %tool, "tools/call refused: the host is stopping");
                        reply(mcp(protocol::rpc_error(
                            &rpc_id,
                            protocol::RPC_HOST_STOPPING,
                            "the host is stopping",
                        )));
                    }
                    McpRequest::Call {
                        rpc_id,
                        tool,
                        tool_use_id,
                        input,
                    } => {
                        let (responder, rx) =
                            Responder::new(format!("tools/call {tool} ({tool_use_id})"));
                        self.emit(AgentEvent::ToolCall(ToolCall {
                            id: tool_use_id,
                            name: format!("mcp__{TOOL_SERVER}__{tool}"),
                            input,
                            reply: responder,
                        }));
                        tokio::spawn(async move {
                            let answer = match rx.await {
                                Ok(value) => protocol::tool_reply(&rpc_id, &value),
                                Err(_) => protocol::rpc_error(
                                    &rpc_id,
                                    protocol::RPC_INTERNAL,
                                    "the host dropped the call",
                                ),
                            };
                            reply(protocol::control_success(
                                &id,
                                serde_json::json!({"mcp_response": answer}),
                            ));
                        });
                    }
                }
            }
            "can_use_tool" | "hook_callback" if stopping => {
                tracing::info!(
                    pid = self.pid,
                    subtype,
                    "agent request refused: the host is stopping"
                );
                reply(protocol::control_error(&id, "the host is stopping"));
            }
            "can_use_tool" => {
                reply(protocol::control_success(
                    &id,
                    protocol::permission(&request, &self.tools, &self.settings.allowed_tools),
                ));
            }
            "hook_callback" => {
                let input = request.get("input").cloned().unwrap_or(Value::Null);
                if input.get("hook_event_name").and_then(Value::as_str) != Some("PostToolBatch") {
                    return reply(protocol::control_success(&id, serde_json::json!({})));
                }
                let (responder, rx) = Responder::new("PostToolBatch hook");
                self.emit(AgentEvent::BatchResolved(ToolBatch {
                    calls: protocol::batch_calls(&input),
                    reply: responder,
                }));
                tokio::spawn(async move {
                    reply(match rx.await.map(|r| protocol::hook_output(&r)) {
                        Ok(Ok(output)) => protocol::control_success(&id, output),
                        Ok(Err(why)) => protocol::control_error(&id, &why),
                        Err(_) => protocol::control_error(&id, "the host dropped the hook"),
                    });
                });
            }
            other => {
                tracing::warn!(
                    pid = self.pid,
                    subtype = other,
                    "unknown control request refused"
                );
                reply(protocol::control_error(
                    &id,
                    &format!("unsupported request `{other}`"),
                ));
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if !self.reaped {
            // The runtime is going away mid-session (turnstile is exiting):
            // take the whole group down now; the child is reaped by tokio.
            kill_group(self.pid, libc::SIGKILL);
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Signals the agent's process group (the child leads it).
fn kill_group(pid: u32, signal: libc::c_int) {
    let Ok(pgid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: killpg only sends a signal; the group is the child's own.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers() -> (Answers, mpsc::UnboundedReceiver<Value>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Answers::new(tx, 1), rx)
    }

    #[test]
    fn a_request_is_answered_at_most_once() {
        let (answers, mut rx) = answers();
        answers.expect("r1");
        assert!(answers.answer("r1", serde_json::json!({"n": 1})));
        assert!(
            !answers.answer("r1", serde_json::json!({"n": 2})),
            "the second answer is refused"
        );
        assert_eq!(rx.try_recv().unwrap()["n"], 1);
        assert!(rx.try_recv().is_err(), "only one answer was written");
        assert!(!answers.answer("never-asked", serde_json::json!({})));
    }

    #[test]
    fn an_answer_that_could_not_be_written_stays_pending_and_the_close_path_refuses_it() {
        let (answers, rx) = answers();
        answers.expect("r1");
        drop(rx);
        assert!(
            !answers.answer("r1", serde_json::json!({})),
            "stdin is gone"
        );
        assert_eq!(answers.lock().pending.len(), 1, "still unanswered");
        let (tx, mut rx) = mpsc::unbounded_channel();
        answers.lock().out = Some(tx);
        answers.refuse_pending("the host is stopping");
        let line = rx.try_recv().unwrap();
        assert_eq!(line["response"]["subtype"], "error");
        assert_eq!(line["response"]["request_id"], "r1");
        assert!(answers.lock().pending.is_empty());
    }

    #[test]
    fn an_error_message_that_is_not_plain_text_still_makes_valid_json() {
        let nasty = "line\nbreak \u{0}nul \"quote\" \u{202e}rtl 🚀";
        let line = protocol::control_error("r", nasty);
        let text = line.to_string();
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["response"]["error"], nasty);
        let rpc = protocol::rpc_error(&Value::Null, protocol::RPC_INTERNAL, nasty);
        assert_eq!(rpc["error"]["message"], nasty);
    }
}

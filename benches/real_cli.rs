//! Benchmarks through the real Claude Code CLI (issue 5, benchmarks 4–6),
//! offline: the CLI installed by `scripts/install-claude.sh` talks to the
//! fake Anthropic Messages API (`tests/support/anthropic.rs`, a fixed 300 ms
//! per model call) and turnstile to a fake Telegram, all on 127.0.0.1.
//!
//! The CLI must never reach the network. Run normally, this binary installs
//! the CLI (outside), then re-runs itself inside a loopback-only network
//! namespace (`unshare -n`, as `tests/real_claude.rs` does; needs root) with
//! `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`; inside, it refuses to start
//! unless loopback is the only interface.
//!
//! One run drives four agents in turn, iteration after iteration, so every
//! comparison is between figures of the same run:
//!
//! - **hook**: turnstile, warm process (`agent.keep_warm = 10m`), PostToolBatch hook on;
//! - **no hook**: the same with `agent.batch_hook = false`;
//! - **cold**: turnstile with the hook and `agent.keep_warm = 0s` (a fresh
//!   process per turn, resuming the chat's session);
//! - **direct**: a minimal driver of one warm CLI process (spawn,
//!   `initialize`, answer its control requests at once, write user lines),
//!   the floor the CLI itself sets.
//!
//! Then one bot restarts after each warm turn, and its first message after
//! the restart runs on the session the new process prewarmed (`restart.rs`);
//! and the real binary re-executes itself on `/restart`, handing its warm
//! CLI process to the next process (`exec.rs`).
//!
//! Every turn is the same: the user says "hello", the model answers with one
//! `end_turn` call carrying the reply text (the no-hook run needs a second
//! model call, answered with text, before the CLI finishes).

#[path = "real_cli/exec.rs"]
mod exec;
#[path = "real_cli/restart.rs"]
mod restart;
mod support;

#[path = "../tests/support/anthropic.rs"]
mod anthropic;

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anthropic::{FakeAnthropic, Reply};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::mpsc;
use turnstile::Turnstile;
use turnstile::agent::claude::protocol::{self, McpRequest};
use turnstile::agent::claude::{ClaudeBackend, ClaudeSettings, permission};
use turnstile::agent::tools::terminator;
use turnstile::agent::{HookReply, ToolRegistry, ToolReply};

use support::bot_api::{FakeBotApi, Options, Record};
use support::collect::{Collector, Ev, TurnOver, check_typing};
use support::figures::{Better, figure};
use support::live;
use support::stats::{Summary, ms, ms_between, ratio, table, verdict};
use support::{Args, Fakes, USER};

/// Every model call of the fake Anthropic API takes this long.
const API_DELAY: Duration = Duration::from_millis(300);
/// The chat every turn happens in.
const CHAT: i64 = USER;
/// What the user says.
const USER_TEXT: &str = "hello";
/// What the model answers through `end_turn`.
const REPLY_TEXT: &str = "hi there";
/// Set in the environment of the re-run inside the namespace.
const INNER_ENV: &str = "BENCH_REAL_CLI_NETNS";
/// The CLI's path, for the re-run.
const CLAUDE_ENV: &str = "BENCH_CLAUDE";
/// Bounds one turn.
const TURN_TIMEOUT: Duration = Duration::from_secs(90);
/// The pause before every measured turn.
const GAP: Duration = Duration::from_millis(500);

fn main() {
    let args = Args::parse();
    support::init_logging();
    if std::env::var(INNER_ENV).as_deref() == Ok("1") {
        inner(&args);
    } else {
        outer(&args);
    }
}

/// Installs the CLI and re-runs this binary in a loopback-only namespace.
fn outer(args: &Args) {
    let root = env!("CARGO_MANIFEST_DIR");
    let install = Command::new(format!("{root}/scripts/install-claude.sh"))
        .stderr(Stdio::inherit())
        .output();
    let claude = match install {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Ok(out) => fail(&format!(
            "scripts/install-claude.sh failed ({})",
            out.status
        )),
        Err(e) => fail(&format!("scripts/install-claude.sh did not run: {e}")),
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => fail(&format!("the bench binary's path: {e}")),
    };
    eprintln!("real_cli: claude at {claude}; re-running inside `unshare -n` (loopback only)");
    let mut cmd = Command::new("unshare");
    cmd.args([
        "-n",
        "sh",
        "-c",
        "ip link set lo up && exec \"$@\"",
        "netns",
    ])
    .arg(&exe)
    .args(args.mode_flag())
    .env(INNER_ENV, "1")
    .env(CLAUDE_ENV, &claude)
    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    let (fragment, ok) = match support::run_child(&mut cmd) {
        Ok(out) if out.code == Some(0) => (out.stdout, true),
        Ok(out) if out.code == Some(support::BROKEN) => (out.stdout, false),
        Ok(out) => (
            format!(
                "### 4–6. Real CLI: FAILED (exit {:?}; see its output)\n\n{}\n",
                out.code, out.stdout
            ),
            false,
        ),
        Err(e) => (format!("### 4–6. Real CLI: FAILED\n\n{e}\n\n"), false),
    };
    support::write_report(args.report.as_deref(), &fragment);
    print!("{fragment}");
    if !ok {
        fail("the real-CLI benchmarks failed (above)");
    }
}

fn fail(why: &str) -> ! {
    eprintln!("real_cli: {why}");
    std::process::exit(1);
}

/// Interfaces of this network namespace other than loopback.
fn other_interfaces() -> Result<Vec<String>, String> {
    let dev = std::fs::read_to_string("/proc/self/net/dev")
        .map_err(|e| format!("/proc/self/net/dev: {e}"))?;
    Ok(dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(|name| name.trim().to_string())
        .filter(|name| name != "lo")
        .collect())
}

fn inner(args: &Args) {
    match other_interfaces() {
        Ok(others) if others.is_empty() => {}
        Ok(others) => fail(&format!(
            "refusing to run the CLI: this network namespace has interfaces besides loopback: {others:?}"
        )),
        Err(e) => fail(&e),
    }
    if std::env::var("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC").as_deref() != Ok("1") {
        fail("refusing to run the CLI without CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1");
    }
    let Ok(claude) = std::env::var(CLAUDE_ENV) else {
        fail("no CLI path (run this binary without the namespace variables)");
    };
    let iterations = if args.quick { 4 } else { 20 };
    let started = Instant::now();
    let stream_turns = if args.quick { 2 } else { 20 };
    let result = actix::System::new().block_on(async {
        let (mut fragment, mut broken) = run(claude.clone(), iterations).await?;
        let (more, more_broken) = restart::restart_run(claude.clone(), iterations).await?;
        fragment.push_str(&more);
        broken.extend(more_broken);
        fragment.push_str(&exec::exec_run(claude.clone(), iterations).await?);
        let (more, more_broken) = stream_run(claude, stream_turns).await?;
        fragment.push_str(&more);
        broken.extend(more_broken);
        Ok::<_, String>((fragment, broken))
    });
    eprintln!("real_cli: {:.1} s", started.elapsed().as_secs_f64());
    match result {
        Ok((fragment, broken)) => support::finish("real_cli", &fragment, &broken),
        Err(e) => fail(&e),
    }
}

// ---------------------------------------------------------------------------
// turnstile on the real CLI.

/// One bot under test, with its own fakes.
struct Bot {
    name: &'static str,
    tg: FakeBotApi,
    api: FakeAnthropic,
    bot: Turnstile,
    backend: Arc<ClaudeBackend>,
    settings: ClaudeSettings,
    /// Its configuration, to start it again (`restart.rs`).
    config: turnstile::Config,
    collector: Collector,
    over: mpsc::UnboundedReceiver<TurnOver>,
    /// Every message pushed (warm-up included), for bucketing API calls.
    pushes: Vec<Instant>,
    _home: tempfile::TempDir,
    _state: tempfile::TempDir,
}

/// One turn of a bot.
#[derive(Debug, Clone, Copy)]
struct BotTurn {
    push: Instant,
    over: TurnOver,
    reply: Instant,
    first_call: Instant,
}

async fn start_bot(
    name: &'static str,
    fakes: &Fakes,
    claude: &str,
    keep_warm: &str,
    hook: bool,
    more: &[(&'static str, String)],
) -> Result<Bot, String> {
    let record = if more.is_empty() {
        Record::Arrivals
    } else {
        Record::Calls
    };
    let tg = fakes
        .bot_api(Options {
            record,
            idle_close: None,
            strict_idle: false,
        })
        .await;
    let api = fakes.run(FakeAnthropic::start()).await;
    api.set_delay(API_DELAY);
    let home = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let state = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let home_path = home.path().display().to_string();
    let extra: Vec<(&str, String)> = vec![
        ("TURNSTILE_AGENT_BACKEND", "claude".into()),
        ("TURNSTILE_AGENT_COMMAND", claude.into()),
        ("TURNSTILE_AGENT_WORKDIR", home_path.clone()),
        ("TURNSTILE_AGENT_ENV_ANTHROPIC_BASE_URL", api.base_url()),
        ("TURNSTILE_AGENT_ENV_ANTHROPIC_API_KEY", "bench-key".into()),
        ("TURNSTILE_AGENT_ENV_HOME", home_path.clone()),
        ("TURNSTILE_AGENT_ENV_CLAUDE_CONFIG_DIR", home_path),
        (
            "TURNSTILE_AGENT_ENV_CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
            "1".into(),
        ),
        ("TURNSTILE_AGENT_KEEP_WARM", keep_warm.into()),
        ("TURNSTILE_AGENT_BATCH_HOOK", hook.to_string()),
        ("TURNSTILE_AGENT_SANDBOX", "none".into()),
        ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "60s".into()),
    ];
    let extra: Vec<(&str, String)> = extra.into_iter().chain(more.iter().cloned()).collect();
    let config = support::config(&tg.url(), state.path(), &extra);
    let settings = ClaudeSettings::from_config(&config);
    let backend = Arc::new(ClaudeBackend::new(
        settings.clone(),
        Arc::new(ToolRegistry::new(&config.turn.terminator_tools)),
    ));
    let bot = Turnstile::start_with_limits(&config, backend.clone(), support::generous_limits())
        .await
        .map_err(|e| format!("{name}: the bot did not start: {e}"))?;
    let (collector, over) = Collector::start(&bot.events);
    Ok(Bot {
        name,
        tg,
        api,
        bot,
        backend,
        settings,
        config,
        collector,
        over,
        pushes: Vec::new(),
        _home: home,
        _state: state,
    })
}

impl Bot {
    /// One user message, answered by `replies`; for a cold bot, also waits
    /// until its process has exited.
    async fn turn(
        &mut self,
        replies: &[Reply],
        expect: &str,
        cold: bool,
    ) -> Result<BotTurn, String> {
        let name = self.name;
        for reply in replies {
            self.api.push(reply.clone());
        }
        let (push, over) = self.say_and_end(expect).await?;
        // The reply, past the live view's status message (a turn longer
        // than `progress.after`, such as a cold start on a loaded machine,
        // shows one first).
        let mut from = push;
        let reply = loop {
            let Some((at, text)) = self
                .tg
                .message_after(CHAT, from, Duration::from_secs(10))
                .await
            else {
                return Err(format!("{name}: no reply reached the fake Telegram"));
            };
            if text == REPLY_TEXT {
                break at;
            }
            if !is_status(&text) {
                return Err(format!("{name}: the reply was {text:?}"));
            }
            from = at + Duration::from_nanos(1);
        };
        let first_call = self
            .api
            .model_call_times()
            .into_iter()
            .find(|at| *at >= push)
            .ok_or_else(|| format!("{name}: no model call after the message"))?;
        if cold {
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.backend.running() > 0 {
                if Instant::now() > deadline {
                    return Err(format!(
                        "{name}: the CLI process did not exit after the turn"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(BotTurn {
            push,
            over,
            reply,
            first_call,
        })
    }

    /// Model calls (and side calls) between each push and the next, for the
    /// pushes from `skip` on.
    fn calls_per_turn(&self, skip: usize) -> (Vec<f64>, usize) {
        let requests = self.api.requests();
        let mut model = Vec::new();
        let mut side = 0;
        for (i, from) in self.pushes.iter().enumerate().skip(skip) {
            let until = self.pushes.get(i + 1).copied();
            let inside = |at: Instant| at >= *from && until.is_none_or(|u| at < u);
            model.push(
                requests
                    .iter()
                    .filter(|r| r.model_call && inside(r.at))
                    .count() as f64,
            );
            side += requests
                .iter()
                .filter(|r| !r.model_call && r.path == "/v1/messages" && inside(r.at))
                .count();
        }
        (model, side)
    }

    /// Stops the bot (its CLI processes end); returns the typing check and
    /// when each turn actor started, in order.
    async fn stop(self) -> Result<(support::collect::TypingCheck, Vec<Instant>), String> {
        let _ = self.bot.stop().await;
        let collected = self.collector.finish();
        if collected.lagged > 0 {
            return Err(format!(
                "{}: the collector lost {} events",
                self.name, collected.lagged
            ));
        }
        let pushes = [(CHAT, self.pushes.clone())].into_iter().collect();
        let mut started: Vec<(u64, Instant)> = collected
            .events
            .iter()
            .filter_map(|e| match *e {
                Ev::Started { turn, at, .. } => Some((turn, at)),
                _ => None,
            })
            .collect();
        started.sort_by_key(|s| s.0);
        let check = check_typing(&collected.events, &pushes, &self.tg.log().chat_actions);
        Ok((check, started.into_iter().map(|s| s.1).collect()))
    }
}

/// Whether `text` is the live view's status message (`💬 Writing to the
/// chat\n1 tool call · 3s`): its second line counts the tool calls.
fn is_status(text: &str) -> bool {
    text.lines()
        .nth(1)
        .is_some_and(|l| l.contains(" tool call") && l.contains(" · "))
}

fn end_turn_reply() -> Reply {
    Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({ "text": REPLY_TEXT }),
    )])
}

// ---------------------------------------------------------------------------
// The minimal direct driver.

/// One warm CLI process driven directly: the floor.
struct Direct {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    tools: ToolRegistry,
    api: FakeAnthropic,
    _home: tempfile::TempDir,
}

/// One turn of the direct driver.
#[derive(Debug, Clone, Copy)]
struct DirectTurn {
    written: Instant,
    tool_call: Instant,
    result: Instant,
    first_call: Instant,
    /// What the CLI says of its own way to the first request, when asked
    /// (`CLAUDE_CODE_EMIT_STARTUP_TIMING=1`).
    own: Option<OwnTiming>,
}

/// The CLI's own account of one turn's way to its first API request, from
/// its `result` line (`time_to_request_ms`, `time_to_request_cpu_ms`).
#[derive(Debug, Clone, Copy)]
struct OwnTiming {
    /// The user line taken → the request sent.
    to_request_ms: f64,
    /// CPU time the CLI spent on that way.
    cpu_ms: f64,
}

impl OwnTiming {
    fn of(result: &Value) -> Option<OwnTiming> {
        Some(OwnTiming {
            to_request_ms: result["time_to_request_ms"].as_f64()?,
            cpu_ms: result["time_to_request_cpu_ms"].as_f64()?,
        })
    }
}

impl Direct {
    /// Spawns the CLI with the same arguments, environment and `initialize`
    /// turnstile uses (from `base`), against a fake API of its own.
    async fn spawn(fakes: &Fakes, claude: &str, base: &ClaudeSettings) -> Result<Direct, String> {
        let api = fakes.run(FakeAnthropic::start()).await;
        api.set_delay(API_DELAY);
        let home = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let mut settings = base.clone();
        let home_path = home.path().display().to_string();
        settings
            .process
            .env
            .insert("ANTHROPIC_BASE_URL".into(), api.base_url());
        settings
            .process
            .env
            .insert("HOME".into(), home_path.clone());
        settings
            .process
            .env
            .insert("CLAUDE_CONFIG_DIR".into(), home_path);
        let tools = ToolRegistry::new(&["end_turn".to_string()]);
        let mut child = tokio::process::Command::new(claude)
            .args(settings.argv(&tools, None))
            .envs(&settings.process.env)
            .env("CLAUDE_CODE_ENTRYPOINT", "sdk-ts")
            .env("CLAUDE_CODE_SDK_READS_SESSION_STATE", "1")
            .current_dir(home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("direct: spawn {claude}: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("direct: the CLI's pipes are missing".into());
        };
        let mut direct = Direct {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            tools,
            api,
            _home: home,
        };
        let init = protocol::initialize("init_1", true, &settings.system_prompt);
        direct.write(&init).await?;
        Ok(direct)
    }

    async fn write(&mut self, line: &Value) -> Result<(), String> {
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        self.stdin
            .write_all(&bytes)
            .await
            .map_err(|e| format!("direct: write to the CLI: {e}"))?;
        self.stdin
            .flush()
            .await
            .map_err(|e| format!("direct: flush: {e}"))
    }

    /// The answer to one control request, and whether it was a tool call.
    fn answer(&self, message: &Value) -> (Value, bool) {
        let id = message["request_id"].as_str().unwrap_or_default();
        let request = &message["request"];
        match request["subtype"].as_str().unwrap_or_default() {
            "mcp_message" => match protocol::mcp(&request["message"], &self.tools) {
                McpRequest::Answer(answer) => (
                    protocol::control_success(id, json!({ "mcp_response": answer })),
                    false,
                ),
                McpRequest::Call { rpc_id, .. } => {
                    let reply = protocol::tool_reply(&rpc_id, &ToolReply::Ok("delivered".into()));
                    (
                        protocol::control_success(id, json!({ "mcp_response": reply })),
                        true,
                    )
                }
            },
            "can_use_tool" => (
                protocol::control_success(id, permission(request, &self.tools, &[])),
                false,
            ),
            "hook_callback" => {
                let calls = protocol::batch_calls(&request["input"], &self.tools);
                let reply = if terminator(&calls).is_some() {
                    HookReply::Stop {
                        reason: "done".into(),
                    }
                } else {
                    HookReply::Continue
                };
                let line = match protocol::hook_output(&reply) {
                    Ok(output) => protocol::control_success(id, output),
                    Err(why) => protocol::control_error(id, &why),
                };
                (line, false)
            }
            other => (
                protocol::control_error(id, &format!("unsupported request `{other}`")),
                false,
            ),
        }
    }

    /// Writes a user line and answers the CLI until its `result`.
    async fn turn(&mut self) -> Result<DirectTurn, String> {
        self.api.push(end_turn_reply());
        let written = Instant::now();
        self.write(&protocol::user_message(USER_TEXT)).await?;
        let deadline = tokio::time::Instant::now() + TURN_TIMEOUT;
        let mut tool_call = None;
        loop {
            let line = match tokio::time::timeout_at(deadline, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None)) => return Err("direct: the CLI closed its output".into()),
                Ok(Err(e)) => return Err(format!("direct: reading the CLI: {e}")),
                Err(_) => {
                    return Err(format!(
                        "direct: no result within {TURN_TIMEOUT:?}; API: {}",
                        self.api.describe()
                    ));
                }
            };
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            match message["type"].as_str() {
                Some("control_request") => {
                    let (answer, is_call) = self.answer(&message);
                    if is_call && tool_call.is_none() {
                        tool_call = Some(Instant::now());
                    }
                    self.write(&answer).await?;
                }
                Some("result") => {
                    let result = Instant::now();
                    let first_call = self
                        .api
                        .model_call_times()
                        .into_iter()
                        .find(|at| *at >= written)
                        .ok_or("direct: no model call after the user line")?;
                    return Ok(DirectTurn {
                        written,
                        tool_call: tool_call.ok_or("direct: no tool call before the result")?,
                        result,
                        first_call,
                        own: OwnTiming::of(&message),
                    });
                }
                _ => {}
            }
        }
    }

    /// Waits for the CLI's answer to `initialize`, answering what it asks
    /// meanwhile: the process is then as ready as a prewarmed one.
    async fn ready(&mut self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + TURN_TIMEOUT;
        loop {
            let line = match tokio::time::timeout_at(deadline, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None)) => return Err("direct: the CLI closed its output".into()),
                Ok(Err(e)) => return Err(format!("direct: reading the CLI: {e}")),
                Err(_) => {
                    return Err(format!(
                        "direct: no answer to initialize within {TURN_TIMEOUT:?}"
                    ));
                }
            };
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            match message["type"].as_str() {
                Some("control_request") => {
                    let (answer, _) = self.answer(&message);
                    self.write(&answer).await?;
                }
                Some("control_response")
                    if message["response"]["request_id"].as_str() == Some("init_1") =>
                {
                    return Ok(());
                }
                _ => {}
            }
        }
    }

    /// Closes stdin and waits (bounded) for the CLI to exit.
    async fn close(self) {
        let Direct {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
    }
}

// ---------------------------------------------------------------------------
// The run.

async fn run(claude: String, iterations: usize) -> Result<(String, Vec<String>), String> {
    let fakes = Fakes::new();
    let mut hook = start_bot("hook", &fakes, &claude, "10m", true, &[]).await?;
    let mut nohook = start_bot("no hook", &fakes, &claude, "10m", false, &[]).await?;
    let mut cold = start_bot("cold", &fakes, &claude, "0s", true, &[]).await?;
    let mut direct = Direct::spawn(&fakes, &claude, &hook.settings).await?;
    let with_second_call = [end_turn_reply(), Reply::Text("done".into())];

    eprintln!("real_cli: warm-up (one turn each, not counted)");
    hook.turn(&[end_turn_reply()], "terminated", false).await?;
    nohook.turn(&with_second_call, "completed", false).await?;
    cold.turn(&[end_turn_reply()], "terminated", true).await?;
    direct.turn().await?;

    let (mut h, mut n, mut c, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..iterations {
        // Rotate who goes first, so each agent takes each place in the
        // order equally often; and let the machine settle before each turn
        // (a turn right after a cold start is measurably slower).
        for k in 0..4 {
            tokio::time::sleep(GAP).await;
            match (i + k) % 4 {
                0 => h.push(hook.turn(&[end_turn_reply()], "terminated", false).await?),
                1 => n.push(nohook.turn(&with_second_call, "completed", false).await?),
                2 => c.push(cold.turn(&[end_turn_reply()], "terminated", true).await?),
                _ => d.push(direct.turn().await?),
            }
        }
        eprintln!(
            "real_cli: iteration {} of {iterations}: first API request hook {:.0} ms, cold {:.0} ms, direct {:.0} ms",
            i + 1,
            ms_between(h[i].push, h[i].first_call),
            ms_between(c[i].push, c[i].first_call),
            ms_between(d[i].written, d[i].first_call),
        );
    }

    let (hook_calls, hook_side) = hook.calls_per_turn(1);
    let (nohook_calls, nohook_side) = nohook.calls_per_turn(1);
    let (cold_calls, cold_side) = cold.calls_per_turn(1);
    let spawned = (
        hook.backend.spawned(),
        nohook.backend.spawned(),
        cold.backend.spawned(),
    );
    let mut broken = Vec::new();
    let mut hook_started = Vec::new();
    for bot in [hook, nohook, cold] {
        let name = bot.name;
        let (check, started) = bot.stop().await?;
        if name == "hook" {
            hook_started = started;
        }
        if check.dispatched_after_end > 0 {
            broken.push(format!(
                "{name}: {} sendChatAction dispatched after TurnEnded",
                check.dispatched_after_end
            ));
        }
    }
    direct.close().await;

    let since = |pairs: &mut dyn Iterator<Item = (Instant, Instant)>| -> Vec<f64> {
        pairs.map(|(a, b)| ms_between(a, b)).collect()
    };
    let p50 = |v: &[f64]| Summary::of(v).map_or(f64::NAN, |s| s.p50);
    let cells = |v: &[f64]| {
        Summary::of(v).map_or("–".to_string(), |s| {
            format!("{} / {} / {}", ms(s.p50), ms(s.p99), ms(s.max))
        })
    };
    let counts = |v: &[f64]| {
        Summary::of(v).map_or("–".to_string(), |s| {
            format!("{:.0} / {:.0} / {:.0}", s.p50, s.p99, s.max)
        })
    };

    // 4. Hook against no hook.
    let h_reply = since(&mut h.iter().map(|t| (t.push, t.reply)));
    let n_reply = since(&mut n.iter().map(|t| (t.push, t.reply)));
    let h_typing = since(&mut h.iter().map(|t| (t.push, t.over.typing_stopped)));
    let n_typing = since(&mut n.iter().map(|t| (t.push, t.over.typing_stopped)));
    let h_reply_to_typing = since(&mut h.iter().map(|t| (t.reply, t.over.typing_stopped)));
    let n_reply_to_typing = since(&mut n.iter().map(|t| (t.reply, t.over.typing_stopped)));
    let rows4 = vec![
        vec![
            "**API calls per turn**".into(),
            counts(&hook_calls),
            counts(&nohook_calls),
            ratio(p50(&nohook_calls), p50(&hook_calls)),
        ],
        vec![
            "user message → reply (`sendMessage` at the fake Telegram)".into(),
            cells(&h_reply),
            cells(&n_reply),
            ratio(p50(&n_reply), p50(&h_reply)),
        ],
        vec![
            "**user message → typing stopped**".into(),
            cells(&h_typing),
            cells(&n_typing),
            ratio(p50(&n_typing), p50(&h_typing)),
        ],
        vec![
            "reply → typing stopped (typing shown after the reply)".into(),
            cells(&h_reply_to_typing),
            cells(&n_reply_to_typing),
            ratio(p50(&n_reply_to_typing), p50(&h_reply_to_typing)),
        ],
    ];

    // 5. Warm against cold, and the floor.
    let h_first = since(&mut h.iter().map(|t| (t.push, t.first_call)));
    let c_first = since(&mut c.iter().map(|t| (t.push, t.first_call)));
    let d_first = since(&mut d.iter().map(|t| (t.written, t.first_call)));
    let added = p50(&h_first) - p50(&d_first);
    // `first` for --compare: a real CLI's start of work spreads widely
    // between runs on the 2-core machine, hence the wide bands.
    figure(
        "real_cli",
        "first: user message → first API request, warm p50 (ms)",
        p50(&h_first),
        "ms",
        Better::Lower,
        (50.0, 20.0),
    );
    figure(
        "real_cli",
        "turnstile adds to the floor, warm p50 (ms)",
        added,
        "ms",
        Better::Lower,
        (100.0, 20.0),
    );
    // The warm-up turn is the first started; the measured ones follow.
    let h_to_actor: Vec<f64> = h
        .iter()
        .zip(hook_started.iter().skip(1))
        .map(|(t, started)| ms_between(t.push, *started))
        .collect();
    let rows5 = vec![
        vec![
            "turnstile, warm process: user message → first API request".into(),
            cells(&h_first),
            String::new(),
        ],
        vec![
            "turnstile, fresh process per turn (`--resume`): user message → first API request"
                .into(),
            cells(&c_first),
            format!(
                "cold / warm (p50): **{}**",
                ratio(p50(&c_first), p50(&h_first))
            ),
        ],
        vec![
            "floor: direct driver, warm CLI: user line written → first API request".into(),
            cells(&d_first),
            String::new(),
        ],
        vec![
            "of which turnstile alone: user message → turn actor started (warm)".into(),
            cells(&h_to_actor),
            String::new(),
        ],
        vec![
            "**turnstile adds to the floor** (warm p50 − floor p50)".into(),
            ms(added),
            format!("target < 5 ms: {}", verdict(added < 5.0)),
        ],
    ];

    // 6. Overhead.
    let h_ended = since(&mut h.iter().map(|t| (t.push, t.over.ended)));
    let d_result = since(&mut d.iter().map(|t| (t.written, t.result)));
    let d_tool = since(&mut d.iter().map(|t| (t.written, t.tool_call)));
    let rows6 = vec![
        vec![
            "turnstile (warm, hook): Telegram update → `sendMessage` received".into(),
            cells(&h_reply),
        ],
        vec![
            "direct driver (warm): user line → `result`".into(),
            cells(&d_result),
        ],
        vec![
            "**difference** (turnstile p50 − direct p50)".into(),
            ms(p50(&h_reply) - p50(&d_result)),
        ],
        vec![
            "for reference: direct driver, user line → the `end_turn` tool call".into(),
            cells(&d_tool),
        ],
        vec![
            "for reference: turnstile, Telegram update → TurnEnded".into(),
            cells(&h_ended),
        ],
    ];

    let mut f = String::new();
    let _ = writeln!(
        f,
        "Benchmarks 4–6 share one run: the real Claude Code CLI against the fake Anthropic API (every \
         model call answered after a fixed {} ms), inside a loopback-only network namespace. Each \
         iteration runs one turn of each of four agents, one after another: turnstile with the hook (warm \
         process), without the hook (warm), with the hook and a fresh process per turn, and a minimal \
         direct driver of a warm CLI; who goes first rotates each iteration, and every turn starts after a \
         {} ms pause (a turn right after a cold start is otherwise measurably slower). {} iterations after \
         one warm-up turn each; every turn counted; p50 / p99 / \
         max (nearest rank: with fewer than 100 turns p99 is the maximum). \"User message\" is the moment \
         the update is queued at the fake Telegram (the bot's long poll is waiting); the reply is the \
         `sendMessage` arriving there; the first API request is its arrival at the fake Anthropic API; \
         typing stopped is the bot's own event. {}.\n",
        API_DELAY.as_millis(),
        GAP.as_millis(),
        iterations,
        support::build_profile()
    );
    let _ = writeln!(f, "### 4. The real CLI, hook against no hook\n");
    let _ = writeln!(
        f,
        "The model answers \"hello\" with one `end_turn` call carrying the reply. With the PostToolBatch \
         hook, turnstile ends the turn when the batch resolves and answers `continue: false`, so the CLI \
         makes no second call; without it, the CLI calls the model again (answered with text) and the turn \
         ends at the settled `result`. Side calls (model requests without tools): hook {hook_side}, no hook \
         {nohook_side}, cold {cold_side}. Processes spawned: hook {}, no hook {}, cold {}.\n",
        spawned.0, spawned.1, spawned.2
    );
    f.push_str(&table(
        &[
            "measure",
            "hook: p50 / p99 / max",
            "no hook: p50 / p99 / max",
            "no hook / hook (p50)",
        ],
        &rows4,
    ));
    let _ = writeln!(f, "\n### 5. Warm against cold\n");
    let _ = writeln!(
        f,
        "From the user message to the CLI's first model request. The cold run's process is started for the \
         turn (resuming the chat's session) and has exited before the next iteration; API calls per turn: \
         cold {}. The floor is the same CLI build, arguments, environment and `initialize` driven directly \
         (`benches/real_cli.rs`, `Direct`), timed from writing the same user line to a warm process.\n",
        counts(&cold_calls)
    );
    f.push_str(&table(
        &["measure", "p50 / p99 / max", "ratio / target"],
        &rows5,
    ));
    let _ = writeln!(f, "\n### 6. Overhead\n");
    let _ = writeln!(
        f,
        "The same one-call turn, side by side: driven by turnstile (from the Telegram update to the \
         `sendMessage` the fake Telegram receives) and by the direct driver (from writing the user line to \
         reading the CLI's `result`; its tool calls are answered at once, with no Telegram behind them). \
         turnstile sends the reply while serving the `end_turn` call, before the CLI's `result`.\n"
    );
    f.push_str(&table(&["measure", "p50 / p99 / max"], &rows6));
    f.push('\n');
    Ok((f, broken))
}

// ---------------------------------------------------------------------------
// 7b. First text token → first text visible, through the real CLI.

/// The pause between two streamed pieces of the answer.
const PIECE_PAUSE: Duration = Duration::from_millis(150);

/// One streamed turn's figures, in milliseconds from the fake API's first
/// delta.
struct StreamTurn {
    visible: f64,
    whole: Option<f64>,
    text_requests: usize,
}

impl Bot {
    /// Sends the user's message and waits for its TurnEnded, which must
    /// be `expect`: when the message went, and how the turn ended.
    async fn say_and_end(&mut self, expect: &str) -> Result<(Instant, TurnOver), String> {
        let name = self.name;
        let push = self
            .tg
            .push_many(std::iter::once((CHAT, USER, USER_TEXT.to_string())));
        self.pushes.push(push);
        let over = match tokio::time::timeout(TURN_TIMEOUT, self.over.recv()).await {
            Ok(Some(over)) => over,
            Ok(None) => return Err(format!("{name}: the event collector stopped")),
            Err(_) => {
                return Err(format!(
                    "{name}: no TurnEnded within {TURN_TIMEOUT:?}; API: {}",
                    self.api.describe()
                ));
            }
        };
        if over.outcome != expect {
            return Err(format!(
                "{name}: the turn ended {}, expected {expect}; API: {}",
                over.outcome,
                self.api.describe()
            ));
        }
        Ok((push, over))
    }

    /// One user message answered by `reply` (the answer in chunks), ending
    /// `expect`; waits until the whole answer reached the fake Telegram.
    async fn stream_turn(&mut self, reply: Reply, expect: &str) -> Result<StreamTurn, String> {
        let name = self.name;
        self.api.push(reply);
        let answered_before = self.api.answer_times().len();
        let (push, _) = self.say_and_end(expect).await?;
        let seen = self.tg.wait_for(TURN_TIMEOUT, "the whole answer", |calls| {
            live::answer_complete(
                &calls
                    .iter()
                    .filter(|c| c.at >= push)
                    .cloned()
                    .collect::<Vec<_>>(),
            )
            .then_some(())
        });
        if tokio::time::timeout(TURN_TIMEOUT, seen).await.is_err() {
            return Err(format!(
                "{name}: the whole answer never reached the fake Telegram"
            ));
        }
        let token = self
            .api
            .answer_times()
            .get(answered_before)
            .copied()
            .ok_or_else(|| {
                format!(
                    "{name}: no model call answered; API: {}",
                    self.api.describe()
                )
            })?;
        let calls = self.tg.calls();
        let (first, whole, text_requests) =
            live::answer_calls(calls.iter().filter(|c| c.at >= push));
        let Some(first) = first else {
            return Err(format!("{name}: the answer never showed"));
        };
        Ok(StreamTurn {
            visible: ms_between(token, first.at),
            whole: whole.map(|c| ms_between(token, c.at)),
            text_requests,
        })
    }
}

async fn stream_run(claude: String, turns: usize) -> Result<(String, Vec<String>), String> {
    let fakes = Fakes::new();
    let end_turn = || {
        Reply::tool_text_in_chunks(
            "mcp__telegram-tools__end_turn",
            &live::ANSWER_PIECES,
            PIECE_PAUSE,
        )
    };
    let plain = || Reply::text_in_chunks(&live::ANSWER_PIECES, PIECE_PAUSE);
    let mut rows = Vec::new();
    let broken = Vec::new();
    for (label, source) in [("`end_turn {text}`", "end_turn"), ("plain text", "text")] {
        for mode in ["edit", "off"] {
            let name: &'static str = match (source, mode) {
                ("end_turn", "edit") => "stream end_turn edit",
                ("end_turn", _) => "stream end_turn off",
                (_, "edit") => "stream text edit",
                _ => "stream text off",
            };
            let more = [("TURNSTILE_PROGRESS_STREAM", mode.to_string())];
            let mut bot = start_bot(name, &fakes, &claude, "10m", true, &more).await?;
            let expect = if source == "end_turn" {
                "terminated"
            } else {
                "completed"
            };
            let reply = || {
                if source == "end_turn" {
                    end_turn()
                } else {
                    plain()
                }
            };
            eprintln!("real_cli: {name}: warm-up and {turns} turns");
            bot.stream_turn(reply(), expect).await?;
            let mut got = Vec::new();
            for _ in 0..turns {
                tokio::time::sleep(GAP * 2).await;
                got.push(bot.stream_turn(reply(), expect).await?);
            }
            let _ = bot.bot.stop().await;
            let visible: Vec<f64> = got.iter().map(|t| t.visible).collect();
            let whole: Vec<f64> = got.iter().filter_map(|t| t.whole).collect();
            let requests: Vec<f64> = got.iter().map(|t| t.text_requests as f64).collect();
            let s = Summary::of(&visible);
            let w = Summary::of(&whole);
            let r = Summary::of(&requests);
            rows.push(vec![
                label.to_string(),
                format!("`{mode}`"),
                got.len().to_string(),
                s.map_or("–".into(), |s| format!("**{}**", ms(s.p50))),
                s.map_or("–".into(), |s| format!("**{}**", ms(s.p99))),
                s.map_or("–".into(), |s| ms(s.max)),
                w.map_or("–".into(), |w| format!("{} / {}", ms(w.p50), ms(w.p99))),
                r.map_or("–".into(), |r| {
                    if r.min == r.max {
                        format!("{:.0}", r.p50)
                    } else {
                        format!("{:.0}–{:.0}", r.min, r.max)
                    }
                }),
            ]);
        }
    }
    let mut f = String::new();
    let _ = writeln!(
        f,
        "### 7b. First text token → first text visible, real CLI\n"
    );
    let _ = writeln!(
        f,
        "The real Claude Code CLI (warm process, hook on) against the fake Anthropic API, which answers \
         each model call after {} ms by streaming the same {}-character answer in {} `content_block_delta` \
         pieces {} ms apart: as the `text` of an `end_turn` call (`input_json_delta`) or as plain text \
         (`text_delta`). One bot per row, a warm-up turn, then {turns} turns, each {} ms after the previous \
         answer arrived; the outbox without rate limits (as in 4–6), `progress.interval` at its default \
         (2 s). **First text token**: the moment the fake API hands its answer's body to the connection \
         (after the delay; that first frame carries the first delta). **Visible**: the arrival at the \
         fake Telegram of the turn's first `sendMessage` or `editMessageText` answered 200 whose text is a \
         non-empty prefix of the answer; \"whole answer\" is the first carrying all of it. Both clocks are \
         this process's. {}.\n",
        API_DELAY.as_millis(),
        live::answer().chars().count(),
        live::ANSWER_PIECES.len(),
        PIECE_PAUSE.as_millis(),
        (GAP * 2).as_millis(),
        support::build_profile()
    );
    f.push_str(&table(
        &[
            "answer as",
            "progress.stream",
            "turns",
            "token → visible p50",
            "p99",
            "max",
            "token → whole answer p50 / p99",
            "text requests per turn",
        ],
        &rows,
    ));
    f.push('\n');
    Ok((f, broken))
}

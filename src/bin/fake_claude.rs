//! fake-claude: a stand-in for the Claude Code CLI that speaks its
//! stream-json protocol and plays a [`Scenario`] (the scripted backend's
//! format) from the file named by `FAKE_CLAUDE_SCENARIO`. Test-only.
//!
//! - `FAKE_CLAUDE_LOG`: a file to append what happened to (JSON lines:
//!   `{"pid"}` at start, every line from the host, every answer to the
//!   fake's own requests, `{"grandchild"}` pids).
//! - `FAKE_CLAUDE_GRANDCHILD=1`: start a `sleep` child in the same process
//!   group, to prove the whole group is killed.
//! - `FAKE_CLAUDE_FINISH_TURN_FIRST=1`: `end_session` during a turn lets the
//!   turn finish (its requests still come) before exiting.
//! - `FAKE_CLAUDE_REPORT_PERMISSIONS=1`: after the answer to the
//!   `can_use_tool` request of a `tools` step's call of a tool that is not a
//!   chat tool (`Bash`), the fake tells the chat what it got, through the
//!   `send` chat tool: `allowed: <updatedInput as JSON>`, `denied: <message>`
//!   or `refused: <control error>`.
//! - `FAKE_CLAUDE_DUMP`: a file (relative to the working directory) to
//!   append one JSON line to at start: `{"pid", "env", "args", "cwd",
//!   "probes"}`, where `probes` maps each path of `FAKE_CLAUDE_PROBE`
//!   (`:`-separated) to what reading it gave (`null`: nothing).
//!
//! Its session id is a UUID made of its pid ([`session_id`]), or the one
//! given as `--resume=<id>` (or `--resume <id>`).
//!
//! The protocol: `initialize` is answered; each user line plays the first
//! scenario rule its text matches; tool calls go out as `mcp_message`
//! `tools/call`; a batch ends with a `hook_callback` when the hook was
//! registered; `interrupt` ends the turn with `aborted_streaming`;
//! `end_session` or the end of stdin exits 0 (unless wedged).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use turnstile::agent::scripted::fill_value;
use turnstile::agent::tools::{TOOL_SERVER, ToolName};
use turnstile::agent::{AfterResult, Scenario, ScriptTurn, Step};

/// Shared by the stdin reader and the player.
struct Fake {
    out: Mutex<std::io::Stdout>,
    log: Option<Mutex<std::fs::File>>,
    pending: Mutex<HashMap<String, Sender<Value>>>,
    interrupted: AtomicBool,
    hook: AtomicBool,
    next_id: AtomicU64,
    session_id: String,
}

impl Fake {
    fn write(&self, line: &Value) {
        self.write_raw(&line.to_string());
    }

    fn write_raw(&self, line: &str) {
        if let Ok(mut out) = self.out.lock() {
            let _ = out.write_all(format!("{line}\n").as_bytes());
            let _ = out.flush();
        }
    }

    fn log(&self, entry: Value) {
        if let Some(log) = &self.log
            && let Ok(mut file) = log.lock()
        {
            // One write per line, so lines of concurrent fakes never interleave.
            let _ = file.write_all(format!("{entry}\n").as_bytes());
        }
    }

    /// Sends a control request and waits for its answer (None: stdin gone).
    fn ask(&self, request: Value) -> Option<Value> {
        let id = format!("fake_{}", self.next_id.fetch_add(1, Ordering::SeqCst));
        let (tx, rx) = mpsc::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id.clone(), tx);
        }
        self.write(&json!({"type": "control_request", "request_id": id, "request": request}));
        let answer = rx.recv().ok();
        self.log(json!({"asked": request, "answer": answer}));
        answer
    }
}

fn main() {
    let scenario = match std::env::var("FAKE_CLAUDE_SCENARIO") {
        Ok(path) => match Scenario::from_file(std::path::Path::new(&path)) {
            Ok(s) => s,
            Err(err) => {
                eprintln!("fake-claude: {err}");
                std::process::exit(3);
            }
        },
        Err(_) => Scenario::default(),
    };
    let args: Vec<String> = std::env::args().collect();
    let resume = resumed(&args);
    let pid = std::process::id();
    dump(&args);
    let fake = Arc::new(Fake {
        out: Mutex::new(std::io::stdout()),
        log: std::env::var("FAKE_CLAUDE_LOG").ok().and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
                .map(Mutex::new)
        }),
        pending: Mutex::new(HashMap::new()),
        interrupted: AtomicBool::new(false),
        hook: AtomicBool::new(false),
        next_id: AtomicU64::new(1),
        session_id: resume.clone().unwrap_or_else(|| session_id(pid)),
    });
    fake.log(json!({"pid": pid, "args": args[1..]}));
    if std::env::var("FAKE_CLAUDE_GRANDCHILD").is_ok_and(|v| v == "1")
        && let Ok(child) = std::process::Command::new("sleep").arg("1000").spawn()
    {
        fake.log(json!({"grandchild": child.id()}));
    }
    FINISH_TURN_FIRST.store(
        std::env::var("FAKE_CLAUDE_FINISH_TURN_FIRST").is_ok_and(|v| v == "1"),
        Ordering::SeqCst,
    );
    REPORT_PERMISSIONS.store(
        std::env::var("FAKE_CLAUDE_REPORT_PERMISSIONS").is_ok_and(|v| v == "1"),
        Ordering::SeqCst,
    );
    eprintln!("fake-claude {pid} started");

    let (turns_tx, turns_rx) = mpsc::channel::<String>();
    let player = {
        let fake = Arc::clone(&fake);
        std::thread::spawn(move || play(&fake, &scenario, turns_rx))
    };
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(value) = serde_json::from_str::<Value>(&line) else {
            fake.log(json!({"unparsed": line}));
            continue;
        };
        fake.log(json!({"from_host": value}));
        match value.get("type").and_then(Value::as_str) {
            Some("user") => {
                let text = value
                    .pointer("/message/content/0/text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let _ = turns_tx.send(text);
            }
            Some("control_request") => {
                let id = value
                    .get("request_id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let subtype = value
                    .pointer("/request/subtype")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                match subtype {
                    "initialize" => {
                        fake.hook.store(
                            value.pointer("/request/hooks/PostToolBatch").is_some(),
                            Ordering::SeqCst,
                        );
                        fake.write(&json!({"type": "control_response", "response": {"subtype": "success", "request_id": id, "response": {"pid": pid}}}));
                    }
                    "interrupt" => {
                        fake.interrupted.store(true, Ordering::SeqCst);
                        fake.write(&json!({"type": "control_response", "response": {"subtype": "success", "request_id": id, "response": {"still_queued": []}}}));
                    }
                    "end_session" => {
                        fake.write(&json!({"type": "control_response", "response": {"subtype": "success", "request_id": id, "response": {}}}));
                        if FINISH_TURN_FIRST.load(Ordering::SeqCst) {
                            // Like a CLI mid-turn: finish the turn, then exit.
                            END_AFTER_TURN.store(true, Ordering::SeqCst);
                        } else if !WEDGED.load(Ordering::SeqCst) {
                            std::process::exit(0);
                        }
                    }
                    other => {
                        fake.write(&json!({"type": "control_response", "response": {"subtype": "error", "request_id": id, "error": format!("unknown {other}")}}));
                    }
                }
            }
            Some("control_response") => {
                let id = value
                    .pointer("/response/request_id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let waiter = fake.pending.lock().ok().and_then(|mut p| p.remove(&id));
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(value.get("response").cloned().unwrap_or(Value::Null));
                    }
                    None => fake.log(json!({"unexpected_answer": value})),
                }
            }
            _ => {}
        }
    }
    // stdin closed.
    fake.log(json!({"stdin": "closed"}));
    drop(turns_tx);
    if WEDGED.load(Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
    // Unblock anyone waiting for an answer: the host is gone.
    if let Ok(mut pending) = fake.pending.lock() {
        pending.clear();
    }
    let _ = player.join();
    std::process::exit(0);
}

/// The session id of a fresh fake: a UUID made of its pid.
fn session_id(pid: u32) -> String {
    format!("00000000-0000-4000-8000-{pid:012x}")
}

/// The session resumed: `--resume=<id>` or `--resume <id>`.
fn resumed(args: &[String]) -> Option<String> {
    args.iter().enumerate().find_map(|(i, arg)| {
        if let Some(id) = arg.strip_prefix("--resume=") {
            Some(id.to_string())
        } else if arg == "--resume" {
            args.get(i + 1).cloned()
        } else {
            None
        }
    })
}

/// `FAKE_CLAUDE_DUMP`: what this process was started with and can see.
fn dump(args: &[String]) {
    let Ok(path) = std::env::var("FAKE_CLAUDE_DUMP") else {
        return;
    };
    let env: serde_json::Map<String, Value> = std::env::vars_os()
        .map(|(k, v)| (k.to_string_lossy().into_owned(), json!(v.to_string_lossy())))
        .collect();
    let probes: serde_json::Map<String, Value> = std::env::var("FAKE_CLAUDE_PROBE")
        .unwrap_or_default()
        .split(':')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let seen = match std::fs::read(p) {
                Ok(bytes) => json!(String::from_utf8_lossy(&bytes)),
                Err(_) => match std::fs::read_dir(p) {
                    Ok(entries) => json!(
                        entries
                            .filter_map(|e| e
                                .ok()
                                .map(|e| e.file_name().to_string_lossy().into_owned()))
                            .collect::<Vec<_>>()
                    ),
                    Err(_) => Value::Null,
                },
            };
            (p.to_string(), seen)
        })
        .collect();
    let cwd = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    let line = json!({"pid": std::process::id(), "env": env, "args": args[1..], "cwd": cwd, "probes": probes});
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(format!("{line}\n").as_bytes());
    }
}

/// Set once the fake is wedged: it ignores everything until killed.
static WEDGED: AtomicBool = AtomicBool::new(false);
/// `FAKE_CLAUDE_FINISH_TURN_FIRST=1`: `end_session` waits for the turn.
static FINISH_TURN_FIRST: AtomicBool = AtomicBool::new(false);
/// Set by a deferred `end_session`: exit once the turn is over.
static END_AFTER_TURN: AtomicBool = AtomicBool::new(false);
/// `FAKE_CLAUDE_REPORT_PERMISSIONS=1`: each `can_use_tool` answer is sent
/// to the chat.
static REPORT_PERMISSIONS: AtomicBool = AtomicBool::new(false);

/// What a `can_use_tool` answer (the `response` of its `control_response`)
/// said, as the fake reports it to the chat.
fn permission_report(answer: &Value) -> String {
    let body = &answer["response"];
    match body["behavior"].as_str() {
        Some("allow") => format!("allowed: {}", body["updatedInput"]),
        Some("deny") => format!("denied: {}", body["message"].as_str().unwrap_or_default()),
        _ => format!("refused: {}", answer["error"].as_str().unwrap_or_default()),
    }
}

/// Calls the `send` chat tool (JSON-RPC id `rpc_id`, tool-use id `id`) and
/// returns its entry for the batch hook; `None` when stdin is gone.
fn send_tool(fake: &Fake, rpc_id: u32, id: &str, text: &str) -> Option<Value> {
    let input = json!({"text": text});
    fake.ask(json!({"subtype": "mcp_message", "server_name": TOOL_SERVER, "message": {
        "jsonrpc": "2.0", "id": rpc_id, "method": "tools/call",
        "params": {"name": "send", "arguments": input, "_meta": {"claudecode/toolUseId": id}}
    }}))
    .map(|_| json!({"tool_name": ToolName::served_here("send").full(), "tool_input": input, "tool_use_id": id, "tool_response": []}))
}

fn play(fake: &Fake, scenario: &Scenario, turns: Receiver<String>) {
    while let Ok(text) = turns.recv() {
        let turn = scenario
            .rules
            .iter()
            .find(|r| text.contains(&r.contains))
            .map(|r| r.turn.clone())
            .unwrap_or_else(|| scenario.default.clone());
        fake.interrupted.store(false, Ordering::SeqCst);
        play_turn(fake, &turn, &text);
        if END_AFTER_TURN.load(Ordering::SeqCst) {
            std::process::exit(0);
        }
    }
}

fn state(fake: &Fake, state: &str) {
    fake.log(json!({"state": state}));
    fake.write(&json!({"type": "system", "subtype": "session_state_changed", "state": state, "session_id": fake.session_id}));
}

/// Sleeps, unless interrupted; returns false on interrupt.
fn pause(fake: &Fake, ms: u64) -> bool {
    let until = Instant::now() + Duration::from_millis(ms);
    let (_tx, rx) = mpsc::channel::<()>();
    while Instant::now() < until {
        if fake.interrupted.load(Ordering::SeqCst) {
            return false;
        }
        let left = until
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(10));
        if let Err(RecvTimeoutError::Disconnected) = rx.recv_timeout(left) {
            break;
        }
    }
    !fake.interrupted.load(Ordering::SeqCst)
}

fn result(
    fake: &Fake,
    subtype: &str,
    is_error: bool,
    stop: &str,
    terminal: &str,
    text: &str,
    turns: u32,
) {
    fake.write(&json!({
        "type": "result", "subtype": subtype, "is_error": is_error, "num_turns": turns,
        "stop_reason": stop, "terminal_reason": terminal, "result": text,
        "session_id": fake.session_id, "total_cost_usd": 0.001, "duration_ms": 5, "usage": {}
    }));
}

fn after(fake: &Fake, after: AfterResult) {
    match after {
        AfterResult::Idle => state(fake, "idle"),
        AfterResult::Exit => std::process::exit(0),
        AfterResult::Hang => {
            WEDGED.store(true, Ordering::SeqCst);
            loop {
                std::thread::park();
            }
        }
    }
}

fn play_turn(fake: &Fake, turn: &ScriptTurn, user_text: &str) {
    let fill = |s: &str| s.replace("{text}", user_text);
    fake.write(&json!({"type": "system", "subtype": "init", "session_id": fake.session_id, "tools": [], "mcp_servers": [{"name": "telegram-tools", "status": "connected", "source": "sdk"}], "model": "fake"}));
    state(fake, "running");
    let mut calls: u32 = 0;
    let mut streams: u32 = 0;
    let mut stopped = false;
    for step in &turn.steps {
        if stopped && !matches!(step, Step::Control { .. }) {
            continue;
        }
        match step {
            Step::Wait { ms } => {
                if !pause(fake, *ms) {
                    result(fake, "error_during_execution", true, "", "aborted_streaming", "", calls + 1);
                    return after(fake, turn.after_result);
                }
            }
            Step::Text { text } => fake.write(&json!({"type": "assistant", "message": {"id": format!("msg_{calls}"), "role": "assistant", "content": [{"type": "text", "text": fill(text)}], "stop_reason": null}, "parent_tool_use_id": null, "session_id": fake.session_id})),
            Step::Tools { calls: tools } | Step::ToolsWithoutHook { calls: tools } => {
                calls += 1;
                let mut batch = Vec::new();
                for (i, tool) in tools.iter().enumerate() {
                    if tool.ms > 0 && !pause(fake, tool.ms) {
                        result(fake, "error_during_execution", true, "", "aborted_tools", "", calls);
                        return after(fake, turn.after_result);
                    }
                    let id = format!("toolu_{calls}_{i}");
                    let input = fill_value(&tool.input, user_text);
                    fake.write(&json!({"type": "assistant", "message": {"id": format!("msg_{calls}"), "role": "assistant", "content": [{"type": "tool_use", "id": id, "name": tool.name, "input": input}], "stop_reason": null}, "parent_tool_use_id": null, "session_id": fake.session_id}));
                    // As the CLI does: the host's server's tools go to it by their bare name.
                    let name = ToolName::parse(tool.name.as_str());
                    let chat_tool = name.is_served_here();
                    let response = if chat_tool {
                        fake.ask(json!({"subtype": "mcp_message", "server_name": TOOL_SERVER, "message": {
                            "jsonrpc": "2.0", "id": calls * 100 + i as u32, "method": "tools/call",
                            "params": {"name": name.bare(), "arguments": input, "_meta": {"claudecode/toolUseId": id}}
                        }}))
                    } else {
                        fake.ask(json!({"subtype": "can_use_tool", "tool_name": tool.name, "input": input, "tool_use_id": id}))
                    };
                    let Some(response) = response else { return };
                    fake.write(&json!({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": response.to_string()}]}]}, "session_id": fake.session_id}));
                    batch.push(json!({"tool_name": tool.name, "tool_input": input, "tool_use_id": id, "tool_response": []}));
                    if !chat_tool && REPORT_PERMISSIONS.load(Ordering::SeqCst) {
                        let report = permission_report(&response);
                        let Some(sent) = send_tool(fake, calls * 100 + 50 + i as u32, &format!("{id}_report"), &report) else { return };
                        batch.push(sent);
                    }
                }
                if matches!(step, Step::Tools { .. }) && fake.hook.load(Ordering::SeqCst) {
                    let answer = fake.ask(json!({"subtype": "hook_callback", "callback_id": "hook_0", "input": {
                        "hook_event_name": "PostToolBatch", "session_id": fake.session_id, "tool_calls": batch
                    }}));
                    let Some(answer) = answer else { return };
                    if answer.pointer("/response/continue") == Some(&json!(false)) {
                        stopped = true;
                    }
                }
            }
            Step::Result { text, subtype, is_error, terminal_reason, num_turns } => {
                result(fake, subtype, *is_error, "end_turn", terminal_reason.as_deref().unwrap_or("completed"), &fill(text), num_turns.unwrap_or(calls + 1));
                return after(fake, turn.after_result);
            }
            Step::HangForever => {
                WEDGED.store(true, Ordering::SeqCst);
                loop {
                    std::thread::park();
                }
            }
            Step::Fail { detail } => {
                eprintln!("fake-claude: {detail}");
                std::process::exit(1);
            }
            Step::Idle => {
                state(fake, "idle");
                return;
            }
            Step::Raw { line } => fake.write_raw(line),
            Step::Big { bytes } => {
                let text = "x".repeat(*bytes);
                fake.write(&json!({"type": "assistant", "message": {"id": "msg_big", "role": "assistant", "content": [{"type": "text", "text": text}]}, "session_id": fake.session_id}));
            }
            Step::Control { request } => {
                let _ = fake.ask(request.clone());
            }
            Step::Activity { tool, input } => {
                streams += 1;
                let block = json!({"type": "tool_use", "id": format!("toolu_activity_{streams}"), "name": tool, "input": fill_value(input, user_text)});
                fake.write(&json!({"type": "assistant", "message": {"id": format!("msg_activity_{streams}"), "role": "assistant", "content": [block], "stop_reason": null}, "parent_tool_use_id": null, "session_id": fake.session_id}));
            }
            Step::Stream { pieces, ms } | Step::StreamTool { pieces, ms, .. } => {
                // As the CLI with --include-partial-messages: the API's stream
                // events, then (for text) the whole block as an assistant line.
                streams += 1;
                let message = format!("msg_stream_{streams}");
                let (block, delta_of): (Value, fn(&str) -> Value) = match step {
                    Step::StreamTool { tool, .. } => (
                        json!({"type": "tool_use", "id": format!("toolu_stream_{streams}"), "name": tool, "input": {}}),
                        |piece| json!({"type": "input_json_delta", "partial_json": piece}),
                    ),
                    _ => (json!({"type": "text", "text": ""}), |piece| json!({"type": "text_delta", "text": piece})),
                };
                let event = |event: Value| fake.write(&json!({"type": "stream_event", "event": event, "parent_tool_use_id": null, "session_id": fake.session_id}));
                event(json!({"type": "message_start", "message": {"id": message, "type": "message", "role": "assistant", "content": [], "usage": {}}}));
                event(json!({"type": "content_block_start", "index": 0, "content_block": block}));
                let mut whole = String::new();
                for (i, piece) in pieces.iter().enumerate() {
                    if i > 0 && *ms > 0 && !pause(fake, *ms) {
                        result(fake, "error_during_execution", true, "", "aborted_streaming", "", calls + 1);
                        return after(fake, turn.after_result);
                    }
                    let piece = fill(piece);
                    event(json!({"type": "content_block_delta", "index": 0, "delta": delta_of(&piece)}));
                    whole.push_str(&piece);
                }
                event(json!({"type": "content_block_stop", "index": 0}));
                event(json!({"type": "message_stop"}));
                if matches!(step, Step::Stream { .. }) {
                    fake.write(&json!({"type": "assistant", "message": {"id": message, "role": "assistant", "content": [{"type": "text", "text": whole}], "stop_reason": null}, "parent_tool_use_id": null, "session_id": fake.session_id}));
                }
            }
            Step::Ask { tool, input } => {
                // As the scripted agent does: ask, then tell the chat.
                let input = fill_value(input, user_text);
                let id = format!("toolu_ask_{calls}");
                let Some(answer) = fake.ask(json!({"subtype": "can_use_tool", "tool_name": tool, "input": input, "tool_use_id": id})) else { return };
                if send_tool(fake, calls * 100 + 99, &format!("{id}_told"), &permission_report(&answer)).is_none() {
                    return;
                }
            }
        }
    }
    if stopped {
        result(
            fake,
            "success",
            false,
            "tool_use",
            "hook_stopped",
            "",
            calls,
        );
    } else {
        result(
            fake,
            "success",
            false,
            "end_turn",
            "completed",
            "",
            calls + 1,
        );
    }
    after(fake, turn.after_result);
}

//! The player: each user line plays the first scenario rule its text
//! matches, writing what the CLI would write and asking what it would ask.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use turnstile::agent::scripted::fill_value;
use turnstile::agent::tools::{TOOL_SERVER, ToolName};
use turnstile::agent::{AfterResult, Scenario, ScriptTool, ScriptTurn, Step};

use super::Fake;

/// Set once the fake is wedged: it ignores everything until killed.
pub(super) static WEDGED: AtomicBool = AtomicBool::new(false);
/// `FAKE_CLAUDE_FINISH_TURN_FIRST=1`: `end_session` waits for the turn.
pub(super) static FINISH_TURN_FIRST: AtomicBool = AtomicBool::new(false);
/// Set by a deferred `end_session`: exit once the turn is over.
pub(super) static END_AFTER_TURN: AtomicBool = AtomicBool::new(false);
/// `FAKE_CLAUDE_REPORT_PERMISSIONS=1`: each `can_use_tool` answer is sent
/// to the chat.
pub(super) static REPORT_PERMISSIONS: AtomicBool = AtomicBool::new(false);

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

pub(super) fn play(fake: &Fake, scenario: &Scenario, turns: Receiver<String>) {
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
        AfterResult::Hang => wedge(),
    }
}

/// What has been played of a turn so far.
#[derive(Default)]
struct Played {
    /// Model calls (one per tool batch).
    calls: u32,
    /// Streams and activities (numbers their ids).
    streams: u32,
    /// The batch hook said stop: only `control` steps still run.
    stopped: bool,
}

fn play_turn(fake: &Fake, turn: &ScriptTurn, user_text: &str) {
    fake.write(&json!({"type": "system", "subtype": "init", "session_id": fake.session_id, "tools": [], "mcp_servers": [{"name": "telegram-tools", "status": "connected", "source": "sdk"}], "model": "fake"}));
    state(fake, "running");
    let mut played = Played::default();
    for step in &turn.steps {
        if played.stopped && !matches!(step, Step::Control { .. }) {
            continue;
        }
        if play_step(fake, turn, step, user_text, &mut played).is_break() {
            return;
        }
    }
    if played.stopped {
        result(
            fake,
            "success",
            false,
            "tool_use",
            "hook_stopped",
            "",
            played.calls,
        );
    } else {
        result(
            fake,
            "success",
            false,
            "end_turn",
            "completed",
            "",
            played.calls + 1,
        );
    }
    after(fake, turn.after_result);
}

/// The turn was interrupted: its result says so (`terminal`), then what the
/// scenario does after a result.
fn aborted(fake: &Fake, turn: &ScriptTurn, terminal: &str, turns: u32) -> ControlFlow<()> {
    result(
        fake,
        "error_during_execution",
        true,
        "",
        terminal,
        "",
        turns,
    );
    after(fake, turn.after_result);
    ControlFlow::Break(())
}

/// Wedged: ignores everything until killed.
fn wedge() -> ! {
    WEDGED.store(true, Ordering::SeqCst);
    loop {
        std::thread::park();
    }
}

/// Plays one step; `Break` when the turn is over there.
fn play_step(
    fake: &Fake,
    turn: &ScriptTurn,
    step: &Step,
    user_text: &str,
    played: &mut Played,
) -> ControlFlow<()> {
    let fill = |s: &str| s.replace("{text}", user_text);
    let calls = played.calls;
    match step {
        Step::Wait { ms } => {
            if !pause(fake, *ms) {
                return aborted(fake, turn, "aborted_streaming", calls + 1);
            }
        }
        Step::Text { text } => fake.write(&json!({"type": "assistant", "message": {"id": format!("msg_{calls}"), "role": "assistant", "content": [{"type": "text", "text": fill(text)}], "stop_reason": null}, "parent_tool_use_id": null, "session_id": fake.session_id})),
        Step::Tools { calls: tools } | Step::ToolsWithoutHook { calls: tools } => {
            played.calls += 1;
            let hook = matches!(step, Step::Tools { .. });
            return play_tools(fake, turn, tools, hook, user_text, played);
        }
        Step::Result { text, subtype, is_error, terminal_reason, num_turns, limited: true, .. } => {
            // As the CLI writes a usage-limit refusal: the API error line,
            // then a result with the API's status.
            let text = fill(text);
            fake.write(&json!({"type": "assistant", "error": "rate_limit", "message": {"id": "msg_limit", "role": "assistant", "content": [{"type": "text", "text": text}]}, "session_id": fake.session_id}));
            fake.write(&json!({
                "type": "result", "subtype": subtype, "is_error": *is_error, "api_error_status": 429,
                "num_turns": num_turns.unwrap_or(calls + 1), "stop_reason": null,
                "terminal_reason": terminal_reason.as_deref().unwrap_or("api_error"), "result": text,
                "session_id": fake.session_id, "total_cost_usd": 0.0, "duration_ms": 5, "usage": {}
            }));
            after(fake, turn.after_result);
            return ControlFlow::Break(());
        }
        Step::Result { text, subtype, is_error, terminal_reason, num_turns, .. } => {
            result(fake, subtype, *is_error, "end_turn", terminal_reason.as_deref().unwrap_or("completed"), &fill(text), num_turns.unwrap_or(calls + 1));
            after(fake, turn.after_result);
            return ControlFlow::Break(());
        }
        Step::HangForever => wedge(),
        Step::Fail { detail } => {
            eprintln!("fake-claude: {detail}");
            std::process::exit(1);
        }
        Step::Idle => {
            state(fake, "idle");
            return ControlFlow::Break(());
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
            played.streams += 1;
            let streams = played.streams;
            let block = json!({"type": "tool_use", "id": format!("toolu_activity_{streams}"), "name": tool, "input": fill_value(input, user_text)});
            fake.write(&json!({"type": "assistant", "message": {"id": format!("msg_activity_{streams}"), "role": "assistant", "content": [block], "stop_reason": null}, "parent_tool_use_id": null, "session_id": fake.session_id}));
        }
        Step::Stream { pieces, ms } | Step::StreamTool { pieces, ms, .. } => {
            return play_stream(fake, turn, step, pieces, *ms, user_text, played);
        }
        Step::Ask { tool, input } => {
            // As the scripted agent does: ask, then tell the chat.
            let input = fill_value(input, user_text);
            let id = format!("toolu_ask_{calls}");
            let Some(answer) = fake.ask(json!({"subtype": "can_use_tool", "tool_name": tool, "input": input, "tool_use_id": id})) else { return ControlFlow::Break(()) };
            if send_tool(fake, calls * 100 + 99, &format!("{id}_told"), &permission_report(&answer)).is_none() {
                return ControlFlow::Break(());
            }
        }
    }
    ControlFlow::Continue(())
}

/// A batch of tool calls, as the CLI makes them: chat tools over MCP, the
/// rest through `can_use_tool`; then (with `hook`) the batch hook.
fn play_tools(
    fake: &Fake,
    turn: &ScriptTurn,
    tools: &[ScriptTool],
    hook: bool,
    user_text: &str,
    played: &mut Played,
) -> ControlFlow<()> {
    let calls = played.calls;
    let mut batch = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        if tool.ms > 0 && !pause(fake, tool.ms) {
            return aborted(fake, turn, "aborted_tools", calls);
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
        let Some(response) = response else {
            return ControlFlow::Break(());
        };
        fake.write(&json!({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": response.to_string()}]}]}, "session_id": fake.session_id}));
        batch.push(json!({"tool_name": tool.name, "tool_input": input, "tool_use_id": id, "tool_response": []}));
        if !chat_tool && REPORT_PERMISSIONS.load(Ordering::SeqCst) {
            let report = permission_report(&response);
            let Some(sent) = send_tool(
                fake,
                calls * 100 + 50 + i as u32,
                &format!("{id}_report"),
                &report,
            ) else {
                return ControlFlow::Break(());
            };
            batch.push(sent);
        }
    }
    if hook && fake.hook.load(Ordering::SeqCst) {
        let answer = fake.ask(json!({"subtype": "hook_callback", "callback_id": "hook_0", "input": {
            "hook_event_name": "PostToolBatch", "session_id": fake.session_id, "tool_calls": batch
        }}));
        let Some(answer) = answer else {
            return ControlFlow::Break(());
        };
        if answer.pointer("/response/continue") == Some(&json!(false)) {
            played.stopped = true;
        }
    }
    ControlFlow::Continue(())
}

/// A streamed block, as the CLI with --include-partial-messages writes it:
/// the API's stream events, then (for text) the whole block as an
/// assistant line.
fn play_stream(
    fake: &Fake,
    turn: &ScriptTurn,
    step: &Step,
    pieces: &[String],
    ms: u64,
    user_text: &str,
    played: &mut Played,
) -> ControlFlow<()> {
    played.streams += 1;
    let streams = played.streams;
    let message = format!("msg_stream_{streams}");
    let (block, delta_of): (Value, fn(&str) -> Value) = match step {
        Step::StreamTool { tool, .. } => (
            json!({"type": "tool_use", "id": format!("toolu_stream_{streams}"), "name": tool, "input": {}}),
            |piece| json!({"type": "input_json_delta", "partial_json": piece}),
        ),
        _ => (
            json!({"type": "text", "text": ""}),
            |piece| json!({"type": "text_delta", "text": piece}),
        ),
    };
    let event = |event: Value| {
        fake.write(&json!({"type": "stream_event", "event": event, "parent_tool_use_id": null, "session_id": fake.session_id}))
    };
    event(
        json!({"type": "message_start", "message": {"id": message, "type": "message", "role": "assistant", "content": [], "usage": {}}}),
    );
    event(json!({"type": "content_block_start", "index": 0, "content_block": block}));
    let mut whole = String::new();
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 && ms > 0 && !pause(fake, ms) {
            return aborted(fake, turn, "aborted_streaming", played.calls + 1);
        }
        let piece = piece.replace("{text}", user_text);
        event(json!({"type": "content_block_delta", "index": 0, "delta": delta_of(&piece)}));
        whole.push_str(&piece);
    }
    event(json!({"type": "content_block_stop", "index": 0}));
    event(json!({"type": "message_stop"}));
    if matches!(step, Step::Stream { .. }) {
        fake.write(&json!({"type": "assistant", "message": {"id": message, "role": "assistant", "content": [{"type": "text", "text": whole}], "stop_reason": null}, "parent_tool_use_id": null, "session_id": fake.session_id}));
    }
    ControlFlow::Continue(())
}

use super::*;
use crate::agent::tools::{BatchCall, ChatCall, ChatTool, ToolRegistry};
use crate::agent::{AgentResult, ResultStatus, TerminalReason};

mod mcp;
mod stream;

fn registry() -> ToolRegistry {
    ToolRegistry::new(&["end_turn".to_string()])
}

#[test]
fn initialize_registers_the_hook_only_when_enabled() {
    let on = initialize("init", true, "be brief");
    assert_eq!(
        on["request"]["hooks"]["PostToolBatch"][0]["hookCallbackIds"][0],
        HOOK_ID
    );
    assert_eq!(on["request"]["sdkMcpServers"][0], "telegram-tools");
    assert_eq!(on["request"]["systemPrompt"], "be brief");
    assert!(
        initialize("init", false, "")
            .get("request")
            .unwrap()
            .get("hooks")
            .is_none()
    );
}

#[test]
fn the_hook_stops_the_loop_with_continue_false() {
    assert_eq!(hook_output(&HookReply::Continue).unwrap(), json!({}));
    let stop = hook_output(&HookReply::Stop {
        reason: "done".into(),
    })
    .unwrap();
    assert_eq!(stop, json!({"continue": false, "stopReason": "done"}));
    assert!(hook_output(&HookReply::Refused("stopping".into())).is_err());
}

#[test]
fn batch_calls_and_results_are_read_tolerantly() {
    let input = json!({"hook_event_name": "PostToolBatch", "tool_calls": [
        {"tool_name": "mcp__telegram-tools__send", "tool_input": {"text": "a"}},
        {"tool_name": "mcp__telegram-tools__end_turn"},
        {"tool_name": "Bash", "tool_input": 7},
        {"tool_name": "mcp__teams-tools__end_turn"},
        {"tool_name": "mcp__telegram-tools__react", "tool_input": {"emoji": "👍", "end_turn": true}},
        "not a call"
    ]});
    let calls = batch_calls(&input, &registry());
    let read: Vec<(&str, bool)> = calls
        .iter()
        .map(|c| (c.tool.as_str(), c.ends_turn))
        .collect();
    assert_eq!(
        read,
        vec![
            ("send", false),
            ("end_turn", true),
            ("Bash", false),
            ("end_turn", true),
            ("react", true),
            ("", false)
        ],
        "a terminator under any server, react by its flag"
    );
    assert!(batch_calls(&json!({}), &registry()).is_empty());
    let r = result(
        &json!({"type": "result", "subtype": "success", "is_error": false, "num_turns": 1,
            "stop_reason": "tool_use", "terminal_reason": "hook_stopped", "result": "", "total_cost_usd": 0.01}),
    );
    assert_eq!(r.terminal_reason, Some(TerminalReason::HookStopped));
    assert_eq!(r.subtype, ResultStatus::Success);
    let empty = result(&json!({"type": "result"}));
    assert_eq!(empty.subtype, ResultStatus::Failed(String::new()));
    assert!(
        !empty.succeeded(),
        "a result that says nothing did not succeed"
    );
    let read = |subtype: &str, reason: &str| {
        let r = result(&json!({"type": "result", "subtype": subtype, "terminal_reason": reason}));
        (r.subtype, r.terminal_reason)
    };
    assert_eq!(
        read("error_max_turns", "max_turns"),
        (
            ResultStatus::Failed("error_max_turns".into()),
            Some(TerminalReason::Other("max_turns".into()))
        )
    );
    assert_eq!(
        read("success", "completed").1,
        Some(TerminalReason::Completed)
    );
    assert_eq!(
        read("success", "aborted_tools").1,
        Some(TerminalReason::AbortedTools)
    );
    assert_eq!(
        read("error_during_execution", "aborted_streaming").1,
        Some(TerminalReason::AbortedStreaming)
    );
}

fn parse(value: Value) -> Line {
    Line::parse(value.to_string().as_bytes())
}

fn request(value: Value) -> (Option<String>, ControlRequest) {
    match parse(value) {
        Line::Cli(CliLine::ControlRequest {
            request_id,
            request,
        }) => (request_id, request),
        other => panic!("not a control request: {other:?}"),
    }
}

#[test]
fn system_lines_are_read_by_subtype() {
    assert_eq!(
        parse(json!({"type": "system", "subtype": "init", "session_id": "s1", "tools": []})),
        Line::Cli(CliLine::System(SystemLine::Init {
            session_id: "s1".into()
        }))
    );
    assert_eq!(
        parse(
            json!({"type": "system", "subtype": "session_state_changed", "state": "idle", "sdk_host_only": true})
        ),
        Line::Cli(CliLine::System(SystemLine::SessionStateChanged {
            state: SessionState::Idle
        }))
    );
    assert_eq!(
        parse(json!({"type": "system", "subtype": "session_state_changed", "state": "dreaming"})),
        Line::Cli(CliLine::System(SystemLine::SessionStateChanged {
            state: SessionState::Other
        }))
    );
    assert_eq!(
        parse(json!({"type": "system", "subtype": "api_retry", "attempt": 1})),
        Line::Cli(CliLine::System(SystemLine::ApiRetry {
            error_status: None,
            error: None
        }))
    );
    assert_eq!(
        parse(json!({"type": "system", "subtype": "status", "status": null})),
        Line::Cli(CliLine::System(SystemLine::Other))
    );
    assert_eq!(
        parse(json!({"type": "system"})),
        Line::Cli(CliLine::System(SystemLine::Other)),
        "a system line without a subtype is still a sign of life"
    );
    assert_eq!(
        parse(json!({"type": "system", "subtype": "init", "session_id": 7})),
        Line::Cli(CliLine::System(SystemLine::Init {
            session_id: String::new()
        })),
        "a mistyped field takes its default"
    );
}

#[test]
fn assistant_lines_carry_the_text_of_their_text_blocks() {
    let Line::Cli(CliLine::Assistant { message, .. }) = parse(json!({
        "type": "assistant",
        "message": {"id": "m1", "content": [
            {"type": "text", "text": "one"},
            {"type": "tool_use", "id": "t", "name": "send", "input": {}},
            "not a block",
            {"type": "text", "text": "two"}
        ]},
        "parent_tool_use_id": null
    })) else {
        panic!("not an assistant line")
    };
    assert_eq!(message.text().as_deref(), Some("one\ntwo"));
    let Line::Cli(CliLine::Assistant { message, .. }) = parse(json!({
        "type": "assistant",
        "message": {"content": [{"type": "tool_use", "id": "t", "name": "send", "input": {}}]}
    })) else {
        panic!("not an assistant line")
    };
    assert_eq!(message.text(), None);
    let Line::Cli(CliLine::Assistant { message, .. }) = parse(json!({"type": "assistant"})) else {
        panic!("not an assistant line")
    };
    assert_eq!(message.text(), None);
}

#[test]
fn user_stream_and_rate_limit_lines_are_known() {
    assert_eq!(
        parse(json!({"type": "user", "message": {"role": "user", "content": []}})),
        Line::Cli(CliLine::User { is_replay: false })
    );
    assert_eq!(
        parse(json!({"type": "stream_event", "event": {"type": "content_block_delta"}})),
        Line::Cli(CliLine::StreamEvent {
            event: StreamEvent::ContentBlockDelta {
                index: 0,
                delta: Delta::Other
            },
            parent_tool_use_id: None,
        })
    );
    assert_eq!(
        parse(json!({"type": "rate_limit_event", "rate_limit_info": {}})),
        Line::Cli(CliLine::RateLimitEvent {})
    );
}

#[test]
fn tool_use_blocks_are_read_from_assistant_lines() {
    let Line::Cli(CliLine::Assistant { message, .. }) = parse(json!({
        "type": "assistant",
        "message": {"id": "m1", "content": [
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
            {"type": "tool_use", "id": 5, "name": "Read"},
            {"type": "text", "text": "x"}
        ]}
    })) else {
        panic!("not an assistant line")
    };
    let uses: Vec<_> = message.tool_uses().collect();
    assert_eq!(
        uses,
        vec![
            ("t1", "Bash", &json!({"command": "ls"})),
            ("", "Read", &json!({}))
        ]
    );
}

#[test]
fn a_result_line_becomes_the_agent_result() {
    let Line::Cli(CliLine::Result(line)) = parse(json!({
        "type": "result", "subtype": "error_during_execution", "is_error": true,
        "num_turns": 2, "stop_reason": null, "terminal_reason": "aborted_streaming",
        "result": "partial", "total_cost_usd": 0.25,
        "usage": {"input_tokens": 3, "cache_creation_input_tokens": 10,
                  "cache_read_input_tokens": 100, "output_tokens": 7, "service_tier": "standard"}
    })) else {
        panic!("not a result line")
    };
    assert_eq!(
        AgentResult::from(line),
        AgentResult {
            subtype: "error_during_execution".into(),
            is_error: true,
            stop_reason: None,
            terminal_reason: Some("aborted_streaming".into()),
            text: "partial".into(),
            num_turns: 2,
            total_cost_usd: 0.25,
            limited: false,
            resets_at: None,
            usage: crate::agent::TokenUsage {
                input_tokens: 113,
                output_tokens: 7,
            },
        }
    );
    let Line::Cli(CliLine::Result(line)) =
        parse(json!({"type": "result", "num_turns": "two", "total_cost_usd": 1}))
    else {
        panic!("not a result line")
    };
    assert_eq!(line.num_turns, 0, "a mistyped count is zero");
    assert_eq!(line.total_cost_usd, 1.0);
    let Line::Cli(CliLine::Result(line)) =
        parse(json!({"type": "result", "usage": {"input_tokens": -1, "output_tokens": 2}}))
    else {
        panic!("not a result line")
    };
    assert_eq!(
        AgentResult::from(line).usage,
        crate::agent::TokenUsage {
            input_tokens: 0,
            output_tokens: 2
        },
        "a mistyped count is zero"
    );
}

/// The CLI's usage-limit refusal (2.1.332): an error result carrying the
/// API's 429; only then is the turn limited, and a reset time in its text
/// is read.
#[test]
fn a_429_result_is_a_usage_limit() {
    let limited = |line: serde_json::Value| match parse(line) {
        Line::Cli(CliLine::Result(line)) => AgentResult::from(line),
        other => panic!("not a result line: {other:?}"),
    };
    let refusal = limited(json!({
        "type": "result", "subtype": "success", "is_error": true, "api_error_status": 429,
        "num_turns": 1, "terminal_reason": "api_error",
        "result": "API Error: Request rejected (429) · rate limited"
    }));
    assert!(refusal.limited);
    assert_eq!(refusal.resets_at, None);
    let later = chrono::Utc::now().timestamp() + 3600;
    let named = limited(json!({
        "type": "result", "is_error": true, "api_error_status": 429,
        "result": format!("Claude AI usage limit reached|{later}")
    }));
    assert_eq!((named.limited, named.resets_at), (true, Some(later)));
    // Another status, or no error, is not a usage limit.
    for line in [
        json!({"type": "result", "is_error": true, "api_error_status": 500, "result": "API Error: 500"}),
        json!({"type": "result", "is_error": false, "api_error_status": 429, "result": "fine"}),
        json!({"type": "result", "is_error": true, "api_error_status": "429", "result": "x"}),
    ] {
        assert!(!limited(line.clone()).limited, "{line}");
    }
}

#[test]
fn control_responses_are_read_by_subtype() {
    assert_eq!(
        parse(
            json!({"type": "control_response", "response": {"subtype": "error", "request_id": "req_2", "error": "no"}})
        ),
        Line::Cli(CliLine::ControlResponse {
            response: ControlResponse::Error {
                request_id: Some("req_2".into()),
                error: "no".into()
            }
        })
    );
    assert_eq!(
        parse(
            json!({"type": "control_response", "response": {"subtype": "success", "request_id": "init_1", "response": {}}})
        ),
        Line::Cli(CliLine::ControlResponse {
            response: ControlResponse::Success {
                request_id: Some("init_1".into())
            }
        })
    );
}

#[test]
fn control_requests_are_read_by_subtype() {
    let (id, ask) = request(
        json!({"type": "control_request", "request_id": "r1", "request": {
            "subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "ls"}, "tool_use_id": "toolu_9"
        }}),
    );
    assert_eq!(id.as_deref(), Some("r1"));
    assert_eq!(
        ask,
        ControlRequest::CanUseTool(CanUseTool {
            tool_name: "Bash".into(),
            input: json!({"command": "ls"}),
            tool_use_id: json!("toolu_9"),
        })
    );
    let (_, hook) = request(
        json!({"type": "control_request", "request_id": "r2", "request": {
            "subtype": "hook_callback", "callback_id": "hook_0", "input": {
                "hook_event_name": "PostToolBatch",
                "tool_calls": [{"tool_name": "mcp__telegram-tools__end_turn", "tool_input": {}, "tool_use_id": "t"}]
            }
        }}),
    );
    let ControlRequest::HookCallback(HookCallback {
        callback_id,
        input: HookInput::PostToolBatch(batch),
    }) = hook
    else {
        panic!("not a PostToolBatch hook: {hook:?}")
    };
    assert_eq!(callback_id, HOOK_ID);
    assert_eq!(
        batch.calls(&registry()),
        vec![BatchCall {
            tool: "end_turn".into(),
            ends_turn: true,
        }]
    );
    let (_, other_hook) = request(
        json!({"type": "control_request", "request_id": "r3", "request": {
            "subtype": "hook_callback", "callback_id": "hook_0", "input": {"hook_event_name": "Stop"}
        }}),
    );
    assert!(matches!(
        other_hook,
        ControlRequest::HookCallback(HookCallback {
            input: HookInput::Other,
            ..
        })
    ));
    let (id, _) =
        request(json!({"type": "control_request", "request": {"subtype": "can_use_tool"}}));
    assert_eq!(id, None, "a request without an id is still read");
}

#[test]
fn an_unknown_control_subtype_is_named_not_an_error() {
    let (id, unknown) = request(
        json!({"type": "control_request", "request_id": "r4", "request": {"subtype": "rewind_files", "x": 1}}),
    );
    assert_eq!(id.as_deref(), Some("r4"));
    assert_eq!(
        unknown,
        ControlRequest::Unknown {
            subtype: "rewind_files".into()
        }
    );
    assert_eq!(unknown.subtype(), "rewind_files");
    let (_, missing) = request(json!({"type": "control_request", "request_id": "r5"}));
    assert_eq!(missing.subtype(), "", "no request at all: an unknown one");
}

#[test]
fn an_unknown_type_is_kept_for_the_log_not_an_error() {
    let Line::Unknown(shown) = parse(json!({"type": "telemetry_v9", "zdata": "x".repeat(500)}))
    else {
        panic!("an unknown type is Line::Unknown")
    };
    assert!(shown.contains("telemetry_v9"), "{shown}");
    assert_eq!(shown.chars().count(), SHOWN_CHARS, "bounded");
    assert!(matches!(parse(json!({"no_type": 1})), Line::Unknown(_)));
    assert!(matches!(parse(json!({"type": 5})), Line::Unknown(_)));
    assert!(matches!(parse(json!(["system", "init"])), Line::Unknown(_)));
}

#[test]
fn a_malformed_line_is_kept_for_the_log_not_an_error() {
    let bytes = format!("{{\"type\": \"assistant\", {}", "y".repeat(400));
    let Line::Malformed(start) = Line::parse(bytes.as_bytes()) else {
        panic!("a line that is not JSON is Line::Malformed")
    };
    assert!(start.starts_with("{\"type\": \"assistant\""), "{start}");
    assert_eq!(start.len(), SHOWN_CHARS, "bounded");
    assert!(matches!(Line::parse(b"\xff\xfe"), Line::Malformed(_)));
}

/// Only the CLI's authentication failures end a turn as one: not a 529
/// it retries, nor a usage-limit line, nor an ordinary answer.
#[test]
fn only_authentication_failures_are_read_as_such() {
    let failure = |line: serde_json::Value| match parse(line) {
        Line::Cli(line) => line.auth_failure(),
        other => panic!("not a CLI line: {other:?}"),
    };
    let retry = |status: u16, error: &str| json!({"type": "system", "subtype": "api_retry", "attempt": 1, "error_status": status, "error": error});
    let refused = failure(retry(401, "authentication_failed")).expect("a 401 retry");
    assert!(refused.refused);
    assert_eq!(refused.detail, "API Error: 401 authentication_failed");
    assert!(failure(retry(529, "overloaded")).is_none());
    let said = |error: &str, text: &str| json!({"type": "assistant", "error": error, "message": {"content": [{"type": "text", "text": text}]}});
    let not_logged_in = failure(said(
        "authentication_failed",
        "Not logged in · Please run /login",
    ))
    .expect("the not-logged-in line");
    assert!(!not_logged_in.refused);
    assert_eq!(not_logged_in.detail, "Not logged in · Please run /login");
    assert!(failure(said("rate_limit", "API Error: Request rejected (429)")).is_none());
    assert!(
        failure(json!({"type": "assistant", "message": {"content": [{"type": "text", "text": "Not logged in"}]}}))
            .is_none()
    );
}

//! The agent's side: the CLI's stream-json lines, the MCP server's
//! JSON-RPC messages, and a tool call's input as it streams.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::{Value, json};

use super::{Draw, is_subsequence};
use crate::agent::backends::stream_json::{
    CliLine, ControlRequest, HookCallback, HookInput, Line, Live, McpMessage, McpRequest,
    SHOWN_CHARS, SystemLine, answer_unasked, protocol,
};
use crate::agent::host::is_session_id;
use crate::agent::host::lines::MAX_LINE_BYTES;
use crate::agent::partial_json::StringField;
use crate::agent::tools::{TOOL_SERVER, ToolName, ToolRegistry, terminator};
use crate::agent::{Activity, AgentResult, HookReply, ToolReply};
use crate::chat::turn::approval;
use crate::chat::turn::live;

/// The host's tools, with the usual terminator.
fn registry() -> ToolRegistry {
    ToolRegistry::new(&["end_turn".to_owned()])
}

/// The CLI's stdout, line by line, through what the driver does with each
/// line: parsed, its live activity (stream events, tool calls and their
/// status lines) followed across lines, its text and result read, each
/// control request answered (`can_use_tool` from config and as the approval
/// question shows it, hooks, `mcp_message`, unknown ones), and the chat
/// tool calls parsed.
pub fn stream_json(data: &[u8]) {
    let tools = registry();
    let allowed = ["Read".to_owned(), "WebSearch".to_owned()];
    let mut live = Live::default();
    for line in data.split(|&b| b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = if line.len() > MAX_LINE_BYTES {
            Line::Oversized(line.len())
        } else {
            Line::parse(line)
        };
        let line = match line {
            Line::Cli(line) => line,
            Line::Unknown(shown) | Line::Malformed(shown) => {
                assert!(shown.chars().count() <= SHOWN_CHARS, "{shown:?}");
                continue;
            }
            Line::Oversized(_) => continue,
        };
        let _ = line.auth_failure();
        match line {
            CliLine::System(SystemLine::Init { session_id }) => {
                let _ = is_session_id(&session_id);
            }
            CliLine::Assistant { message, .. } => {
                for activity in live.on_assistant(&message) {
                    check_activity(&activity);
                }
                let _ = message.text();
                for (_, name, input) in message.tool_uses() {
                    let _ = tools.call(&ToolName::parse(name), input);
                }
            }
            CliLine::StreamEvent {
                event,
                parent_tool_use_id: None,
            } => {
                if let Some(activity) = live.on_stream(event) {
                    check_activity(&activity);
                }
            }
            CliLine::Result(result) => {
                live.turn_ended();
                let _ = AgentResult::from(result);
            }
            CliLine::ControlRequest {
                request_id: Some(id),
                request,
            } => {
                let answer = control_request(request, &tools, &allowed);
                let line = protocol::control_success(&id, answer);
                assert!(serde_json::to_string(&line).is_ok());
            }
            _ => {}
        }
    }
}

/// A streamed piece is never empty; a tool call gets its status line.
fn check_activity(activity: &Activity) {
    match activity {
        Activity::Writing { appended, .. } => {
            assert!(!appended.is_empty(), "an empty piece: {activity:?}");
        }
        Activity::ToolStarted { name, input, .. } => {
            let _ = live::summary(name, input, "/var/lib/turnstile/work/5");
        }
    }
}

/// What an approval question shows of a tool call leaves nothing out and
/// hides nothing: every top-level string of the input is in it, each
/// character that shows in order,
/// and no character that would not show is left in it (such characters
/// are written out, as `⟦U+202E⟧`).
fn check_question(tool: &ToolName, input: &Value) {
    let shown = approval::summary(tool, input);
    if let Some(c) = shown.chars().find(|&c| invisible(c)) {
        panic!("U+{:04X} left in the question: {shown:?}", u32::from(c));
    }
    let Some(fields) = input.as_object() else {
        return;
    };
    // A character the question writes out (`⟦U+206E⟧`) is not itself in it.
    let showing = |text: &str| -> Vec<char> {
        text.chars()
            .filter(|&c| {
                !c.is_whitespace()
                    && !invisible(c)
                    && !shown.contains(&format!("⟦U+{:04X}", u32::from(c)))
            })
            .collect()
    };
    for (name, value) in fields {
        if let Value::String(text) = value {
            assert!(
                is_subsequence(&showing(text), &showing(&shown)),
                "{tool}'s `{name}` is not whole in the question: {shown:?}"
            );
        }
    }
}

/// A character that would not show in a message, or would change how what
/// follows shows: controls but line breaks and tabs, zero-width and
/// direction marks, embeddings, overrides and isolates, the BOM.
fn invisible(c: char) -> bool {
    (c.is_control() && !matches!(c, '\n' | '\t'))
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// The answer to a control request, as the driver makes it.
fn control_request(request: ControlRequest, tools: &ToolRegistry, allowed: &[String]) -> Value {
    match request {
        ControlRequest::CanUseTool(ask) => {
            check_question(&ToolName::parse(ask.tool_name.as_str()), &ask.input);
            answer_unasked(&ask, tools, allowed)
        }
        ControlRequest::HookCallback(HookCallback {
            input: HookInput::PostToolBatch(batch),
            ..
        }) => {
            let _ = terminator(&batch.calls(tools));
            protocol::hook_output(&HookReply::Continue).unwrap_or_default()
        }
        ControlRequest::HookCallback(_) => json!({}),
        ControlRequest::McpMessage(McpMessage {
            server_name,
            message,
        }) => {
            if server_name == TOOL_SERVER {
                mcp_answer(message.serve(tools), tools)
            } else {
                json!({})
            }
        }
        ControlRequest::Unknown { subtype } => {
            let _shown: String = subtype.chars().take(SHOWN_CHARS).collect();
            json!({})
        }
    }
}

/// A JSON-RPC message for `telegram-tools`, served as the driver serves
/// the `mcp_message` that carries it; reading it inside a whole
/// `control_request` line gives the same request.
pub fn mcp_server(data: &[u8]) {
    let Ok(message) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let tools = registry();
    let served = protocol::mcp(&message, &tools);
    let line = json!({
        "type": "control_request",
        "request_id": "req_1",
        "request": {"subtype": "mcp_message", "server_name": TOOL_SERVER, "message": message},
    });
    match Line::from_value(&line) {
        Line::Cli(CliLine::ControlRequest {
            request: ControlRequest::McpMessage(carried),
            ..
        }) => assert_eq!(carried.message.serve(&tools), served, "{message}"),
        other => panic!("an mcp_message line read as {other:?}"),
    }
    let answer = mcp_answer(served, &tools);
    assert!(serde_json::to_string(&protocol::mcp_response("req_1", answer)).is_ok());
}

/// The JSON-RPC answer to a served MCP request (a tool call parsed and
/// answered each way it can be).
fn mcp_answer(served: McpRequest, tools: &ToolRegistry) -> Value {
    match served {
        McpRequest::Answer(answer) => {
            assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
            answer
        }
        McpRequest::Call { rpc_id, call, .. } => {
            assert!(
                tools.get(&call.name).is_some(),
                "a call of {:?} served",
                call.name
            );
            for reply in [
                ToolReply::Error("e".into()),
                ToolReply::Refused("r".into()),
                ToolReply::Failed("f".into()),
            ] {
                let _ = protocol::tool_reply(&rpc_id, &reply);
            }
            protocol::tool_reply(&rpc_id, &ToolReply::Ok("sent".into()))
        }
    }
}

/// A tool call's input JSON, as `input_json_delta` pieces: the `text`
/// field extracted from it is the same whatever the pieces (whole, byte
/// by byte, cut at spots drawn from the input), and, when the input is a
/// JSON object, it is the value of its first top-level `text` string.
pub fn partial_json(data: &[u8]) {
    let whole = extract([data].into_iter());
    let bytewise = extract(data.chunks(1));
    assert_eq!(bytewise, whole, "byte by byte");
    let mut draw = Draw::new(data);
    for _ in 0..4 {
        let mut cuts: Vec<usize> = (0..draw.next() % 9)
            .map(|_| draw.next() % (data.len() + 1))
            .collect();
        cuts.sort_unstable();
        let mut pieces = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain([&data.len()]) {
            pieces.push(&data[from..cut]);
            from = cut;
        }
        assert_eq!(extract(pieces.into_iter()), whole, "cut at {cuts:?}");
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let mut field = StringField::new("text");
        let mut got = String::new();
        for (at, c) in text.char_indices() {
            got.push_str(&field.push(&text[at..at + c.len_utf8()]));
        }
        assert_eq!((got, field.is_complete()), whole, "char by char");
    }
    if let Ok(Entries(entries)) = serde_json::from_slice::<Entries>(data) {
        let first = entries.into_iter().find_map(|(key, value)| match value {
            Value::String(text) if key == "text" => Some(text),
            _ => None,
        });
        match first {
            Some(text) => assert_eq!(whole, (text, true), "the first `text` string"),
            None => assert_eq!(whole, (String::new(), false), "no `text` string"),
        }
    }
}

/// The text extracted from `pieces`, and whether it was read to its end.
fn extract<'a>(pieces: impl Iterator<Item = &'a [u8]>) -> (String, bool) {
    let mut field = StringField::new("text");
    let text = pieces.map(|piece| field.push_bytes(piece)).collect();
    (text, field.is_complete())
}

/// A JSON object's entries in order, duplicates kept.
struct Entries(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Reads a map's entries.
        struct Each;
        impl<'de> Visitor<'de> for Each {
            type Value = Entries;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Each)
    }
}

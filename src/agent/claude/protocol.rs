//! The Claude Code stream-json wire format: lines the host writes, lines
//! the CLI writes, and the in-process MCP server `telegram-tools`.
//!
//! Every line from the CLI is parsed once, here, into typed enums: a
//! [`Line`] holds a [`CliLine`], whose control requests are
//! [`ControlRequest`]s, whose MCP messages are [`RpcRequest`]s; tool names
//! and tool calls become the agent-neutral values of [`crate::agent::tools`]
//! ([`McpRequest::Call`] carries a parsed chat call, [`PostToolBatch::calls`]
//! the batch's parsed calls). Fields are
//! read tolerantly (a missing or mistyped field takes its default) and an
//! unknown `type` or `subtype` becomes an `Unknown` or `Other` variant, so
//! nothing the CLI writes is an error that ends a turn. The lines the host
//! writes are built by plain functions over `serde_json::Value`. The MCP
//! side (`protocol/mcp_server.rs`) is re-exported here. All of it is
//! unit-tested without a process.

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use serde_json::{Value, json};

use crate::agent::tools::{BatchCall, TOOL_SERVER, ToolName, ToolRegistry};
use crate::agent::{AgentResult, HookReply};

mod mcp_server;

pub use mcp_server::{
    CallMeta, McpMethod, McpRequest, RPC_HOST_STOPPING, RPC_INTERNAL, RPC_INVALID_PARAMS,
    RPC_METHOD_NOT_FOUND, RpcRequest, ToolsCall, mcp, rpc_error, rpc_result, tool_reply,
};

/// The PostToolBatch hook's callback id.
pub const HOOK_ID: &str = "hook_0";

/// Characters of an unknown or malformed line kept for logs.
pub const SHOWN_CHARS: usize = 200;

// Lines the host writes.

/// The `initialize` control request.
pub fn initialize(request_id: &str, batch_hook: bool, system_prompt: &str) -> Value {
    let mut request = json!({
        "subtype": "initialize",
        "sdkMcpServers": [TOOL_SERVER],
        "systemPrompt": system_prompt,
    });
    if batch_hook {
        request["hooks"] =
            json!({"PostToolBatch": [{"hookCallbackIds": [HOOK_ID], "timeout": 60}]});
    }
    control_request(request_id, request)
}

/// The `interrupt` request's body: stop the running turn.
pub fn interrupt() -> Value {
    json!({"subtype": "interrupt"})
}

/// The `end_session` request's body: finish and exit.
pub fn end_session(reason: &str) -> Value {
    json!({"subtype": "end_session", "reason": reason})
}

/// A control request from the host.
pub fn control_request(request_id: &str, request: Value) -> Value {
    json!({"type": "control_request", "request_id": request_id, "request": request})
}

/// A user turn.
pub fn user_message(text: &str) -> Value {
    json!({
        "type": "user",
        "session_id": "",
        "parent_tool_use_id": null,
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
    })
}

/// A successful answer to a CLI request.
pub fn control_success(request_id: &str, response: Value) -> Value {
    json!({
        "type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response},
    })
}

/// An error answer to a CLI request.
pub fn control_error(request_id: &str, error: &str) -> Value {
    json!({
        "type": "control_response",
        "response": {"subtype": "error", "request_id": request_id, "error": error},
    })
}

/// The answer to an `mcp_message`: the JSON-RPC reply, wrapped.
pub fn mcp_response(request_id: &str, answer: Value) -> Value {
    control_success(request_id, json!({"mcp_response": answer}))
}

/// The hook's answer.
pub fn hook_output(reply: &HookReply) -> Result<Value, String> {
    match reply {
        HookReply::Continue => Ok(json!({})),
        HookReply::Stop { reason } => Ok(json!({"continue": false, "stopReason": reason})),
        HookReply::Refused(why) => Err(why.clone()),
    }
}

// Lines the CLI writes.

/// One line of the CLI's stdout, parsed.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A line of a kind the host knows.
    Cli(CliLine),
    /// JSON of an unknown `type` (or none): its start, for logs.
    Unknown(String),
    /// Not JSON: its start, for logs.
    Malformed(String),
    /// Longer than the reader keeps: its length in bytes, dropped unread.
    Oversized(usize),
}

impl Line {
    /// Parses one line (without its newline).
    pub fn parse(bytes: &[u8]) -> Self {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(value) => Self::from_value(&value),
            Err(_) => Self::Malformed(
                String::from_utf8_lossy(&bytes[..bytes.len().min(SHOWN_CHARS)]).into_owned(),
            ),
        }
    }

    /// Parses a line already read as JSON.
    pub fn from_value(value: &Value) -> Self {
        if !value.is_object() {
            return Self::Unknown(shown(value));
        }
        match CliLine::deserialize(value) {
            Ok(CliLine::Unknown) | Err(_) => Self::Unknown(shown(value)),
            Ok(line) => Self::Cli(line),
        }
    }
}

/// The start of a JSON value, for logs.
fn shown(value: &Value) -> String {
    value.to_string().chars().take(SHOWN_CHARS).collect()
}

/// A stdout line by its `type`.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CliLine {
    /// `system`: init, status, session state.
    System(#[serde(deserialize_with = "lenient")] SystemLine),
    /// `assistant`: one content block of the model's message.
    Assistant {
        /// The message, with its one block.
        #[serde(default, deserialize_with = "lenient")]
        message: AssistantMessage,
    },
    /// `user`: a tool's result fed back to the model.
    User {},
    /// `result`: the turn ended.
    Result(ResultLine),
    /// `control_request`: the CLI asks the host; answer exactly once.
    ControlRequest {
        /// Echoed in the answer; a request without one cannot be answered.
        #[serde(default, deserialize_with = "lenient")]
        request_id: Option<String>,
        /// What is asked.
        #[serde(default)]
        request: ControlRequest,
    },
    /// `control_response`: the CLI answers one of the host's requests.
    ControlResponse {
        /// The answer.
        #[serde(default, deserialize_with = "lenient")]
        response: ControlResponse,
    },
    /// `stream_event`: a raw API stream event (partial messages, with
    /// `--include-partial-messages`).
    StreamEvent {
        /// The Messages API's event.
        #[serde(default, deserialize_with = "lenient")]
        event: StreamEvent,
        /// Set when a subagent (the `Task` tool) streams, not the agent.
        #[serde(default, deserialize_with = "lenient")]
        parent_tool_use_id: Option<String>,
    },
    /// `rate_limit_event`: the API's rate-limit status.
    RateLimitEvent {},
    /// Any other `type`; [`Line::from_value`] turns it into
    /// [`Line::Unknown`] with the line's start.
    #[serde(other)]
    Unknown,
}

/// A `system` line by its `subtype`.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(tag = "subtype", rename_all = "snake_case")]
pub enum SystemLine {
    /// The CLI started a turn.
    Init {
        /// The agent's own session id, kept for `--resume`.
        #[serde(default, deserialize_with = "lenient")]
        session_id: String,
    },
    /// The session's state moved.
    SessionStateChanged {
        /// The new state.
        #[serde(default, deserialize_with = "lenient")]
        state: SessionState,
    },
    /// Any other subtype (`status`, `api_retry`, …): a sign of life.
    #[default]
    #[serde(other)]
    Other,
}

/// The states `session_state_changed` reports.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// A turn is running.
    Running,
    /// The CLI waits for the host (a permission ask).
    RequiresAction,
    /// The turn is over and the session waits for input.
    Idle,
    /// A state this host does not know.
    #[default]
    #[serde(other)]
    Other,
}

/// An `assistant` line's message.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub struct AssistantMessage {
    /// Its content blocks (one per line, as the CLI writes them).
    #[serde(default, deserialize_with = "lenient_each")]
    pub content: Vec<ContentBlock>,
}

impl AssistantMessage {
    /// The text of its text blocks, joined by newlines; `None` without any.
    pub fn text(&self) -> Option<String> {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text: Some(text) } => Some(text.as_str()),
                ContentBlock::Text { text: None }
                | ContentBlock::ToolUse { .. }
                | ContentBlock::Other => None,
            })
            .collect();
        (!texts.is_empty()).then(|| texts.join("\n"))
    }
}

impl AssistantMessage {
    /// Its tool_use blocks: `(id, name, input)`.
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            ContentBlock::Text { .. } | ContentBlock::Other => None,
        })
    }
}

/// One content block of an assistant message.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text for the user (not delivered by itself).
    Text {
        /// The text; `None` when it is missing or not a string.
        #[serde(default, deserialize_with = "lenient")]
        text: Option<String>,
    },
    /// A tool call (the CLI's own tools and the host's alike).
    ToolUse {
        /// The tool-use id.
        #[serde(default, deserialize_with = "lenient")]
        id: String,
        /// The tool's name as the model sent it (possibly MCP-prefixed).
        #[serde(default, deserialize_with = "lenient")]
        name: String,
        /// The tool's input.
        #[serde(default = "empty_object")]
        input: Value,
    },
    /// Thinking, …: nothing the host reads.
    #[default]
    #[serde(other)]
    Other,
}

/// A `stream_event` line's event: the Messages API's own stream events, by
/// their `type`; everything the host does not read is `Other`.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// A new API message starts.
    MessageStart {
        /// The message (its id names the texts it streams).
        #[serde(default, deserialize_with = "lenient")]
        message: StreamMessage,
    },
    /// A content block starts.
    ContentBlockStart {
        /// The block's index in its message.
        #[serde(default, deserialize_with = "lenient")]
        index: u64,
        /// What kind of block.
        #[serde(default, deserialize_with = "lenient")]
        content_block: StreamBlock,
    },
    /// A piece of a content block.
    ContentBlockDelta {
        /// The block's index in its message.
        #[serde(default, deserialize_with = "lenient")]
        index: u64,
        /// The piece.
        #[serde(default, deserialize_with = "lenient")]
        delta: Delta,
    },
    /// A content block is complete.
    ContentBlockStop {
        /// The block's index in its message.
        #[serde(default, deserialize_with = "lenient")]
        index: u64,
    },
    /// The API message is complete.
    MessageStop,
    /// `ping`, `message_delta`, anything else.
    #[default]
    #[serde(other)]
    Other,
}

/// The message a `message_start` event announces.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub struct StreamMessage {
    /// The API message id (`msg_…`).
    #[serde(default, deserialize_with = "lenient")]
    pub id: String,
}

/// The block a `content_block_start` event announces.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamBlock {
    /// Assistant text.
    Text,
    /// A tool call; its input follows as `input_json_delta` pieces.
    ToolUse {
        /// The tool-use id.
        #[serde(default, deserialize_with = "lenient")]
        id: String,
        /// The tool's name as the model sent it.
        #[serde(default, deserialize_with = "lenient")]
        name: String,
    },
    /// Thinking, server tools, …
    #[default]
    #[serde(other)]
    Other,
}

/// A `content_block_delta` event's piece.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Delta {
    /// A piece of assistant text.
    TextDelta {
        /// The piece.
        #[serde(default, deserialize_with = "lenient")]
        text: String,
    },
    /// A piece of a tool call's input JSON.
    InputJsonDelta {
        /// The piece (the pieces concatenate to the input).
        #[serde(default, deserialize_with = "lenient")]
        partial_json: String,
    },
    /// Thinking, signatures, citations, …
    #[default]
    #[serde(other)]
    Other,
}

/// The `result` line.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub struct ResultLine {
    /// `success`, `error_during_execution`, `error_max_turns`, …
    #[serde(default, deserialize_with = "lenient")]
    pub subtype: String,
    /// Whether the agent counts the turn as failed.
    #[serde(default, deserialize_with = "lenient")]
    pub is_error: bool,
    /// The last API call's stop reason.
    #[serde(default, deserialize_with = "lenient")]
    pub stop_reason: Option<String>,
    /// Why the agent loop ended; unknown values are kept as they are.
    #[serde(default, deserialize_with = "lenient")]
    pub terminal_reason: Option<String>,
    /// The final text (may be empty).
    #[serde(default, deserialize_with = "lenient")]
    pub result: String,
    /// Model turns the agent counted.
    #[serde(default, deserialize_with = "lenient")]
    pub num_turns: u64,
    /// What the turn cost, in USD.
    #[serde(default, deserialize_with = "lenient")]
    pub total_cost_usd: f64,
}

impl From<ResultLine> for AgentResult {
    fn from(line: ResultLine) -> Self {
        Self {
            subtype: line.subtype,
            is_error: line.is_error,
            stop_reason: line.stop_reason,
            terminal_reason: line.terminal_reason,
            text: line.result,
            num_turns: u32::try_from(line.num_turns).unwrap_or(u32::MAX),
            total_cost_usd: line.total_cost_usd,
        }
    }
}

/// The `result` line as the turn needs it.
pub fn result(line: &Value) -> AgentResult {
    ResultLine::deserialize(line).unwrap_or_default().into()
}

/// The CLI's answer to one of the host's requests, by its `subtype`.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(tag = "subtype", rename_all = "snake_case")]
pub enum ControlResponse {
    /// The request was served.
    Success {
        /// The host's request id.
        #[serde(default, deserialize_with = "lenient")]
        request_id: Option<String>,
    },
    /// The CLI refused the request.
    Error {
        /// The host's request id.
        #[serde(default, deserialize_with = "lenient")]
        request_id: Option<String>,
        /// Why.
        #[serde(default, deserialize_with = "lenient")]
        error: String,
    },
    /// Any other subtype.
    #[default]
    #[serde(other)]
    Other,
}

/// What a `control_request` from the CLI asks, by its `subtype`.
#[derive(Debug, PartialEq)]
pub enum ControlRequest {
    /// `can_use_tool`: may the agent run this tool?
    CanUseTool(CanUseTool),
    /// `hook_callback`: a hook the host registered fired.
    HookCallback(HookCallback),
    /// `mcp_message`: a JSON-RPC message for an in-process MCP server.
    McpMessage(McpMessage),
    /// Any other subtype; refused through the protocol.
    Unknown {
        /// The subtype as sent (empty when there was none).
        subtype: String,
    },
}

impl ControlRequest {
    /// The subtype, for logs.
    pub fn subtype(&self) -> &str {
        match self {
            Self::CanUseTool(_) => "can_use_tool",
            Self::HookCallback(_) => "hook_callback",
            Self::McpMessage(_) => "mcp_message",
            Self::Unknown { subtype } => subtype,
        }
    }
}

impl Default for ControlRequest {
    fn default() -> Self {
        Self::Unknown {
            subtype: String::new(),
        }
    }
}

impl<'de> Deserialize<'de> for ControlRequest {
    fn deserialize<D>(deserializer: D) -> Result<Self, D::Error>
    where
        D: Deserializer<'de>,
    {
        /// The subtypes the host serves.
        #[derive(Deserialize)]
        #[serde(tag = "subtype", rename_all = "snake_case")]
        enum Known {
            /// `can_use_tool`.
            CanUseTool(CanUseTool),
            /// `hook_callback`.
            HookCallback(HookCallback),
            /// `mcp_message`.
            McpMessage(McpMessage),
            /// Any other subtype.
            #[serde(other)]
            Other,
        }
        /// Only the subtype, to name an unknown request.
        #[derive(Deserialize)]
        struct Subtype {
            /// The subtype as sent.
            #[serde(default, deserialize_with = "lenient")]
            subtype: String,
        }
        let value = Value::deserialize(deserializer)?;
        Ok(match Known::deserialize(&value) {
            Ok(Known::CanUseTool(ask)) => Self::CanUseTool(ask),
            Ok(Known::HookCallback(hook)) => Self::HookCallback(hook),
            Ok(Known::McpMessage(message)) => Self::McpMessage(message),
            Ok(Known::Other) | Err(_) => Self::Unknown {
                subtype: Subtype::deserialize(&value)
                    .map(|s| s.subtype)
                    .unwrap_or_default(),
            },
        })
    }
}

/// A `can_use_tool` request.
#[derive(Debug, PartialEq, Deserialize)]
pub struct CanUseTool {
    /// The tool's full name (`Read`, `mcp__telegram-tools__send`).
    #[serde(default, deserialize_with = "lenient")]
    pub tool_name: String,
    /// The tool's input, echoed back when allowed.
    #[serde(default = "empty_object")]
    pub input: Value,
    /// The tool-use id, echoed back as sent.
    #[serde(default)]
    pub tool_use_id: Value,
}

impl Default for CanUseTool {
    fn default() -> Self {
        Self {
            tool_name: String::new(),
            input: empty_object(),
            tool_use_id: Value::Null,
        }
    }
}

/// `can_use_tool` answered yes: the tool runs with `input`.
pub fn permission_allow(input: &Value, tool_use_id: &Value) -> Value {
    json!({"behavior": "allow", "updatedInput": input, "toolUseID": tool_use_id})
}

/// `can_use_tool` answered no; the message goes back to the model.
pub fn permission_deny(message: &str) -> Value {
    json!({"behavior": "deny", "message": message})
}

/// A `hook_callback` request.
#[derive(Debug, PartialEq, Deserialize)]
pub struct HookCallback {
    /// Which registered callback fired ([`HOOK_ID`]).
    #[serde(default, deserialize_with = "lenient")]
    pub callback_id: String,
    /// The hook's input, by its event.
    #[serde(default, deserialize_with = "lenient")]
    pub input: HookInput,
}

/// A hook's input, by its `hook_event_name`.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(tag = "hook_event_name")]
pub enum HookInput {
    /// Every tool of one assistant message has resolved.
    PostToolBatch(PostToolBatch),
    /// Another hook: answered with an empty output.
    #[default]
    #[serde(other)]
    Other,
}

/// A PostToolBatch hook's input.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub struct PostToolBatch {
    /// The batch's calls, in order.
    #[serde(default, deserialize_with = "lenient_each")]
    pub tool_calls: Vec<BatchToolCall>,
}

/// One call of a PostToolBatch.
#[derive(Debug, PartialEq, Deserialize)]
pub struct BatchToolCall {
    /// The tool's full name.
    #[serde(default, deserialize_with = "lenient")]
    pub tool_name: String,
    /// The tool's input.
    #[serde(default = "empty_object")]
    pub tool_input: Value,
}

impl Default for BatchToolCall {
    fn default() -> Self {
        Self {
            tool_name: String::new(),
            tool_input: empty_object(),
        }
    }
}

impl PostToolBatch {
    /// The calls as the turn sees them, each parsed with `tools`.
    pub fn calls(&self, tools: &ToolRegistry) -> Vec<BatchCall> {
        self.tool_calls
            .iter()
            .map(|call| {
                tools.batch_call(&ToolName::parse(call.tool_name.as_str()), &call.tool_input)
            })
            .collect()
    }
}

/// The calls of a PostToolBatch hook input read as JSON.
pub fn batch_calls(input: &Value, tools: &ToolRegistry) -> Vec<BatchCall> {
    PostToolBatch::deserialize(input)
        .unwrap_or_default()
        .calls(tools)
}

/// An `mcp_message` request.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub struct McpMessage {
    /// The MCP server it is for (only [`TOOL_SERVER`] is served).
    #[serde(default, deserialize_with = "lenient")]
    pub server_name: String,
    /// The JSON-RPC message.
    #[serde(default)]
    pub message: RpcRequest,
}

// Tolerant reading.

/// Reads a field, taking its default when it has the wrong shape.
fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let value = Value::deserialize(deserializer)?;
    Ok(T::deserialize(value).unwrap_or_default())
}

/// Reads a list item by item, each item that has the wrong shape taking its
/// default; anything but a list is an empty one.
fn lenient_each<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    Ok(match Value::deserialize(deserializer)? {
        Value::Array(items) => items
            .into_iter()
            .map(|item| T::deserialize(item).unwrap_or_default())
            .collect(),
        _ => Vec::new(),
    })
}

fn empty_object() -> Value {
    json!({})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::ToolReply;
    use crate::agent::tools::{ChatCall, ChatTool};

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
    fn mcp_initialize_echoes_the_protocol_version() {
        let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}});
        let McpRequest::Answer(answer) = mcp(&msg, &registry()) else {
            panic!()
        };
        assert_eq!(answer["result"]["protocolVersion"], "2025-11-25");
        assert_eq!(answer["result"]["capabilities"], json!({"tools": {}}));
        assert_eq!(answer["id"], 1);
    }

    #[test]
    fn tools_are_listed_always_loaded() {
        let McpRequest::Answer(answer) =
            mcp(&json!({"id": 2, "method": "tools/list"}), &registry())
        else {
            panic!()
        };
        let tools = answer["result"]["tools"].as_array().unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, vec!["send", "end_turn", "react", "send_file"]);
        assert!(
            tools
                .iter()
                .all(|t| t["_meta"]["anthropic/alwaysLoad"] == true)
        );
    }

    fn send(text: &str) -> ChatCall {
        ChatCall {
            name: "send".into(),
            tool: Ok(ChatTool::Send { text: text.into() }),
            ends_turn: false,
        }
    }

    #[test]
    fn tool_calls_are_served_and_unknown_ones_refused() {
        let call = json!({"id": 3, "method": "tools/call", "params": {"name": "send", "arguments": {"text": "hi"}, "_meta": {"claudecode/toolUseId": "toolu_1"}}});
        assert_eq!(
            mcp(&call, &registry()),
            McpRequest::Call {
                rpc_id: json!(3),
                tool_use_id: "toolu_1".into(),
                call: send("hi"),
            }
        );
        let end = json!({"id": 6, "method": "tools/call", "params": {"name": "end_turn", "arguments": {}}});
        let McpRequest::Call { call, .. } = mcp(&end, &registry()) else {
            panic!("end_turn is served")
        };
        assert_eq!(
            (call.tool, call.ends_turn),
            (Ok(ChatTool::EndTurn { text: None }), true),
            "the call says it ends the turn"
        );
        let unknown = json!({"id": 4, "method": "tools/call", "params": {"name": "teleport"}});
        let McpRequest::Answer(answer) = mcp(&unknown, &registry()) else {
            panic!()
        };
        assert_eq!(answer["error"]["code"], RPC_INVALID_PARAMS);
        let McpRequest::Answer(answer) =
            mcp(&json!({"id": 5, "method": "resources/list"}), &registry())
        else {
            panic!()
        };
        assert_eq!(answer["error"]["code"], RPC_METHOD_NOT_FOUND);
    }

    #[test]
    fn tool_replies_map_to_results_errors_and_refusals() {
        let id = json!(7);
        assert_eq!(
            tool_reply(&id, &ToolReply::Ok("ok".into()))["result"]["content"][0]["text"],
            "ok"
        );
        assert_eq!(
            tool_reply(&id, &ToolReply::Error("bad".into()))["result"]["isError"],
            true
        );
        assert_eq!(
            tool_reply(&id, &ToolReply::Refused("stopping".into()))["error"]["code"],
            RPC_HOST_STOPPING
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
        assert_eq!(r.terminal_reason.as_deref(), Some("hook_stopped"));
        assert_eq!(result(&json!({"type": "result"})).subtype, "");
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
            parse(
                json!({"type": "system", "subtype": "session_state_changed", "state": "dreaming"})
            ),
            Line::Cli(CliLine::System(SystemLine::SessionStateChanged {
                state: SessionState::Other
            }))
        );
        assert_eq!(
            parse(json!({"type": "system", "subtype": "api_retry", "attempt": 1})),
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
        let Line::Cli(CliLine::Assistant { message }) = parse(json!({
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
        let Line::Cli(CliLine::Assistant { message }) = parse(json!({
            "type": "assistant",
            "message": {"content": [{"type": "tool_use", "id": "t", "name": "send", "input": {}}]}
        })) else {
            panic!("not an assistant line")
        };
        assert_eq!(message.text(), None);
        let Line::Cli(CliLine::Assistant { message }) = parse(json!({"type": "assistant"})) else {
            panic!("not an assistant line")
        };
        assert_eq!(message.text(), None);
    }

    #[test]
    fn user_stream_and_rate_limit_lines_are_known() {
        assert_eq!(
            parse(json!({"type": "user", "message": {"role": "user", "content": []}})),
            Line::Cli(CliLine::User {})
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

    fn stream(event: Value) -> StreamEvent {
        match parse(
            json!({"type": "stream_event", "event": event, "session_id": "s",
            "parent_tool_use_id": null, "uuid": "u"}),
        ) {
            Line::Cli(CliLine::StreamEvent {
                event,
                parent_tool_use_id: None,
            }) => event,
            other => panic!("not a stream event: {other:?}"),
        }
    }

    #[test]
    fn stream_events_are_read_by_type() {
        assert_eq!(
            stream(
                json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "content": [], "usage": {}}})
            ),
            StreamEvent::MessageStart {
                message: StreamMessage { id: "msg_1".into() }
            }
        );
        assert_eq!(
            stream(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}})),
            StreamEvent::ContentBlockStart {
                index: 0,
                content_block: StreamBlock::Text
            }
        );
        assert_eq!(
            stream(
                json!({"type": "content_block_start", "index": 2, "content_block":
                {"type": "tool_use", "id": "toolu_1", "name": "mcp__telegram-tools__end_turn", "input": {}}})
            ),
            StreamEvent::ContentBlockStart {
                index: 2,
                content_block: StreamBlock::ToolUse {
                    id: "toolu_1".into(),
                    name: "mcp__telegram-tools__end_turn".into()
                }
            }
        );
        assert_eq!(
            stream(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "Hel"}})),
            StreamEvent::ContentBlockDelta {
                index: 0,
                delta: Delta::TextDelta { text: "Hel".into() }
            }
        );
        assert_eq!(
            stream(json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "{\"te"}})),
            StreamEvent::ContentBlockDelta {
                index: 1,
                delta: Delta::InputJsonDelta {
                    partial_json: "{\"te".into()
                }
            }
        );
        assert_eq!(
            stream(json!({"type": "content_block_stop", "index": 1})),
            StreamEvent::ContentBlockStop { index: 1 }
        );
        assert_eq!(
            stream(json!({"type": "message_stop"})),
            StreamEvent::MessageStop
        );
    }

    #[test]
    fn unknown_or_mistyped_stream_events_are_other_never_an_error() {
        for event in [
            json!({"type": "ping"}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
            json!({"type": "future_event", "x": 1}),
            json!({}),
            json!("not an object"),
            json!(null),
        ] {
            assert_eq!(stream(event.clone()), StreamEvent::Other, "{event}");
        }
        assert_eq!(
            stream(json!({"type": "content_block_delta", "index": "one",
                "delta": {"type": "thinking_delta", "thinking": "hm"}})),
            StreamEvent::ContentBlockDelta {
                index: 0,
                delta: Delta::Other
            }
        );
        assert_eq!(
            stream(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": 5}})),
            StreamEvent::ContentBlockDelta {
                index: 0,
                delta: Delta::TextDelta {
                    text: String::new()
                }
            }
        );
        assert_eq!(
            stream(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "thinking", "thinking": ""}})),
            StreamEvent::ContentBlockStart {
                index: 0,
                content_block: StreamBlock::Other
            }
        );
        assert_eq!(
            stream(json!({"type": "message_start", "message": 7})),
            StreamEvent::MessageStart {
                message: StreamMessage::default()
            }
        );
        assert_eq!(
            parse(json!({"type": "stream_event"})),
            Line::Cli(CliLine::StreamEvent {
                event: StreamEvent::Other,
                parent_tool_use_id: None,
            })
        );
        assert_eq!(
            parse(
                json!({"type": "stream_event", "parent_tool_use_id": "toolu_task",
                "event": {"type": "message_stop"}})
            ),
            Line::Cli(CliLine::StreamEvent {
                event: StreamEvent::MessageStop,
                parent_tool_use_id: Some("toolu_task".into()),
            }),
            "a subagent's stream is told apart"
        );
    }

    #[test]
    fn tool_use_blocks_are_read_from_assistant_lines() {
        let Line::Cli(CliLine::Assistant { message }) = parse(json!({
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
            "result": "partial", "total_cost_usd": 0.25, "usage": {}
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
            }
        );
        let Line::Cli(CliLine::Result(line)) =
            parse(json!({"type": "result", "num_turns": "two", "total_cost_usd": 1}))
        else {
            panic!("not a result line")
        };
        assert_eq!(line.num_turns, 0, "a mistyped count is zero");
        assert_eq!(line.total_cost_usd, 1.0);
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
    fn a_tools_call_carries_its_tool_use_id_from_meta() {
        let (_, call) = request(
            json!({"type": "control_request", "request_id": "r6", "request": {
                "subtype": "mcp_message", "server_name": "telegram-tools", "message": {
                    "jsonrpc": "2.0", "id": 9, "method": "tools/call",
                    "params": {"name": "send", "arguments": {"text": "hi"}, "_meta": {"claudecode/toolUseId": "toolu_42"}}
                }
            }}),
        );
        let ControlRequest::McpMessage(McpMessage {
            server_name,
            message,
        }) = call
        else {
            panic!("not an mcp_message: {call:?}")
        };
        assert_eq!(server_name, TOOL_SERVER);
        assert_eq!(
            message,
            RpcRequest {
                id: json!(9),
                method: McpMethod::ToolsCall(ToolsCall {
                    name: "send".into(),
                    arguments: json!({"text": "hi"}),
                    meta: CallMeta {
                        tool_use_id: "toolu_42".into()
                    },
                }),
            }
        );
        assert_eq!(
            message.serve(&registry()),
            McpRequest::Call {
                rpc_id: json!(9),
                tool_use_id: "toolu_42".into(),
                call: send("hi"),
            }
        );
    }

    #[test]
    fn mcp_methods_are_read_by_name() {
        let read = |message: Value| RpcRequest::deserialize(&message).unwrap();
        assert_eq!(
            read(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2099-01-01"}})).method,
            McpMethod::Initialize {
                protocol_version: json!("2099-01-01")
            }
        );
        assert_eq!(
            read(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize"})).method,
            McpMethod::Initialize {
                protocol_version: json!("2025-11-25")
            }
        );
        let initialized = read(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(initialized.id, Value::Null);
        assert_eq!(initialized.method, McpMethod::Notification);
        assert_eq!(
            read(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).method,
            McpMethod::ToolsList
        );
        assert_eq!(
            read(json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/list"})).method,
            McpMethod::Unknown {
                method: "prompts/list".into()
            }
        );
        assert_eq!(
            read(json!("not a message")),
            RpcRequest::default(),
            "anything but an object is an unknown method"
        );
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

    #[test]
    fn an_error_message_that_is_not_plain_text_still_makes_valid_json() {
        let nasty = "line\nbreak \u{0}nul \"quote\" \u{202e}rtl 🚀";
        let line = control_error("r", nasty);
        let text = line.to_string();
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["response"]["error"], nasty);
        let rpc = rpc_error(&Value::Null, RPC_INTERNAL, nasty);
        assert_eq!(rpc["error"]["message"], nasty);
    }
}

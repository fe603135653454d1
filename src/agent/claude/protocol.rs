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
//! side is the host's ([`crate::agent::host::mcp`]). All of it is
//! unit-tested without a process.

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use serde_json::{Value, json};

use crate::agent::host::jsonrpc::{empty_object, lenient};
use crate::agent::tools::TOOL_SERVER;
use crate::agent::{AuthFailure, HookReply};
pub use result_line::{ResultLine, result};
pub use usage::UsageLine;

mod control;
mod result_line;
mod usage;

pub use control::{
    BatchToolCall, CanUseTool, ControlRequest, ControlResponse, HookCallback, HookInput,
    McpMessage, PostToolBatch, batch_calls, permission_allow, permission_deny,
};

// The chat tools' MCP server is the host's; re-exported for the
// benchmarks' minimal direct driver.
pub use crate::agent::host::mcp::{McpRequest, RpcRequest, mcp, tool_reply};

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
#[allow(
    clippy::large_enum_variant,
    reason = "one line at a time; serde_json's ordered maps (turned on by the ACP schema crate) made `CliLine` larger"
)]
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
        /// Set on a line the CLI writes for an API error instead of the
        /// model's answer (`authentication_failed`, `rate_limit`, …).
        #[serde(default, deserialize_with = "lenient")]
        error: Option<String>,
    },
    /// `user`: a tool's result fed back to the model, or (with
    /// `isReplay`, under `--replay-user-messages`) the echo of a user
    /// message the host wrote, at the moment the CLI read it.
    User {
        /// Set on the echo of a host's message.
        #[serde(default, rename = "isReplay", deserialize_with = "lenient")]
        is_replay: bool,
    },
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

/// The CLI's name for an API error that these credentials cannot get past.
const AUTH_FAILED: &str = "authentication_failed";

impl CliLine {
    /// The authentication failure this line reports: the CLI's error line
    /// for one (`Not logged in · Please run /login`), or its retry of a
    /// call the API refused for the credentials (it would retry a 401 for
    /// minutes before giving up).
    pub fn auth_failure(&self) -> Option<AuthFailure> {
        match self {
            Self::Assistant {
                message,
                error: Some(error),
            } if error == AUTH_FAILED => {
                let detail = message.text().unwrap_or_else(|| error.clone());
                Some(AuthFailure {
                    refused: !detail.starts_with("Not logged in"),
                    detail,
                })
            }
            Self::System(SystemLine::ApiRetry {
                error_status,
                error,
            }) if error.as_deref() == Some(AUTH_FAILED) || *error_status == Some(401) => {
                Some(AuthFailure {
                    refused: true,
                    detail: format!(
                        "API Error: {} {}",
                        error_status.map_or("?".into(), |s| s.to_string()),
                        error.as_deref().unwrap_or(AUTH_FAILED)
                    ),
                })
            }
            _ => None,
        }
    }
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
    /// The CLI will retry a failed API call.
    ApiRetry {
        /// The HTTP status of the failure (401: credentials refused).
        #[serde(default, deserialize_with = "lenient")]
        error_status: Option<u16>,
        /// The CLI's name for it (`authentication_failed`, …).
        #[serde(default, deserialize_with = "lenient")]
        error: Option<String>,
    },
    /// Any other subtype (`status`, …): a sign of life.
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

// Tolerant reading.

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

#[cfg(test)]
mod tests;

//! The CLI's `control_request`s (`can_use_tool`, `hook_callback`,
//! `mcp_message`) and `control_response`s, typed, with the host's answers to
//! `can_use_tool`.

use serde::Deserialize;
use serde::de::Deserializer;
use serde_json::{Value, json};

use super::{RpcRequest, empty_object, lenient, lenient_each};
use crate::agent::tools::{BatchCall, ToolName, ToolRegistry};

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

impl ControlResponse {
    /// The id of the host's request it answers, when it names one.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Self::Success { request_id } | Self::Error { request_id, .. } => request_id.as_deref(),
            Self::Other => None,
        }
    }
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
        enum KnownSubtype {
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
        Ok(match KnownSubtype::deserialize(&value) {
            Ok(KnownSubtype::CanUseTool(ask)) => Self::CanUseTool(ask),
            Ok(KnownSubtype::HookCallback(hook)) => Self::HookCallback(hook),
            Ok(KnownSubtype::McpMessage(message)) => Self::McpMessage(message),
            Ok(KnownSubtype::Other) | Err(_) => Self::Unknown {
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
    /// The MCP server it is for (only [`TOOL_SERVER`](crate::agent::tools::TOOL_SERVER) is served).
    #[serde(default, deserialize_with = "lenient")]
    pub server_name: String,
    /// The JSON-RPC message.
    #[serde(default)]
    pub message: RpcRequest,
}

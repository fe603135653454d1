//! The chat tools' MCP server `telegram-tools`, whatever carries it (the
//! claude CLI relays its messages in `mcp_message`; an ACP agent reaches
//! it over HTTP or the stdio bridge): its JSON-RPC messages, typed, the
//! host's answers to them, and a chat tool call handed to the turn
//! ([`hand_over`]).

use serde::Deserialize;
use serde::de::Deserializer;
use serde_json::{Value, json};

use super::jsonrpc::{
    self, HOST_STOPPING, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, empty_object, lenient,
};
use crate::agent::tools::{ChatCall, TOOL_SERVER, ToolName, ToolRegistry};
use crate::agent::{AgentEvent, BoxFuture, Responder, ToolCall, ToolReply};

/// The MCP protocol version answered when `initialize` names none.
const DEFAULT_MCP_VERSION: &str = "2025-11-25";

/// The `tools/call` answer for a tool's reply.
pub fn tool_reply(id: &Value, reply: &ToolReply) -> Value {
    match reply {
        ToolReply::Ok(text) => {
            jsonrpc::result(id, json!({"content": [{"type": "text", "text": text}]}))
        }
        ToolReply::Error(text) => jsonrpc::result(
            id,
            json!({"content": [{"type": "text", "text": text}], "isError": true}),
        ),
        ToolReply::Refused(text) => jsonrpc::error(id, HOST_STOPPING, text),
        ToolReply::Failed(text) => jsonrpc::error(id, INTERNAL_ERROR, text),
    }
}

/// A JSON-RPC message for `telegram-tools`.
#[derive(Debug, Default, PartialEq)]
pub struct RpcRequest {
    /// The id to answer with (`null` when there was none).
    pub id: Value,
    /// What is asked.
    pub method: McpMethod,
}

/// The MCP methods, with their params.
#[derive(Debug, PartialEq)]
pub enum McpMethod {
    /// `initialize`: the version to echo.
    Initialize {
        /// The client's protocol version, echoed.
        protocol_version: Value,
    },
    /// `notifications/*` (such as `notifications/initialized`).
    Notification,
    /// `tools/list`.
    ToolsList,
    /// `tools/call`.
    ToolsCall(ToolsCall),
    /// Any other method; answered "method not found".
    Unknown {
        /// The method as sent (empty when there was none).
        method: String,
    },
}

impl Default for McpMethod {
    fn default() -> Self {
        Self::Unknown {
            method: String::new(),
        }
    }
}

/// `tools/call` params.
#[derive(Debug, PartialEq, Deserialize)]
pub struct ToolsCall {
    /// The tool's bare name (`end_turn`).
    #[serde(default, deserialize_with = "lenient")]
    pub name: String,
    /// The tool's input.
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// Where the CLI names the tool use.
    #[serde(rename = "_meta", default, deserialize_with = "lenient")]
    pub meta: CallMeta,
}

impl Default for ToolsCall {
    fn default() -> Self {
        Self {
            name: String::new(),
            arguments: empty_object(),
            meta: CallMeta::default(),
        }
    }
}

/// `tools/call` `_meta`.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub struct CallMeta {
    /// The agent's tool-use id for the call.
    #[serde(rename = "claudecode/toolUseId", default, deserialize_with = "lenient")]
    pub tool_use_id: String,
}

impl<'de> Deserialize<'de> for RpcRequest {
    fn deserialize<D>(deserializer: D) -> Result<Self, D::Error>
    where
        D: Deserializer<'de>,
    {
        /// The JSON-RPC envelope; params are read by method.
        #[derive(Deserialize)]
        struct McpEnvelope {
            /// The id to answer with.
            #[serde(default)]
            id: Value,
            /// The method's name.
            #[serde(default, deserialize_with = "lenient")]
            method: String,
            /// The method's params, read once the method is known.
            #[serde(default = "empty_object")]
            params: Value,
        }
        /// `initialize` params.
        #[derive(Deserialize)]
        struct InitializeParams {
            /// The client's protocol version.
            #[serde(rename = "protocolVersion", default = "default_mcp_version")]
            protocol_version: Value,
        }
        let value = Value::deserialize(deserializer)?;
        let Ok(envelope) = McpEnvelope::deserialize(&value) else {
            return Ok(Self::default());
        };
        let method = match envelope.method.as_str() {
            "initialize" => McpMethod::Initialize {
                protocol_version: InitializeParams::deserialize(&envelope.params)
                    .map_or_else(|_| default_mcp_version(), |p| p.protocol_version),
            },
            m if m.starts_with("notifications/") => McpMethod::Notification,
            "tools/list" => McpMethod::ToolsList,
            "tools/call" => {
                McpMethod::ToolsCall(ToolsCall::deserialize(envelope.params).unwrap_or_default())
            }
            _ => McpMethod::Unknown {
                method: envelope.method,
            },
        };
        Ok(Self {
            id: envelope.id,
            method,
        })
    }
}

/// What an `mcp_message` asks of the host.
#[derive(Debug, PartialEq)]
pub enum McpRequest {
    /// Answer at once with this JSON-RPC message.
    Answer(Value),
    /// A chat tool call to serve.
    Call {
        /// The JSON-RPC id to answer.
        rpc_id: Value,
        /// The agent's tool-use id.
        tool_use_id: String,
        /// The call, parsed.
        call: ChatCall,
    },
}

impl RpcRequest {
    /// Serves the message as `telegram-tools`.
    pub fn serve(self, tools: &ToolRegistry) -> McpRequest {
        let id = self.id;
        match self.method {
            McpMethod::Initialize { protocol_version } => McpRequest::Answer(jsonrpc::result(
                &id,
                json!({
                    "protocolVersion": protocol_version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": TOOL_SERVER, "version": env!("CARGO_PKG_VERSION")},
                }),
            )),
            McpMethod::Notification => {
                McpRequest::Answer(json!({"jsonrpc": "2.0", "result": {}, "id": 0}))
            }
            McpMethod::ToolsList => {
                let list: Vec<Value> = tools
                    .tools()
                    .iter()
                    .map(|t| {
                        json!({
                            "name": t.name,
                            "description": t.description,
                            "inputSchema": t.input_schema,
                            "_meta": {"anthropic/alwaysLoad": true},
                        })
                    })
                    .collect();
                McpRequest::Answer(jsonrpc::result(&id, json!({"tools": list})))
            }
            McpMethod::ToolsCall(call) => {
                let name = ToolName::parse(call.name.as_str());
                if tools.get(name.bare()).is_none() {
                    return McpRequest::Answer(jsonrpc::error(
                        &id,
                        INVALID_PARAMS,
                        &format!("unknown tool `{}`", call.name),
                    ));
                }
                McpRequest::Call {
                    rpc_id: id,
                    tool_use_id: call.meta.tool_use_id,
                    call: tools.call(&name, &call.arguments),
                }
            }
            McpMethod::Unknown { method } => McpRequest::Answer(jsonrpc::error(
                &id,
                METHOD_NOT_FOUND,
                &format!("method `{method}` not found"),
            )),
        }
    }
}

/// Serves an MCP JSON-RPC message read as JSON for `telegram-tools`.
pub fn mcp(message: &Value, tools: &ToolRegistry) -> McpRequest {
    RpcRequest::deserialize(message)
        .unwrap_or_default()
        .serve(tools)
}

fn default_mcp_version() -> Value {
    json!(DEFAULT_MCP_VERSION)
}

/// A chat tool call served: handed to the turn as an
/// [`AgentEvent::ToolCall`] (its id the agent's tool-use id, else
/// `mcp-<rpc id>`), or refused at once while the host is stopping. The
/// answer resolves once the turn replies (an event nobody receives drops
/// its responder, which fails the call).
pub(crate) fn hand_over(
    rpc_id: Value,
    tool_use_id: String,
    call: ChatCall,
    stopping: bool,
    events: &tokio::sync::mpsc::UnboundedSender<AgentEvent>,
) -> BoxFuture<Value> {
    if stopping {
        tracing::info!(call_id = %tool_use_id, tool = %call.name, "tools/call refused: the host is stopping");
        let answer = jsonrpc::error(&rpc_id, HOST_STOPPING, "the host is stopping");
        return Box::pin(std::future::ready(answer));
    }
    let id = if tool_use_id.is_empty() {
        format!("mcp-{rpc_id}")
    } else {
        tool_use_id
    };
    let (responder, rx) = Responder::new(format!("tools/call {} ({id})", call.name));
    let _ = events.send(AgentEvent::ToolCall(ToolCall {
        id,
        call,
        reply: responder,
    }));
    Box::pin(async move {
        match rx.await {
            Ok(value) => tool_reply(&rpc_id, &value),
            Err(_) => jsonrpc::error(&rpc_id, INTERNAL_ERROR, "the host dropped the call"),
        }
    })
}

#[cfg(test)]
mod tests;

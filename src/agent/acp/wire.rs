//! The wire: JSON-RPC 2.0, one object per line, read once into
//! [`Incoming`]; the host's requests and answers built from the
//! `agent-client-protocol-schema` types. Nothing here decides anything.

use std::path::Path;

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    AuthenticateRequest, CancelNotification, ClientCapabilities, ContentBlock,
    FileSystemCapabilities, Implementation, InitializeRequest, LoadSessionRequest, McpServer,
    NewSessionRequest, PermissionOptionId, PromptRequest, RequestPermissionOutcome,
    RequestPermissionResponse, SelectedPermissionOutcome, TextContent,
};
use serde::Serialize;
use serde_json::{Value, json};

/// JSON-RPC: the method does not exist (or is not offered).
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC: the host is stopping (as the claude backend answers).
pub(crate) const HOST_STOPPING: i64 = -32000;

/// Characters of a bad line kept for the log.
const SHOWN_CHARS: usize = 200;

/// One line from the agent, read once.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    /// The answer to one of the host's requests (the host's ids are numbers).
    Response {
        /// The host's request id.
        id: u64,
        /// Its `result`, or its `error`.
        outcome: Result<Value, RpcError>,
    },
    /// A request the host must answer once.
    Request {
        /// The agent's id, echoed in the answer as it came.
        id: Value,
        /// The method.
        method: String,
        /// Its params (`null` when absent).
        params: Value,
    },
    /// A notification (`session/update`, …).
    Notification {
        /// The method.
        method: String,
        /// Its params (`null` when absent).
        params: Value,
    },
    /// Not a JSON-RPC message the host can act on: the start of it, for the
    /// log.
    Malformed(String),
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    /// The code.
    pub(crate) code: i64,
    /// The message (bounded when shown).
    pub(crate) message: String,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let message: String = self.message.chars().take(SHOWN_CHARS).collect();
        write!(f, "{message} ({})", self.code)
    }
}

/// The start of `line`, for a log.
fn shown(line: &str) -> String {
    line.chars().take(SHOWN_CHARS).collect()
}

impl Incoming {
    /// Reads one line; never fails: what it cannot read is
    /// [`Incoming::Malformed`].
    pub(crate) fn parse(line: &str) -> Self {
        let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(line) else {
            return Self::Malformed(shown(line));
        };
        let params = object.remove("params").unwrap_or(Value::Null);
        let method = object
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match (object.remove("id"), method) {
            (Some(id), Some(method)) if !id.is_null() => Self::Request { id, method, params },
            (None, Some(method)) => Self::Notification { method, params },
            (Some(id), None) => {
                Self::response(&id, object).unwrap_or_else(|| Self::Malformed(shown(line)))
            }
            _ => Self::Malformed(shown(line)),
        }
    }

    /// A response to one of the host's (numbered) requests.
    fn response(id: &Value, mut object: serde_json::Map<String, Value>) -> Option<Self> {
        let id = id.as_u64()?;
        if let Some(error) = object.remove("error") {
            let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            return Some(Self::Response {
                id,
                outcome: Err(RpcError { code, message }),
            });
        }
        let result = object.remove("result")?;
        Some(Self::Response {
            id,
            outcome: Ok(result),
        })
    }
}

/// `params` as JSON (the schema's types always serialize).
fn to_value(params: impl Serialize) -> Value {
    serde_json::to_value(params).unwrap_or(Value::Null)
}

/// A request of the host's.
pub(crate) fn request(id: u64, method: &str, params: impl Serialize) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": to_value(params)})
}

/// A notification of the host's.
pub(crate) fn notification(method: &str, params: impl Serialize) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": to_value(params)})
}

/// The answer to the agent's request `id`.
pub(crate) fn result(id: &Value, result: impl Serialize) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": to_value(result)})
}

/// An error answer to the agent's request `id`.
pub(crate) fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// `initialize`: protocol version 1, no file-system and no terminal
/// capability (the agent works in its own directory, with its own tools).
pub(crate) fn initialize() -> InitializeRequest {
    let mut fs = FileSystemCapabilities::default();
    fs.read_text_file = false;
    fs.write_text_file = false;
    let mut capabilities = ClientCapabilities::default();
    capabilities.fs = fs;
    capabilities.terminal = false;
    InitializeRequest::new(ProtocolVersion::V1)
        .client_capabilities(capabilities)
        .client_info(Implementation::new("turnstile", env!("CARGO_PKG_VERSION")))
}

/// `authenticate` with `method`.
pub(crate) fn authenticate(method: &str) -> AuthenticateRequest {
    AuthenticateRequest::new(method.to_owned())
}

/// `session/new` in `cwd`, offering `servers`.
pub(crate) fn new_session(cwd: &Path, servers: Vec<McpServer>) -> NewSessionRequest {
    NewSessionRequest::new(cwd).mcp_servers(servers)
}

/// `session/load` of `id` in `cwd`, offering `servers`.
pub(crate) fn load_session(id: &str, cwd: &Path, servers: Vec<McpServer>) -> LoadSessionRequest {
    LoadSessionRequest::new(id.to_owned(), cwd).mcp_servers(servers)
}

/// The extension request sent after a `session/load` answered, whose
/// answer (any answer: an agent that does not know it says "method not
/// found", as JSON-RPC and ACP's extensibility rules ask) marks the end of
/// a replay the agent sent after answering the load.
pub(crate) const REPLAY_SYNC: &str = "_turnstile/replay_sync";

/// The params of [`REPLAY_SYNC`]: the session.
pub(crate) fn replay_sync(session: &str) -> Value {
    json!({ "sessionId": session })
}

/// `session/prompt`: the user's text as one text block.
pub(crate) fn prompt(session: &str, text: &str) -> PromptRequest {
    PromptRequest::new(
        session.to_owned(),
        vec![ContentBlock::Text(TextContent::new(text))],
    )
}

/// `session/cancel`.
pub(crate) fn cancel(session: &str) -> CancelNotification {
    CancelNotification::new(session.to_owned())
}

/// The answer to `session/request_permission`: the option chosen, or
/// `cancelled` (`None`).
pub(crate) fn permission_outcome(option: Option<&PermissionOptionId>) -> RequestPermissionResponse {
    RequestPermissionResponse::new(match option {
        Some(id) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id.clone())),
        None => RequestPermissionOutcome::Cancelled,
    })
}

#[cfg(test)]
mod tests;

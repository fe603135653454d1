//! The one JSON-RPC 2.0 codec: a line read once into a [`Message`], the
//! error codes under one name each, and the requests, notifications and
//! answers the host writes. ACP speaks it on the agent's stdio; the chat
//! tools' MCP server speaks it inside claude's `mcp_message` and over HTTP.
//! Nothing here decides anything.

use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Invalid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// The method does not exist (or is not offered).
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid params (an unknown tool, a request that cannot be read).
pub const INVALID_PARAMS: i64 = -32602;
/// The handler failed.
pub const INTERNAL_ERROR: i64 = -32603;
/// The host is stopping (a server error of the host's own).
pub const HOST_STOPPING: i64 = -32000;

/// Characters of a bad line kept for the log.
pub const SHOWN_CHARS: usize = 200;

/// One JSON-RPC message from the agent, read once.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
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
    /// A notification.
    Notification {
        /// The method.
        method: String,
        /// Its params (`null` when absent).
        params: Value,
    },
    /// Not a JSON-RPC message the host can act on: the start of it, for the
    /// log.
    Malformed(String),
    /// Longer than the line reader holds: its length in bytes, dropped
    /// unread.
    Oversized(usize),
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The code.
    pub code: i64,
    /// The message (bounded when shown).
    pub message: String,
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

impl Message {
    /// Reads one line; never fails: what it cannot read is
    /// [`Message::Malformed`].
    pub fn parse(line: &str) -> Self {
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

/// `params` as JSON (what the host writes always serializes).
fn to_value(params: impl Serialize) -> Value {
    serde_json::to_value(params).unwrap_or(Value::Null)
}

/// A request of the host's.
pub fn request(id: u64, method: &str, params: impl Serialize) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": to_value(params)})
}

/// A notification of the host's.
pub fn notification(method: &str, params: impl Serialize) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": to_value(params)})
}

/// The answer to the request `id`.
pub fn result(id: &Value, result: impl Serialize) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": to_value(result)})
}

/// An error answer to the request `id`.
pub fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

// Tolerant reading, for the messages read field by field.

/// Reads a field, taking its default when it has the wrong shape.
pub(crate) fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let value = Value::deserialize(deserializer)?;
    Ok(T::deserialize(value).unwrap_or_default())
}

/// An empty JSON object, the default of absent params.
pub(crate) fn empty_object() -> Value {
    json!({})
}

#[cfg(test)]
mod tests;

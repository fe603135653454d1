//! The wire: the requests and answers of ACP built from the
//! `agent-client-protocol-schema` types (the JSON-RPC lines around them are
//! the host's [`jsonrpc`](crate::agent::host::jsonrpc) codec's). Nothing
//! here decides anything.

use std::path::Path;

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    AuthenticateRequest, CancelNotification, ClientCapabilities, ContentBlock,
    FileSystemCapabilities, Implementation, InitializeRequest, LoadSessionRequest, McpServer,
    NewSessionRequest, PermissionOptionId, PromptRequest, RequestPermissionOutcome,
    RequestPermissionResponse, SelectedPermissionOutcome, TextContent,
};
use serde_json::{Value, json};

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

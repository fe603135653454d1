//! What answers `session/request_permission`: `agent.denied_tools` (the
//! call's whole title), then `agent.permission_mode`, and for `ask` the
//! chat's decision, mapped onto the options the agent offered.
//!
//! A request's title, name and kind are the agent's own words (Gemini CLI
//! titles a shell call with its command, an MCP call with an argument), so
//! they never make a call a chat tool or match `agent.allowed_tools`: what
//! allowing would run is known only from what the request carries. The
//! question shows all of it whole (title, raw input, each diff's path and
//! text, locations, any other field), read from the request's JSON itself:
//! the schema crate's lenient reading would drop what it cannot parse.
//!
//! "Always in this chat" is remembered by the chat itself, for exactly
//! this request (its shown fields, byte for byte), and answered here as
//! `allow_once`: the agent's own `allow_always` may cover more than the
//! chat agreed to (Gemini CLI remembers a shell command by its first
//! word), so it is never chosen for the chat. A request carrying what a
//! question cannot show as text (a terminal, an image, a field of no known
//! kind) or too large to remember offers no "always".

use agent_client_protocol_schema::v1::{
    PermissionOption, PermissionOptionId, PermissionOptionKind, RequestPermissionRequest,
};
use serde_json::{Map, Value};

use super::AcpSettings;
use crate::agent::shown::shown_content;
use crate::agent::tools::ToolName;
use crate::agent::{Permission, Remember};
use crate::config::PermissionMode;

/// The longest request (its shown fields as JSON) "always" remembers.
pub(crate) const MAX_REMEMBERED: usize = 16 << 10;

/// The fields of a request's tool call that say what it does, in the order
/// a question shows them.
pub(crate) const SHOWN: &[&str] = &["title", "name", "kind", "rawInput", "content", "locations"];

/// The fields that say nothing of what runs: the call's id, its status,
/// its output so far, the protocol's extension data.
const NOT_SHOWN: &[&str] = &["toolCallId", "status", "rawOutput", "_meta"];

/// A permission request, read once.
#[derive(Debug)]
pub(crate) struct PermissionRequest {
    /// The session it is for.
    pub(crate) session: String,
    /// The tool call's id.
    pub(crate) call_id: String,
    /// The call's title, whole, when it is text: matched only against
    /// `agent.denied_tools`.
    pub(crate) title: Option<String>,
    /// What logs and the question call it: `acp:<kind>` (`acp:execute`),
    /// never its title, so no chat-tool or configured name can match it.
    pub(crate) tool: ToolName,
    /// What the request says it does: its [`SHOWN`] fields and any field
    /// of no known kind, as sent.
    pub(crate) input: Value,
    /// Whether "always" can name it exactly.
    pub(crate) remember: Remember,
    /// The options the agent offered.
    pub(crate) options: Vec<PermissionOption>,
}

impl PermissionRequest {
    /// Reads the params of `session/request_permission`; `None` when they
    /// are not one.
    pub(crate) fn read(params: &Value) -> Option<Self> {
        let request = serde_json::from_value::<RequestPermissionRequest>(params.clone()).ok()?;
        let call = params.get("toolCall")?.as_object()?;
        let mut input = Map::new();
        for field in SHOWN {
            if let Some(value) = call.get(*field).filter(|v| !v.is_null()) {
                input.insert((*field).to_owned(), value.clone());
            }
        }
        let mut unknown = false;
        for (field, value) in call {
            if !SHOWN.contains(&field.as_str()) && !NOT_SHOWN.contains(&field.as_str()) {
                unknown = true;
                input.insert(field.clone(), value.clone());
            }
        }
        let kind = call
            .get("kind")
            .and_then(Value::as_str)
            .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .unwrap_or("other");
        let input = Value::Object(input);
        let remember = remember(&input, unknown);
        Some(Self {
            session: request.session_id.0.to_string(),
            call_id: request.tool_call.tool_call_id.0.to_string(),
            title: call.get("title").and_then(Value::as_str).map(str::to_owned),
            tool: ToolName::parse(format!("acp:{kind}")),
            input,
            remember,
            options: request.options,
        })
    }

    /// The first option of the first kind in `kinds` the agent offered.
    fn option(&self, kinds: &[PermissionOptionKind]) -> Option<PermissionOptionId> {
        kinds.iter().find_map(|kind| {
            self.options
                .iter()
                .find(|o| o.kind == *kind)
                .map(|o| o.option_id.clone())
        })
    }

    /// The option that allows this call once (never `allow_always`).
    pub(crate) fn allow(&self) -> Option<PermissionOptionId> {
        self.option(&[PermissionOptionKind::AllowOnce])
    }

    /// The option that rejects this call (once, else always).
    pub(crate) fn reject(&self) -> Option<PermissionOptionId> {
        self.option(&[
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::RejectAlways,
        ])
    }

    /// The option the chat's answer chooses; `None` answers `cancelled`.
    pub(crate) fn answer(&self, permission: &Permission) -> Option<PermissionOptionId> {
        match permission {
            Permission::Allow { .. } => self.allow(),
            Permission::Deny { .. } => self.reject(),
        }
    }
}

/// Whether "always" can name a request exactly: it says what it does
/// (a title, raw input or content), every content item is text or a diff,
/// no field is of an unknown kind, and it is at most [`MAX_REMEMBERED`].
fn remember(input: &Value, unknown: bool) -> Remember {
    let says = ["title", "rawInput", "content"]
        .iter()
        .any(|f| input.get(*f).is_some());
    let content_shown = match input.get("content") {
        None => true,
        Some(Value::Array(items)) => items.iter().all(|item| shown_content(item).is_some()),
        Some(_) => false,
    };
    let size = input.to_string().len();
    if says && content_shown && !unknown && size <= MAX_REMEMBERED {
        Remember::Exactly
    } else {
        Remember::Never
    }
}

/// How config decides `ask`: `Some(allowed)`, or `None` to ask the chat.
/// `agent.denied_tools` naming its whole title denies it; nothing the
/// agent writes allows it (`agent.allowed_tools` and the chat tools name
/// tools, and a request's title is only the agent's words).
pub(crate) fn from_config(ask: &PermissionRequest, settings: &AcpSettings) -> Option<bool> {
    let denied = ask
        .title
        .as_ref()
        .is_some_and(|title| settings.denied_tools.iter().any(|d| d == title));
    if denied {
        return Some(false);
    }
    match settings.permission_mode {
        PermissionMode::Allow => Some(true),
        PermissionMode::Deny => Some(false),
        PermissionMode::Ask => None,
    }
}

#[cfg(test)]
mod tests;

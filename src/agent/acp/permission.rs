//! What answers `session/request_permission`: the same rules as the claude
//! backend's `can_use_tool` (`agent.denied_tools`, `agent.allowed_tools`,
//! `agent.permission_mode`, the tool named by the call's title), and for
//! `ask` the chat's decision, mapped onto the options the agent offered.
//!
//! "Always in this chat" is remembered by the chat itself (its exact-input
//! rule) and answered here as `allow_once`: the agent's own `allow_always`
//! may cover more than the chat agreed to (Gemini CLI remembers a shell
//! command by its first word), so it is never chosen for the chat.

use agent_client_protocol_schema::v1::{
    PermissionOption, PermissionOptionId, PermissionOptionKind, RequestPermissionRequest,
};
use serde_json::{Value, json};

use super::AcpSettings;
use crate::agent::Permission;
use crate::agent::claude::permissions::{Decision, Rules};
use crate::agent::tools::{ToolName, ToolRegistry};
use crate::config::PermissionMode;

/// A permission request, read once.
#[derive(Debug)]
pub(crate) struct Ask {
    /// The session it is for.
    pub(crate) session: String,
    /// The tool call's id.
    pub(crate) call_id: String,
    /// The tool, named by the call's title (its kind when untitled).
    pub(crate) tool: ToolName,
    /// What the person is shown: the call's raw input, or its title.
    pub(crate) input: Value,
    /// The options the agent offered.
    pub(crate) options: Vec<PermissionOption>,
}

impl Ask {
    /// Reads the params of `session/request_permission`; `None` when they
    /// are not one.
    pub(crate) fn read(params: &Value) -> Option<Self> {
        let request = serde_json::from_value::<RequestPermissionRequest>(params.clone()).ok()?;
        let fields = request.tool_call.fields;
        let title = fields
            .title
            .filter(|t| !t.trim().is_empty())
            .or_else(|| {
                fields
                    .kind
                    .and_then(|k| serde_json::to_value(k).ok())
                    .and_then(|v| v.as_str().map(str::to_owned))
            })
            .unwrap_or_else(|| "tool".to_owned());
        let title: String = title.chars().take(200).collect();
        let input = fields
            .raw_input
            .filter(|v| v.is_object())
            .unwrap_or_else(|| json!({ "title": title }));
        Some(Self {
            session: request.session_id.0.to_string(),
            call_id: request.tool_call.tool_call_id.0.to_string(),
            tool: ToolName::parse(title),
            input,
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

/// How config decides `ask`: `Some(allowed)`, or `None` to ask the chat.
pub(crate) fn from_config(ask: &Ask, settings: &AcpSettings, tools: &ToolRegistry) -> Option<bool> {
    let rules = Rules {
        allowed: &settings.allowed_tools,
        denied: &settings.denied_tools,
        mode: settings.permission_mode,
    };
    match rules.decide(&ask.tool, tools) {
        Decision::ChatTool | Decision::Allowed | Decision::Mode(PermissionMode::Allow) => {
            Some(true)
        }
        Decision::Denied | Decision::Mode(PermissionMode::Deny) => Some(false),
        Decision::Mode(PermissionMode::Ask) => None,
    }
}

#[cfg(test)]
mod tests;

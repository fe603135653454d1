//! The permission rules: which rule decides a tool the agent names whole
//! (`Bash`, `mcp__server__tool`), in order: the host's own chat tools,
//! `agent.denied_tools`, `agent.allowed_tools`, `agent.permission_mode`.
//! How a backend asks and answers is its own; the order is decided here,
//! once.

use crate::agent::tools::{ToolName, ToolRegistry};
use crate::config::PermissionMode;

/// The config that decides a tool: `agent.allowed_tools`,
/// `agent.denied_tools` and `agent.permission_mode`.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    /// Tools that run without asking.
    pub allowed: &'a [String],
    /// Tools that never run; they beat `allowed`.
    pub denied: &'a [String],
    /// What answers every other tool.
    pub mode: PermissionMode,
}

/// Which rule decided a tool, for the answer and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// One of the host's own chat tools (`mcp__telegram-tools__send`): runs.
    ChatTool,
    /// Named in `agent.denied_tools`: denied.
    Denied,
    /// Named in `agent.allowed_tools`: runs.
    Allowed,
    /// Neither list names it: `agent.permission_mode` decides.
    Mode(PermissionMode),
}

impl Rules<'_> {
    /// Decides `tool`, in order: chat tool (served by the host's own
    /// server), denied, allowed, mode; the lists name it whole.
    pub fn decide(&self, tool: &ToolName, tools: &ToolRegistry) -> Decision {
        let ours = tool.is_served_here() && tools.get(tool.bare()).is_some();
        let named = |list: &[String]| list.iter().any(|entry| entry == tool.full());
        if ours {
            Decision::ChatTool
        } else if named(self.denied) {
            Decision::Denied
        } else if named(self.allowed) {
            Decision::Allowed
        } else {
            Decision::Mode(self.mode)
        }
    }
}

/// What the model reads when config denies `tool`.
pub fn not_allowed(tool: &str) -> String {
    format!(
        "The tool `{tool}` is not allowed in this chat. Answer with the send and end_turn tools."
    )
}

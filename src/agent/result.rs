//! [`AgentResult`]: how the agent says a prompt ended, in the agent-neutral
//! terms the turn decides on. A backend reads its own protocol's result
//! into it at its boundary (`claude::protocol::result`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The agent's result for a prompt, as far as the turn needs it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentResult {
    /// Whether the prompt ran to its end, or how it failed.
    pub subtype: ResultStatus,
    /// Whether the agent counts the turn as failed.
    #[serde(default)]
    pub is_error: bool,
    /// The last API call's stop reason, for the log.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// Why the agent loop ended.
    #[serde(default)]
    pub terminal_reason: Option<TerminalReason>,
    /// The final text (may be empty).
    #[serde(default)]
    pub text: String,
    /// Model turns the agent ran.
    #[serde(default)]
    pub num_turns: u32,
    /// What the turn cost, in USD.
    #[serde(default)]
    pub total_cost_usd: f64,
    /// The model API refused for a rate or usage limit and the agent gave
    /// up (it retries a passing one itself).
    #[serde(default)]
    pub limited: bool,
    /// When that limit resets (Unix seconds), when the agent said.
    #[serde(default)]
    pub resets_at: Option<i64>,
    /// The tokens the turn's model calls read and wrote.
    #[serde(default)]
    pub usage: TokenUsage,
}

/// Tokens a prompt's model calls read and wrote, as the agent reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Read: input, including what was written to and read from a cache.
    pub input_tokens: u64,
    /// Written.
    pub output_tokens: u64,
}

impl AgentResult {
    /// Whether the prompt ran to its end and the agent counts it as done:
    /// only then is its text an answer.
    pub fn succeeded(&self) -> bool {
        !self.is_error && self.subtype == ResultStatus::Success
    }
}

/// Whether a prompt ran to its end. Written as `success`, or as the name
/// of the failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ResultStatus {
    /// It ran to its end.
    Success,
    /// It did not; the agent's name for how (`error_max_turns`, …; empty
    /// when it gave none), kept for the log and the outcome's reason.
    Failed(String),
}

impl ResultStatus {
    /// The status as written.
    pub fn name(&self) -> &str {
        match self {
            Self::Success => "success",
            Self::Failed(how) => how,
        }
    }
}

impl Default for ResultStatus {
    /// A result that said nothing did not succeed.
    fn default() -> Self {
        Self::Failed(String::new())
    }
}

impl From<&str> for ResultStatus {
    fn from(name: &str) -> Self {
        match name {
            "success" => Self::Success,
            how => Self::Failed(how.to_owned()),
        }
    }
}

impl From<String> for ResultStatus {
    fn from(name: String) -> Self {
        Self::from(name.as_str())
    }
}

impl From<ResultStatus> for String {
    fn from(status: ResultStatus) -> Self {
        status.name().to_owned()
    }
}

impl fmt::Display for ResultStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the agent loop ended. Written in snake case (`completed`,
/// `hook_stopped`, `aborted_streaming`, `aborted_tools`); any other reason
/// is kept as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum TerminalReason {
    /// The loop ran to its end.
    Completed,
    /// The batch hook stopped it (after a terminator).
    HookStopped,
    /// Interrupted while the model wrote.
    AbortedStreaming,
    /// Interrupted while tools ran.
    AbortedTools,
    /// Any other reason (an error such as `max_turns`, or one this build
    /// does not know), as written.
    Other(String),
}

impl TerminalReason {
    /// The reason as written.
    pub fn name(&self) -> &str {
        match self {
            Self::Completed => "completed",
            Self::HookStopped => "hook_stopped",
            Self::AbortedStreaming => "aborted_streaming",
            Self::AbortedTools => "aborted_tools",
            Self::Other(reason) => reason,
        }
    }

    /// Whether the loop was interrupted (`/stop`, or the agent's own abort).
    pub fn interrupted(&self) -> bool {
        matches!(self, Self::AbortedStreaming | Self::AbortedTools)
    }
}

impl From<&str> for TerminalReason {
    fn from(name: &str) -> Self {
        match name {
            "completed" => Self::Completed,
            "hook_stopped" => Self::HookStopped,
            "aborted_streaming" => Self::AbortedStreaming,
            "aborted_tools" => Self::AbortedTools,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl From<String> for TerminalReason {
    fn from(name: String) -> Self {
        Self::from(name.as_str())
    }
}

impl From<TerminalReason> for String {
    fn from(reason: TerminalReason) -> Self {
        reason.name().to_owned()
    }
}

impl fmt::Display for TerminalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

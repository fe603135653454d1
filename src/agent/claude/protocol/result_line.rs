//! The `result` line, read leniently into the agent-neutral
//! [`AgentResult`] (with a usage-limit refusal and its reset time).

use serde::Deserialize;
use serde_json::Value;

use super::{UsageLine, lenient};
use crate::agent::{AgentResult, ResultStatus, TerminalReason};

/// The `result` line.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub struct ResultLine {
    /// `success`, `error_during_execution`, `error_max_turns`, …
    #[serde(default, deserialize_with = "lenient")]
    pub subtype: String,
    /// Whether the agent counts the turn as failed.
    #[serde(default, deserialize_with = "lenient")]
    pub is_error: bool,
    /// The last API call's stop reason.
    #[serde(default, deserialize_with = "lenient")]
    pub stop_reason: Option<String>,
    /// Why the agent loop ended; unknown values are kept as they are.
    #[serde(default, deserialize_with = "lenient")]
    pub terminal_reason: Option<String>,
    /// The final text (may be empty).
    #[serde(default, deserialize_with = "lenient")]
    pub result: String,
    /// Model turns the agent counted.
    #[serde(default, deserialize_with = "lenient")]
    pub num_turns: u64,
    /// What the turn cost, in USD.
    #[serde(default, deserialize_with = "lenient")]
    pub total_cost_usd: f64,
    /// The HTTP status of the model API's refusal that ended the turn
    /// (429: a rate or usage limit the CLI did not retry).
    #[serde(default, deserialize_with = "lenient")]
    pub api_error_status: Option<u16>,
    /// The tokens its model calls read and wrote.
    #[serde(default, deserialize_with = "lenient")]
    pub usage: UsageLine,
}

impl From<ResultLine> for AgentResult {
    /// Claude's `subtype` and `terminal_reason` read into the agent-neutral
    /// [`ResultStatus`] and [`TerminalReason`].
    fn from(line: ResultLine) -> Self {
        Self {
            subtype: match line.subtype.as_str() {
                "success" => ResultStatus::Success,
                how => ResultStatus::Failed(how.to_owned()),
            },
            is_error: line.is_error,
            stop_reason: line.stop_reason,
            terminal_reason: line.terminal_reason.as_deref().map(|reason| match reason {
                "completed" => TerminalReason::Completed,
                "hook_stopped" => TerminalReason::HookStopped,
                "aborted_streaming" => TerminalReason::AbortedStreaming,
                "aborted_tools" => TerminalReason::AbortedTools,
                other => TerminalReason::Other(other.to_owned()),
            }),
            limited: line.is_error && line.api_error_status == Some(429),
            resets_at: (line.is_error && line.api_error_status == Some(429))
                .then(|| crate::agent::claude::limits::reset_at(&line.result, chrono::Utc::now()))
                .flatten(),
            text: line.result,
            num_turns: u32::try_from(line.num_turns).unwrap_or(u32::MAX),
            total_cost_usd: line.total_cost_usd,
            usage: line.usage.into(),
        }
    }
}

/// The `result` line as the turn needs it.
pub fn result(line: &Value) -> AgentResult {
    ResultLine::deserialize(line).unwrap_or_default().into()
}

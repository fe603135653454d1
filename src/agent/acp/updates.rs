//! `session/update` read once into an [`Update`], and a prompt's answer
//! gathered from its message chunks ([`PromptAnswer`]); how a prompt's
//! `stopReason` becomes an [`AgentResult`] ([`result_for`]).

use agent_client_protocol_schema::v1::{
    ContentBlock, PlanEntryStatus, SessionNotification, SessionUpdate, StopReason,
};
use serde_json::{Value, json};

use crate::agent::{AgentResult, ResultStatus, TerminalReason};

/// What one `session/update` says, as far as the host acts on it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Update {
    /// Text of the agent's answer (`agent_message_chunk`, text content).
    Chunk {
        /// The text.
        text: String,
        /// The message it belongs to, when the agent says.
        message: Option<String>,
    },
    /// The agent started a tool call (`tool_call`).
    ToolStarted {
        /// The agent's id of the call.
        id: String,
        /// Its title (what a person is shown).
        title: String,
        /// Its input, when the agent gave it.
        input: Value,
    },
    /// The plan's current step (`plan`), when one is under way or pending.
    Plan(Option<String>),
    /// The session's cumulative cost in USD (`usage_update` with a cost).
    Cost(f64),
    /// Any other kind the schema knows (thoughts, tool call updates,
    /// commands, modes): a sign of life only.
    Other,
    /// A kind this build does not know, or a known kind in a shape it
    /// cannot read: logged and skipped.
    Unknown(String),
}

/// Reads the params of a `session/update` for `session`; an update of
/// another session is [`Update::Unknown`].
pub(crate) fn read(params: &Value, session: &str) -> Update {
    let kind = params
        .get("update")
        .and_then(|u| u.get("sessionUpdate"))
        .and_then(Value::as_str)
        .unwrap_or("(none)")
        .chars()
        .take(64)
        .collect::<String>();
    let Ok(notification) = serde_json::from_value::<SessionNotification>(params.clone()) else {
        return Update::Unknown(kind);
    };
    if &*notification.session_id.0 != session {
        return Update::Unknown(format!("{kind} of another session"));
    }
    match notification.update {
        SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
            ContentBlock::Text(text) => Update::Chunk {
                text: text.text,
                message: chunk.message_id.map(|id| id.0.to_string()),
            },
            _ => Update::Other,
        },
        SessionUpdate::ToolCall(call) => Update::ToolStarted {
            id: call.tool_call_id.0.to_string(),
            title: call.title,
            input: call.raw_input.unwrap_or_else(|| json!({})),
        },
        SessionUpdate::Plan(plan) => Update::Plan(
            plan.entries
                .iter()
                .find(|e| e.status == PlanEntryStatus::InProgress)
                .or_else(|| {
                    plan.entries
                        .iter()
                        .find(|e| e.status == PlanEntryStatus::Pending)
                })
                .map(|e| e.content.clone()),
        ),
        SessionUpdate::UsageUpdate(usage) => match usage.cost {
            Some(cost) if cost.currency.eq_ignore_ascii_case("USD") && cost.amount.is_finite() => {
                Update::Cost(cost.amount)
            }
            _ => Update::Other,
        },
        _ => Update::Other,
    }
}

/// A prompt's answer as its message chunks come.
#[derive(Debug, Default)]
pub(crate) struct PromptAnswer {
    /// Everything written so far.
    text: String,
    /// Which piece of the answer is being written (a tool call or a new
    /// message starts the next), naming the preview's stream.
    piece: u32,
    /// The message id of the last chunk.
    message: Option<String>,
    /// The session's cost when the prompt started.
    cost_at_start: Option<f64>,
    /// The session's cost last reported.
    cost: Option<f64>,
}

impl PromptAnswer {
    /// A fresh answer, the session's cost so far being `cost`.
    pub(crate) fn new(cost: Option<f64>) -> Self {
        Self {
            cost_at_start: cost,
            cost,
            ..Self::default()
        }
    }

    /// Adds a chunk; answers the preview's stream name.
    pub(crate) fn chunk(&mut self, text: &str, message: Option<String>) -> String {
        if message.is_some() && self.message.is_some() && message != self.message {
            self.next_piece();
        }
        if message.is_some() {
            self.message = message;
        }
        self.text.push_str(text);
        self.stream()
    }

    /// A tool call came between two texts: the next text is a new piece.
    pub(crate) fn next_piece(&mut self) {
        if !self.text.is_empty() && !self.text.ends_with("\n\n") {
            self.text.push_str(if self.text.ends_with('\n') {
                "\n"
            } else {
                "\n\n"
            });
        }
        self.piece = self.piece.saturating_add(1);
    }

    /// The preview's stream name of the piece being written.
    pub(crate) fn stream(&self) -> String {
        format!("acp:{}", self.piece)
    }

    /// The session's cumulative cost, as reported.
    pub(crate) fn cost(&mut self, usd: f64) {
        self.cost = Some(usd);
    }

    /// The session's cost last reported.
    pub(crate) fn session_cost(&self) -> Option<f64> {
        self.cost
    }

    /// The text so far, and what the prompt cost.
    pub(crate) fn finish(self) -> (String, f64) {
        let cost = match (self.cost_at_start, self.cost) {
            (Some(start), Some(end)) => (end - start).max(0.0),
            (None, Some(end)) => end.max(0.0),
            _ => 0.0,
        };
        (self.text.trim_end().to_owned(), cost)
    }
}

/// How a prompt ended, from the `stopReason` of its response as written
/// (the schema's [`StopReason`] for the ones it knows): `end_turn`
/// completed; `cancelled` interrupted; `max_tokens`, `max_turn_requests`
/// and `refusal` errors worded for the chat; any other reason
/// unrecognized.
pub(crate) fn result_for(stop: &str, text: String, cost: f64) -> AgentResult {
    let known = serde_json::from_value::<StopReason>(Value::String(stop.to_owned())).ok();
    let failed = |words: &str| AgentResult {
        subtype: ResultStatus::Failed(stop.to_owned()),
        is_error: true,
        stop_reason: Some(stop.to_owned()),
        terminal_reason: Some(TerminalReason::Other(format!("{stop}: {words}"))),
        text: text.clone(),
        num_turns: 1,
        total_cost_usd: cost,
        ..AgentResult::default()
    };
    match known {
        Some(StopReason::EndTurn) => AgentResult {
            subtype: ResultStatus::Success,
            is_error: false,
            stop_reason: Some(stop.to_owned()),
            terminal_reason: Some(TerminalReason::Completed),
            text,
            num_turns: 1,
            total_cost_usd: cost,
            ..AgentResult::default()
        },
        Some(StopReason::Cancelled) => AgentResult {
            subtype: ResultStatus::Failed(stop.to_owned()),
            is_error: false,
            stop_reason: Some(stop.to_owned()),
            terminal_reason: Some(TerminalReason::AbortedStreaming),
            text,
            num_turns: 1,
            total_cost_usd: cost,
            ..AgentResult::default()
        },
        Some(StopReason::MaxTokens) => failed("the model reached its output limit"),
        Some(StopReason::MaxTurnRequests) => {
            failed("the agent reached its limit of model requests for one message")
        }
        Some(StopReason::Refusal) => failed("the model refused to go on"),
        _ => AgentResult {
            subtype: ResultStatus::Success,
            is_error: false,
            stop_reason: Some(stop.to_owned()),
            terminal_reason: Some(TerminalReason::Other(stop.chars().take(64).collect())),
            text,
            num_turns: 1,
            total_cost_usd: cost,
            ..AgentResult::default()
        },
    }
}

/// The result of a prompt the agent answered with an error.
pub(crate) fn failed_prompt(
    error: &crate::agent::host::jsonrpc::RpcError,
    text: String,
) -> AgentResult {
    AgentResult {
        subtype: ResultStatus::Failed("error".into()),
        is_error: true,
        stop_reason: None,
        terminal_reason: Some(TerminalReason::Other(format!(
            "the agent refused the prompt: {error}"
        ))),
        text,
        num_turns: 1,
        total_cost_usd: 0.0,
        ..AgentResult::default()
    }
}

#[cfg(test)]
mod tests;

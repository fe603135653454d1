//! How a turn ends: the one function that maps a turn's events to its
//! [`TurnOutcome`] ([`decide`]), pinned by
//! `tests/fixtures/turn_outcome_contract.json`.

use serde::{Deserialize, Serialize};

use crate::agent::tools::{BatchCall, terminator};
use crate::agent::{AgentResult, AuthFailure, TerminalReason};
pub use crate::outcome::TurnOutcome;

/// What a turn has seen so far that bears on how it ends, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TurnEvent {
    /// A tool batch fully resolved (PostToolBatch).
    ToolBatch {
        /// Its calls, in order, as the backend parsed them.
        calls: Vec<BatchCall>,
    },
    /// The agent's `result`.
    Result(AgentResult),
    /// The host re-prompted after an empty result; the turn goes on.
    Reprompted,
    /// The session reported itself idle.
    Idle,
    /// After its `result`, the agent goes on with a message steered into
    /// the turn as its next turn: this one is over, as at an idle.
    Continued,
    /// The agent process exited (or its stream broke).
    Exited {
        /// Exit code, if any.
        #[serde(default)]
        code: Option<i32>,
        /// What happened.
        #[serde(default)]
        detail: String,
    },
    /// `turn.post_result_grace` passed after `result` without a settle.
    GraceExpired,
    /// The agent could not authenticate with its model API.
    AuthFailed(AuthFailure),
    /// `turn.no_progress_timeout` passed without an event before `result`.
    NoProgress,
    /// `turn.max_duration` passed.
    BudgetExceeded,
    /// `/stop` from the chat.
    Interrupt,
    /// The host is stopping.
    HostStopping,
}

/// The outcome of a result that settled.
fn from_result(result: &AgentResult) -> TurnOutcome {
    let reason = result.terminal_reason.as_ref();
    match reason {
        _ if result.num_turns == 0 && !result.is_error => TurnOutcome::IdleResume,
        Some(r) if r.interrupted() => TurnOutcome::Interrupted,
        _ if result.limited => TurnOutcome::Limited {
            resets_at: result.resets_at,
        },
        _ if !result.succeeded() => TurnOutcome::AgentError {
            reason: reason
                .map_or(result.subtype.name(), TerminalReason::name)
                .to_string(),
        },
        Some(r @ (TerminalReason::Completed | TerminalReason::HookStopped)) => {
            TurnOutcome::Completed {
                reason: r.name().to_string(),
            }
        }
        None => TurnOutcome::Completed {
            reason: TerminalReason::Completed.name().to_string(),
        },
        Some(other) => TurnOutcome::Unrecognized {
            reason: other.name().to_string(),
        },
    }
}

/// Decides whether the events so far end the turn, and how: the earliest
/// trigger of the turn contract wins. `None` means the turn goes on and the
/// chat stays held.
pub fn decide(events: &[TurnEvent]) -> Option<TurnOutcome> {
    let mut result: Option<&AgentResult> = None;
    for event in events {
        match event {
            TurnEvent::ToolBatch { calls } => {
                if let Some(tool) = terminator(calls) {
                    return Some(TurnOutcome::Terminated {
                        tool: tool.to_string(),
                    });
                }
            }
            TurnEvent::Result(r) => result = Some(r),
            TurnEvent::Reprompted => result = None,
            TurnEvent::Idle => {
                return Some(match result {
                    Some(r) => from_result(r),
                    None => TurnOutcome::IdleResume,
                });
            }
            TurnEvent::Exited { code, detail } => {
                return Some(match result {
                    Some(r) => from_result(r),
                    None => TurnOutcome::AgentFailed {
                        detail: match code {
                            Some(c) if detail.is_empty() => {
                                format!("the agent exited with code {c}")
                            }
                            _ if detail.is_empty() => "the agent exited".to_string(),
                            _ => detail.clone(),
                        },
                    },
                });
            }
            TurnEvent::Continued => {
                if let Some(r) = result {
                    return Some(from_result(r));
                }
            }
            TurnEvent::GraceExpired if result.is_some() => {
                return Some(TurnOutcome::ForceClosedAfterResult);
            }
            TurnEvent::GraceExpired => {}
            TurnEvent::NoProgress => return Some(TurnOutcome::NoProgress),
            TurnEvent::AuthFailed(AuthFailure { refused, detail }) => {
                return Some(TurnOutcome::Unauthenticated {
                    refused: *refused,
                    detail: detail.clone(),
                });
            }
            TurnEvent::BudgetExceeded => return Some(TurnOutcome::BudgetExceeded),
            TurnEvent::Interrupt => return Some(TurnOutcome::Interrupted),
            TurnEvent::HostStopping => return Some(TurnOutcome::HostStopping),
        }
    }
    None
}

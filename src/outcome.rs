//! [`TurnOutcome`]: how a turn ended, as a value the layers below the chat
//! may hold (the event bus carries it, the metrics count it) without
//! knowing how it was decided (`chat::outcome::decide`).

use serde::{Deserialize, Serialize};

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TurnOutcome {
    /// A tool batch with a terminator resolved.
    Terminated {
        /// The terminator's bare name.
        tool: String,
    },
    /// The agent's result says it completed (`completed` or `hook_stopped`).
    Completed {
        /// The result's terminal reason.
        reason: String,
    },
    /// The session settled without running a turn.
    IdleResume,
    /// `/stop`, or an agent-side abort.
    Interrupted,
    /// The agent's result reports an error (`max_turns`, `api_error`, …).
    AgentError {
        /// The terminal reason, or the subtype when there is none.
        reason: String,
    },
    /// The model API refused for a rate or usage limit (the agent gave up).
    Limited {
        /// When the limit resets (Unix seconds), when the agent said.
        resets_at: Option<i64>,
    },
    /// The agent could not authenticate with its model API.
    Unauthenticated {
        /// The API refused the credentials (false: the agent had none).
        refused: bool,
        /// What the agent said.
        detail: String,
    },
    /// The result carries a terminal reason this build does not know.
    Unrecognized {
        /// The unknown terminal reason.
        reason: String,
    },
    /// The agent emitted its result but never settled.
    ForceClosedAfterResult,
    /// The agent went silent before its result.
    NoProgress,
    /// The turn ran past `turn.max_duration`.
    BudgetExceeded,
    /// The agent process exited or its stream broke before `result`.
    AgentFailed {
        /// What happened.
        detail: String,
    },
    /// The host is stopping.
    HostStopping,
    /// The chat's hard-deadline timer released it at `turn.hard_deadline`.
    ForceReleased,
}

impl TurnOutcome {
    /// Whether the turn actually ran and completed: only this tells a person
    /// "done" (the completed-turn counter, a completion reaction).
    pub fn finished(&self) -> bool {
        matches!(self, Self::Terminated { .. } | Self::Completed { .. })
    }

    /// A short name for logs and `/status`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Terminated { .. } => "terminated",
            Self::Completed { .. } => "completed",
            Self::IdleResume => "idle_resume",
            Self::Interrupted => "interrupted",
            Self::AgentError { .. } => "agent_error",
            Self::Limited { .. } => "limited",
            Self::Unauthenticated { .. } => "unauthenticated",
            Self::Unrecognized { .. } => "unrecognized",
            Self::ForceClosedAfterResult => "force_closed_after_result",
            Self::NoProgress => "no_progress",
            Self::BudgetExceeded => "budget_exceeded",
            Self::AgentFailed { .. } => "agent_failed",
            Self::HostStopping => "host_stopping",
            Self::ForceReleased => "force_released",
        }
    }
}

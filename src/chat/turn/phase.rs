//! [`TurnPhase`]: where a turn is, as one value. The turn actor changes it
//! only through [`TurnPhase::after`], so a turn cannot be, say, ended and
//! still waiting for its result at once.
//!
//! ```text
//! Opening ──Attached──▶ Running ──ResultArrived──▶ AwaitingSettle
//!    ▲                   │  ▲                          │
//!    └──ReplacingWarm────┘  └────────Reprompted────────┘
//!
//! Opening | Running | AwaitingSettle ──Ended(outcome)──▶ Closing ──Released──▶ Released
//! any phase ──Aborted──▶ Released (the supervisor's hard deadline)
//! ```

use crate::chat::outcome::TurnOutcome;

/// Where a turn is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TurnPhase {
    /// The backend is opening a session; the agent has not had the prompt.
    Opening,
    /// The agent works on the prompt.
    Running {
        /// A warm session that has not shown life yet: if it stays silent
        /// it is replaced rather than waited out.
        proving: bool,
    },
    /// `result` arrived: waiting, up to `turn.post_result_grace`, for the
    /// session to settle.
    AwaitingSettle,
    /// TurnEnded went out; the session is closing (late events are logged
    /// and dropped).
    Closing {
        /// How the turn ended.
        outcome: TurnOutcome,
    },
    /// The session was handed back or is gone; the actor stops.
    Released {
        /// How the turn ended.
        outcome: TurnOutcome,
    },
}

/// What moves a turn from one phase to the next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// A session is attached and has the prompt (`warm`: a kept session).
    Attached {
        /// Whether the session was kept warm from an earlier turn.
        warm: bool,
    },
    /// The warm session answered.
    ShowedLife,
    /// The warm session was dead or silent; a fresh one is opening.
    ReplacingWarm,
    /// The agent's `result` arrived.
    ResultArrived,
    /// The agent ended without a reply and was asked once more.
    Reprompted,
    /// The turn contract decided the outcome: TurnEnded goes out.
    Ended(TurnOutcome),
    /// The session was handed back or is gone.
    Released,
    /// The supervisor released the chat past its hard deadline.
    Aborted,
}

impl TurnPhase {
    /// The phase after `step`; a step that does not apply to the phase
    /// leaves it as it is.
    pub(crate) fn after(self, step: Step) -> Self {
        match (self, step) {
            (Self::Opening | Self::Running { .. }, Step::Attached { warm }) => {
                Self::Running { proving: warm }
            }
            (Self::Running { .. }, Step::ShowedLife) => Self::Running { proving: false },
            (Self::Running { proving: true }, Step::ReplacingWarm) => Self::Opening,
            (Self::Running { .. }, Step::ResultArrived) => Self::AwaitingSettle,
            (Self::AwaitingSettle, Step::Reprompted) => Self::Running { proving: false },
            (Self::Opening | Self::Running { .. } | Self::AwaitingSettle, Step::Ended(outcome)) => {
                Self::Closing { outcome }
            }
            (Self::Closing { outcome }, Step::Released) => Self::Released { outcome },
            (Self::Closing { outcome } | Self::Released { outcome }, Step::Aborted) => {
                Self::Released { outcome }
            }
            (_, Step::Aborted) => Self::Released {
                outcome: TurnOutcome::ForceReleased,
            },
            (phase, _) => phase,
        }
    }

    /// The outcome, once TurnEnded went out.
    pub(crate) fn outcome(&self) -> Option<&TurnOutcome> {
        match self {
            Self::Closing { outcome } | Self::Released { outcome } => Some(outcome),
            _ => None,
        }
    }

    /// Whether the turn still holds the chat (TurnEnded not sent).
    pub(crate) fn is_live(&self) -> bool {
        self.outcome().is_none()
    }

    /// Whether the prompt's `result` is still to come (the no-progress
    /// watchdog runs only then).
    pub(crate) fn awaits_result(&self) -> bool {
        matches!(self, Self::Opening | Self::Running { .. })
    }

    /// Whether a warm session has yet to show life.
    pub(crate) fn is_proving(&self) -> bool {
        matches!(self, Self::Running { proving: true })
    }

    /// Whether the session was handed back or is gone.
    pub(crate) fn is_released(&self) -> bool {
        matches!(self, Self::Released { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(proving: bool) -> TurnPhase {
        TurnPhase::Running { proving }
    }

    fn closing(outcome: TurnOutcome) -> TurnPhase {
        TurnPhase::Closing { outcome }
    }

    #[test]
    fn transitions_to_the_end() {
        use TurnOutcome::{Interrupted, NoProgress};
        use TurnPhase::{AwaitingSettle, Opening};
        let table: Vec<(TurnPhase, Step, TurnPhase)> = vec![
            (Opening, Step::Attached { warm: false }, running(false)),
            (Opening, Step::Attached { warm: true }, running(true)),
            (running(true), Step::ShowedLife, running(false)),
            (running(true), Step::ReplacingWarm, Opening),
            (running(false), Step::ReplacingWarm, running(false)),
            (
                running(true),
                Step::Attached { warm: false },
                running(false),
            ),
            (running(false), Step::ResultArrived, AwaitingSettle),
            (AwaitingSettle, Step::Reprompted, running(false)),
            (AwaitingSettle, Step::ResultArrived, AwaitingSettle),
            (Opening, Step::Ended(NoProgress), closing(NoProgress)),
            (
                running(true),
                Step::Ended(Interrupted),
                closing(Interrupted),
            ),
            (
                AwaitingSettle,
                Step::Ended(Interrupted),
                closing(Interrupted),
            ),
        ];
        for (from, step, to) in table {
            let got = from.clone().after(step.clone());
            assert_eq!(got, to, "{from:?} --{step:?}-->");
        }
    }

    #[test]
    fn transitions_after_the_end() {
        use TurnOutcome::{ForceReleased, Interrupted, NoProgress};
        use TurnPhase::Released;
        let table: Vec<(TurnPhase, Step, TurnPhase)> = vec![
            // Exactly once: a second outcome does not replace the first.
            (
                closing(Interrupted),
                Step::Ended(NoProgress),
                closing(Interrupted),
            ),
            (
                closing(Interrupted),
                Step::ResultArrived,
                closing(Interrupted),
            ),
            (
                closing(Interrupted),
                Step::Attached { warm: false },
                closing(Interrupted),
            ),
            (
                closing(Interrupted),
                Step::Released,
                Released {
                    outcome: Interrupted,
                },
            ),
            (running(false), Step::Released, running(false)),
            (
                running(false),
                Step::Aborted,
                Released {
                    outcome: ForceReleased,
                },
            ),
            (
                closing(Interrupted),
                Step::Aborted,
                Released {
                    outcome: Interrupted,
                },
            ),
            (
                Released {
                    outcome: Interrupted,
                },
                Step::Ended(NoProgress),
                Released {
                    outcome: Interrupted,
                },
            ),
        ];
        for (from, step, to) in table {
            let got = from.clone().after(step.clone());
            assert_eq!(got, to, "{from:?} --{step:?}-->");
        }
    }

    #[test]
    fn queries_follow_the_phase() {
        assert!(TurnPhase::Opening.awaits_result());
        assert!(!TurnPhase::AwaitingSettle.awaits_result());
        assert!(running(true).is_proving() && !running(false).is_proving());
        assert!(TurnPhase::AwaitingSettle.is_live());
        assert!(!closing(TurnOutcome::Interrupted).is_live());
        assert!(!closing(TurnOutcome::Interrupted).is_released());
    }
}

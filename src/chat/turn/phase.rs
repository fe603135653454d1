//! [`TurnPhase`]: where a turn is, as one value, with what it holds there.
//! The turn actor changes it only through [`TurnPhase::after`], so a turn
//! cannot be, say, ended and still waiting for its result at once, nor hold
//! a session link while opening or a warm session while running.
//!
//! ```text
//! Opening ──Attached──▶ Running ──ResultArrived──▶ AwaitingSettle
//!    ▲                   │  ▲                          │
//!    └──ReplacingWarm────┘  └────────Reprompted────────┘
//!                      (not after EndingCall)
//! Running | AwaitingSettle ──EndingCall──▶ the same, ended by a call
//!
//! Opening | Running | AwaitingSettle ──Ended(outcome)──▶ Closing ──Released──▶ Released
//! any phase ──Aborted──▶ Released (the supervisor's hard deadline)
//! ```
//!
//! `S` is a session handed over warm, `L` the link to the session in use:
//! the actor's are `AgentSession` and `Link`; the table's tests use plain
//! values. A step moves them from one phase to the next and hands back
//! what the turn no longer holds ([`Leftover`]).

use crate::chat::outcome::TurnOutcome;

/// Where a turn is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TurnPhase<S, L> {
    /// The backend is opening a session; the agent has not had the prompt.
    Opening {
        /// A session the chat kept warm, until the turn begins on it.
        warm: Option<S>,
    },
    /// The agent works on the prompt.
    Running {
        /// The session.
        link: L,
        /// A warm session that has not shown life yet: if it stays silent
        /// it is replaced rather than waited out.
        proving: bool,
        /// The agent called a tool that ends the turn.
        ended_by_call: bool,
    },
    /// `result` arrived: waiting, up to `turn.post_result_grace`, for the
    /// session to settle.
    AwaitingSettle {
        /// The session.
        link: L,
        /// The agent called a tool that ends the turn: its answer is given
        /// (the result's text is not delivered, nothing is re-prompted).
        ended_by_call: bool,
    },
    /// TurnEnded went out; the session is closing (late events are logged
    /// and dropped).
    Closing {
        /// The session still to close; `None` when there was none left (it
        /// never opened), so it is released at once.
        link: Option<L>,
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
pub(crate) enum TurnStep<L> {
    /// A session is attached and has the prompt (`warm`: a kept session).
    Attached {
        /// The session.
        link: L,
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
    /// The agent called a tool that ends the turn (`ends_turn`).
    EndingCall,
    /// The turn contract decided the outcome: TurnEnded goes out.
    Ended(TurnOutcome),
    /// The session was handed back or is gone.
    Released,
    /// The supervisor released the chat past its hard deadline.
    Aborted,
}

/// What a step took from the turn: the caller closes it, hands it back or
/// drops it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Leftover<S, L> {
    /// A warm session the turn did not begin on.
    Warm(S),
    /// A session link the turn no longer uses (replaced, released, or
    /// attached too late).
    Link(L),
}

impl<S, L> TurnPhase<S, L> {
    /// The phase after `step`, and what the turn let go of. A step that
    /// does not apply leaves the phase as it is (a session attached then is
    /// handed back as a leftover).
    pub(crate) fn after(mut self, step: TurnStep<L>) -> (Self, Option<Leftover<S, L>>) {
        use Leftover::{Link, Warm};
        if self.marks(&step) {
            return (self, None);
        }
        match (self, step) {
            (Self::Opening { warm }, TurnStep::Attached { link, warm: kept }) => {
                (Self::attached(link, kept), warm.map(Warm))
            }
            (Self::Running { link: old, .. }, TurnStep::Attached { link, warm }) => {
                (Self::attached(link, warm), Some(Link(old)))
            }
            (
                Self::Running {
                    link,
                    proving: true,
                    ..
                },
                TurnStep::ReplacingWarm,
            ) => (Self::Opening { warm: None }, Some(Link(link))),
            (
                Self::Running {
                    link,
                    ended_by_call,
                    ..
                },
                TurnStep::ResultArrived,
            ) => (
                Self::AwaitingSettle {
                    link,
                    ended_by_call,
                },
                None,
            ),
            (
                Self::AwaitingSettle {
                    link,
                    ended_by_call: false,
                },
                TurnStep::Reprompted,
            ) => (Self::attached(link, false), None),
            (Self::Opening { warm }, TurnStep::Ended(outcome)) => (
                Self::Closing {
                    link: None,
                    outcome,
                },
                warm.map(Warm),
            ),
            (
                Self::Running { link, .. } | Self::AwaitingSettle { link, .. },
                TurnStep::Ended(outcome),
            ) => (
                Self::Closing {
                    link: Some(link),
                    outcome,
                },
                None,
            ),
            (Self::Closing { link, outcome }, TurnStep::Released | TurnStep::Aborted) => {
                (Self::Released { outcome }, link.map(Link))
            }
            (phase @ Self::Released { .. }, TurnStep::Aborted) => (phase, None),
            (phase, TurnStep::Aborted) => (
                Self::Released {
                    outcome: TurnOutcome::ForceReleased,
                },
                phase.into_leftover(),
            ),
            (phase, TurnStep::Attached { link, .. }) => (phase, Some(Link(link))),
            (phase, _) => (phase, None),
        }
    }

    /// Takes a step that only marks the phase the turn is in; whether it
    /// was one.
    fn marks(&mut self, step: &TurnStep<L>) -> bool {
        match (self, step) {
            (Self::Running { proving, .. }, TurnStep::ShowedLife) => {
                *proving = false;
                true
            }
            (
                Self::Running { ended_by_call, .. } | Self::AwaitingSettle { ended_by_call, .. },
                TurnStep::EndingCall,
            ) => {
                *ended_by_call = true;
                true
            }
            _ => false,
        }
    }

    /// Running on a session just attached.
    fn attached(link: L, proving: bool) -> Self {
        Self::Running {
            link,
            proving,
            ended_by_call: false,
        }
    }

    /// What the phase holds, let go.
    fn into_leftover(self) -> Option<Leftover<S, L>> {
        match self {
            Self::Opening { warm } => warm.map(Leftover::Warm),
            Self::Running { link, .. } | Self::AwaitingSettle { link, .. } => {
                Some(Leftover::Link(link))
            }
            Self::Closing { link, .. } => link.map(Leftover::Link),
            Self::Released { .. } => None,
        }
    }

    /// The warm session, taken as the turn begins on it.
    pub(crate) fn take_warm(&mut self) -> Option<S> {
        match self {
            Self::Opening { warm } => warm.take(),
            _ => None,
        }
    }

    /// The session in use, if any.
    pub(crate) fn link(&self) -> Option<&L> {
        match self {
            Self::Running { link, .. } | Self::AwaitingSettle { link, .. } => Some(link),
            Self::Closing { link, .. } => link.as_ref(),
            Self::Opening { .. } | Self::Released { .. } => None,
        }
    }

    /// The session in use, if any, to change.
    pub(crate) fn link_mut(&mut self) -> Option<&mut L> {
        match self {
            Self::Running { link, .. } | Self::AwaitingSettle { link, .. } => Some(link),
            Self::Closing { link, .. } => link.as_mut(),
            Self::Opening { .. } | Self::Released { .. } => None,
        }
    }

    /// The outcome, once TurnEnded went out.
    pub(crate) fn outcome(&self) -> Option<&TurnOutcome> {
        match self {
            Self::Closing { outcome, .. } | Self::Released { outcome } => Some(outcome),
            _ => None,
        }
    }

    /// Whether the turn still holds the chat (TurnEnded not sent).
    pub(crate) fn holds_chat(&self) -> bool {
        self.outcome().is_none()
    }

    /// Whether the prompt's `result` is still to come (the no-progress
    /// watchdog runs only then).
    pub(crate) fn awaits_result(&self) -> bool {
        matches!(self, Self::Opening { .. } | Self::Running { .. })
    }

    /// Whether a warm session has yet to show life.
    pub(crate) fn is_proving(&self) -> bool {
        matches!(self, Self::Running { proving: true, .. })
    }

    /// Whether the agent called a tool that ends the turn.
    pub(crate) fn ended_by_call(&self) -> bool {
        matches!(
            self,
            Self::Running {
                ended_by_call: true,
                ..
            } | Self::AwaitingSettle {
                ended_by_call: true,
                ..
            }
        )
    }

    /// Whether the session was handed back or is gone.
    pub(crate) fn is_released(&self) -> bool {
        matches!(self, Self::Released { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A warm session and links, as plain values.
    type Phase = TurnPhase<&'static str, &'static str>;
    type Row = (
        Phase,
        TurnStep<&'static str>,
        Phase,
        Option<Leftover<&'static str, &'static str>>,
    );

    const OPENING: Phase = TurnPhase::Opening { warm: None };

    fn running(link: &'static str, proving: bool) -> Phase {
        TurnPhase::Running {
            link,
            proving,
            ended_by_call: false,
        }
    }

    fn settling(link: &'static str) -> Phase {
        TurnPhase::AwaitingSettle {
            link,
            ended_by_call: false,
        }
    }

    fn closing(link: Option<&'static str>, outcome: TurnOutcome) -> Phase {
        TurnPhase::Closing { link, outcome }
    }

    fn released(outcome: TurnOutcome) -> Phase {
        TurnPhase::Released { outcome }
    }

    fn attached(link: &'static str, warm: bool) -> TurnStep<&'static str> {
        TurnStep::Attached { link, warm }
    }

    fn check(table: Vec<Row>) {
        for (from, step, to, left) in table {
            let got = from.clone().after(step.clone());
            assert_eq!(got, (to, left), "{from:?} --{step:?}-->");
        }
    }

    #[test]
    fn transitions_to_the_end() {
        use Leftover::{Link, Warm};
        let warm = TurnPhase::Opening { warm: Some("kept") };
        check(vec![
            (OPENING, attached("a", false), running("a", false), None),
            (OPENING, attached("a", true), running("a", true), None),
            // A warm session is taken before the turn begins; one still
            // held when another attaches is let go.
            (
                warm.clone(),
                attached("a", false),
                running("a", false),
                Some(Warm("kept")),
            ),
            (
                running("a", true),
                TurnStep::ShowedLife,
                running("a", false),
                None,
            ),
            // The silent warm session is let go, to be killed.
            (
                running("a", true),
                TurnStep::ReplacingWarm,
                OPENING,
                Some(Link("a")),
            ),
            (
                running("a", false),
                TurnStep::ReplacingWarm,
                running("a", false),
                None,
            ),
            (
                running("a", true),
                attached("b", false),
                running("b", false),
                Some(Link("a")),
            ),
            (
                running("a", false),
                TurnStep::ResultArrived,
                settling("a"),
                None,
            ),
            (
                settling("a"),
                TurnStep::Reprompted,
                running("a", false),
                None,
            ),
            (settling("a"), TurnStep::ResultArrived, settling("a"), None),
        ]);
    }

    #[test]
    fn transitions_to_closing() {
        use Leftover::{Link, Warm};
        use TurnOutcome::{Interrupted, NoProgress};
        let warm = TurnPhase::Opening { warm: Some("kept") };
        check(vec![
            (
                OPENING,
                TurnStep::Ended(NoProgress),
                closing(None, NoProgress),
                None,
            ),
            // Ended before it began: the warm session is let go.
            (
                warm,
                TurnStep::Ended(NoProgress),
                closing(None, NoProgress),
                Some(Warm("kept")),
            ),
            (
                running("a", true),
                TurnStep::Ended(Interrupted),
                closing(Some("a"), Interrupted),
                None,
            ),
            (
                settling("a"),
                TurnStep::Ended(Interrupted),
                closing(Some("a"), Interrupted),
                None,
            ),
            // A session that comes when none is taken any more is handed back.
            (
                settling("a"),
                attached("b", false),
                settling("a"),
                Some(Link("b")),
            ),
        ]);
    }

    #[test]
    fn transitions_after_the_end() {
        use Leftover::{Link, Warm};
        use TurnOutcome::{ForceReleased, Interrupted, NoProgress};
        let closing_a = || closing(Some("a"), Interrupted);
        check(vec![
            // Exactly once: a second outcome does not replace the first.
            (closing_a(), TurnStep::Ended(NoProgress), closing_a(), None),
            (closing_a(), TurnStep::ResultArrived, closing_a(), None),
            (
                closing_a(),
                attached("b", false),
                closing_a(),
                Some(Link("b")),
            ),
            // The session is let go at release: handed back or dropped.
            (
                closing_a(),
                TurnStep::Released,
                released(Interrupted),
                Some(Link("a")),
            ),
            (
                closing(None, Interrupted),
                TurnStep::Released,
                released(Interrupted),
                None,
            ),
            (
                running("a", false),
                TurnStep::Released,
                running("a", false),
                None,
            ),
            (
                running("a", false),
                TurnStep::Aborted,
                released(ForceReleased),
                Some(Link("a")),
            ),
            (
                settling("a"),
                TurnStep::Aborted,
                released(ForceReleased),
                Some(Link("a")),
            ),
            (
                TurnPhase::Opening { warm: Some("kept") },
                TurnStep::Aborted,
                released(ForceReleased),
                Some(Warm("kept")),
            ),
            (
                closing_a(),
                TurnStep::Aborted,
                released(Interrupted),
                Some(Link("a")),
            ),
            (
                released(Interrupted),
                TurnStep::Ended(NoProgress),
                released(Interrupted),
                None,
            ),
            (
                released(Interrupted),
                TurnStep::Aborted,
                released(Interrupted),
                None,
            ),
            (
                released(Interrupted),
                attached("b", false),
                released(Interrupted),
                Some(Link("b")),
            ),
        ]);
    }

    #[test]
    fn a_call_that_ends_the_turn_is_kept_until_the_turn_ends() {
        let ended_running = TurnPhase::Running {
            link: "a",
            proving: true,
            ended_by_call: true,
        };
        let ended_settling = TurnPhase::AwaitingSettle {
            link: "a",
            ended_by_call: true,
        };
        check(vec![
            (
                running("a", true),
                TurnStep::EndingCall,
                ended_running.clone(),
                None,
            ),
            (
                settling("a"),
                TurnStep::EndingCall,
                ended_settling.clone(),
                None,
            ),
            (
                ended_running.clone(),
                TurnStep::ResultArrived,
                ended_settling.clone(),
                None,
            ),
            (
                ended_running.clone(),
                TurnStep::ShowedLife,
                TurnPhase::Running {
                    link: "a",
                    proving: false,
                    ended_by_call: true,
                },
                None,
            ),
            // Its answer is given: nothing is re-prompted.
            (
                ended_settling.clone(),
                TurnStep::Reprompted,
                ended_settling.clone(),
                None,
            ),
            // A new session is a new start.
            (
                ended_running.clone(),
                attached("b", false),
                running("b", false),
                Some(Leftover::Link("a")),
            ),
            (OPENING, TurnStep::EndingCall, OPENING, None),
            (
                closing(Some("a"), TurnOutcome::Interrupted),
                TurnStep::EndingCall,
                closing(Some("a"), TurnOutcome::Interrupted),
                None,
            ),
        ]);
        assert!(ended_running.ended_by_call() && ended_settling.ended_by_call());
        assert!(!running("a", false).ended_by_call() && !settling("a").ended_by_call());
    }

    #[test]
    fn queries_follow_the_phase() {
        assert!(OPENING.awaits_result());
        assert!(!settling("a").awaits_result());
        assert!(running("a", true).is_proving() && !running("a", false).is_proving());
        assert!(settling("a").holds_chat());
        assert!(!closing(None, TurnOutcome::Interrupted).holds_chat());
        assert!(!closing(None, TurnOutcome::Interrupted).is_released());
    }

    #[test]
    fn the_link_and_the_warm_session_are_where_the_phase_says() {
        let mut opening = TurnPhase::<_, &str>::Opening { warm: Some("kept") };
        assert_eq!(opening.link(), None);
        assert_eq!(opening.take_warm(), Some("kept"));
        assert_eq!(opening.take_warm(), None);
        let mut running = running("a", false);
        assert_eq!(running.take_warm(), None);
        assert_eq!(running.link(), Some(&"a"));
        assert_eq!(settling("a").link(), Some(&"a"));
        assert_eq!(
            closing(Some("a"), TurnOutcome::Interrupted).link(),
            Some(&"a")
        );
        assert_eq!(closing(None, TurnOutcome::Interrupted).link(), None);
        assert_eq!(released(TurnOutcome::Interrupted).link(), None);
    }
}

//! [`ChatState`]: where a chat is, as one value. The supervisor changes it
//! only through [`ChatState::after`].
//!
//! ```text
//!        Merge                  window over
//! Idle ─────────▶ Merging ───────────────────▶ Idle
//!  │ Acquire                      Start(turn)                  Ended(turn)             Released(turn)
//!  └────────▶ WaitingForSlot ───────────────▶ Running(turn) ─────────────▶ Settling(turn) ─────────▶ Idle
//!                    │ NoSlot                      │ ForceReleased(turn)
//!                    ▼                             ▼
//!                   Idle                          Idle   (the hard deadline; its session is killed)
//! ```
//!
//! The chat's queue, warm session and "host stopping" mark sit beside the
//! state: they are the chat's data, not where it is.

use actix::SpawnHandle;

use crate::ids::TurnId;

/// What a state that holds a turn knows about it.
pub(crate) trait HoldsTurn {
    /// The turn.
    fn turn(&self) -> TurnId;
}

impl HoldsTurn for TurnId {
    fn turn(&self) -> TurnId {
        *self
    }
}

/// Where a chat is; `R` is what a running turn holds.
#[derive(Debug, PartialEq)]
pub(crate) enum ChatState<R> {
    /// Nothing is starting or running.
    Idle,
    /// The front message's merge window is open (`dispatcher.merge_window`).
    Merging(SpawnHandle),
    /// Waiting for one of `dispatcher.max_concurrent_turns` slots.
    WaitingForSlot,
    /// A turn holds the chat.
    Running(R),
    /// The turn ended; its session is still closing (the next turn waits,
    /// so it never gets a session that has not settled).
    Settling(TurnId),
}

/// What moves a chat.
#[derive(Debug, PartialEq)]
pub(crate) enum ChatStep<R> {
    /// A message waits for its merge window.
    Merge(SpawnHandle),
    /// The merge window is over, or `/stop` cleared it.
    WindowClosed,
    /// A turn may start once a slot is free.
    Acquire,
    /// A slot came: the turn starts.
    Start(R),
    /// The slot came but there was nothing left to run, or none will come.
    NoSlot,
    /// The turn sent TurnEnded.
    Ended(TurnId),
    /// The hard deadline released the chat from the turn.
    ForceReleased(TurnId),
    /// The turn's session settled or is gone.
    Released(TurnId),
}

impl<R: HoldsTurn> ChatState<R> {
    /// The state after `step`, and the running turn's data when the step
    /// took the chat from it. A step that does not apply leaves the state
    /// as it is (a stale TurnEnded of an older turn, say).
    pub(crate) fn after(self, step: ChatStep<R>) -> (Self, Option<R>) {
        match (self, step) {
            (Self::Idle, ChatStep::Merge(handle)) => (Self::Merging(handle), None),
            (Self::Merging(_), ChatStep::WindowClosed) => (Self::Idle, None),
            (Self::Idle, ChatStep::Acquire) => (Self::WaitingForSlot, None),
            (Self::WaitingForSlot, ChatStep::Start(turn)) => (Self::Running(turn), None),
            (Self::WaitingForSlot, ChatStep::NoSlot) => (Self::Idle, None),
            (Self::Running(r), ChatStep::Ended(turn)) if r.turn() == turn => {
                (Self::Settling(turn), Some(r))
            }
            (Self::Running(r), ChatStep::ForceReleased(turn)) if r.turn() == turn => {
                (Self::Idle, Some(r))
            }
            (Self::Settling(t), ChatStep::Released(turn)) if t == turn => (Self::Idle, None),
            (state, _) => (state, None),
        }
    }

    /// The running turn, if one holds the chat.
    pub(crate) fn running(&self) -> Option<&R> {
        match self {
            Self::Running(r) => Some(r),
            _ => None,
        }
    }

    /// Whether the chat is free to start a turn.
    pub(crate) fn is_idle(&self) -> bool {
        matches!(self, Self::Idle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type S = ChatState<TurnId>;
    type Step = ChatStep<TurnId>;

    #[test]
    fn transitions() {
        let h = SpawnHandle::default();
        let (t1, t2) = (TurnId(1), TurnId(2));
        let table: Vec<(S, Step, S, Option<TurnId>)> = vec![
            (S::Idle, Step::Merge(h), S::Merging(h), None),
            (S::Merging(h), Step::WindowClosed, S::Idle, None),
            (S::Idle, Step::Acquire, S::WaitingForSlot, None),
            (S::WaitingForSlot, Step::Start(t1), S::Running(t1), None),
            (S::WaitingForSlot, Step::NoSlot, S::Idle, None),
            (S::Running(t1), Step::Ended(t1), S::Settling(t1), Some(t1)),
            (S::Running(t2), Step::Ended(t1), S::Running(t2), None),
            (S::Running(t1), Step::ForceReleased(t1), S::Idle, Some(t1)),
            (
                S::Running(t2),
                Step::ForceReleased(t1),
                S::Running(t2),
                None,
            ),
            (S::Settling(t1), Step::Released(t1), S::Idle, None),
            (S::Settling(t2), Step::Released(t1), S::Settling(t2), None),
            // A turn never starts over another or while one settles.
            (S::Running(t1), Step::Start(t2), S::Running(t1), None),
            (S::Settling(t1), Step::Acquire, S::Settling(t1), None),
            (S::Running(t1), Step::Merge(h), S::Running(t1), None),
            (S::Idle, Step::Ended(t1), S::Idle, None),
            (S::Merging(h), Step::Acquire, S::Merging(h), None),
        ];
        for (from, step, to, left) in table {
            let shown = format!("{from:?} --{step:?}-->");
            let (got, got_left) = from.after(step);
            assert_eq!((got, got_left), (to, left), "{shown}");
        }
    }
}

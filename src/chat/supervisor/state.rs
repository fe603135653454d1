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
//!
//! HostStopping: Idle | Merging | WaitingForSlot ──▶ Stopped (for good);
//! a running or settling turn goes on, marked `Then::Stop`, and its end
//! leads to Stopped instead of Idle.
//! ```
//!
//! The chat's queue and warm session sit beside the state: they are the
//! chat's data, not where it is.

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

/// What the chat does once the turn holding it lets go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Then {
    /// The next turn may start.
    Next,
    /// The host is stopping: nothing more starts.
    Stop,
}

impl Then {
    /// Where the chat is once the turn let go.
    fn at_rest<R>(self) -> ChatState<R> {
        match self {
            Self::Next => ChatState::Idle,
            Self::Stop => ChatState::Stopped,
        }
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
    /// A turn holds the chat; then what its end leads to.
    Running(R, Then),
    /// The turn ended; its session is still closing (the next turn waits,
    /// so it never gets a session that has not settled).
    Settling(TurnId, Then),
    /// The host is stopping: no turn starts again (queued messages stay
    /// queued in the inbox, for the next process).
    Stopped,
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
    /// The host is stopping: a running turn may finish (the drain), but no
    /// other starts.
    HostStopping,
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
            (Self::WaitingForSlot, ChatStep::Start(turn)) => {
                (Self::Running(turn, Then::Next), None)
            }
            (Self::WaitingForSlot, ChatStep::NoSlot) => (Self::Idle, None),
            (Self::Running(r, then), ChatStep::Ended(turn)) if r.turn() == turn => {
                (Self::Settling(turn, then), Some(r))
            }
            (Self::Running(r, then), ChatStep::ForceReleased(turn)) if r.turn() == turn => {
                (then.at_rest(), Some(r))
            }
            (Self::Settling(t, then), ChatStep::Released(turn)) if t == turn => {
                (then.at_rest(), None)
            }
            (Self::Running(r, _), ChatStep::HostStopping) => (Self::Running(r, Then::Stop), None),
            (Self::Settling(t, _), ChatStep::HostStopping) => (Self::Settling(t, Then::Stop), None),
            (Self::Idle | Self::Merging(_) | Self::WaitingForSlot, ChatStep::HostStopping) => {
                (Self::Stopped, None)
            }
            (state, _) => (state, None),
        }
    }

    /// The running turn, if one holds the chat.
    pub(crate) fn running(&self) -> Option<&R> {
        match self {
            Self::Running(r, _) => Some(r),
            _ => None,
        }
    }

    /// Whether the chat is free to start a turn.
    pub(crate) fn is_idle(&self) -> bool {
        matches!(self, Self::Idle)
    }

    /// Whether nothing runs, starts or settles (the chat may be retired).
    pub(crate) fn at_rest(&self) -> bool {
        matches!(self, Self::Idle | Self::Stopped)
    }

    /// Whether the host is stopping: no turn starts again.
    pub(crate) fn host_stopping(&self) -> bool {
        matches!(
            self,
            Self::Stopped | Self::Running(_, Then::Stop) | Self::Settling(_, Then::Stop)
        )
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
            (S::WaitingForSlot, Step::Start(t1), running(t1), None),
            (S::WaitingForSlot, Step::NoSlot, S::Idle, None),
            (running(t1), Step::Ended(t1), settling(t1), Some(t1)),
            (running(t2), Step::Ended(t1), running(t2), None),
            (running(t1), Step::ForceReleased(t1), S::Idle, Some(t1)),
            (running(t2), Step::ForceReleased(t1), running(t2), None),
            (settling(t1), Step::Released(t1), S::Idle, None),
            (settling(t2), Step::Released(t1), settling(t2), None),
            // A turn never starts over another or while one settles.
            (running(t1), Step::Start(t2), running(t1), None),
            (settling(t1), Step::Acquire, settling(t1), None),
            (running(t1), Step::Merge(h), running(t1), None),
            (S::Idle, Step::Ended(t1), S::Idle, None),
            (S::Merging(h), Step::Acquire, S::Merging(h), None),
        ];
        check(table);
    }

    #[test]
    fn a_stopping_host_lets_the_running_turn_end_and_starts_nothing_after() {
        let h = SpawnHandle::default();
        let t1 = TurnId(1);
        let stop = |turn| S::Running(turn, Then::Stop);
        let table: Vec<(S, Step, S, Option<TurnId>)> = vec![
            (S::Idle, Step::HostStopping, S::Stopped, None),
            (S::Merging(h), Step::HostStopping, S::Stopped, None),
            (S::WaitingForSlot, Step::HostStopping, S::Stopped, None),
            (running(t1), Step::HostStopping, stop(t1), None),
            (
                settling(t1),
                Step::HostStopping,
                S::Settling(t1, Then::Stop),
                None,
            ),
            // The turn ends as it would; where it leads is Stopped.
            (
                stop(t1),
                Step::Ended(t1),
                S::Settling(t1, Then::Stop),
                Some(t1),
            ),
            (
                S::Settling(t1, Then::Stop),
                Step::Released(t1),
                S::Stopped,
                None,
            ),
            (stop(t1), Step::ForceReleased(t1), S::Stopped, Some(t1)),
            // Stopped is for good.
            (S::Stopped, Step::Acquire, S::Stopped, None),
            (S::Stopped, Step::Merge(h), S::Stopped, None),
            (S::Stopped, Step::Start(t1), S::Stopped, None),
            (S::Stopped, Step::NoSlot, S::Stopped, None),
            (S::Stopped, Step::HostStopping, S::Stopped, None),
        ];
        check(table);
        assert!(S::Stopped.host_stopping() && stop(t1).host_stopping());
        assert!(!running(t1).host_stopping() && !S::Idle.host_stopping());
        assert!(S::Stopped.at_rest() && !S::Stopped.is_idle());
    }

    fn running(turn: TurnId) -> S {
        S::Running(turn, Then::Next)
    }

    fn settling(turn: TurnId) -> S {
        S::Settling(turn, Then::Next)
    }

    fn check(table: Vec<(S, Step, S, Option<TurnId>)>) {
        for (from, step, to, left) in table {
            let shown = format!("{from:?} --{step:?}-->");
            let (got, got_left) = from.after(step);
            assert_eq!((got, got_left), (to, left), "{shown}");
        }
    }
}

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
//! Every state but Merging and Stopped carries a Hold, what holds the next
//! turn back, and keeps it across a turn (a delivery and a usage limit
//! outlive the turn they began in):
//!
//!                 DeliveryBegins ▶
//!   Open ◀────────────────────────────────▶ Delivery
//!    │ Park(parked)      ◀ DeliveryEnded       │ Park(parked)
//!    ▼                                         ▼
//!   Limit { delivering: false } ◀─────────▶ Limit { delivering: true }
//!    │ Unpark                                  │ Unpark
//!    ▼ (their time came, /stop, host stopping) ▼
//!   Open                                    Delivery
//!
//! Merging holds nothing: DeliveryBegins or Park there closes the window
//! (to Idle(Delivery), Idle(Limit)); once the hold is gone the turn opens
//! what is left of it. Acquire { adopted } leaves Idle only when the hold
//! lets the turn start: Open, or Delivery under a message the agent runs
//! already (`adopted`); never Limit.
//!
//! HostStopping: Idle | Merging | WaitingForSlot ──▶ Stopped (for good);
//! a running or settling turn goes on, marked `Then::Stop`, and its end
//! leads to Stopped instead of Idle. Parked messages are handed back then
//! (their rows stay parked in the inbox, for the next process), and none
//! are taken while the turn ends.
//! ```
//!
//! The chat's queue, warm session, last usage-limit wait and the messages
//! held behind a steered one (`awaiting`) sit beside the state: they are
//! the chat's data, not where it is (the supervisor's fields say why).

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
    /// Where the chat is once the turn let go, holding `hold`.
    fn at_rest<R, P>(self, hold: Hold<P>) -> ChatState<R, P> {
        match self {
            Self::Next => ChatState::Idle(hold),
            Self::Stop => ChatState::Stopped,
        }
    }
}

/// What holds the chat's next turn back; `P` is what waits out a usage
/// limit. It goes with the chat through a turn: a delivery arrives whatever
/// the chat is doing (its messages may be steered into the running turn),
/// and a limit outlives the turn it refused (its messages are parked while
/// that turn's session still settles, and a message the previous process
/// parked can come back while another turn runs).
#[derive(Debug, PartialEq)]
pub(crate) enum Hold<P> {
    /// Nothing: the front message's turn may start.
    Open,
    /// A delivery's messages are still arriving ([`super::DeliveryEnd`] to
    /// come): they are one turn, so the front waits for the rest (unless
    /// the agent runs it already).
    Delivery,
    /// Messages wait out a usage limit, and every message after them joins
    /// them: everything runs together then.
    Limit {
        /// The messages and their timer.
        parked: P,
        /// A delivery is arriving too: once they run, the next turn waits
        /// for its end.
        delivering: bool,
    },
}

impl<P> Hold<P> {
    /// Where the hold goes on `step`, and what it hands back (parked
    /// messages it let go of, or could not take).
    fn after<R>(self, step: HoldStep<P>) -> (Self, Left<R, P>) {
        match (self, step) {
            (Self::Open, HoldStep::DeliveryBegins) => (Self::Delivery, Left::Nothing),
            (Self::Delivery, HoldStep::DeliveryEnded) => (Self::Open, Left::Nothing),
            (Self::Limit { parked, .. }, HoldStep::DeliveryBegins) => {
                let delivering = true;
                (Self::Limit { parked, delivering }, Left::Nothing)
            }
            (Self::Limit { parked, .. }, HoldStep::DeliveryEnded) => {
                let delivering = false;
                (Self::Limit { parked, delivering }, Left::Nothing)
            }
            (Self::Open, HoldStep::Park(parked)) => {
                let delivering = false;
                (Self::Limit { parked, delivering }, Left::Nothing)
            }
            (Self::Delivery, HoldStep::Park(parked)) => {
                let delivering = true;
                (Self::Limit { parked, delivering }, Left::Nothing)
            }
            (Self::Limit { parked, delivering }, HoldStep::Unpark) => {
                let hold = if delivering {
                    Self::Delivery
                } else {
                    Self::Open
                };
                (hold, Left::Parked(parked))
            }
            // Parked messages are joined in place, never swapped.
            (hold, HoldStep::Park(parked)) => (hold, Left::Parked(parked)),
            (hold, _) => (hold, Left::Nothing),
        }
    }

    fn parked(&self) -> Option<&P> {
        match self {
            Self::Limit { parked, .. } => Some(parked),
            _ => None,
        }
    }

    /// Whether the next turn may start, its front message `adopted` (one
    /// the agent runs already) or not.
    fn lets_start(&self, adopted: bool) -> bool {
        match self {
            Self::Open => true,
            // The rest of the delivery joins the turn: it waits for it.
            Self::Delivery => adopted,
            // Everything runs together at the parked messages' time.
            Self::Limit { .. } => false,
        }
    }
}

/// What moves a [`Hold`].
enum HoldStep<P> {
    DeliveryBegins,
    DeliveryEnded,
    Park(P),
    Unpark,
}

/// Where a chat is; `R` is what a running turn holds, `P` what waits out a
/// usage limit.
#[derive(Debug, PartialEq)]
pub(crate) enum ChatState<R, P> {
    /// Nothing is starting or running; what holds the next turn back.
    Idle(Hold<P>),
    /// The front message's merge window is open (`dispatcher.merge_window`).
    Merging(SpawnHandle),
    /// Waiting for one of `dispatcher.max_concurrent_turns` slots.
    WaitingForSlot(Hold<P>),
    /// A turn holds the chat; then what its end leads to, and what holds
    /// the turn after it.
    Running(R, Then, Hold<P>),
    /// The turn ended; its session is still closing (the next turn waits,
    /// so it never gets a session that has not settled).
    Settling(TurnId, Then, Hold<P>),
    /// The host is stopping: no turn starts again (queued messages stay
    /// queued in the inbox, for the next process).
    Stopped,
}

/// What moves a chat.
#[derive(Debug, PartialEq)]
pub(crate) enum ChatStep<R, P> {
    /// A message waits for its merge window.
    Merge(SpawnHandle),
    /// The merge window is over, or `/stop` cleared it.
    WindowClosed,
    /// A turn may start once a slot is free; `adopted`: its front message
    /// is one the agent runs already (it waits for no delivery).
    Acquire {
        /// The front message is one the agent runs already.
        adopted: bool,
    },
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
    /// A message came whose delivery has more to follow.
    DeliveryBegins,
    /// The delivery is whole ([`super::DeliveryEnd`]).
    DeliveryEnded,
    /// Messages wait out a usage limit (none waited yet).
    Park(P),
    /// The parked messages' time came, or `/stop` cancelled it.
    Unpark,
}

/// What a step took out of the state, for the caller to finish: a turn's
/// data (its timer cancelled, its slot dropped), parked messages (run, or
/// given back), or a merge window's timer to cancel.
#[derive(Debug, PartialEq)]
pub(crate) enum Left<R, P> {
    /// Nothing.
    Nothing,
    /// The turn that held the chat.
    Turn(R),
    /// Messages that waited out a usage limit, or that could not be parked.
    Parked(P),
    /// The merge window that was open, or one the state did not take.
    Window(SpawnHandle),
}

impl<R, P> Left<R, P> {
    /// The turn that held the chat, if the step took the chat from it.
    pub(crate) fn turn(self) -> Option<R> {
        match self {
            Self::Turn(r) => Some(r),
            _ => None,
        }
    }

    /// The parked messages the step let go of.
    pub(crate) fn parked(self) -> Option<P> {
        match self {
            Self::Parked(p) => Some(p),
            _ => None,
        }
    }
}

impl<R: HoldsTurn, P> ChatState<R, P> {
    /// The state after `step`, and what the step took out of it. A step
    /// that does not apply leaves the state as it is (a stale TurnEnded of
    /// an older turn, say).
    pub(crate) fn after(self, step: ChatStep<R, P>) -> (Self, Left<R, P>) {
        match (self, step) {
            (Self::Idle(Hold::Open), ChatStep::Merge(handle)) => {
                (Self::Merging(handle), Left::Nothing)
            }
            (Self::Merging(handle), ChatStep::WindowClosed) => {
                (Self::Idle(Hold::Open), Left::Window(handle))
            }
            (Self::Idle(hold), ChatStep::Acquire { adopted }) if hold.lets_start(adopted) => {
                (Self::WaitingForSlot(hold), Left::Nothing)
            }
            (Self::WaitingForSlot(hold), ChatStep::Start(turn)) => {
                (Self::Running(turn, Then::Next, hold), Left::Nothing)
            }
            (Self::WaitingForSlot(hold), ChatStep::NoSlot) => (Self::Idle(hold), Left::Nothing),
            (Self::Running(r, then, hold), ChatStep::Ended(turn)) if r.turn() == turn => {
                (Self::Settling(turn, then, hold), Left::Turn(r))
            }
            (Self::Running(r, then, hold), ChatStep::ForceReleased(turn)) if r.turn() == turn => {
                (then.at_rest(hold), Left::Turn(r))
            }
            (Self::Settling(t, then, hold), ChatStep::Released(turn)) if t == turn => {
                (then.at_rest(hold), Left::Nothing)
            }
            (state, ChatStep::HostStopping) => state.stopping(),
            (Self::Merging(handle), ChatStep::DeliveryBegins) => {
                (Self::Idle(Hold::Delivery), Left::Window(handle))
            }
            (Self::Merging(handle), ChatStep::Park(parked)) => {
                let delivering = false;
                let hold = Hold::Limit { parked, delivering };
                (Self::Idle(hold), Left::Window(handle))
            }
            (state, ChatStep::DeliveryBegins) => state.holding(HoldStep::DeliveryBegins),
            (state, ChatStep::DeliveryEnded) => state.holding(HoldStep::DeliveryEnded),
            (state, ChatStep::Park(parked)) => state.holding(HoldStep::Park(parked)),
            (state, ChatStep::Unpark) => state.holding(HoldStep::Unpark),
            // A window the state does not take is handed back, to cancel:
            // its timer would close a window that never opened.
            (state, ChatStep::Merge(handle)) => (state, Left::Window(handle)),
            (state, _) => (state, Left::Nothing),
        }
    }

    /// The host is stopping: nothing starts again; parked messages are
    /// handed back (or the open window, to cancel).
    fn stopping(self) -> (Self, Left<R, P>) {
        match self {
            Self::Merging(handle) => (Self::Stopped, Left::Window(handle)),
            Self::Running(r, _, hold) => {
                let (hold, left) = hold.after(HoldStep::Unpark);
                (Self::Running(r, Then::Stop, hold), left)
            }
            Self::Settling(t, _, hold) => {
                let (hold, left) = hold.after(HoldStep::Unpark);
                (Self::Settling(t, Then::Stop, hold), left)
            }
            Self::Idle(hold) | Self::WaitingForSlot(hold) => {
                (Self::Stopped, hold.after(HoldStep::Unpark).1)
            }
            Self::Stopped => (Self::Stopped, Left::Nothing),
        }
    }

    /// `step` applied to the chat's hold, wherever the chat is.
    fn holding(self, step: HoldStep<P>) -> (Self, Left<R, P>) {
        let step = match step {
            // A stopping host parks nothing: the turn's end leads to
            // Stopped, which holds nothing, and they would be lost.
            HoldStep::Park(parked) if self.host_stopping() => {
                return (self, Left::Parked(parked));
            }
            step => step,
        };
        match self {
            Self::Idle(hold) => {
                let (hold, left) = hold.after(step);
                (Self::Idle(hold), left)
            }
            Self::WaitingForSlot(hold) => {
                let (hold, left) = hold.after(step);
                (Self::WaitingForSlot(hold), left)
            }
            Self::Running(r, then, hold) => {
                let (hold, left) = hold.after(step);
                (Self::Running(r, then, hold), left)
            }
            Self::Settling(t, then, hold) => {
                let (hold, left) = hold.after(step);
                (Self::Settling(t, then, hold), left)
            }
            state @ (Self::Merging(_) | Self::Stopped) => match step {
                HoldStep::Park(parked) => (state, Left::Parked(parked)),
                _ => (state, Left::Nothing),
            },
        }
    }

    /// Whether a turn may start now, its front message `adopted` or not:
    /// the chat is idle and nothing holds the turn back.
    pub(crate) fn may_start(&self, adopted: bool) -> bool {
        matches!(self, Self::Idle(hold) if hold.lets_start(adopted))
    }

    /// The running turn, if one holds the chat.
    pub(crate) fn running(&self) -> Option<&R> {
        match self {
            Self::Running(r, ..) => Some(r),
            _ => None,
        }
    }

    /// What holds the next turn back (none while Merging or Stopped).
    fn hold(&self) -> Option<&Hold<P>> {
        match self {
            Self::Idle(hold)
            | Self::WaitingForSlot(hold)
            | Self::Running(.., hold)
            | Self::Settling(.., hold) => Some(hold),
            Self::Merging(_) | Self::Stopped => None,
        }
    }

    /// The messages waiting out a usage limit, if any.
    pub(crate) fn parked(&self) -> Option<&P> {
        self.hold().and_then(Hold::parked)
    }

    /// The messages waiting out a usage limit, to join more to them.
    pub(crate) fn parked_mut(&mut self) -> Option<&mut P> {
        match self {
            Self::Idle(Hold::Limit { parked, .. })
            | Self::WaitingForSlot(Hold::Limit { parked, .. })
            | Self::Running(.., Hold::Limit { parked, .. })
            | Self::Settling(.., Hold::Limit { parked, .. }) => Some(parked),
            _ => None,
        }
    }

    /// Whether nothing runs, starts, settles or waits out a usage limit
    /// (the chat may be retired: retiring it would drop the retry).
    pub(crate) fn at_rest(&self) -> bool {
        matches!(
            self,
            Self::Idle(Hold::Open | Hold::Delivery) | Self::Stopped
        )
    }

    /// Whether the host is stopping: no turn starts again.
    pub(crate) fn host_stopping(&self) -> bool {
        matches!(
            self,
            Self::Stopped | Self::Running(_, Then::Stop, _) | Self::Settling(_, Then::Stop, _)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parked messages are a number here.
    type S = ChatState<TurnId, u8>;
    type Step = ChatStep<TurnId, u8>;
    type Row = (S, Step, S, Left<TurnId, u8>);

    const OPEN: Hold<u8> = Hold::Open;
    const DELIVERY: Hold<u8> = Hold::Delivery;

    #[test]
    fn transitions() {
        let h = SpawnHandle::default();
        let (t1, t2) = (TurnId(1), TurnId(2));
        let table: Vec<Row> = vec![
            (S::Idle(OPEN), Step::Merge(h), S::Merging(h), Left::Nothing),
            (
                S::Merging(h),
                Step::WindowClosed,
                S::Idle(OPEN),
                Left::Window(h),
            ),
            (
                S::Idle(OPEN),
                Step::Acquire { adopted: false },
                S::WaitingForSlot(OPEN),
                Left::Nothing,
            ),
            (
                S::WaitingForSlot(OPEN),
                Step::Start(t1),
                running(t1),
                Left::Nothing,
            ),
            (
                S::WaitingForSlot(OPEN),
                Step::NoSlot,
                S::Idle(OPEN),
                Left::Nothing,
            ),
            (running(t1), Step::Ended(t1), settling(t1), Left::Turn(t1)),
            (running(t2), Step::Ended(t1), running(t2), Left::Nothing),
            (
                running(t1),
                Step::ForceReleased(t1),
                S::Idle(OPEN),
                Left::Turn(t1),
            ),
            (
                running(t2),
                Step::ForceReleased(t1),
                running(t2),
                Left::Nothing,
            ),
            (
                settling(t1),
                Step::Released(t1),
                S::Idle(OPEN),
                Left::Nothing,
            ),
            (
                settling(t2),
                Step::Released(t1),
                settling(t2),
                Left::Nothing,
            ),
            // A turn never starts over another or while one settles.
            (running(t1), Step::Start(t2), running(t1), Left::Nothing),
            (
                settling(t1),
                Step::Acquire { adopted: false },
                settling(t1),
                Left::Nothing,
            ),
            (running(t1), Step::Merge(h), running(t1), Left::Window(h)),
            (S::Idle(OPEN), Step::Ended(t1), S::Idle(OPEN), Left::Nothing),
            (
                S::Merging(h),
                Step::Acquire { adopted: false },
                S::Merging(h),
                Left::Nothing,
            ),
        ];
        check(table);
    }

    #[test]
    fn a_delivery_holds_a_free_chat_until_it_is_whole() {
        let h = SpawnHandle::default();
        let table: Vec<Row> = vec![
            (
                S::Idle(OPEN),
                Step::DeliveryBegins,
                S::Idle(DELIVERY),
                Left::Nothing,
            ),
            (
                S::Idle(DELIVERY),
                Step::DeliveryEnded,
                S::Idle(OPEN),
                Left::Nothing,
            ),
            // The window ends: the turn waits for the delivery, then opens
            // it again for what is left of it.
            (
                S::Merging(h),
                Step::DeliveryBegins,
                S::Idle(DELIVERY),
                Left::Window(h),
            ),
            (
                S::Idle(DELIVERY),
                Step::Merge(h),
                S::Idle(DELIVERY),
                Left::Window(h),
            ),
            // The front waits for the rest of its delivery, unless the
            // agent runs it already; the hold goes with it.
            (
                S::Idle(DELIVERY),
                Step::Acquire { adopted: false },
                S::Idle(DELIVERY),
                Left::Nothing,
            ),
            (
                S::Idle(DELIVERY),
                Step::Acquire { adopted: true },
                S::WaitingForSlot(DELIVERY),
                Left::Nothing,
            ),
        ];
        check(table);
    }

    #[test]
    fn a_delivery_goes_with_the_chat_through_a_turn() {
        let t1 = TurnId(1);
        let table: Vec<Row> = vec![
            (
                S::WaitingForSlot(OPEN),
                Step::DeliveryBegins,
                S::WaitingForSlot(DELIVERY),
                Left::Nothing,
            ),
            (
                S::WaitingForSlot(DELIVERY),
                Step::Start(t1),
                S::Running(t1, Then::Next, DELIVERY),
                Left::Nothing,
            ),
            (
                S::WaitingForSlot(DELIVERY),
                Step::NoSlot,
                S::Idle(DELIVERY),
                Left::Nothing,
            ),
            (
                running(t1),
                Step::DeliveryBegins,
                held(t1, DELIVERY),
                Left::Nothing,
            ),
            (
                held(t1, DELIVERY),
                Step::DeliveryEnded,
                running(t1),
                Left::Nothing,
            ),
            (
                held(t1, DELIVERY),
                Step::Ended(t1),
                S::Settling(t1, Then::Next, DELIVERY),
                Left::Turn(t1),
            ),
            (
                S::Settling(t1, Then::Next, DELIVERY),
                Step::Released(t1),
                S::Idle(DELIVERY),
                Left::Nothing,
            ),
            (
                held(t1, DELIVERY),
                Step::ForceReleased(t1),
                S::Idle(DELIVERY),
                Left::Turn(t1),
            ),
            (
                S::Idle(OPEN),
                Step::DeliveryEnded,
                S::Idle(OPEN),
                Left::Nothing,
            ),
            (S::Stopped, Step::DeliveryBegins, S::Stopped, Left::Nothing),
        ];
        check(table);
    }

    #[test]
    fn parked_messages_go_with_the_chat_wherever_it_is() {
        let h = SpawnHandle::default();
        let t1 = TurnId(1);
        let table: Vec<Row> = vec![
            (
                S::Idle(OPEN),
                Step::Park(1),
                S::Idle(limit(1, false)),
                Left::Nothing,
            ),
            (
                S::Idle(DELIVERY),
                Step::Park(1),
                S::Idle(limit(1, true)),
                Left::Nothing,
            ),
            (
                S::Merging(h),
                Step::Park(1),
                S::Idle(limit(1, false)),
                Left::Window(h),
            ),
            // A turn refused: parked while its session settles.
            (
                settling(t1),
                Step::Park(1),
                S::Settling(t1, Then::Next, limit(1, false)),
                Left::Nothing,
            ),
            (
                S::Settling(t1, Then::Next, limit(1, false)),
                Step::Released(t1),
                S::Idle(limit(1, false)),
                Left::Nothing,
            ),
            // One the previous process parked, back while a turn runs.
            (
                running(t1),
                Step::Park(1),
                held(t1, limit(1, false)),
                Left::Nothing,
            ),
            (
                held(t1, limit(1, false)),
                Step::Ended(t1),
                S::Settling(t1, Then::Next, limit(1, false)),
                Left::Turn(t1),
            ),
        ];
        check(table);
    }

    #[test]
    fn parked_messages_hold_the_chat_until_their_time() {
        let (h, t1) = (SpawnHandle::default(), TurnId(1));
        let table: Vec<Row> = vec![
            (
                S::WaitingForSlot(OPEN),
                Step::Park(1),
                S::WaitingForSlot(limit(1, false)),
                Left::Nothing,
            ),
            // Parked messages wait for their time: nothing starts.
            (
                S::Idle(limit(1, false)),
                Step::Acquire { adopted: false },
                S::Idle(limit(1, false)),
                Left::Nothing,
            ),
            (
                S::Idle(limit(1, true)),
                Step::Acquire { adopted: true },
                S::Idle(limit(1, true)),
                Left::Nothing,
            ),
            (
                S::Idle(limit(1, false)),
                Step::Merge(h),
                S::Idle(limit(1, false)),
                Left::Window(h),
            ),
            (
                S::Idle(limit(1, false)),
                Step::DeliveryBegins,
                S::Idle(limit(1, true)),
                Left::Nothing,
            ),
            (
                S::Idle(limit(1, true)),
                Step::DeliveryEnded,
                S::Idle(limit(1, false)),
                Left::Nothing,
            ),
            (
                S::Idle(limit(1, false)),
                Step::Unpark,
                S::Idle(OPEN),
                Left::Parked(1),
            ),
            (
                S::Idle(limit(1, true)),
                Step::Unpark,
                S::Idle(DELIVERY),
                Left::Parked(1),
            ),
            (
                held(t1, limit(1, false)),
                Step::Unpark,
                running(t1),
                Left::Parked(1),
            ),
            (S::Idle(OPEN), Step::Unpark, S::Idle(OPEN), Left::Nothing),
            // More joins the parked ones in place: a second is given back.
            (
                S::Idle(limit(1, false)),
                Step::Park(2),
                S::Idle(limit(1, false)),
                Left::Parked(2),
            ),
            (S::Stopped, Step::Park(2), S::Stopped, Left::Parked(2)),
        ];
        check(table);
    }

    #[test]
    fn a_stopping_host_lets_the_running_turn_end_and_starts_nothing_after() {
        let h = SpawnHandle::default();
        let t1 = TurnId(1);
        let stop = |turn| S::Running(turn, Then::Stop, OPEN);
        let stop_settling = |turn| S::Settling(turn, Then::Stop, OPEN);
        let table: Vec<Row> = vec![
            (S::Idle(OPEN), Step::HostStopping, S::Stopped, Left::Nothing),
            (
                S::Merging(h),
                Step::HostStopping,
                S::Stopped,
                Left::Window(h),
            ),
            (
                S::WaitingForSlot(OPEN),
                Step::HostStopping,
                S::Stopped,
                Left::Nothing,
            ),
            (running(t1), Step::HostStopping, stop(t1), Left::Nothing),
            (
                settling(t1),
                Step::HostStopping,
                stop_settling(t1),
                Left::Nothing,
            ),
            // Parked messages are handed back: the inbox keeps their rows.
            (
                S::Idle(limit(1, true)),
                Step::HostStopping,
                S::Stopped,
                Left::Parked(1),
            ),
            (
                held(t1, limit(1, false)),
                Step::HostStopping,
                stop(t1),
                Left::Parked(1),
            ),
            (
                S::Settling(t1, Then::Next, limit(1, true)),
                Step::HostStopping,
                S::Settling(t1, Then::Stop, DELIVERY),
                Left::Parked(1),
            ),
            // The turn ends as it would; where it leads is Stopped.
            (stop(t1), Step::Ended(t1), stop_settling(t1), Left::Turn(t1)),
            (
                stop_settling(t1),
                Step::Released(t1),
                S::Stopped,
                Left::Nothing,
            ),
            (
                stop(t1),
                Step::ForceReleased(t1),
                S::Stopped,
                Left::Turn(t1),
            ),
            // Stopped is for good.
            (
                S::Stopped,
                Step::Acquire { adopted: false },
                S::Stopped,
                Left::Nothing,
            ),
            (S::Stopped, Step::Merge(h), S::Stopped, Left::Window(h)),
            (S::Stopped, Step::Start(t1), S::Stopped, Left::Nothing),
            (S::Stopped, Step::NoSlot, S::Stopped, Left::Nothing),
            (S::Stopped, Step::HostStopping, S::Stopped, Left::Nothing),
        ];
        check(table);
        assert!(S::Stopped.host_stopping() && stop(t1).host_stopping());
        assert!(!running(t1).host_stopping() && !S::Idle(OPEN).host_stopping());
        assert!(S::Stopped.at_rest() && S::Idle(DELIVERY).at_rest());
        assert!(!S::Idle(limit(1, false)).at_rest() && !running(t1).at_rest());
        assert_eq!(held(t1, limit(3, false)).parked(), Some(&3));
        assert_eq!(S::Merging(h).parked(), None);
    }

    /// Nothing is parked while a stopping host's turn ends: where it leads
    /// is Stopped, which would drop them.
    #[test]
    fn a_stopping_host_parks_nothing_while_its_turn_ends() {
        let t1 = TurnId(1);
        let stop = S::Running(t1, Then::Stop, OPEN);
        let stop_settling = S::Settling(t1, Then::Stop, DELIVERY);
        let table: Vec<Row> = vec![
            (
                stop,
                Step::Park(2),
                S::Running(t1, Then::Stop, OPEN),
                Left::Parked(2),
            ),
            (
                stop_settling,
                Step::Park(2),
                S::Settling(t1, Then::Stop, DELIVERY),
                Left::Parked(2),
            ),
            (S::Stopped, Step::Park(2), S::Stopped, Left::Parked(2)),
        ];
        check(table);
    }

    fn running(turn: TurnId) -> S {
        S::Running(turn, Then::Next, OPEN)
    }

    fn held(turn: TurnId, hold: Hold<u8>) -> S {
        S::Running(turn, Then::Next, hold)
    }

    fn settling(turn: TurnId) -> S {
        S::Settling(turn, Then::Next, OPEN)
    }

    fn limit(parked: u8, delivering: bool) -> Hold<u8> {
        Hold::Limit { parked, delivering }
    }

    fn check(table: Vec<Row>) {
        for (from, step, to, left) in table {
            let shown = format!("{from:?} --{step:?}-->");
            let got = from.after(step);
            assert_eq!(got, (to, left), "{shown}");
        }
    }
}

//! The chat actors: the [`Dispatcher`], one `ChatSupervisor` per chat, one
//! `TurnActor` per turn and one `TypingActor` per chat; the turn outcome.
//! The actors are internal; what a test or an embedder
//! needs is re-exported here.

pub(crate) mod dispatcher;
pub(crate) mod menus;
pub mod naming;
pub mod notices;
pub(crate) mod outcome;
pub(crate) mod slots;
pub(crate) mod supervisor;
pub(crate) mod turn;
pub(crate) mod typing;

pub use crate::telegram::TypingLease;
pub use dispatcher::{Dispatcher, HostRequest};
pub use menus::{Choices, Models, Projects};
pub use notices::{REPROMPT, STOP_REASON};
pub use outcome::{TurnEvent, TurnOutcome, decide};
/// The report a chat sends when idle; public so a test can send a stale one.
#[doc(hidden)]
pub use supervisor::ChatReport;

//! The chat actors: the [`Dispatcher`], one [`ChatSupervisor`] per chat, one
//! [`TurnActor`] per turn and one [`TypingActor`] per chat; the turn outcome
//! and the chat tools.

pub mod dispatcher;
pub mod notices;
pub mod outcome;
pub mod slots;
pub mod supervisor;
pub mod tools;
pub mod turn;
pub mod typing;

pub use dispatcher::Dispatcher;
pub use notices::{REPROMPT, STOP_REASON};
pub use outcome::{TurnEvent, TurnOutcome, decide};
pub use supervisor::{ChatReport, ChatSupervisor};
pub use tools::{ChatTool, ToolRegistry, bare_tool_name};
pub use turn::{TurnActor, TurnEnded};
pub use typing::TypingActor;

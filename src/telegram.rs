//! Telegram: the [`Intake`] that long-polls updates, the [`Outbox`] every
//! request leaves through, and the formatting that cuts text to the
//! 4096-unit limit ([`format`]).

pub mod addressing;
pub(crate) mod call;
pub mod files;
pub mod format;
pub(crate) mod intake;
pub(crate) mod outbox;

pub use intake::Intake;
pub use outbox::{
    AnswerCallback, Button, CALLBACK_ANSWER_WINDOW, Clear, EditQuestion, Flush, Outbox,
    OutboxError, Purge, QuestionFile, RateLimits, SendFile, SendQuestion, SendText, Show, ShowAs,
    Slot,
};

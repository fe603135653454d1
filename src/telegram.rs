//! Telegram: the [`Intake`] that long-polls updates, the [`Outbox`] every
//! request leaves through, and the formatting that cuts text to the
//! 4096-unit limit ([`format`]); the [`TypingLease`] a turn holds on its
//! chat's typing indicator ([`typing`]). The outbox's requests and the
//! intake's `getUpdates` go through `call` (no pause after a 5xx).

pub mod addressing;
pub(crate) mod call;
pub mod files;
pub mod format;
pub(crate) mod intake;
pub(crate) mod outbox;
pub mod typing;

pub use intake::Intake;
pub use outbox::{
    AnswerCallback, Button, CALLBACK_ANSWER_WINDOW, Clear, EditQuestion, Flush, MAX_IN_FLIGHT,
    Outbox, OutboxError, Purge, QuestionFile, RateLimits, React, SendFile, SendQuestion, SendText,
    SendTyping, Show, ShowAs, Slot, TelegramRefusal, Unreachable,
};
pub use typing::{TypingLease, TypingView};

//! Telegram: the [`Intake`] that long-polls updates, the [`Outbox`] every
//! request leaves through, and text splitting for the 4096-character limit.

pub(crate) mod intake;
pub(crate) mod outbox;
pub mod split;

pub use intake::Intake;
pub use outbox::{Outbox, OutboxError, RateLimits, SendText};

//! Telegram: the [`Intake`] that long-polls updates, the [`Outbox`] every
//! request leaves through, and text splitting for the 4096-character limit.

pub mod intake;
pub mod outbox;
pub mod split;

pub use intake::Intake;
pub use outbox::{Flush, Outbox, OutboxError, RateLimits, React, SendText, SendTyping, StopOutbox};

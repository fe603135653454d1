//! Schedules: prompts that run in a conversation on their slots, durable
//! and exactly once. `when.rs` is the pure part, from an instant to the
//! next slot.

pub mod when;
pub mod words;

pub use when::{Timing, When, WhenError};

//! Schedules: prompts that run in a conversation on their slots, durable
//! and exactly once.
//!
//! - `when.rs`: the pure part, from an instant to a schedule's next slot;
//! - `words.rs`: the timing as the chat and the agent write it;
//! - `notices.rs`: what a schedule tells the chat and its agent;
//! - `book.rs`: [`ScheduleBook`], making, listing and removing a
//!   conversation's schedules within their bounds;
//! - `scheduler.rs`: the [`Scheduler`] actor, one timer to the earliest
//!   slot; a due slot is claimed in the store in the same transaction that
//!   queues its run, then handed to the dispatcher ([`RunDue`]).

pub mod book;
mod notices;
pub mod scheduler;
pub use crate::when;
pub mod words;

pub use book::{Listed, MAX_PER_CONVERSATION, ScheduleBook};
pub use scheduler::{RunDue, Scheduler, StopScheduler};
pub use when::{Timing, When, WhenError};

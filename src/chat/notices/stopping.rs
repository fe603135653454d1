//! What `/stop` and `/new` answer in a chat.

use super::counted;

/// `2 queued messages`, `1 queued message`.
fn queued(n: usize) -> String {
    counted(n, "queued message", "queued messages")
}

/// `/stop` with a turn running; `dropped` messages were queued.
pub fn stopped(dropped: usize) -> String {
    if dropped > 0 {
        format!("⏹ Stopped. {} dropped.", queued(dropped))
    } else {
        "⏹ Stopped.".to_string()
    }
}

/// `/stop` with no turn running but `dropped` queued messages.
pub fn queue_dropped(dropped: usize) -> String {
    format!("⏹ {} dropped.", queued(dropped))
}

/// `/stop` while messages waited out a usage limit: `n` dropped in all.
pub fn retry_cancelled(n: usize) -> String {
    format!(
        "⏹ Stopped: the retry after the usage limit is cancelled ({} dropped).",
        counted(n, "message", "messages")
    )
}

/// `/new`.
pub const FRESH_CONVERSATION: &str = "🆕 The next message starts a fresh conversation.";

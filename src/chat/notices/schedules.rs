//! What `/schedule`, `/schedules` and a ❌ press answer.

/// How `/schedule` is written, for a reply to a bad one.
pub const USAGE: &str = "Write it as:\n/schedule every 2h <prompt>\n/schedule at 09:00 <prompt> (daily)\n/schedule cron \"0 9 * * 1-5\" <prompt>\n/schedule in 30m <prompt> (once)";

/// A `/schedule` that could not be read.
pub fn unreadable(err: &str) -> String {
    format!("⚠️ {err}.\n\n{USAGE}")
}

/// A `/schedule` with no prompt.
pub fn no_prompt() -> String {
    format!("⚠️ What should the agent be asked?\n\n{USAGE}")
}

/// A schedule added.
pub fn scheduled(name: &str, when: &str, next: Option<&str>) -> String {
    format!(
        "⏰ Scheduled {name}: {when}; next run {}. /schedules lists them.",
        next.unwrap_or("never")
    )
}

/// A schedule refused.
pub fn not_scheduled(why: &str) -> String {
    format!("⚠️ Not scheduled: {why}.")
}

/// The mark of a schedule the operator made (none for the chat's own).
pub fn lock(locked: bool) -> &'static str {
    if locked { "🔒 " } else { "" }
}

/// `/schedules`' heading: `own` of at most `max` are the chat's.
pub fn listed(own: usize, max: usize) -> String {
    format!(
        "⏰ Schedules here ({own} of at most {max} of this conversation's own; 🔒 the operator's):"
    )
}

/// The button that removes the schedule `name`, and the answer once it is.
pub fn remove(name: &str) -> String {
    format!("❌ {name}")
}

/// A schedule that could not be removed.
pub fn not_removed(why: &str) -> String {
    format!("⚠️ Not removed: {why}.")
}

/// `/schedules` in a conversation without any.
pub fn none_here() -> String {
    format!("No schedules in this conversation.\n\n{USAGE}")
}

/// The list a schedule was removed from, as it reads afterwards.
pub fn removed_on_list(removed: &str) -> String {
    format!("{removed} /schedules lists the rest.")
}

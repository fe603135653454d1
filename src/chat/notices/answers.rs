//! What the bot answers to a command or a press that it cannot act on, or
//! that it acted on at once: each text once, whoever sends it.

use teloxide::types::UserId;

use super::counted;

/// A press on a question (or any button) no one is waiting for any more.
pub const QUESTION_EXPIRED: &str = "This question has expired.";

/// A press on a list that is no longer the conversation's latest.
pub const LIST_EXPIRED: &str = "This list has expired; ask for it again.";

/// A stranger's press.
pub const NOT_FOR_YOU: &str = "Sorry, this bot only answers the people it was set up for.";

/// `/stop` with no turn running or queued.
pub const NOTHING_TO_STOP: &str = "Nothing to stop.";

/// `/fork` in a conversation without a session.
pub const NOTHING_TO_FORK: &str = "Nothing to fork yet: this conversation has no session.";

/// `/fork` whose new start could not be written.
pub const FORK_NOT_SAVED: &str = "⚠️ The fork could not be saved; try again.";

/// The name of a topic `/new` opens.
pub const NEW_TOPIC_NAME: &str = "🆕 New conversation";

/// The first message in a topic `/new` opened.
pub const NEW_TOPIC_OPENED: &str = "🆕 A fresh conversation: write here.";

/// Where `/new` was asked, once its topic is open.
pub const NEW_TOPIC_ELSEWHERE: &str =
    "🆕 A fresh conversation is open in the new topic; this one goes on as it was.";

/// `/new` asked for a topic and Telegram did not confirm it (no answer, or
/// none came in time): the topic may exist anyway, so the conversation is
/// not started afresh where it is.
pub const NEW_TOPIC_UNCONFIRMED: &str = "⚠️ Telegram did not confirm a new topic. This conversation goes on as it was: if a topic “🆕 New conversation” appeared, write there to start afresh; if not, send /new again.";

/// `/restart` while the bot already stops.
pub const ALREADY_STOPPING: &str = "Already stopping.";

/// What a stranger is told: that the bot is not for them, and their user
/// id, which the operator adds to `access.allowed_users` to let them in.
pub fn refusal(user: UserId) -> String {
    format!(
        "{NOT_FOR_YOU} Your Telegram user id is {}; to be let in, ask the bot's operator to add it to access.allowed_users.",
        user.0
    )
}

/// An admins' command from someone else.
pub fn only_admins(word: &str) -> String {
    format!("Only admins can use /{word}.")
}

/// `/restart` taken: the turns it waits for first.
pub fn restarting(running: usize) -> String {
    if running == 0 {
        "🔄 Restarting.".to_string()
    } else {
        format!(
            "🔄 Restarting; waiting for {} first.",
            counted(running, "running turn", "running turns")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_user_id_after_the_press_answer() {
        let text = refusal(UserId(42));
        assert!(text.starts_with(NOT_FOR_YOU), "{text}");
        assert!(text.contains("user id is 42;"), "{text}");
        assert_eq!(restarting(0), "🔄 Restarting.");
        assert_eq!(
            restarting(2),
            "🔄 Restarting; waiting for 2 running turns first."
        );
    }
}

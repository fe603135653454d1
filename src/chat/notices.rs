//! What the bot tells a chat (and its agent) about a turn, in one place.

mod answers;
pub mod approval;
pub mod handoff;
pub(crate) mod help;
pub mod menus;
pub mod progress;
pub mod recovery;
pub mod schedules;
pub mod settings;
pub mod stopping;
pub mod terminal;

pub use self::answers::{
    ALREADY_STOPPING, FORK_NOT_SAVED, LIST_EXPIRED, NEW_TOPIC_ELSEWHERE, NEW_TOPIC_NAME,
    NEW_TOPIC_OPENED, NEW_TOPIC_UNCONFIRMED, NOT_FOR_YOU, NOTHING_TO_FORK, NOTHING_TO_STOP,
    QUESTION_EXPIRED, only_admins, refusal, restarting,
};
use crate::chat::outcome::TurnOutcome;

/// The text sent when an agent ends with nothing delivered and no text.
pub const REPROMPT: &str = "[turnstile] Your last turn ended without a reply to the user. Reply with the `send` tool, then call `end_turn`.";

/// The stop reason given to the agent after a terminator (it reads it at the
/// start of its next turn).
pub const STOP_REASON: &str =
    "You ended the previous turn with end_turn; the user has seen your reply.";

/// What else the notice at a turn's end depends on, besides its outcome.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ending {
    /// Whether any text of the turn reached the chat.
    pub(crate) replied: bool,
    /// `dispatcher.on_interrupted = "retry"`: a message cut off before it
    /// replied runs again in the next process.
    pub(crate) retry: bool,
    /// The host stops for `/restart` (not for a signal): it comes back.
    pub(crate) restarting: bool,
    /// Whether the agent ever started: a session was open, or the open
    /// failed (then the operator's log says why, not the chat).
    pub(crate) agent_started: bool,
    /// `agent.limit_retry` is on: a turn refused for a usage limit is
    /// parked and tried again (the chat is told that, not this).
    pub(crate) parks: bool,
}

/// Told when the agent could not be started (its executable missing, not
/// executable, its working directory not made): the details are for the
/// operator, in the log.
pub(crate) const AGENT_NOT_STARTED: &str =
    "⚠️ The agent could not start; the operator has been told in the log.";

/// What the chat is told when a turn ends without a reply, or is cut short
/// by the host stopping.
pub(crate) fn notice_for(outcome: &TurnOutcome, ending: Ending) -> Option<String> {
    if let TurnOutcome::HostStopping = outcome {
        return Some(match (ending.restarting, ending.retry && !ending.replied) {
            (true, true) => {
                "⏸ The bot is restarting; your message will be answered once it is back."
            }
            (true, false) => {
                "⚠️ The bot is restarting and this turn was cut short. Send your message again if you still need an answer."
            }
            (false, true) => {
                "⏸ The bot is stopping; your message will be answered when it runs again."
            }
            (false, false) => {
                "⚠️ The bot is stopping and this turn was cut short. Send your message again once it is back if you still need an answer."
            }
        }
        .to_string());
    }
    if let TurnOutcome::Limited { .. } = outcome {
        // Parked and retried (the chat is told so then) unless it replied:
        // a message partly answered is not run again.
        return (!ending.parks || ending.replied).then(|| {
            "⚠️ The model's usage limit was reached, so this answer stops here; send your message again later.".to_string()
        });
    }
    if let TurnOutcome::Unauthenticated { refused, detail } = outcome {
        return Some(unauthenticated(*refused, detail));
    }
    if ending.replied {
        return None;
    }
    let text = match outcome {
        TurnOutcome::AgentFailed { .. } if !ending.agent_started => AGENT_NOT_STARTED.to_string(),
        TurnOutcome::NoProgress => "⚠️ The agent stopped responding, so this turn was ended. Send your message again to retry.".to_string(),
        TurnOutcome::BudgetExceeded => "⚠️ This turn ran past its time budget and was stopped.".to_string(),
        TurnOutcome::ForceClosedAfterResult => "⚠️ The agent finished without a reply and did not close; the turn was ended.".to_string(),
        TurnOutcome::AgentFailed { detail } => format!("⚠️ The agent failed: {}", bounded(detail, 300)),
        TurnOutcome::AgentError { reason } => format!("⚠️ The agent stopped with an error ({reason})."),
        TurnOutcome::Unrecognized { reason } => format!("⚠️ The agent stopped ({reason}) without a reply."),
        _ => return None,
    };
    Some(text)
}

/// Told when the agent could not authenticate: what it said, and what the
/// operator sets (told even after a reply: no later turn can do better).
fn unauthenticated(refused: bool, detail: &str) -> String {
    let what = if refused {
        "The model API refused the agent's credentials"
    } else {
        "The agent is not logged in to its model API"
    };
    format!(
        "⚠️ {what} (it said: “{}”), so it cannot answer. The bot's operator must give it credentials: for Claude Code, set ANTHROPIC_API_KEY (an API key) or CLAUDE_CODE_OAUTH_TOKEN (from `claude setup-token`) in the bot's environment, name it in agent.pass_env, and restart the bot.",
        bounded(detail, 300)
    )
}

/// Told for a message that came while the bot stops (for `/restart` when
/// `restarting`): it was not taken.
pub(crate) fn not_accepted(restarting: bool) -> &'static str {
    if restarting {
        "⚠️ The bot is restarting; this message was not accepted. Send it again in a moment."
    } else {
        "⚠️ The bot is stopping; this message was not accepted. Send it again once it is back."
    }
}

/// Told for a message refused because `waiting` messages fill the chat's
/// queue (`dispatcher.queue_limit`).
pub(crate) fn queue_full(waiting: usize) -> String {
    let waiting = match waiting {
        1 => "1 message is".to_string(),
        n => format!("{n} messages are"),
    };
    format!(
        "⚠️ {waiting} already waiting; this one was not queued. Send it again once I have answered."
    )
}

/// Replies to a message sent again after Telegram did not confirm its
/// first copy, when the chat's message ids cannot rule out that the first
/// copy arrived: the message above may show twice.
pub(crate) const RESENT: &str =
    "↻ Sent again: Telegram did not confirm the first copy of this message, so it may show twice.";

/// Ends a question sent by a later process than the one that asked it
/// (an approval waiting for Telegram when the bot stopped): the request it
/// asked about ended with that process, so it goes without its buttons.
pub(crate) const QUESTION_ENDED: &str = "❌ Not run: turnstile restarted before this question reached the chat, and the request ended with it.";

/// Ends a question an earlier process showed, its buttons waiting, when
/// that process ended (a crash, `kill -9`): the request it asked about
/// ended with it, so its buttons go.
pub(crate) const QUESTION_ENDED_SHOWN: &str =
    "❌ Not run: turnstile restarted while this question waited, and the request ended with it.";

/// Told, once Telegram takes it, when a message of the bot waited longer
/// than `telegram.max_pending_age` and was dropped.
pub(crate) fn undelivered(what: &str, age: std::time::Duration) -> String {
    let age = humantime::format_duration(std::time::Duration::from_secs(age.as_secs()));
    format!("⚠️ Telegram could not be reached for {age}: {what} of mine was dropped unsent.")
}

/// Told when a turn was refused for a usage limit and its messages wait:
/// when they run again (UTC, and how long from now).
pub(crate) fn parked(due: chrono::DateTime<chrono::Utc>, wait: std::time::Duration) -> String {
    let minutes = wait.as_secs().div_ceil(60).max(1);
    let within = if minutes >= 120 && minutes.is_multiple_of(60) {
        format!("{} h", minutes / 60)
    } else if minutes >= 60 {
        format!("{} h {} min", minutes / 60, minutes % 60)
    } else {
        format!("{minutes} min")
    };
    format!(
        "⏳ The model's usage limit was reached. I will try again at {} UTC (in {within}) with your message; /stop cancels.",
        due.format("%H:%M")
    )
}

/// Told when the hard deadline released a chat.
pub(crate) const FORCE_RELEASED: &str = "⚠️ This turn took too long and was ended.";

/// Told when what the chat asked needs the state store, which could not
/// be read.
pub(crate) const STORE_UNREADABLE: &str =
    "⚠️ The bot's state could not be read just now; please try again.";

/// At most `max` characters of `text`.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

/// `n` and the noun that fits it: `counted(1, "chat", "chats")` is
/// `1 chat`, `counted(2, …)` is `2 chats` (and `0 chats`).
pub(crate) fn counted(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// `65536` as `64 KiB`, `1000` as `1000 bytes`.
fn bytes(n: u64) -> String {
    if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} bytes")
    }
}

/// Told once when a turn reaches `turn.max_messages`.
pub(crate) fn too_many_messages(max: u32) -> String {
    format!(
        "⚠️ The agent reached this turn's limit of {max} messages; what it sends next in this turn is not shown."
    )
}

/// Told once when a turn reaches `turn.max_output`.
pub(crate) fn too_much_output(max: u64) -> String {
    format!(
        "⚠️ The agent reached this turn's limit of {} of text; the rest of its output in this turn is not shown.",
        bytes(max)
    )
}

/// What the agent's `send` gets past `turn.max_messages`.
pub(crate) fn messages_refused(max: u32) -> String {
    format!(
        "not sent: this turn already sent {max} messages, the most one turn may send (turn.max_messages). Finish with end_turn; the user can ask for more in a new message."
    )
}

/// What the agent's `send` gets past `turn.max_output`.
pub(crate) fn output_refused(max: u64) -> String {
    format!(
        "not sent: this turn already sent {} of text, the most one turn may send (turn.max_output). Finish with end_turn; the user can ask for more in a new message.",
        bytes(max)
    )
}

/// Closes a text cut at `turn.max_output`.
pub(crate) const CUT_MARK: &str = "\n\n[…]";

/// Told to the chat when its agent made a schedule: the agent is not
/// trusted, so nothing it sets to run later runs unseen.
pub fn agent_scheduled(name: &str, when: &str, prompt: &str) -> String {
    format!(
        "⏰ The agent made schedule {name} ({when}): {prompt}\n/schedules lists this conversation's schedules, each with a ❌ to remove it."
    )
}

/// Told to the chat when its agent removed one of its schedules.
pub fn agent_unscheduled(id: i64) -> String {
    format!("⏰ The agent removed schedule #{id}.")
}

/// The reaction on a steered message once the agent has read it.
pub const READ_MARK: &str = "👀";

/// Told to the chat that asked for `/restart` once the new process runs.
pub const RESTARTED: &str = "✅ Restarted.";

/// Told to the chat when a file it sent could not be fetched.
pub(crate) fn file_not_received(kind: &str, shown: &str, err: impl std::fmt::Display) -> String {
    format!("⚠️ The {kind}{shown} was not received: {err}.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_the_singular_only_for_one() {
        assert_eq!(counted(0, "chat", "chats"), "0 chats");
        assert_eq!(counted(1, "chat", "chats"), "1 chat");
        assert!(queue_full(1).starts_with("⚠️ 1 message is already waiting;"));
        assert!(queue_full(3).starts_with("⚠️ 3 messages are already waiting;"));
        assert_eq!(
            counted(2, "queued message", "queued messages"),
            "2 queued messages"
        );
    }

    #[test]
    fn a_stop_says_stopping_and_a_restart_says_restarting() {
        for (retry, replied) in [(false, false), (true, false), (true, true)] {
            let ending = Ending {
                replied,
                retry,
                ..Ending::default()
            };
            let stop = notice_for(&TurnOutcome::HostStopping, ending).unwrap_or_default();
            assert!(
                stop.contains("stopping") && !stop.contains("restart"),
                "{stop}"
            );
            let restart = Ending {
                restarting: true,
                ..ending
            };
            let restart = notice_for(&TurnOutcome::HostStopping, restart).unwrap_or_default();
            assert!(restart.contains("restarting"), "{restart}");
        }
        assert!(
            not_accepted(false).contains("stopping")
                && !not_accepted(false).contains("in a moment")
        );
        assert!(not_accepted(true).contains("restarting"));
    }

    #[test]
    fn an_agent_that_never_started_is_told_plainly() {
        let failed = TurnOutcome::AgentFailed {
            detail:
                "could not start the agent: /nowhere/claude: No such file or directory (os error 2)"
                    .into(),
        };
        let ending = Ending::default();
        assert_eq!(
            notice_for(&failed, ending).as_deref(),
            Some(AGENT_NOT_STARTED)
        );
        let started = Ending {
            agent_started: true,
            ..ending
        };
        let told = notice_for(&failed, started).unwrap_or_default();
        assert!(told.starts_with("⚠️ The agent failed:"), "{told}");
    }
}

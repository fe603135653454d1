//! What the bot tells a chat (and its agent) about a turn, in one place.

use crate::chat::outcome::TurnOutcome;

/// The text sent when an agent ends with nothing delivered and no text.
pub const REPROMPT: &str = "[turnstile] Your last turn ended without a reply to the user. Reply with the `send` tool, then call `end_turn`.";

/// The stop reason given to the agent after a terminator (it reads it at the
/// start of its next turn).
pub const STOP_REASON: &str =
    "You ended the previous turn with end_turn; the user has seen your reply.";

/// What the chat is told when a turn ends without a reply.
pub(crate) fn notice_for(outcome: &TurnOutcome, replied: bool, retry: bool) -> Option<String> {
    if let TurnOutcome::HostStopping = outcome {
        return Some(if retry && !replied {
            "⏸ The bot is restarting; your message will be answered once it is back.".to_string()
        } else {
            "⚠️ The bot is restarting and this turn was cut short. Send your message again if you still need an answer.".to_string()
        });
    }
    if replied {
        return None;
    }
    let text = match outcome {
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

/// Told when the hard deadline released a chat.
pub(crate) const FORCE_RELEASED: &str = "⚠️ This turn took too long and was ended.";

/// At most `max` characters of `text`.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
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

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

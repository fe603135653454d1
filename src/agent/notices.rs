//! What an agent's driver tells the chat in front of an answer. (The
//! chat's own notices are `chat::notices`; the agent sits below the chat
//! and cannot reach them.)

/// Told in front of the answer when the stored conversation could not be
/// loaded.
pub(crate) const NOT_RESUMED: &str =
    "ℹ️ The earlier conversation could not be resumed; this is a new one.";

/// Told in front of the answer when the agent cannot load sessions at all.
pub(crate) const CANNOT_RESUME: &str =
    "ℹ️ This agent cannot resume an earlier conversation; this is a new one.";

/// `/handoff`'s way into the Claude Code CLI itself: `command`, the whole
/// command line that resumes the conversation's session.
pub(crate) fn resume_in_claude_code(command: &str) -> String {
    format!(
        "Or work in Claude Code itself, in the same session (what you do there is here when the chat takes it back):\n{command}"
    )
}

/// `/handoff`, when the stored session is not one the Claude Code CLI can
/// resume (`why`).
pub(crate) fn claude_cannot_resume(why: &str) -> String {
    format!(
        "Claude Code cannot resume this session from a terminal ({why}); go on through turnstile attach."
    )
}

/// `/handoff`, for an agent with no command of its own that resumes the
/// conversation's session outside the bot.
pub(crate) const ONLY_THROUGH_ATTACH: &str = "This agent offers no command of its own that resumes this session outside the bot: it goes on only through turnstile attach.";

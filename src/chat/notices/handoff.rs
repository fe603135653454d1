//! What the chat is told of `/handoff`: how to go on at the host, and
//! when the chat takes the conversation back.

/// The `turnstile attach` command that follows the conversation `key` at
/// the host; `config`, the bot's config file as a shell word, when it was
/// started with one.
pub fn attach_command(config: Option<&str>, key: &str) -> String {
    match config {
        Some(file) => format!("turnstile attach --config {file} {key}"),
        None => format!("turnstile attach {key}"),
    }
}

/// The answer to `/handoff`: `attach`, the command that follows the
/// conversation; `own`, how to go on in the agent's own program (its
/// backend's words).
pub fn handed_off(attach: &str, own: &str) -> String {
    format!(
        "🖥 Handed off to the host: the bot holds no agent process of this conversation now, and no schedule runs here until it is back. The next message here takes it back and goes on from what was done at the host.\n\nFollow it in a terminal:\n{attach}\n\n{own}"
    )
}

/// The answer to `/handoff` in a conversation with no agent session yet.
pub fn nothing_yet(attach: &str) -> String {
    format!(
        "ℹ️ Nothing to hand off yet: this conversation has no agent session. Follow it in a terminal:\n{attach}"
    )
}

/// `/handoff` while a turn runs or its agent finishes, or a message
/// waits for one.
pub const BUSY: &str = "⏳ A turn is under way here (or its agent is finishing, or a message waits for one): wait for it to end, or /stop it, then /handoff again. A session never has two writers.";

/// Told before the turn of the message that took the conversation back.
pub const TAKEN_BACK: &str =
    "↩️ Taken back from the host: this conversation goes on here, in the same session.";

/// A schedule's run that came while the conversation was handed off.
pub const SCHEDULE_SKIPPED: &str = "⏭ A scheduled run was skipped: this conversation is handed off to the host. A message here takes it back.";

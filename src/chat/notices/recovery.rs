//! What a chat is told about a message the previous process did not finish.

/// The previous process was answering `excerpt` when it stopped.
pub fn cut_while_answering(excerpt: &str) -> String {
    format!(
        "⚠️ turnstile restarted while answering “{excerpt}”; the answer above may be incomplete. Send it again if you need more."
    )
}

/// The previous process stopped before it answered `excerpt`.
pub fn cut_before_answering(excerpt: &str) -> String {
    format!(
        "⚠️ turnstile restarted before it could answer “{excerpt}”. Send it again if you still need an answer."
    )
}

//! What the chat is told of `turnstile attach`.

/// A line the operator typed at the host, shown in the chat before the
/// agent reads it.
pub fn typed(text: &str) -> String {
    format!("⌨️ From the terminal: {text}")
}

/// Who decided a question answered at the terminal, as the question shows
/// it ("✅ Allowed by the operator, decided at the terminal").
pub const OPERATOR: &str = "the operator, decided at the terminal";

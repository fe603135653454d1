//! What the chat is told of `turnstile attach`.

/// A line the operator typed at the host, shown in the chat before the
/// agent reads it.
pub fn typed(text: &str) -> String {
    format!("⌨️ From the terminal: {text}")
}

//! STUB (replaced by the format branch at merge): plain text only.

pub use teloxide::types::{MessageEntity, MessageEntityKind};

use crate::telegram::split::{TELEGRAM_TEXT_LIMIT, split_message};

/// Text as Telegram shows it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rendered {
    /// The text.
    pub text: String,
    /// Its entities.
    pub entities: Vec<MessageEntity>,
}

impl Rendered {
    /// Plain text.
    pub fn plain(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            entities: Vec::new(),
        }
    }
    /// UTF-16 length.
    pub fn units(&self) -> usize {
        self.text.encode_utf16().count()
    }
}

/// Stub.
pub fn render(markdown: &str) -> Rendered {
    Rendered::plain(markdown)
}

/// Stub.
pub fn split(rendered: &Rendered, limit: usize) -> Vec<Rendered> {
    split_message(&rendered.text, limit)
        .into_iter()
        .map(Rendered::plain)
        .collect()
}

/// Stub.
pub fn pieces(markdown: &str) -> Vec<Rendered> {
    split(&render(markdown), TELEGRAM_TEXT_LIMIT)
}

/// Stub.
pub fn validate(_text: &str, _entities: &[MessageEntity]) -> Result<(), String> {
    Ok(())
}

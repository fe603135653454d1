//! Telegram-native formatting: the agent's Markdown rendered to plain text
//! plus message entities (no `parse_mode`, so nothing can fail to parse),
//! split into messages that fit [`TELEGRAM_TEXT_LIMIT`] with the entities
//! sliced along, and a validator of Telegram's entity rules.
//!
//! All offsets and lengths are in UTF-16 code units, as Telegram counts them.

mod render;
mod split;
mod validate;

pub use teloxide::types::{MessageEntity, MessageEntityKind};

pub use render::render;
pub use split::split;
pub use validate::validate;

/// The longest text message Telegram takes, in UTF-16 code units (an emoji
/// outside the Basic Multilingual Plane counts twice).
pub const TELEGRAM_TEXT_LIMIT: usize = 4096;

/// Text as Telegram shows it: plain text plus entities (UTF-16 offsets/lengths).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rendered {
    pub text: String,
    pub entities: Vec<MessageEntity>,
}

impl Rendered {
    /// `text` with no entities.
    pub fn plain(text: impl Into<String>) -> Self {
        Rendered {
            text: text.into(),
            entities: Vec::new(),
        }
    }

    /// Length of the text in UTF-16 code units.
    pub fn units(&self) -> usize {
        units(&self.text)
    }
}

/// The agent's Markdown rendered and split at [`TELEGRAM_TEXT_LIMIT`].
pub fn pieces(markdown: &str) -> Vec<Rendered> {
    split(&render(markdown), TELEGRAM_TEXT_LIMIT)
}

/// Length of `s` in UTF-16 code units.
pub(crate) fn units(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Schemes a `text_link` may use (the ones Telegram opens from a link).
const LINK_SCHEMES: [&str; 6] = ["http", "https", "tg", "ton", "tonsite", "ftp"];

/// Why `url` may not be the target of a `text_link`, if it may not.
fn link_url_problem(url: &reqwest::Url) -> Option<String> {
    let scheme = url.scheme();
    if !LINK_SCHEMES.contains(&scheme) {
        return Some(format!("unsupported URL scheme \"{scheme}\""));
    }
    let needs_host = matches!(scheme, "http" | "https" | "ftp");
    if needs_host && url.host_str().is_none_or(str::is_empty) {
        return Some("URL host is empty".into());
    }
    None
}

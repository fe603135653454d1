//! Which messages are for this bot. In a private chat, every message but a
//! command addressed to another bot. In a group or supergroup with
//! `access.group_mode = "mention"`, only a message that mentions the bot,
//! replies to one of its messages, or is a command addressed to it (`/cmd`
//! or `/cmd@ThisBot`); with `"all"`, every message. `/cmd@OtherBot` is never
//! taken. The intake applies this before a message is written to the inbox,
//! so a message not for the bot reaches no agent, not even after a crash.

use std::collections::VecDeque;

use teloxide::types::{Message, MessageEntityKind, UserId};

pub use crate::config::GroupMode;

/// The bot as Telegram's `getMe` described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotIdentity {
    /// Its user id.
    pub id: UserId,
    /// Its username, without the `@`.
    pub username: String,
}

/// How many recent albums are remembered, so an album whose caption
/// addressed the bot brings its other items too.
const ALBUMS_REMEMBERED: usize = 64;

/// Decides which messages are for this bot.
#[derive(Debug, Clone)]
pub struct Addressing {
    me: BotIdentity,
    mode: GroupMode,
    /// Albums (media group ids) taken lately.
    albums: VecDeque<String>,
}

/// Why a message is not for the bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotForUs {
    /// A command addressed to another bot.
    OtherBotsCommand,
    /// A group message that neither mentions nor answers the bot.
    NotAddressed,
}

impl Addressing {
    /// Addressing for the bot `me`.
    pub fn new(me: BotIdentity, mode: GroupMode) -> Self {
        Self {
            me,
            mode,
            albums: VecDeque::new(),
        }
    }

    /// The bot's identity.
    pub fn me(&self) -> &BotIdentity {
        &self.me
    }

    /// Whether `message` is for the bot.
    pub fn check(&mut self, message: &Message) -> Result<(), NotForUs> {
        let text = message.text().or(message.caption()).unwrap_or("");
        if let Some(to) = command_target(text) {
            return if to.eq_ignore_ascii_case(&self.me.username) {
                Ok(())
            } else {
                Err(NotForUs::OtherBotsCommand)
            };
        }
        let group = message.chat.is_group() || message.chat.is_supergroup();
        if !group || self.mode == GroupMode::All {
            return Ok(());
        }
        let album = message.media_group_id().map(|g| g.0.clone());
        if let Some(album) = &album
            && self.albums.contains(album)
        {
            return Ok(());
        }
        let addressed =
            text.starts_with('/') || self.mentions_me(message) || self.answers_me(message);
        if !addressed {
            return Err(NotForUs::NotAddressed);
        }
        if let Some(album) = album {
            if self.albums.len() >= ALBUMS_REMEMBERED {
                self.albums.pop_front();
            }
            self.albums.push_back(album);
        }
        Ok(())
    }

    fn mentions_me(&self, message: &Message) -> bool {
        let mention = format!("@{}", self.me.username);
        let by_entity = message
            .parse_entities()
            .or_else(|| message.parse_caption_entities())
            .unwrap_or_default()
            .iter()
            .any(|e| match e.kind() {
                MessageEntityKind::Mention => e.text().eq_ignore_ascii_case(&mention),
                MessageEntityKind::TextMention { user } => user.id == self.me.id,
                _ => false,
            });
        by_entity
            || message
                .text()
                .or(message.caption())
                .unwrap_or("")
                .split(|c: char| c.is_whitespace() || matches!(c, ',' | ':' | '!' | '?'))
                .any(|word| word.eq_ignore_ascii_case(&mention))
    }

    fn answers_me(&self, message: &Message) -> bool {
        let Some(replied) = message.reply_to_message() else {
            return false;
        };
        // In a forum topic every message "replies" to the topic's first
        // message; that is not an answer to the bot.
        if message.is_topic_message && message.thread_id.is_some_and(|t| t.0 == replied.id) {
            return false;
        }
        replied.from.as_ref().is_some_and(|u| u.id == self.me.id)
    }
}

/// The bot a command names (`/cmd@Name` → `Name`), when it names one.
fn command_target(text: &str) -> Option<&str> {
    let word = text.strip_prefix('/')?.split(char::is_whitespace).next()?;
    let (_, to) = word.split_once('@')?;
    Some(to)
}

/// The text with a leading mention of the bot taken off (`@ThisBot hi` →
/// `hi`), and a command's `@ThisBot` suffix dropped.
pub fn strip_address<'a>(text: &'a str, username: &str) -> std::borrow::Cow<'a, str> {
    let mention = format!("@{username}");
    let trimmed = text.trim_start();
    if trimmed.len() >= mention.len()
        && trimmed.is_char_boundary(mention.len())
        && trimmed[..mention.len()].eq_ignore_ascii_case(&mention)
    {
        let rest = trimmed[mention.len()..]
            .trim_start_matches([',', ':'])
            .trim_start();
        if !rest.is_empty() {
            return rest.into();
        }
    }
    if let Some(word) = text
        .strip_prefix('/')
        .and_then(|t| t.split(char::is_whitespace).next())
        && let Some((cmd, to)) = word.split_once('@')
        && to.eq_ignore_ascii_case(username)
    {
        let rest = &text[1 + word.len()..];
        return format!("/{cmd}{rest}").into();
    }
    text.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_targets_are_read_from_the_first_word() {
        assert_eq!(command_target("/restart@OtherBot now"), Some("OtherBot"));
        assert_eq!(command_target("/restart"), None);
        assert_eq!(command_target("hi /x@y"), None);
        assert_eq!(command_target("/@"), Some(""));
    }

    #[test]
    fn the_address_is_stripped() {
        assert_eq!(strip_address("@TurnBot hello", "turnbot"), "hello");
        assert_eq!(strip_address("@turnbot: hello", "TurnBot"), "hello");
        assert_eq!(strip_address("@turnbot", "TurnBot"), "@turnbot");
        assert_eq!(strip_address("/stop@TurnBot now", "TurnBot"), "/stop now");
        assert_eq!(strip_address("/stop@Other", "TurnBot"), "/stop@Other");
        assert_eq!(strip_address("ask @TurnBot", "TurnBot"), "ask @TurnBot");
        assert_eq!(strip_address("@TurnBo😀", "TurnBot"), "@TurnBo😀");
    }
}

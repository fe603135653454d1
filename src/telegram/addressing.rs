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
use crate::incoming::Head;

/// The bot as Telegram's `getMe` described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotIdentity {
    /// Its user id.
    pub id: UserId,
    /// Its username, without the `@`.
    pub username: String,
    /// Which topics it takes as conversations (private ones with its
    /// topics mode on).
    pub topics: crate::ids::Topics,
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
        if let Some(head) = Head::of(text).filter(|head| head.to.is_some()) {
            return if head.for_another_bot(&self.me.username) {
                Err(NotForUs::OtherBotsCommand)
            } else {
                Ok(())
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
        // Telegram's offsets are read with checked slicing: an entity out
        // of the text or splitting a surrogate pair names nothing (teloxide's
        // `parse_entities` would panic on it).
        let by_entity = [
            (message.text(), message.entities()),
            (message.caption(), message.caption_entities()),
        ]
        .into_iter()
        .filter_map(|(text, entities)| Some((text?, entities?)))
        .any(|(text, entities)| {
            entities.iter().any(|e| match &e.kind {
                MessageEntityKind::Mention => entity_text(text, e.offset, e.length)
                    .is_some_and(|named| named.eq_ignore_ascii_case(&mention)),
                MessageEntityKind::TextMention { user } => user.id == self.me.id,
                _ => false,
            })
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

/// The part of `text` an entity covers, its `offset` and `length` in UTF-16
/// units as Telegram counts them; `None` when it reaches past the end or
/// either end falls inside a surrogate pair.
pub fn entity_text(text: &str, offset: usize, length: usize) -> Option<&str> {
    let end = offset.checked_add(length)?;
    let mut start = None;
    let mut units = 0;
    for (byte, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), '\0')))
    {
        if units == offset {
            start = Some(byte);
        }
        if units == end {
            return text.get(start?..byte);
        }
        if units > end {
            return None;
        }
        units += c.len_utf16();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entity_is_read_by_utf16_units_and_never_past_the_text() {
        // "😀" is two UTF-16 units (a surrogate pair), "é" one.
        let text = "😀 é @bot!";
        assert_eq!(entity_text(text, 5, 4), Some("@bot"));
        assert_eq!(entity_text(text, 0, 2), Some("😀"));
        assert_eq!(entity_text(text, 0, 0), Some(""));
        assert_eq!(entity_text(text, 10, 0), Some(""), "the very end");
        assert_eq!(entity_text(text, 0, 10), Some(text));
        // Inside the surrogate pair, at either end.
        assert_eq!(entity_text(text, 1, 3), None);
        assert_eq!(entity_text(text, 0, 1), None);
        // Past the end.
        assert_eq!(entity_text(text, 5, 6), None);
        assert_eq!(entity_text(text, 11, 0), None);
        assert_eq!(entity_text(text, usize::MAX, 1), None);
        assert_eq!(entity_text(text, 1, usize::MAX), None);
        assert_eq!(entity_text("", 0, 0), Some(""));
        assert_eq!(entity_text("", 0, 1), None);
    }

    fn addressing() -> Addressing {
        let me = BotIdentity {
            id: UserId(1),
            username: "turnbot".into(),
            topics: crate::ids::Topics::default(),
        };
        Addressing::new(me, GroupMode::Mention)
    }

    /// A group message with these fields besides chat, sender and date.
    fn group_message(fields: serde_json::Value) -> Message {
        let mut message = serde_json::json!({
            "message_id": 1, "date": 0,
            "chat": {"id": -100, "type": "supergroup", "title": "g"},
            "from": {"id": 5, "is_bot": false, "first_name": "a"},
        });
        for (key, value) in fields.as_object().expect("fields").clone() {
            message[key] = value;
        }
        serde_json::from_value(message).expect("a message")
    }

    #[test]
    fn entities_out_of_bounds_or_inside_a_surrogate_pair_name_nobody() {
        let mut a = addressing();
        let bad = serde_json::json!([
            {"type": "mention", "offset": 1, "length": 8},
            {"type": "mention", "offset": 40, "length": 8},
            {"type": "bold", "offset": 3, "length": 90},
        ]);
        let text = group_message(serde_json::json!({"text": "😀😀 hello", "entities": bad}));
        assert_eq!(a.check(&text), Err(NotForUs::NotAddressed));
        // The mention in the words is still seen, in a text or a caption.
        let text = group_message(serde_json::json!({"text": "😀 @turnbot hi", "entities": bad}));
        assert_eq!(a.check(&text), Ok(()));
        let caption = group_message(serde_json::json!({
            "photo": [{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1, "file_size": 1}],
            "caption": "😀 @turnbot hi", "caption_entities": bad,
        }));
        assert_eq!(a.check(&caption), Ok(()));
        // A well-placed mention entity after a surrogate pair is read.
        let good = serde_json::json!([{"type": "mention", "offset": 3, "length": 8}]);
        let text = group_message(serde_json::json!({"text": "😀 @TurnBot's hi", "entities": good}));
        assert_eq!(a.check(&text), Ok(()));
    }

    #[test]
    fn a_command_for_another_bot_is_never_taken_and_one_for_this_bot_always_is() {
        let mut a = addressing();
        let text = |t: &str| group_message(serde_json::json!({ "text": t }));
        for other in ["/stop@OtherBot", "/stop@OtherBot now", "/😀@x", "/@"] {
            assert_eq!(
                a.check(&text(other)),
                Err(NotForUs::OtherBotsCommand),
                "{other}"
            );
        }
        for mine in ["/stop@TURNBOT", "/stop@turnbot now", "/stop", "/x@turnbot"] {
            assert_eq!(a.check(&text(mine)), Ok(()), "{mine}");
        }
    }
}

//! Identifiers that travel between actors. Chats and users are teloxide's
//! own [`ChatId`](teloxide::types::ChatId) and [`UserId`](teloxide::types::UserId);
//! turns are numbered by `state::TurnIds`.

/// A turn, numbered on across the processes that ran on one state file
/// (`state::TurnIds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TurnId(pub u64);

impl TurnId {
    /// The number, for logs and the state file.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for TurnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq<u64> for TurnId {
    fn eq(&self, other: &u64) -> bool {
        self.0 == *other
    }
}

impl From<u64> for TurnId {
    fn from(n: u64) -> Self {
        Self(n)
    }
}

/// One conversation: a chat, or one forum topic of a chat. Each has its own
/// supervisor, queue, agent session and working directory; its messages,
/// typing and questions go to its topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conversation {
    /// The chat.
    pub chat: teloxide::types::ChatId,
    /// The forum topic (`message_thread_id`), when the chat is a forum and
    /// the message was in a topic other than General.
    pub topic: Option<teloxide::types::ThreadId>,
}

impl Conversation {
    /// A conversation in `chat`, in `topic` when given.
    pub fn new(chat: teloxide::types::ChatId, topic: Option<teloxide::types::ThreadId>) -> Self {
        Self { chat, topic }
    }

    /// The topic's number, 0 for none (the state file's key).
    pub fn topic_number(self) -> i64 {
        self.topic.map_or(0, |t| i64::from(t.0.0))
    }

    /// The name of its working directory: the chat id, then `_` and the
    /// topic number in a topic (`-1001234_42`).
    pub fn key(self) -> String {
        match self.topic {
            Some(t) => format!("{}_{}", self.chat.0, t.0.0),
            None => self.chat.0.to_string(),
        }
    }

    /// The conversation a [`key`](Self::key) names: a chat id, then `_`
    /// and a positive topic number in a topic; `None` for anything else.
    pub fn from_key(key: &str) -> Option<Self> {
        let (chat, topic) = match key.rsplit_once('_') {
            Some((chat, topic)) => (chat, Some(topic.parse::<i32>().ok().filter(|t| *t > 0)?)),
            None => (key, None),
        };
        let chat = teloxide::types::ChatId(chat.parse().ok()?);
        let topic = topic.map(|t| teloxide::types::ThreadId(teloxide::types::MessageId(t)));
        Some(Self::new(chat, topic))
    }
}

/// Which topics of a chat the bot takes as conversations of their own. A
/// topic id comes from Telegram and is taken only where topics can be: in
/// a group, a message that says it is in a forum topic; in a private chat,
/// the same, and only while the bot's topics mode is on (`getMe`'s
/// `has_topics_enabled`, set in BotFather). Anything else (a reply thread,
/// a number that is not positive, a topic in a private chat with the mode
/// off) is the chat itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Topics {
    /// Whether private chats with the bot have topics.
    pub private: bool,
}

impl Topics {
    /// The topic of a message in `chat` carrying `thread` as its
    /// `message_thread_id` and `in_topic` as its `is_topic_message`.
    pub fn of(
        self,
        chat: teloxide::types::ChatId,
        thread: Option<teloxide::types::ThreadId>,
        in_topic: bool,
    ) -> Option<teloxide::types::ThreadId> {
        let thread = thread.filter(|t| in_topic && t.0.0 > 0)?;
        // Private chats have positive ids (the user's), groups negative.
        (chat.0 < 0 || self.private).then_some(thread)
    }

    /// Where a conversation an earlier run stored (a queued message, a
    /// schedule) goes now: a topic of a private chat while the bot's
    /// topics mode is off is the chat itself (Telegram has no topic there
    /// to send to); anything else is as it was.
    pub fn now(self, to: Conversation) -> Conversation {
        match to.topic {
            Some(_) if to.chat.0 > 0 && !self.private => Conversation::from(to.chat),
            _ => to,
        }
    }
}

impl From<teloxide::types::ChatId> for Conversation {
    fn from(chat: teloxide::types::ChatId) -> Self {
        Self { chat, topic: None }
    }
}

impl std::fmt::Display for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.key())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_key_reads_back_as_its_conversation_and_nothing_else_reads() {
        let topic = Some(ThreadId(MessageId(42)));
        for to in [
            Conversation::new(ChatId(7), None),
            Conversation::new(ChatId(-1_001_234), None),
            Conversation::new(ChatId(7), topic),
            Conversation::new(ChatId(-1_001_234), topic),
        ] {
            assert_eq!(Conversation::from_key(&to.key()), Some(to), "{to}");
        }
        for bad in [
            "",
            "x",
            "7_",
            "7_0",
            "7_-3",
            "7_x",
            "_5",
            "7_5_6",
            "99999999999999999999",
        ] {
            assert_eq!(Conversation::from_key(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_stored_private_topic_is_the_chat_itself_while_the_mode_is_off() {
        let topic = Some(ThreadId(MessageId(42)));
        let (on, off) = (Topics { private: true }, Topics { private: false });
        let private = Conversation::new(ChatId(7), topic);
        let group = Conversation::new(ChatId(-1_001_234), topic);
        assert_eq!(on.now(private), private);
        assert_eq!(off.now(private), Conversation::new(ChatId(7), None));
        assert_eq!(off.now(group), group, "a forum's topics stay");
        assert_eq!(off.now(ChatId(7).into()), ChatId(7).into());
    }

    use teloxide::types::{ChatId, MessageId, ThreadId};

    use super::{Conversation, Topics};

    #[test]
    fn a_topic_is_taken_where_topics_can_be() {
        let t = |n| Some(ThreadId(MessageId(n)));
        let (on, off) = (Topics { private: true }, Topics { private: false });
        let (group, private) = (ChatId(-100), ChatId(42));
        let rows = [
            (on, group, t(7), true, t(7)),
            (off, group, t(7), true, t(7)),
            (on, private, t(7), true, t(7)),
            (off, private, t(7), true, None),
            (on, private, t(7), false, None),
            (on, group, t(7), false, None),
            (on, private, t(0), true, None),
            (on, private, t(-3), true, None),
            (on, group, t(-3), true, None),
            (on, private, None, true, None),
        ];
        for (topics, chat, thread, in_topic, taken) in rows {
            assert_eq!(
                topics.of(chat, thread, in_topic),
                taken,
                "{topics:?} {chat} {thread:?} {in_topic}"
            );
        }
    }
}

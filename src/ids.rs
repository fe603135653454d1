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

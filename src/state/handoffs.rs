//! Conversations handed off to the host (`/handoff`): while a row is
//! here, the bot holds no agent process of the conversation (none kept
//! warm, none prewarmed, no schedule's run), since the operator goes on
//! with the same session in a terminal. The next message takes the row.

use rusqlite::params;
use teloxide::types::{ChatId, MessageId, ThreadId};

use super::{StateError, Store, now_ms};
use crate::ids::Conversation;

/// The migration this file's table comes with (schema 16 → 17); listed in
/// `schema.rs`.
pub(super) const MIGRATION: &str = "CREATE TABLE handoffs (
        chat_id    INTEGER NOT NULL,
        topic      INTEGER NOT NULL,
        session_id TEXT NOT NULL,
        handed_at  INTEGER NOT NULL,
        PRIMARY KEY (chat_id, topic)
     );";

/// A conversation handed off to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandedOff {
    /// The conversation.
    pub to: Conversation,
    /// The agent session it was handed off with.
    pub session: String,
}

impl Store {
    /// Hands `to` off to the host with its session `session`.
    pub fn hand_off(&self, to: Conversation, session: &str) -> Result<(), StateError> {
        self.lock()
            .prepare_cached(
                "INSERT INTO handoffs (chat_id, topic, session_id, handed_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(chat_id, topic) DO UPDATE
                 SET session_id = excluded.session_id, handed_at = excluded.handed_at",
            )?
            .execute(params![to.chat.0, to.topic_number(), session, now_ms()])?;
        Ok(())
    }

    /// Takes `to` back from the host: `true` when it was handed off.
    pub fn take_back(&self, to: Conversation) -> Result<bool, StateError> {
        let taken = self
            .lock()
            .prepare_cached("DELETE FROM handoffs WHERE chat_id = ?1 AND topic = ?2")?
            .execute(params![to.chat.0, to.topic_number()])?;
        Ok(taken > 0)
    }

    /// Every conversation handed off to the host, the earliest first.
    pub fn handoffs(&self) -> Result<Vec<HandedOff>, StateError> {
        let conn = self.lock();
        let mut query = conn.prepare_cached(
            "SELECT chat_id, topic, session_id FROM handoffs ORDER BY handed_at, rowid",
        )?;
        let rows = query.query_map([], |r| {
            let topic = i32::try_from(r.get::<_, i64>(1)?).unwrap_or(0);
            let topic = (topic > 0).then_some(ThreadId(MessageId(topic)));
            Ok(HandedOff {
                to: Conversation::new(ChatId(r.get(0)?), topic),
                session: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use teloxide::types::{ChatId, MessageId, ThreadId};

    use super::super::Store;
    use crate::ids::Conversation;

    #[test]
    fn a_handoff_is_kept_until_taken_back_once() {
        let store = Store::in_memory().expect("store");
        let topic = Conversation::new(ChatId(-7), Some(ThreadId(MessageId(3))));
        let main = Conversation::new(ChatId(-7), None);
        store.hand_off(topic, "s-1").expect("write");
        store.hand_off(topic, "s-2").expect("write again");
        let kept = store.handoffs().expect("read");
        assert_eq!(kept.len(), 1, "one row per conversation: {kept:?}");
        assert_eq!((kept[0].to, kept[0].session.as_str()), (topic, "s-2"));
        assert!(!store.take_back(main).expect("delete"), "never handed off");
        assert!(store.take_back(topic).expect("delete"));
        assert!(!store.take_back(topic).expect("delete"), "taken back once");
        assert!(store.handoffs().expect("read").is_empty());
    }
}

//! Topics of a private chat that wait for a name, and a past session
//! opened in a topic of its own (`/sessions` in a private chat with
//! topics).
//!
//! A topic the bot opened (`/new`, `/fork`, `/sessions`), or one the user
//! started without a title, has a row in `unnamed_topics` until its first
//! answer is out; then the row is taken and the topic named once. A topic
//! the user named, or renamed meanwhile, has none, so it is never renamed;
//! the row outlives a restart, so a topic is named once across them.

use rusqlite::{OptionalExtension, params};

use super::{StateError, Store, now_ms};
use crate::ids::Conversation;

/// The migration this file's table comes with (schema 15 → 16); listed in
/// `schema.rs`.
pub(super) const MIGRATION: &str = "CREATE TABLE unnamed_topics (
        chat_id    INTEGER NOT NULL,
        topic      INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (chat_id, topic)
     );";

impl Store {
    /// `to` (a topic) waits for a name from its first message.
    pub fn await_name(&self, to: Conversation) -> Result<(), StateError> {
        if to.topic.is_none() {
            return Ok(());
        }
        self.lock()
            .prepare_cached(
                "INSERT OR IGNORE INTO unnamed_topics (chat_id, topic, created_at) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![to.chat.0, to.topic_number(), now_ms()])?;
        Ok(())
    }

    /// Takes `to`'s wait for a name: `true` when it waited (it is to be
    /// named now, and never again), `false` when it never did or was
    /// named already.
    pub fn take_unnamed(&self, to: Conversation) -> Result<bool, StateError> {
        let taken = self
            .lock()
            .prepare_cached("DELETE FROM unnamed_topics WHERE chat_id = ?1 AND topic = ?2")?
            .execute(params![to.chat.0, to.topic_number()])?;
        Ok(taken > 0)
    }

    /// Opens `from`'s session `id` in `into` (a new topic): `into`'s first
    /// turn resumes it, with `from`'s model and project. A past session
    /// moves there (`from`'s list no longer offers it, so one session never
    /// runs in two conversations); `from`'s current one is copied, as a
    /// fork, and `from` goes on with it. Answers the session's first words,
    /// or `None` when it is not one of `from`'s.
    pub fn open_in(
        &self,
        from: Conversation,
        into: Conversation,
        id: &str,
    ) -> Result<Option<String>, StateError> {
        if self.session(from)?.as_deref() == Some(id) {
            return self.fork(from, into);
        }
        let project = self.project(from)?;
        let (chat, topic) = (from.chat.0, from.topic_number());
        let words: Option<String> = self
            .lock()
            .query_row(
                "SELECT first_words FROM session_history
                 WHERE chat_id = ?1 AND topic = ?2 AND session_id = ?3 AND project = ?4",
                params![chat, topic, id, project],
                |r| r.get(0),
            )
            .optional()?;
        let Some(words) = words else {
            return Ok(None);
        };
        let model = self.model(from)?;
        self.set_model(into, model.as_deref())?;
        self.set_project(into, &project)?;
        let mut conn = self.lock();
        let tx = conn.savepoint()?;
        tx.execute(
            "UPDATE session_history SET chat_id = ?4, topic = ?5
             WHERE chat_id = ?1 AND topic = ?2 AND session_id = ?3",
            params![chat, topic, id, into.chat.0, into.topic_number()],
        )?;
        tx.execute(
            "INSERT INTO sessions (chat_id, topic, session_id, updated_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(chat_id, topic) DO UPDATE SET session_id = excluded.session_id, updated_at = excluded.updated_at",
            params![into.chat.0, into.topic_number(), id, now_ms()],
        )?;
        tx.commit()?;
        Ok(Some(words))
    }
}

#[cfg(test)]
mod tests {
    use teloxide::types::{ChatId, MessageId, ThreadId};

    use super::super::Store;
    use crate::ids::Conversation;

    fn topic(n: i32) -> Conversation {
        Conversation::new(ChatId(7), Some(ThreadId(MessageId(n))))
    }

    #[test]
    fn a_topic_waiting_for_a_name_is_taken_once_and_others_never() {
        let store = Store::in_memory().expect("store");
        store.await_name(topic(3)).expect("write");
        store
            .await_name(Conversation::new(ChatId(7), None))
            .expect("no topic");
        assert!(!store.take_unnamed(topic(4)).expect("read"), "never waited");
        assert!(store.take_unnamed(topic(3)).expect("read"));
        assert!(!store.take_unnamed(topic(3)).expect("read"), "named once");
        assert!(
            !store
                .take_unnamed(Conversation::new(ChatId(7), None))
                .expect("read")
        );
    }

    #[test]
    fn a_past_session_moves_to_its_topic_and_the_current_one_is_copied() {
        let store = Store::in_memory().expect("store");
        let main = Conversation::new(ChatId(7), None);
        store.note_opening(main, "plan a trip").expect("write");
        store.set_session(main, Some("old")).expect("write");
        store.note_opening(main, "write a poem").expect("write");
        store.set_session(main, Some("now")).expect("write");
        store.set_model(main, Some("opus")).expect("write");
        assert_eq!(
            store.open_in(main, topic(5), "old").expect("write"),
            Some("plan a trip".to_owned())
        );
        let opening = store.opening(topic(5)).expect("read");
        assert_eq!(opening.resume.as_deref(), Some("old"));
        assert!(!opening.fork, "resumed, not copied");
        assert_eq!(opening.model.as_deref(), Some("opus"));
        let left: Vec<String> = store
            .sessions(main)
            .expect("read")
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(left, ["now"], "the past session moved");
        assert_eq!(store.session(main).expect("read").as_deref(), Some("now"));
        assert_eq!(store.open_in(main, topic(6), "old").expect("read"), None);
        store.open_in(main, topic(6), "now").expect("write");
        let copy = store.opening(topic(6)).expect("read");
        assert!(copy.fork && copy.resume.as_deref() == Some("now"));
        assert_eq!(store.session(main).expect("read").as_deref(), Some("now"));
    }
}

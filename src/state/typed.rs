//! What `turnstile attach` asks of the store: a line typed at the host
//! written to the inbox (numbered below [`TERMINAL_IDS`]), and the
//! conversations the inbox has seen, latest first.

use rusqlite::params;
use teloxide::types::{ChatId, MessageId, ThreadId};

use super::rows::insert_incoming;
use super::{StateError, Store};
use crate::ids::Conversation;
use crate::incoming::{Incoming, TERMINAL_IDS};

/// A conversation as the inbox knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenConversation {
    /// The chat, and its topic.
    pub to: Conversation,
    /// The first words of its latest turn (empty when none was noted).
    pub opening: String,
    /// Its latest message's date (unix seconds).
    pub last: i64,
    /// Whether a message of it waits out a usage limit.
    pub parked: bool,
    /// Whether it is handed off to the host (`/handoff`).
    pub handed_off: bool,
}

impl Store {
    /// Writes a typed line to the inbox (queued), numbering it first: one
    /// below the lowest typed line still there. Its update id.
    pub fn accept_typed(&self, m: &mut Incoming) -> Result<i64, StateError> {
        let conn = self.lock();
        let lowest: Option<i64> = conn
            .prepare_cached("SELECT MIN(update_id) FROM inbox WHERE update_id <= ?1")?
            .query_row(params![TERMINAL_IDS], |r| r.get(0))?;
        m.update_id = lowest.map_or(TERMINAL_IDS, |id| id - 1);
        insert_incoming(&conn, m)?;
        Ok(m.update_id)
    }

    /// Up to `limit` conversations of the inbox, the latest active first.
    pub fn seen_conversations(&self, limit: usize) -> Result<Vec<SeenConversation>, StateError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT i.chat_id, i.topic, MAX(i.date), MAX(i.state = 'parked'),
                    COALESCE(c.opening_words, ''),
                    EXISTS (SELECT 1 FROM handoffs h WHERE h.chat_id = i.chat_id AND h.topic = i.topic)
               FROM inbox i LEFT JOIN choices c ON c.chat_id = i.chat_id AND c.topic = i.topic
              GROUP BY i.chat_id, i.topic ORDER BY MAX(i.date) DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map(params![i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
            let topic = i32::try_from(r.get::<_, i64>(1)?).unwrap_or(0);
            let topic = (topic > 0).then_some(ThreadId(MessageId(topic)));
            Ok(SeenConversation {
                to: Conversation::new(ChatId(r.get(0)?), topic),
                last: r.get(2)?,
                parked: r.get::<_, i64>(3)? != 0,
                opening: r.get(4)?,
                handed_off: r.get::<_, i64>(5)? != 0,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incoming::Source;

    #[test]
    fn typed_lines_are_numbered_down_and_read_back_as_typed() {
        let store = Store::in_memory().unwrap();
        let to = Conversation::from(ChatId(7));
        let mut first = Incoming {
            to,
            text: "one".into(),
            date: 50,
            source: Source::Terminal,
            ..Incoming::default()
        };
        let mut second = first.clone();
        assert_eq!(store.accept_typed(&mut first).unwrap(), TERMINAL_IDS);
        assert_eq!(store.accept_typed(&mut second).unwrap(), TERMINAL_IDS - 1);
        let rows = store.unfinished().unwrap();
        assert_eq!(rows.len(), 2);
        assert!(
            rows.iter().all(|r| r.message.source == Source::Terminal),
            "{rows:?}"
        );
        let seen = store.seen_conversations(10).unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!((seen[0].to, seen[0].last, seen[0].parked), (to, 50, false));
        assert!(!seen[0].handed_off);
        store.hand_off(to, "s-1").unwrap();
        assert!(store.seen_conversations(10).unwrap()[0].handed_off);
    }
}

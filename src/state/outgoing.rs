//! The outbox's durable part: every message the bot has queued for a chat
//! and Telegram has not yet taken is a row here, written before the turn
//! that sent it counts as done and deleted once it is settled (sent,
//! refused for good, dropped by `/stop` or at `telegram.max_pending_age`).
//! The next process sends what it finds, in order. Beside it, each chat's
//! highest message id the outbox knows, which tells a copy sent again from
//! one that may show twice (see `telegram/outbox/resend.rs`).

use std::sync::atomic::{AtomicI64, Ordering};

use rusqlite::params;

use super::handle::StoreHandle;
use super::{StateError, Store, now_ms};

/// The migration that adds the tables.
pub(super) const MIGRATION: &str = "CREATE TABLE outgoing (
        id         INTEGER PRIMARY KEY,
        chat_id    INTEGER NOT NULL,
        topic      INTEGER NOT NULL,
        reply_to   INTEGER,
        markdown   INTEGER NOT NULL,
        text       TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        after_id   INTEGER
     );
     CREATE TABLE outgoing_chats (
        chat_id INTEGER PRIMARY KEY,
        last_id INTEGER NOT NULL
     );";

/// A message waiting for Telegram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingRow {
    /// Its row; rows go out in this order.
    pub id: i64,
    /// The chat.
    pub chat_id: i64,
    /// The forum topic (0: none).
    pub topic: i64,
    /// The message its first piece replies to.
    pub reply_to: Option<i32>,
    /// Whether `text` is Markdown.
    pub markdown: bool,
    /// The text.
    pub text: String,
    /// When it was first queued (Unix ms).
    pub created_at: i64,
    /// The highest message id its chat's lane knew before any copy of it
    /// could leave.
    pub after_id: Option<i32>,
}

/// What a previous process left to send: the rows in order, and each
/// chat's highest known message id.
#[derive(Debug, Default)]
pub struct Outgoing {
    /// Messages waiting, oldest first.
    pub rows: Vec<OutgoingRow>,
    /// `(chat, highest message id known)`.
    pub last_ids: Vec<(i64, i32)>,
}

impl Store {
    fn keep_outgoing(&self, row: &OutgoingRow) -> Result<(), StateError> {
        self.lock()
            .prepare_cached(
                "INSERT OR REPLACE INTO outgoing (id, chat_id, topic, reply_to, markdown, text, created_at, after_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                row.id,
                row.chat_id,
                row.topic,
                row.reply_to,
                row.markdown,
                row.text,
                row.created_at,
                row.after_id
            ])?;
        Ok(())
    }

    fn settle_outgoing(&self, id: i64, chat: i64, last: Option<i32>) -> Result<(), StateError> {
        let conn = self.lock();
        conn.prepare_cached("DELETE FROM outgoing WHERE id = ?1")?
            .execute(params![id])?;
        if let Some(last) = last {
            conn.prepare_cached(
                "INSERT INTO outgoing_chats (chat_id, last_id) VALUES (?1, ?2)
                 ON CONFLICT(chat_id) DO UPDATE SET last_id = max(last_id, excluded.last_id)",
            )?
            .execute(params![chat, last])?;
        }
        Ok(())
    }

    /// What waits to be sent, oldest first, and each chat's highest known
    /// message id.
    pub fn outgoing(&self) -> Result<Outgoing, StateError> {
        let conn = self.lock();
        let rows = conn
            .prepare(
                "SELECT id, chat_id, topic, reply_to, markdown, text, created_at, after_id
                 FROM outgoing ORDER BY id",
            )?
            .query_map([], |r| {
                Ok(OutgoingRow {
                    id: r.get(0)?,
                    chat_id: r.get(1)?,
                    topic: r.get(2)?,
                    reply_to: r.get(3)?,
                    markdown: r.get(4)?,
                    text: r.get(5)?,
                    created_at: r.get(6)?,
                    after_id: r.get(7)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let last_ids = conn
            .prepare("SELECT chat_id, last_id FROM outgoing_chats")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Outgoing { rows, last_ids })
    }

    /// The highest row id used so far.
    pub(super) fn last_outgoing_id(&self) -> Result<i64, StateError> {
        Ok(self
            .lock()
            .query_row("SELECT COALESCE(MAX(id), 0) FROM outgoing", [], |r| {
                r.get(0)
            })?)
    }
}

/// Row ids, handed out without asking the store thread.
#[derive(Debug, Default)]
pub(super) struct RowIds(AtomicI64);

impl RowIds {
    pub(super) fn after(last: i64) -> Self {
        Self(AtomicI64::new(last))
    }

    fn next(&self) -> i64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
}

impl StoreHandle {
    /// Keeps a message for `chat` until it is settled; its row id. The
    /// write is queued now, on the store thread, ahead of whatever is
    /// asked after it (a turn's end): a turn that counts as done has its
    /// messages kept.
    pub fn keep_outgoing(
        &self,
        chat: i64,
        topic: i64,
        reply_to: Option<i32>,
        (text, markdown): (&str, bool),
    ) -> i64 {
        let row = OutgoingRow {
            id: self.row_ids().next(),
            chat_id: chat,
            topic,
            reply_to,
            markdown,
            text: text.to_string(),
            created_at: now_ms(),
            after_id: None,
        };
        let id = row.id;
        self.tell("keeping a message to send", move |store| {
            store.keep_outgoing(&row)
        });
        id
    }

    /// No copy of the message of row `id` can leave before its lane knew
    /// its chat's messages up to `after`.
    pub fn outgoing_after(&self, id: i64, after: i32) {
        self.tell("noting a message's place", move |store| {
            store
                .lock()
                .prepare_cached("UPDATE outgoing SET after_id = ?2 WHERE id = ?1")?
                .execute(params![id, after])?;
            Ok(())
        });
    }

    /// The message of row `id` is settled; `last` is the highest message
    /// id its chat's lane knows.
    pub fn settle_outgoing(&self, id: i64, chat: i64, last: Option<i32>) {
        self.tell("settling a sent message", move |store| {
            store.settle_outgoing(id, chat, last)
        });
    }

    /// What a previous process left to send.
    pub fn outgoing(&self) -> impl Future<Output = Outgoing> + Send + 'static {
        let ask = self.ask("reading the messages to send", |store| store.outgoing());
        async move { ask.await.unwrap_or_default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_message_stays_until_it_is_settled_and_the_chat_keeps_its_highest_id() {
        let store = Store::in_memory().expect("store");
        let row = |id, text: &str| OutgoingRow {
            id,
            chat_id: 7,
            topic: 0,
            reply_to: Some(3),
            markdown: true,
            text: text.into(),
            created_at: 1,
            after_id: None,
        };
        store.keep_outgoing(&row(1, "one")).expect("kept");
        store.keep_outgoing(&row(2, "two")).expect("kept");
        assert_eq!(store.last_outgoing_id().expect("max"), 2);
        store.settle_outgoing(1, 7, Some(40)).expect("settled");
        store.settle_outgoing(9, 7, Some(12)).expect("settled");
        let left = store.outgoing().expect("read");
        assert_eq!(left.rows, vec![row(2, "two")]);
        assert_eq!(left.last_ids, vec![(7, 40)], "never moves back");
    }
}

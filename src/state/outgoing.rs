//! The outbox's durable part: every message the bot has queued for a chat
//! and Telegram has not yet taken is a row here, written before the turn
//! that sent it counts as done and deleted once it is settled (sent,
//! refused for good, dropped by `/stop` or at `telegram.max_pending_age`).
//! The next process sends what it finds, in order. Beside it, each chat's
//! highest message id the outbox knows, which tells a copy sent again from
//! one that may show twice (see `telegram/outbox/resend.rs`).
//!
//! A row is a text, a file or a question ([`Kept`]). A file's bytes are not
//! in the database: they are copied, when the file is queued, into the
//! spool (`<state file>-outgoing/<row id>`, mode 0600 in a 0700 folder),
//! which the bot alone owns, and removed when the row is settled.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::handle::{ReadFailed, StoreHandle};
use super::{StateError, Store, now_ms};
use crate::ids::Conversation;

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

/// The migration that lets files and questions wait too: what a row
/// carries besides its text ([`Kept`], JSON; NULL for a text).
pub(super) const MIGRATION_KINDS: &str = "ALTER TABLE outgoing ADD COLUMN extra TEXT;";

/// The spool of the state file at `path`: none for one in memory.
pub(super) fn spool_of(path: &Path) -> Option<PathBuf> {
    let text = path.as_os_str();
    if text.is_empty() || text == ":memory:" {
        return None;
    }
    let mut name = text.to_os_string();
    name.push("-outgoing");
    Some(PathBuf::from(name))
}

/// What a row carries besides its text, when it is no text message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kept {
    /// A file; its bytes are in the spool under the row's id.
    File(KeptFile),
    /// A question under buttons; the row's text is the question's.
    Question(KeptQuestion),
}

/// A file waiting for Telegram.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptFile {
    /// The name it is sent under.
    pub name: String,
    /// Its caption.
    pub caption: Option<String>,
    /// Sent as a photo rather than a document.
    pub as_photo: bool,
}

/// A question waiting for Telegram.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptQuestion {
    /// Rows of buttons: `(label, callback data)`.
    pub buttons: Vec<Vec<(String, String)>>,
    /// The text file sent just before it: `(name, caption, text)`.
    pub file: Option<(String, String, String)>,
    /// Its buttons mean something only to the process that asked (an
    /// approval): a later process sends it without them, saying so.
    pub ends_with_process: bool,
    /// Such a question that reached the chat, as this message, and waits
    /// for a press: a later process takes its buttons away, saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown: Option<i32>,
}

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
    /// A file or a question; `None` for a text.
    pub kept: Option<Kept>,
}

/// What a previous process left to send: the rows in order, and each
/// chat's highest known message id.
#[derive(Debug, Default)]
pub struct LeftToSend {
    /// Messages waiting, oldest first.
    pub rows: Vec<OutgoingRow>,
    /// `(chat, highest message id known)`.
    pub last_ids: Vec<(i64, i32)>,
    /// Where files' bytes are kept.
    pub spool: Option<PathBuf>,
}

impl LeftToSend {
    /// Where the bytes of the file of row `id` are kept.
    pub fn spooled(&self, id: i64) -> Option<PathBuf> {
        Some(self.spool.as_ref()?.join(id.to_string()))
    }
}

impl Store {
    fn keep_outgoing(&self, row: &OutgoingRow) -> Result<(), StateError> {
        let extra = row
            .kept
            .as_ref()
            .map(|kept| serde_json::to_string(kept).unwrap_or_default());
        self.lock()
            .prepare_cached(
                "INSERT OR REPLACE INTO outgoing (id, chat_id, topic, reply_to, markdown, text, created_at, after_id, extra)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
                row.id,
                row.chat_id,
                row.topic,
                row.reply_to,
                row.markdown,
                row.text,
                row.created_at,
                row.after_id,
                extra
            ])?;
        Ok(())
    }

    /// Keeps a file: its bytes (`write` writes them) into the spool first,
    /// then its row. A copy that fails keeps nothing (the file still goes
    /// from memory, but not after a restart); no spool (in memory): nothing.
    fn keep_outgoing_file(
        &self,
        row: &OutgoingRow,
        write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
    ) -> Result<(), StateError> {
        let Some(spool) = &self.spool else {
            return Ok(());
        };
        let path = spool.join(row.id.to_string());
        if let Err(err) = spool_file(spool, &path, write) {
            let _ = std::fs::remove_file(&path);
            tracing::error!(path = %path.display(), cause = %err, "a file to send could not be kept in the spool; it goes from memory only (lost if the process ends first)");
            return Ok(());
        }
        self.keep_outgoing(row)
    }

    fn settle_outgoing(
        &self,
        id: i64,
        chat: i64,
        last: Option<i32>,
        file: bool,
    ) -> Result<(), StateError> {
        let conn = self.lock();
        conn.prepare_cached("DELETE FROM outgoing WHERE id = ?1")?
            .execute(params![id])?;
        if let (true, Some(spool)) = (file, &self.spool) {
            let _ = std::fs::remove_file(spool.join(id.to_string()));
        }
        note_last_id(&conn, chat, last)
    }

    /// The question of row `id` reached the chat as `message_id` and its
    /// buttons wait for a press: the row stays, saying so, until the
    /// question is decided. `last` as for [`Store::settle_outgoing`].
    fn outgoing_shown(
        &self,
        id: i64,
        chat: i64,
        last: Option<i32>,
        message_id: i32,
    ) -> Result<(), StateError> {
        let conn = self.lock();
        conn.prepare_cached(
            "UPDATE outgoing SET extra = json_set(extra, '$.shown', ?2) WHERE id = ?1",
        )?
        .execute(params![id, message_id])?;
        note_last_id(&conn, chat, last)
    }

    /// What waits to be sent, oldest first, and each chat's highest known
    /// message id. A row that cannot be read back (its JSON) is logged and
    /// deleted; a spooled file without its row (the process ended between
    /// the two) is removed.
    pub fn outgoing(&self) -> Result<LeftToSend, StateError> {
        let conn = self.lock();
        let read = conn
            .prepare(
                "SELECT id, chat_id, topic, reply_to, markdown, text, created_at, after_id, extra
                 FROM outgoing ORDER BY id",
            )?
            .query_map([], |r| {
                let row = OutgoingRow {
                    id: r.get(0)?,
                    chat_id: r.get(1)?,
                    topic: r.get(2)?,
                    reply_to: r.get(3)?,
                    markdown: r.get(4)?,
                    text: r.get(5)?,
                    created_at: r.get(6)?,
                    after_id: r.get(7)?,
                    kept: None,
                };
                Ok((row, r.get::<_, Option<String>>(8)?))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let mut rows = Vec::with_capacity(read.len());
        for (mut row, extra) in read {
            match extra
                .map(|json| serde_json::from_str::<Kept>(&json))
                .transpose()
            {
                Ok(kept) => {
                    row.kept = kept;
                    rows.push(row);
                }
                Err(err) => {
                    tracing::error!(row = row.id, chat_id = row.chat_id, cause = %err, "a message waiting for telegram cannot be read back; dropped");
                    conn.prepare_cached("DELETE FROM outgoing WHERE id = ?1")?
                        .execute(params![row.id])?;
                }
            }
        }
        let last_ids = conn
            .prepare("SELECT chat_id, last_id FROM outgoing_chats")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(spool) = &self.spool {
            let files: std::collections::HashSet<i64> = rows
                .iter()
                .filter(|row| matches!(row.kept, Some(Kept::File(_))))
                .map(|row| row.id)
                .collect();
            sweep_spool(spool, &files);
        }
        Ok(LeftToSend {
            rows,
            last_ids,
            spool: self.spool.clone(),
        })
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

/// Keeps `last` as `chat`'s highest message id known, if it is higher.
fn note_last_id(
    conn: &rusqlite::Connection,
    chat: i64,
    last: Option<i32>,
) -> Result<(), StateError> {
    if let Some(last) = last {
        conn.prepare_cached(
            "INSERT INTO outgoing_chats (chat_id, last_id) VALUES (?1, ?2)
             ON CONFLICT(chat_id) DO UPDATE SET last_id = max(last_id, excluded.last_id)",
        )?
        .execute(params![chat, last])?;
    }
    Ok(())
}

/// Writes a file into the spool (made, mode 0700, when missing) as `path`,
/// new, mode 0600.
fn spool_file(
    spool: &Path,
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    match std::fs::DirBuilder::new().mode(0o700).create(spool) {
        Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => return Err(err),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    write(&mut file)?;
    file.flush()
}

/// Removes every file of the spool that is not the file of a row in
/// `files`.
fn sweep_spool(spool: &Path, files: &std::collections::HashSet<i64>) {
    let Ok(entries) = std::fs::read_dir(spool) else {
        return;
    };
    for entry in entries.flatten() {
        let id = entry.file_name().to_str().and_then(|n| n.parse().ok());
        if id.is_none_or(|id| !files.contains(&id)) {
            tracing::info!(path = %entry.path().display(), "a spooled file no message waits for; removed");
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

impl StoreHandle {
    /// Keeps a message for `chat` until it is settled; its row id. The
    /// write is queued now, on the store thread, ahead of whatever is
    /// asked after it (a turn's end): a turn that counts as done has its
    /// messages kept.
    pub fn keep_outgoing(
        &self,
        to: Conversation,
        reply_to: Option<i32>,
        text: &str,
        markdown: bool,
    ) -> i64 {
        let row = self.new_row(to, reply_to, text, markdown, None);
        let id = row.id;
        self.tell("keeping a message to send", move |store| {
            store.keep_outgoing(&row)
        });
        id
    }

    /// A new row, not kept yet.
    fn new_row(
        &self,
        to: Conversation,
        reply_to: Option<i32>,
        text: &str,
        markdown: bool,
        kept: Option<Kept>,
    ) -> OutgoingRow {
        OutgoingRow {
            id: self.row_ids().next(),
            chat_id: to.chat.0,
            topic: to.topic_number(),
            reply_to,
            markdown,
            text: text.to_string(),
            created_at: now_ms(),
            after_id: None,
            kept,
        }
    }

    /// Keeps a question for `chat` until it is settled; its row id (as
    /// [`StoreHandle::keep_outgoing`]).
    pub fn keep_outgoing_question(
        &self,
        to: Conversation,
        text: &str,
        question: KeptQuestion,
    ) -> i64 {
        let kept = Some(Kept::Question(question));
        let row = self.new_row(to, None, text, false, kept);
        let id = row.id;
        self.tell("keeping a question to send", move |store| {
            store.keep_outgoing(&row)
        });
        id
    }

    /// Keeps a file for `chat` until it is settled; its row id. On the
    /// store thread, ahead of whatever is asked after it, `write` copies
    /// its bytes into the spool, then the row is written.
    pub fn keep_outgoing_file(
        &self,
        to: Conversation,
        file: KeptFile,
        write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()> + Send + 'static,
    ) -> i64 {
        let row = self.new_row(to, None, "", false, Some(Kept::File(file)));
        let id = row.id;
        self.tell("keeping a file to send", move |store| {
            store.keep_outgoing_file(&row, write)
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
    /// id its chat's lane knows; `file`: its spooled bytes go too.
    pub fn settle_outgoing(&self, id: i64, chat: i64, last: Option<i32>, file: bool) {
        let stall = self.row_ids().take_settle_stall();
        self.tell("settling a sent message", move |store| {
            if stall > 0 {
                std::thread::sleep(std::time::Duration::from_millis(stall));
            }
            store.settle_outgoing(id, chat, last, file)
        });
    }

    /// The question of row `id` reached `chat` as `message_id`, its buttons
    /// waiting for a press (see [`KeptQuestion::shown`]); `last` as for
    /// [`StoreHandle::settle_outgoing`].
    pub fn outgoing_shown(&self, id: i64, chat: i64, last: Option<i32>, message_id: i32) {
        self.tell("noting a question shown", move |store| {
            store.outgoing_shown(id, chat, last, message_id)
        });
    }

    /// Test hook: the next settle write takes `stall` longer on the store
    /// thread, as a slow disk would, holding up every write behind it.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn stall_next_settle(&self, stall: std::time::Duration) {
        let ms = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX);
        self.row_ids().stall_next_settle(ms);
    }

    /// What a previous process left to send.
    pub fn outgoing(
        &self,
    ) -> impl Future<Output = Result<LeftToSend, ReadFailed>> + Send + 'static {
        self.read("reading the messages to send", |store| store.outgoing())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_shown_stays_with_its_message_until_settled() {
        let store = Store::in_memory().expect("store");
        let question = KeptQuestion {
            buttons: vec![vec![("Allow".into(), "a:1".into())]],
            file: None,
            ends_with_process: true,
            shown: None,
        };
        let row = OutgoingRow {
            id: 1,
            chat_id: 7,
            topic: 0,
            reply_to: None,
            markdown: false,
            text: "Run it?".into(),
            created_at: 1,
            after_id: None,
            kept: Some(Kept::Question(question.clone())),
        };
        store.keep_outgoing(&row).expect("kept");
        store.outgoing_shown(1, 7, Some(5), 5).expect("shown");
        let left = store.outgoing().expect("read");
        let shown = KeptQuestion {
            shown: Some(5),
            ..question
        };
        assert_eq!(left.rows[0].kept, Some(Kept::Question(shown)));
        assert_eq!(left.last_ids, vec![(7, 5)]);
        store.settle_outgoing(1, 7, None, false).expect("settled");
        assert!(store.outgoing().expect("read").rows.is_empty());
    }

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
            kept: None,
        };
        store.keep_outgoing(&row(1, "one")).expect("kept");
        store.keep_outgoing(&row(2, "two")).expect("kept");
        assert_eq!(store.last_outgoing_id().expect("max"), 2);
        store
            .settle_outgoing(1, 7, Some(40), false)
            .expect("settled");
        store
            .settle_outgoing(9, 7, Some(12), false)
            .expect("settled");
        let left = store.outgoing().expect("read");
        assert_eq!(left.rows, vec![row(2, "two")]);
        assert_eq!(left.last_ids, vec![(7, 40)], "never moves back");
    }

    #[test]
    fn a_file_keeps_its_bytes_in_a_private_spool_until_settled_and_nothing_else_stays() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(&dir.path().join("state.db")).expect("store");
        let file = OutgoingRow {
            id: 1,
            chat_id: 7,
            topic: 0,
            reply_to: None,
            markdown: false,
            text: String::new(),
            created_at: 1,
            after_id: None,
            kept: Some(Kept::File(KeptFile {
                name: "a.txt".into(),
                caption: Some("see".into()),
                as_photo: false,
            })),
        };
        store
            .keep_outgoing_file(&file, |out| out.write_all(b"bytes"))
            .expect("kept");
        let spool = dir.path().join("state.db-outgoing");
        assert_eq!(std::fs::read(spool.join("1")).expect("spooled"), b"bytes");
        let mode = |p: &Path| std::fs::metadata(p).expect("there").permissions().mode() & 0o777;
        assert_eq!((mode(&spool), mode(&spool.join("1"))), (0o700, 0o600));
        // A copy no row waits for (the process ended between the two), and
        // a row that cannot be read back: neither stays.
        std::fs::write(spool.join("99"), b"left over").expect("written");
        store
            .lock()
            .execute(
                "INSERT INTO outgoing (id, chat_id, topic, markdown, text, created_at, extra)
                 VALUES (2, 7, 0, 0, 'x', 1, '{\"kind\":\"nonsense\"}')",
                [],
            )
            .expect("inserted");
        let left = store.outgoing().expect("read");
        assert_eq!(left.rows, vec![file]);
        assert_eq!(left.spooled(1), Some(spool.join("1")));
        assert!(!spool.join("99").exists());
        let rows: i64 = store
            .lock()
            .query_row("SELECT COUNT(*) FROM outgoing", [], |r| r.get(0))
            .expect("counted");
        assert_eq!(rows, 1, "the unreadable row is gone");
        store.settle_outgoing(1, 7, None, true).expect("settled");
        assert!(!spool.join("1").exists());
        assert!(store.outgoing().expect("read").rows.is_empty());
    }

    #[test]
    fn a_failed_copy_keeps_no_row_and_no_partial_file() {
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(&dir.path().join("state.db")).expect("store");
        let mut file = OutgoingRow {
            id: 3,
            chat_id: 7,
            topic: 0,
            reply_to: None,
            markdown: false,
            text: String::new(),
            created_at: 1,
            after_id: None,
            kept: None,
        };
        file.kept = Some(Kept::File(KeptFile {
            name: "a.txt".into(),
            caption: None,
            as_photo: true,
        }));
        store
            .keep_outgoing_file(&file, |out| {
                out.write_all(b"half")?;
                Err(std::io::Error::other("the agent's file shrank"))
            })
            .expect("no error for the store");
        assert!(store.outgoing().expect("read").rows.is_empty());
        assert!(!dir.path().join("state.db-outgoing").join("3").exists());
    }
}

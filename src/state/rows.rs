//! The inbox rows: an [`Incoming`] message as the intake read it, with
//! where it is ([`InboxState`]); written, moved, recovered and pruned.

use rusqlite::{Row, params};
use teloxide::types::{ChatId, MessageId, ThreadId, UserId};

use super::{Pruned, StateError, Store, now_ms};
use crate::attachment::Attachment;
use crate::ids::Conversation;
use crate::incoming::{Ask, Author, ChatKind, Incoming, Source};

/// Where an inbox message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxState {
    /// Accepted, waiting for its turn.
    Queued,
    /// Its turn started.
    Running,
    /// Its turn delivered something to the chat.
    Replied,
    /// Its turn ended.
    Done,
    /// Its chat was told it was interrupted.
    Reported,
    /// Refused or cleared; the chat was told.
    Dropped,
    /// Its turn was refused for a usage limit; it runs again at `due_at`.
    Parked,
}

impl InboxState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Replied => "replied",
            Self::Done => "done",
            Self::Reported => "reported",
            Self::Dropped => "dropped",
            Self::Parked => "parked",
        }
    }

    /// Reads a stored name (an unknown one is done).
    fn parse(s: &str) -> Self {
        match s {
            "queued" => Self::Queued,
            "running" => Self::Running,
            "replied" => Self::Replied,
            "reported" => Self::Reported,
            "dropped" => Self::Dropped,
            "parked" => Self::Parked,
            _ => Self::Done,
        }
    }
}

/// An inbox row with its state.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxRow {
    /// The message.
    pub message: Incoming,
    /// Where it is.
    pub state: InboxState,
    /// When a parked message runs again (Unix ms).
    pub due_at: Option<i64>,
}

/// Inbox states that are finished, and so may be pruned.
const FINISHED_STATES: &str = "('done', 'dropped', 'reported')";

/// The columns of a row, in the order [`read_row`] reads them.
const COLUMNS: &str = "update_id, chat_id, topic, user_id, message_id, date, place, ask, text, files, album, state, due_at, author_name, author_username";

/// The files column: empty for none, else a JSON list.
fn files_json(files: &[Attachment]) -> String {
    if files.is_empty() {
        return String::new();
    }
    serde_json::to_string(files).unwrap_or_default()
}

/// Reads the files column; an unreadable one is logged and read as none.
fn files_from_json(text: &str) -> Vec<Attachment> {
    if text.is_empty() {
        return Vec::new();
    }
    serde_json::from_str(text).unwrap_or_else(|err| {
        tracing::warn!(cause = %err, "an inbox row's files could not be read; ignored");
        Vec::new()
    })
}

/// A stored id that no longer fits its type (never written so) reads as 0.
fn fits<T: TryFrom<i64> + Default>(n: i64) -> T {
    T::try_from(n).unwrap_or_default()
}

/// One row, with the columns of [`COLUMNS`].
fn read_row(r: &Row<'_>) -> rusqlite::Result<InboxRow> {
    let topic: i64 = r.get(2)?;
    let topic = Some(fits::<i32>(topic))
        .filter(|&t| t != 0)
        .map(|t| ThreadId(MessageId(t)));
    let (update_id, from) = (r.get(0)?, UserId(fits(r.get(3)?)));
    Ok(InboxRow {
        message: Incoming {
            update_id,
            to: Conversation::new(ChatId(r.get(1)?), topic),
            from,
            message_id: MessageId(fits(r.get(4)?)),
            date: r.get(5)?,
            place: ChatKind::from_stored(&r.get::<_, String>(6)?),
            ask: Ask::from_stored(&r.get::<_, String>(7)?),
            text: r.get(8)?,
            files: files_from_json(&r.get::<_, String>(9)?),
            album: r.get(10)?,
            author: Author {
                name: r.get(13)?,
                username: r.get(14)?,
            },
            source: Source::stored(update_id, from),
        },
        state: InboxState::parse(&r.get::<_, String>(11)?),
        due_at: r.get(12)?,
    })
}

impl Store {
    /// Records an accepted message; `false` when its update id was already
    /// there (a redelivery), which must not be handled again.
    pub fn accept(&self, m: &Incoming) -> Result<bool, StateError> {
        insert_incoming(&self.lock(), m)
    }

    /// Moves messages to `state`.
    pub fn mark(&self, update_ids: &[i64], state: InboxState) -> Result<(), StateError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached("UPDATE inbox SET state = ?1, updated_at = ?2 WHERE update_id = ?3")?;
        let now = now_ms();
        for id in update_ids {
            stmt.execute(params![state.as_str(), now, id])?;
        }
        Ok(())
    }

    /// Parks messages until `due_at` (Unix ms): their turn was refused for
    /// a usage limit.
    pub fn park(&self, update_ids: &[i64], due_at: i64) -> Result<(), StateError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "UPDATE inbox SET state = 'parked', due_at = ?1, updated_at = ?2 WHERE update_id = ?3",
        )?;
        let now = now_ms();
        for id in update_ids {
            stmt.execute(params![due_at, now, id])?;
        }
        Ok(())
    }

    /// Moves messages to `Running` and records their turn.
    pub fn start_turn(&self, update_ids: &[i64], turn: u64) -> Result<(), StateError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "UPDATE inbox SET state = 'running', turn = ?1, updated_at = ?2 WHERE update_id = ?3",
        )?;
        let now = now_ms();
        for id in update_ids {
            stmt.execute(params![i64::try_from(turn).unwrap_or(i64::MAX), now, id])?;
        }
        Ok(())
    }

    /// Messages whose handling was not finished, oldest first, each as the
    /// intake read it.
    pub fn unfinished(&self) -> Result<Vec<InboxRow>, StateError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM inbox
             WHERE state IN ('queued', 'running', 'replied', 'parked') ORDER BY update_id"
        ))?;
        let rows = stmt.query_map([], read_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// How many messages are in each state.
    pub fn counts(&self) -> Result<Vec<(String, i64)>, StateError> {
        let conn = self.lock();
        let mut stmt =
            conn.prepare("SELECT state, COUNT(*) FROM inbox GROUP BY state ORDER BY state")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Removes finished inbox rows (done, dropped, reported) and turn
    /// records older than `retention` (by their last update and their end).
    pub fn prune(&self, retention: std::time::Duration) -> Result<Pruned, StateError> {
        let keep_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        let cutoff = now_ms().saturating_sub(keep_ms);
        let conn = self.lock();
        let inbox = conn.execute(
            &format!("DELETE FROM inbox WHERE state IN {FINISHED_STATES} AND updated_at < ?1"),
            params![cutoff],
        )?;
        let turns = conn.execute("DELETE FROM turns WHERE ended_at < ?1", params![cutoff])?;
        // `/usage` looks 30 days back: its rows stay at least 31 days.
        let usage_cutoff = cutoff.min(now_ms().saturating_sub(31 * 86_400_000));
        conn.execute(
            "DELETE FROM usage WHERE ended_at < ?1",
            params![usage_cutoff],
        )?;
        // A claim this old is at or before its schedule's last slot, which
        // no claim goes back to: its key has done its work.
        conn.execute(
            "DELETE FROM schedule_runs WHERE claimed_at < ?1",
            params![cutoff],
        )?;
        Ok(Pruned { inbox, turns })
    }

    /// Telegram restarted its update ids at `first` (far below the stored
    /// offset): the offset moves back to `first`, and finished inbox rows
    /// at or above `first` are forgotten, since their ids belong to the old
    /// sequence and would otherwise make new updates look like redeliveries.
    /// Dedupe by update id thus holds within one sequence of ids; unfinished
    /// rows are kept (they are still recovered by their row, not their id).
    pub fn reset_update_ids(&self, first: i64) -> Result<usize, StateError> {
        let mut conn = self.lock();
        let tx = conn.savepoint()?;
        let forgotten = tx.execute(
            &format!("DELETE FROM inbox WHERE state IN {FINISHED_STATES} AND update_id >= ?1"),
            params![first],
        )?;
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('offset', ?1)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![first.to_string()],
        )?;
        tx.commit()?;
        Ok(forgotten)
    }
}

/// Writes `m` as a queued row on `conn` (a transaction's too); `false`
/// when its update id was already there.
pub(super) fn insert_incoming(
    conn: &rusqlite::Connection,
    m: &Incoming,
) -> Result<bool, StateError> {
    // Cached, as every statement a turn runs: parsing one again cost
    // about as much as running it.
    let n = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO inbox (update_id, chat_id, topic, user_id, message_id, date,
                    place, ask, text, files, album, state, updated_at, author_name, author_username)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 'queued', ?12, ?13, ?14)",
        )?
        .execute(params![
            m.update_id,
            m.to.chat.0,
            m.to.topic_number(),
            i64::try_from(m.from.0).unwrap_or(i64::MAX),
            i64::from(m.message_id.0),
            m.date,
            m.place.as_str(),
            m.ask.stored(),
            m.text,
            files_json(&m.files),
            m.album,
            now_ms(),
            m.author.name,
            m.author.username,
        ])?;
    Ok(n == 1)
}

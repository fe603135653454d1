//! The state store: one SQLite file (WAL) holding the inbox of accepted
//! updates, each chat's agent session id, turn records and the update
//! offset. Versioned migrations run at open; a corrupt or unreadable file
//! is an error, never a silent new database.
//!
//! [`Store`] is the SQL, synchronous; [`StoreHandle`] runs it on the store's own
//! thread and documents the states of a message (`inbox.rs`). An inbox row
//! is an [`Incoming`](crate::incoming::Incoming) as the intake read it
//! (`rows.rs`); the schema and its migrations are in `schema.rs`; the turn
//! ids' high-water mark, which numbers turns on across restarts, in
//! `turn_ids.rs`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};
use teloxide::types::{ChatId, MessageId, ThreadId};

use crate::ids::Conversation;

mod always;
mod backup;
mod conversations;
mod handle;
mod handoffs;
mod outgoing;
mod rows;
mod schedules;
mod schema;
mod topics;
mod turn_ids;
mod typed;

pub use always::{AlwaysGrant, AlwaysRule};
pub use backup::{BackupError, BackupReport, backup};
pub use conversations::{
    FIRST_WORDS, Opening, SESSIONS_LISTED, SessionRow, TurnUsage, UsagePeriods, UsageTotals,
    first_words,
};
pub use handle::{Disposition, ReadFailed, StoreHandle};
pub use handoffs::HandedOff;
pub use outgoing::{Kept, KeptFile, KeptQuestion, LeftToSend, OutgoingRow};
pub use rows::{InboxRow, InboxState};
pub use schedules::{Added, NewSchedule, Origin, Removed, ScheduleRow};
pub use schema::SCHEMA_VERSION;
pub use turn_ids::{TURN_ID_BLOCK, TurnIds};
pub use typed::SeenConversation;

/// An agent process group recorded while it ran: what a next start needs
/// to tell whether the group is still the one recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentGroup {
    /// The group's id, its leader's pid.
    pub pgid: i64,
    /// The leader's start time (clock ticks after boot), so a reused pid
    /// is never mistaken for it.
    pub start_time: i64,
    /// The kernel's boot id when it was recorded (empty: unknown), since
    /// pids and start times begin again at every boot.
    pub boot_id: String,
}

/// An update id this far below the stored offset is not a stray old update
/// (Telegram never sends those below the offset asked for) but Telegram's
/// reset of its update ids (after about a week without updates they restart
/// at a random, lower number). See [`Store::reset_update_ids`].
pub const UPDATE_ID_RESET_GAP: i64 = 1_000_000;

/// What [`Store::prune`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pruned {
    /// Finished inbox rows.
    pub inbox: usize,
    /// Turn records.
    pub turns: usize,
}

/// Creates the state file (mode 0600) when missing and makes it, and its
/// `-wal` and `-shm` files when present, readable by the owner only: it
/// holds every message the bot accepted. SQLite creates the WAL and SHM
/// files with the database file's mode.
fn make_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let text = path.as_os_str();
    if text.is_empty() || text == ":memory:" || path.is_dir() {
        return Ok(());
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    for suffix in ["", "-wal", "-shm"] {
        let mut name = text.to_os_string();
        name.push(suffix);
        let file = PathBuf::from(name);
        if file.exists() {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

/// Errors at the store boundary.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file could not be opened (permissions, a directory, …).
    #[error("state file {path}: cannot open: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// The file is not a usable SQLite database.
    #[error(
        "state file {path} is corrupt or not a turnstile database ({detail}); move it aside to start with a new one"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        detail: String,
    },
    /// The file was written by a newer turnstile: a downgrade, refused
    /// (this build cannot know what the newer schema means).
    #[error(
        "state file {path} has schema version {found}, newer than this turnstile's {supported} \
         (turnstile {version}): it was written by a newer turnstile; run that newer binary, or \
         restore a backup taken before the upgrade",
        version = env!("CARGO_PKG_VERSION")
    )]
    Newer {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: i64,
        /// This build's.
        supported: i64,
    },
    /// A statement failed.
    #[error("state store: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// One finished turn, for the record.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRecord {
    /// The chat.
    pub chat_id: i64,
    /// The turn's id (never used twice on one state file, see `TurnIds`).
    pub turn: u64,
    /// Unix milliseconds.
    pub started_at: i64,
    /// Unix milliseconds.
    pub ended_at: i64,
    /// The outcome's label.
    pub outcome: String,
    /// Whether it counts as finished.
    pub finished: bool,
    /// Model turns the agent reported.
    pub api_calls: u32,
    /// What it cost.
    pub cost_usd: f64,
}

/// The store: the SQL, synchronous. The running bot calls it only from the
/// store thread, through [`StoreHandle`]; tests and start-up checks may call it
/// directly.
pub struct Store {
    /// The one connection.
    conn: Mutex<Connection>,
    /// Where a file waiting for Telegram is kept (`<state file>-outgoing`;
    /// none in memory).
    spool: Option<PathBuf>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Store {
    /// Opens (creating when missing) and migrates the store at `path`;
    /// `:memory:` keeps it in memory.
    pub fn open(path: &Path) -> Result<Self, StateError> {
        make_private(path).map_err(|err| StateError::Open {
            path: path.to_path_buf(),
            source: rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                Some(format!("cannot make it private (mode 0600): {err}")),
            ),
        })?;
        let conn = Connection::open(path).map_err(|source| StateError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let corrupt = |e: rusqlite::Error| StateError::Corrupt {
            path: path.to_path_buf(),
            detail: e.to_string(),
        };
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(corrupt)?;
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(corrupt)?;
        if check != "ok" {
            return Err(StateError::Corrupt {
                path: path.to_path_buf(),
                detail: check,
            });
        }
        // A newer file is refused before anything of it is changed.
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(corrupt)?;
        if found > SCHEMA_VERSION {
            return Err(StateError::Newer {
                path: path.to_path_buf(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(corrupt)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(corrupt)?;
        let store = Self {
            conn: Mutex::new(conn),
            spool: outgoing::spool_of(path),
        };
        store.migrate(path, SCHEMA_VERSION)?;
        // The WAL and SHM files exist now; an older build may have made them 0644.
        make_private(path).map_err(|err| StateError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("cannot make its files private (mode 0600): {err}"),
        })?;
        Ok(store)
    }

    /// An in-memory store (tests and benchmarks).
    pub fn in_memory() -> Result<Self, StateError> {
        Self::open(Path::new(":memory:"))
    }

    /// Creates a store at an older schema version (for migration tests).
    #[cfg(test)]
    pub(crate) fn create_at_version(path: &Path, version: i64) -> Result<Self, StateError> {
        let conn = Connection::open(path)?;
        let store = Self {
            conn: Mutex::new(conn),
            spool: None,
        };
        store.migrate(path, version)?;
        Ok(store)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens the transaction the store thread's next jobs share; `false`
    /// (logged) when it could not.
    fn begin_batch(&self) -> bool {
        self.lock()
            .execute_batch("BEGIN")
            .inspect_err(|err| tracing::error!(cause = %err, "state store: BEGIN failed"))
            .is_ok()
    }

    /// Commits the store thread's transaction; on failure (logged) rolls
    /// it back and answers `false`.
    fn commit_batch(&self) -> bool {
        let conn = self.lock();
        match conn.execute_batch("COMMIT") {
            Ok(()) => true,
            Err(err) => {
                tracing::error!(cause = %err, "state store: a batch could not be committed; its writes are lost");
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                false
            }
        }
    }

    /// Whether a transaction is open.
    fn in_transaction(&self) -> bool {
        !self.lock().is_autocommit()
    }

    /// The schema version of the open file.
    pub fn schema_version(&self) -> Result<i64, StateError> {
        Ok(self
            .lock()
            .query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    /// The next update id wanted from Telegram.
    pub fn offset(&self) -> Result<i64, StateError> {
        let value: Option<String> = self
            .lock()
            .query_row("SELECT value FROM meta WHERE key = 'offset'", [], |r| {
                r.get(0)
            })
            .optional()?;
        Ok(value.and_then(|v| v.parse().ok()).unwrap_or(0))
    }

    /// Stores the next update id wanted (never moves backwards).
    pub fn set_offset(&self, offset: i64) -> Result<(), StateError> {
        self.lock().execute(
            "INSERT INTO meta (key, value) VALUES ('offset', ?1)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value
             WHERE CAST(meta.value AS INTEGER) < CAST(excluded.value AS INTEGER)",
            params![offset.to_string()],
        )?;
        Ok(())
    }

    /// The conversation's agent session id.
    pub fn session(&self, to: Conversation) -> Result<Option<String>, StateError> {
        Ok(self
            .lock()
            .prepare_cached("SELECT session_id FROM sessions WHERE chat_id = ?1 AND topic = ?2")?
            .query_row(params![to.chat.0, to.topic_number()], |r| r.get(0))
            .optional()?)
    }

    /// Sets (or, with `None`, forgets) the conversation's agent session id.
    pub fn set_session(
        &self,
        to: Conversation,
        session_id: Option<&str>,
    ) -> Result<(), StateError> {
        match session_id {
            Some(id) => self.session_used(to, id)?,
            None => self.session_dropped(to)?,
        }
        let conn = self.lock();
        let (chat, topic) = (to.chat.0, to.topic_number());
        match session_id {
            Some(id) => conn
                .prepare_cached(
                    "INSERT INTO sessions (chat_id, topic, session_id, updated_at) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(chat_id, topic) DO UPDATE SET session_id = excluded.session_id, updated_at = excluded.updated_at",
                )?
                .execute(params![chat, topic, id, now_ms()])?,
            None => conn
                .prepare_cached("DELETE FROM sessions WHERE chat_id = ?1 AND topic = ?2")?
                .execute(params![chat, topic])?,
        };
        Ok(())
    }

    /// The conversations whose session was last used at or after `since`
    /// (Unix ms), most recent first: those a start warms again.
    pub fn recent_sessions(&self, since: i64) -> Result<Vec<Conversation>, StateError> {
        let conn = self.lock();
        let mut query = conn.prepare_cached(
            "SELECT chat_id, topic FROM sessions WHERE updated_at >= ?1
             ORDER BY updated_at DESC, rowid DESC",
        )?;
        let rows = query.query_map(params![since], |r| {
            let topic = i32::try_from(r.get::<_, i64>(1)?).unwrap_or_default();
            let topic = (topic != 0).then_some(ThreadId(MessageId(topic)));
            Ok(Conversation::new(ChatId(r.get(0)?), topic))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records a finished turn.
    pub fn record_turn(&self, t: &TurnRecord) -> Result<(), StateError> {
        self.lock().prepare_cached(
            "INSERT INTO turns (chat_id, turn, started_at, ended_at, outcome, finished, api_calls, cost_usd)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?.execute(params![
                t.chat_id,
                i64::try_from(t.turn).unwrap_or(i64::MAX),
                t.started_at,
                t.ended_at,
                t.outcome,
                t.finished,
                t.api_calls,
                t.cost_usd
            ],
        )?;
        Ok(())
    }

    /// Records a live agent process group of `chat_id`.
    pub fn record_group(&self, group: &AgentGroup, chat_id: i64) -> Result<(), StateError> {
        self.lock().execute(
            "INSERT INTO agent_groups (pgid, start_time, chat_id, started_at, boot_id)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(pgid) DO UPDATE SET start_time = excluded.start_time,
                chat_id = excluded.chat_id, started_at = excluded.started_at,
                boot_id = excluded.boot_id",
            params![
                group.pgid,
                group.start_time,
                chat_id,
                now_ms(),
                group.boot_id
            ],
        )?;
        Ok(())
    }

    /// The group was reaped.
    pub fn forget_group(&self, pgid: i64) -> Result<(), StateError> {
        self.lock()
            .execute("DELETE FROM agent_groups WHERE pgid = ?1", params![pgid])?;
        Ok(())
    }

    /// The recorded groups.
    pub fn groups(&self) -> Result<Vec<AgentGroup>, StateError> {
        let conn = self.lock();
        let mut stmt =
            conn.prepare("SELECT pgid, start_time, boot_id FROM agent_groups ORDER BY pgid")?;
        let rows = stmt.query_map([], |r| {
            Ok(AgentGroup {
                pgid: r.get(0)?,
                start_time: r.get(1)?,
                boot_id: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Makes every later inbox statement fail (for tests of error paths).
    #[cfg(test)]
    pub(crate) fn break_for_tests(&self) {
        let _ = self.lock().execute_batch("DROP TABLE inbox");
    }

    /// Turn records of a chat, oldest first: (outcome, finished).
    #[cfg(test)]
    pub(crate) fn turns_of(&self, chat_id: i64) -> Result<Vec<(String, bool)>, StateError> {
        let conn = self.lock();
        let mut stmt =
            conn.prepare("SELECT outcome, finished FROM turns WHERE chat_id = ?1 ORDER BY id")?;
        let rows = stmt.query_map(params![chat_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests;

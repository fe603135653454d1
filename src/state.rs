//! The state store: one SQLite file (WAL) holding the inbox of accepted
//! updates, each chat's agent session id, turn records and the update
//! offset. Versioned migrations run at open; a corrupt or unreadable file
//! is an error, never a silent new database.
//!
//! [`Store`] is the SQL, synchronous; [`Inbox`] runs it on the store's own
//! thread and documents the states of a message (`inbox.rs`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};
use teloxide::types::{ChatId, MessageId, ThreadId};

use crate::attachment::Attachment;
use crate::ids::Conversation;

mod backup;
mod inbox;

pub use backup::{BackupError, BackupReport, backup};
pub use inbox::{Disposition, Inbox};

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 7;

/// The migrations, in order: `MIGRATIONS[n]` takes version n to n + 1.
const MIGRATIONS: &[&str] = &[
    // 0 → 1: inbox, sessions, offset.
    "CREATE TABLE inbox (
        update_id  INTEGER PRIMARY KEY,
        chat_id    INTEGER NOT NULL,
        user_id    INTEGER NOT NULL,
        message_id INTEGER NOT NULL,
        text       TEXT NOT NULL,
        date       INTEGER NOT NULL,
        state      TEXT NOT NULL,
        updated_at INTEGER NOT NULL
     );
     CREATE INDEX inbox_open ON inbox(state) WHERE state IN ('queued', 'running', 'replied');
     CREATE TABLE sessions (
        chat_id    INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        updated_at INTEGER NOT NULL
     );
     CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
    // 1 → 2: turn records; which turn took an inbox message.
    "CREATE TABLE turns (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id     INTEGER NOT NULL,
        turn        INTEGER NOT NULL,
        started_at  INTEGER NOT NULL,
        ended_at    INTEGER NOT NULL,
        outcome     TEXT NOT NULL,
        finished    INTEGER NOT NULL,
        api_calls   INTEGER NOT NULL,
        cost_usd    REAL NOT NULL
     );
     ALTER TABLE inbox ADD COLUMN turn INTEGER;",
    // 2 → 3: "always in this chat" tool approvals.
    "CREATE TABLE permissions (
        chat_id    INTEGER NOT NULL,
        rule       TEXT NOT NULL,
        granted_by INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (chat_id, rule)
     );",
    // 3 → 4: forum topics (a session per topic) and the files a message
    // carried (JSON), so a recovered message fetches them again.
    "ALTER TABLE inbox ADD COLUMN topic INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE inbox ADD COLUMN files TEXT NOT NULL DEFAULT '';
     CREATE TABLE sessions_by_topic (
        chat_id    INTEGER NOT NULL,
        topic      INTEGER NOT NULL,
        session_id TEXT NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (chat_id, topic)
     );
     INSERT INTO sessions_by_topic (chat_id, topic, session_id, updated_at)
        SELECT chat_id, 0, session_id, updated_at FROM sessions;
     DROP TABLE sessions;
     ALTER TABLE sessions_by_topic RENAME TO sessions;",
    // 4 → 5: indexes for pruning by age; the agents' live process groups.
    "CREATE INDEX inbox_updated ON inbox(updated_at);
     CREATE INDEX turns_ended ON turns(ended_at);
     CREATE TABLE agent_groups (
        pgid        INTEGER PRIMARY KEY,
        start_time  INTEGER NOT NULL,
        chat_id     INTEGER NOT NULL,
        started_at  INTEGER NOT NULL
     );",
    // 5 → 6: "always" rules by kind: a tool (every call) or one exact Bash
    // command. The old Bash rules (`Bash(<first word>)`) allowed far more
    // than the chat agreed to and are dropped (see `OLD_BASH_RULES`).
    "CREATE TABLE always_allowed (
        chat_id    INTEGER NOT NULL,
        kind       TEXT NOT NULL CHECK (kind IN ('tool', 'bash_command')),
        value      TEXT NOT NULL,
        granted_by INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (chat_id, kind, value)
     );
     INSERT INTO always_allowed (chat_id, kind, value, granted_by, created_at)
        SELECT chat_id, 'tool', rule, granted_by, created_at FROM permissions
        WHERE rule <> 'Bash' AND substr(rule, 1, 5) <> 'Bash(';
     DROP TABLE permissions;",
    // 6 → 7: the boot each agent process group was recorded in (a group
    // of an earlier boot is never killed; rows from before have none).
    "ALTER TABLE agent_groups ADD COLUMN boot_id TEXT NOT NULL DEFAULT '';",
];

/// The migration (from this version) that drops the old Bash "always"
/// rules, and the query counting them first, for its one log line.
const OLD_BASH_RULES: (i64, &str) = (
    5,
    "SELECT COUNT(*) FROM permissions WHERE rule = 'Bash' OR substr(rule, 1, 5) = 'Bash('",
);

/// What "always in this chat" lets run without asking.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AlwaysRule {
    /// Every call of this tool (any tool but Bash).
    Tool(String),
    /// Bash running exactly this command (its whitespace runs collapsed).
    BashCommand(String),
}

impl AlwaysRule {
    /// The stored kind and value.
    fn stored(&self) -> (&'static str, &str) {
        match self {
            Self::Tool(name) => ("tool", name),
            Self::BashCommand(command) => ("bash_command", command),
        }
    }

    /// The rule a stored row holds; `None` for a kind this build does not know.
    fn from_stored(kind: &str, value: String) -> Option<Self> {
        match kind {
            "tool" => Some(Self::Tool(value)),
            "bash_command" => Some(Self::BashCommand(value)),
            _ => None,
        }
    }
}

/// An "always" rule and who granted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlwaysGrant {
    /// What runs without asking.
    pub rule: AlwaysRule,
    /// The Telegram user who pressed "Always in this chat".
    pub granted_by: i64,
}

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

/// Inbox states that are finished, and so may be pruned.
const FINISHED_STATES: &str = "('done', 'dropped', 'reported')";

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
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "queued" => Self::Queued,
            "running" => Self::Running,
            "replied" => Self::Replied,
            "reported" => Self::Reported,
            "dropped" => Self::Dropped,
            _ => Self::Done,
        }
    }
}

/// An accepted message.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InboxMessage {
    /// Telegram's update id (the key).
    pub update_id: i64,
    /// The chat.
    pub chat_id: i64,
    /// The forum topic (`message_thread_id`), 0 for none.
    pub topic: i64,
    /// The sender.
    pub user_id: i64,
    /// The message, for replies and reactions.
    pub message_id: i64,
    /// The text (a file's caption, or empty).
    pub text: String,
    /// The files it carried.
    pub files: Vec<Attachment>,
    /// Telegram's date of the message (unix seconds).
    pub date: i64,
}

impl InboxMessage {
    /// Its conversation.
    pub fn conversation(&self) -> Conversation {
        let topic = i32::try_from(self.topic)
            .ok()
            .filter(|&t| t != 0)
            .map(|t| ThreadId(MessageId(t)));
        Conversation::new(ChatId(self.chat_id), topic)
    }
}

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

/// An inbox row with its state.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxRow {
    /// The message.
    pub message: InboxMessage,
    /// Where it is.
    pub state: InboxState,
}

/// One finished turn, for the record.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRecord {
    /// The chat.
    pub chat_id: i64,
    /// The turn number in its process.
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
/// store thread, through [`Inbox`]; tests and start-up checks may call it
/// directly.
pub struct Store {
    /// The one connection.
    conn: Mutex<Connection>,
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
    #[doc(hidden)]
    pub fn create_at_version(path: &Path, version: i64) -> Result<Self, StateError> {
        let conn = Connection::open(path)?;
        let store = Self {
            conn: Mutex::new(conn),
        };
        store.migrate(path, version)?;
        Ok(store)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn migrate(&self, path: &Path, target: i64) -> Result<(), StateError> {
        let mut conn = self.lock();
        let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if found < 0 {
            return Err(StateError::Corrupt {
                path: path.to_path_buf(),
                detail: format!("schema version {found}"),
            });
        }
        if found > SCHEMA_VERSION {
            return Err(StateError::Newer {
                path: path.to_path_buf(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        for version in found..target {
            let tx = conn.transaction()?;
            let dropped: i64 = if version == OLD_BASH_RULES.0 {
                tx.query_row(OLD_BASH_RULES.1, [], |r| r.get(0))?
            } else {
                0
            };
            tx.execute_batch(MIGRATIONS[usize::try_from(version).unwrap_or(0)])?;
            tx.pragma_update(None, "user_version", version + 1)?;
            tx.commit()?;
            tracing::info!(path = %path.display(), from = version, to = version + 1, "state store migrated");
            if dropped > 0 {
                tracing::warn!(path = %path.display(), dropped, "dropped {dropped} \"always in this chat\" Bash rule(s) of the old shape (the command's first word); those commands ask again");
            }
        }
        Ok(())
    }

    /// The schema version of the open file.
    pub fn schema_version(&self) -> Result<i64, StateError> {
        Ok(self
            .lock()
            .query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    /// Records an accepted message; `false` when its update id was already
    /// there (a redelivery), which must not be handled again.
    pub fn accept(&self, m: &InboxMessage) -> Result<bool, StateError> {
        // Cached, as every statement a turn runs: parsing one again cost
        // about as much as running it.
        let n = self.lock().prepare_cached(
            "INSERT OR IGNORE INTO inbox (update_id, chat_id, user_id, message_id, text, date, state, updated_at, topic, files)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7, ?8, ?9)",
        )?.execute(
            params![m.update_id, m.chat_id, m.user_id, m.message_id, m.text, m.date, now_ms(), m.topic, files_json(&m.files)],
        )?;
        Ok(n == 1)
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

    /// Messages whose handling was not finished, oldest first.
    pub fn unfinished(&self) -> Result<Vec<InboxRow>, StateError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT update_id, chat_id, user_id, message_id, text, date, state, topic, files FROM inbox
             WHERE state IN ('queued', 'running', 'replied') ORDER BY update_id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(InboxRow {
                message: InboxMessage {
                    update_id: r.get(0)?,
                    chat_id: r.get(1)?,
                    user_id: r.get(2)?,
                    message_id: r.get(3)?,
                    text: r.get(4)?,
                    date: r.get(5)?,
                    topic: r.get(7)?,
                    files: files_from_json(&r.get::<_, String>(8)?),
                },
                state: InboxState::parse(&r.get::<_, String>(6)?),
            })
        })?;
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

    /// Remembers that `rule` runs without asking in the chat, granted by
    /// `granted_by` (the first grant of a rule is kept).
    pub fn allow_always(
        &self,
        chat_id: i64,
        rule: &AlwaysRule,
        granted_by: i64,
    ) -> Result<(), StateError> {
        let (kind, value) = rule.stored();
        self.lock().execute(
            "INSERT INTO always_allowed (chat_id, kind, value, granted_by, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(chat_id, kind, value) DO NOTHING",
            params![chat_id, kind, value, granted_by, now_ms()],
        )?;
        Ok(())
    }

    /// The chat's "always" rules, oldest first.
    pub fn always_rules(&self, chat_id: i64) -> Result<Vec<AlwaysGrant>, StateError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT kind, value, granted_by FROM always_allowed WHERE chat_id = ?1
             ORDER BY created_at, kind, value",
        )?;
        let rows = stmt.query_map(params![chat_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        let mut grants = Vec::new();
        for row in rows {
            let (kind, value, granted_by) = row?;
            if let Some(rule) = AlwaysRule::from_stored(&kind, value) {
                grants.push(AlwaysGrant { rule, granted_by });
            }
        }
        Ok(grants)
    }

    /// Forgets the chat's "always" rules; returns how many there were.
    pub fn clear_always(&self, chat_id: i64) -> Result<usize, StateError> {
        Ok(self.lock().execute(
            "DELETE FROM always_allowed WHERE chat_id = ?1",
            params![chat_id],
        )?)
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
        let tx = conn.transaction()?;
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
    pub fn turns_of(&self, chat_id: i64) -> Result<Vec<(String, bool)>, StateError> {
        let conn = self.lock();
        let mut stmt =
            conn.prepare("SELECT outcome, finished FROM turns WHERE chat_id = ?1 ORDER BY id")?;
        let rows = stmt.query_map(params![chat_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(update_id: i64, chat_id: i64) -> InboxMessage {
        InboxMessage {
            update_id,
            chat_id,
            user_id: 7,
            message_id: update_id * 10,
            text: format!("m{update_id}"),
            date: 1,
            ..InboxMessage::default()
        }
    }

    #[test]
    fn an_update_is_accepted_once() {
        let store = Store::in_memory().unwrap();
        assert!(store.accept(&msg(1, 5)).unwrap());
        assert!(
            !store.accept(&msg(1, 5)).unwrap(),
            "a redelivery is not new"
        );
        assert_eq!(store.unfinished().unwrap().len(), 1);
    }

    #[test]
    fn states_move_and_finished_rows_leave_the_open_set() {
        let store = Store::in_memory().unwrap();
        for id in 1..=4 {
            store.accept(&msg(id, 5)).unwrap();
        }
        store.start_turn(&[1, 2], 1).unwrap();
        store.mark(&[2], InboxState::Replied).unwrap();
        store.mark(&[3], InboxState::Done).unwrap();
        let open: Vec<(i64, InboxState)> = store
            .unfinished()
            .unwrap()
            .into_iter()
            .map(|r| (r.message.update_id, r.state))
            .collect();
        assert_eq!(
            open,
            vec![
                (1, InboxState::Running),
                (2, InboxState::Replied),
                (4, InboxState::Queued)
            ]
        );
    }

    #[test]
    fn the_offset_never_moves_backwards() {
        let store = Store::in_memory().unwrap();
        assert_eq!(store.offset().unwrap(), 0);
        store.set_offset(10).unwrap();
        store.set_offset(4).unwrap();
        assert_eq!(store.offset().unwrap(), 10);
        store.set_offset(11).unwrap();
        assert_eq!(store.offset().unwrap(), 11);
    }

    #[test]
    fn sessions_are_kept_and_forgotten() {
        let store = Store::in_memory().unwrap();
        store.set_session(ChatId(5).into(), Some("s1")).unwrap();
        store.set_session(ChatId(5).into(), Some("s2")).unwrap();
        assert_eq!(
            store.session(ChatId(5).into()).unwrap().as_deref(),
            Some("s2")
        );
        let topic = Conversation::new(ChatId(5), Some(ThreadId(MessageId(42))));
        store.set_session(topic, Some("t1")).unwrap();
        assert_eq!(store.session(topic).unwrap().as_deref(), Some("t1"));
        assert_eq!(
            store.session(ChatId(5).into()).unwrap().as_deref(),
            Some("s2")
        );
        store.set_session(ChatId(5).into(), None).unwrap();
        assert_eq!(store.session(ChatId(5).into()).unwrap(), None);
        assert_eq!(store.session(topic).unwrap().as_deref(), Some("t1"));
    }

    #[test]
    fn a_message_keeps_its_topic_and_files() {
        let store = Store::in_memory().unwrap();
        let mut m = msg(1, -100);
        m.topic = 42;
        m.files = vec![Attachment {
            kind: crate::attachment::FileKind::Voice,
            file_id: "f1".into(),
            name: None,
            size: 9,
        }];
        store.accept(&m).unwrap();
        let row = &store.unfinished().unwrap()[0];
        assert_eq!(row.message, m);
        assert_eq!(row.message.conversation().key(), "-100_42");
    }

    #[test]
    fn always_rules_are_kept_per_chat_and_cleared() {
        let store = Store::in_memory().unwrap();
        let git = AlwaysRule::BashCommand("git status".into());
        store.allow_always(1, &git, 7).unwrap();
        store.allow_always(1, &git, 8).unwrap();
        store
            .allow_always(1, &AlwaysRule::Tool("WebFetch".into()), 7)
            .unwrap();
        store
            .allow_always(2, &AlwaysRule::Tool("Read".into()), 8)
            .unwrap();
        let rules = store.always_rules(1).unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(
            rules[0],
            AlwaysGrant {
                rule: git,
                granted_by: 7
            },
            "the first grant is kept"
        );
        assert_eq!(
            store.always_rules(2).unwrap()[0].rule,
            AlwaysRule::Tool("Read".into())
        );
        assert_eq!(store.clear_always(1).unwrap(), 2);
        assert!(store.always_rules(1).unwrap().is_empty());
        assert_eq!(store.always_rules(2).unwrap().len(), 1);
    }

    /// What a closure logged, as text.
    fn logged(run: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Sink(std::sync::Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, run);
        let bytes = sink.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn old_bash_rules_are_dropped_at_the_upgrade_with_one_log_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let old = Store::create_at_version(&path, 5).unwrap();
            // Rules as version 5 stored them: a Bash rule was the command's
            // first word; any other tool, its name.
            old.lock()
                .execute_batch(
                    "INSERT INTO permissions (chat_id, rule, granted_by, created_at) VALUES
                        (1, 'Bash(git)', 7, 1), (1, 'WebFetch', 7, 2),
                        (2, 'Bash(rm)', 8, 3), (2, 'mcp__files__read', 8, 4);",
                )
                .unwrap();
        }
        let mut store = None;
        let log = logged(|| store = Some(Store::open(&path).unwrap()));
        let store = store.unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        let rules = |chat| -> Vec<AlwaysRule> {
            store
                .always_rules(chat)
                .unwrap()
                .into_iter()
                .map(|g| g.rule)
                .collect()
        };
        assert_eq!(rules(1), vec![AlwaysRule::Tool("WebFetch".into())]);
        assert_eq!(rules(2), vec![AlwaysRule::Tool("mcp__files__read".into())]);
        assert_eq!(store.always_rules(1).unwrap()[0].granted_by, 7);
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("old shape")).collect();
        assert_eq!(lines.len(), 1, "{log}");
        assert!(lines[0].contains("dropped 2 "), "{log}");
        // A file with no old rules says nothing of them.
        let fresh = dir.path().join("fresh.db");
        let log = logged(|| drop(Store::open(&fresh).unwrap()));
        assert!(!log.contains("old shape"), "{log}");
    }

    #[test]
    fn a_file_written_by_the_previous_schema_is_migrated_with_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let old = Store::create_at_version(&path, 1).unwrap();
            assert_eq!(old.schema_version().unwrap(), 1);
            // Written with version 1's own columns.
            old.lock()
                .execute_batch(
                    "INSERT INTO inbox (update_id, chat_id, user_id, message_id, text, date, state, updated_at)
                     VALUES (3, 9, 7, 30, 'm3', 1, 'queued', 0);
                     INSERT INTO sessions (chat_id, session_id, updated_at) VALUES (9, 'kept', 0);",
                )
                .unwrap();
            old.set_offset(4).unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(store.unfinished().unwrap()[0].message.text, "m3");
        assert_eq!(
            store.session(ChatId(9).into()).unwrap().as_deref(),
            Some("kept")
        );
        assert_eq!(store.offset().unwrap(), 4);
        store.start_turn(&[3], 1).unwrap();
        store
            .record_turn(&TurnRecord {
                chat_id: 9,
                turn: 1,
                started_at: 1,
                ended_at: 2,
                outcome: "completed".into(),
                finished: true,
                api_calls: 1,
                cost_usd: 0.0,
            })
            .unwrap();
        assert_eq!(
            store.turns_of(9).unwrap(),
            vec![("completed".to_string(), true)]
        );
    }

    #[test]
    fn the_state_file_and_its_wal_and_shm_are_mode_0600() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("private.db");
        // An existing file another build left readable by all.
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let store = Store::open(&path).unwrap();
        store.accept(&msg(1, 5)).unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let file = dir.path().join(format!("private.db{suffix}"));
            let mode = std::fs::metadata(&file)
                .unwrap_or_else(|e| panic!("{} exists: {e}", file.display()))
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{}: {mode:o}", file.display());
        }
        // A new file too.
        let fresh = dir.path().join("fresh.db");
        Store::open(&fresh).unwrap().accept(&msg(1, 5)).unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }

    /// Backdates an inbox row and the chat's turn records by `age`.
    fn backdate(store: &Store, update_id: i64, chat_id: i64, age: std::time::Duration) {
        let then = now_ms() - i64::try_from(age.as_millis()).unwrap();
        let conn = store.lock();
        conn.execute(
            "UPDATE inbox SET updated_at = ?1 WHERE update_id = ?2",
            params![then, update_id],
        )
        .unwrap();
        conn.execute(
            "UPDATE turns SET ended_at = ?1 WHERE chat_id = ?2",
            params![then, chat_id],
        )
        .unwrap();
    }

    fn record(store: &Store, chat_id: i64) {
        store
            .record_turn(&TurnRecord {
                chat_id,
                turn: 1,
                started_at: now_ms(),
                ended_at: now_ms(),
                outcome: "completed".into(),
                finished: true,
                api_calls: 1,
                cost_usd: 0.0,
            })
            .unwrap();
    }

    #[test]
    fn prune_removes_finished_rows_and_turns_older_than_the_retention() {
        let day = std::time::Duration::from_secs(86_400);
        let store = Store::in_memory().unwrap();
        for (id, chat) in [(1, 10), (2, 20), (3, 30), (4, 40)] {
            store.accept(&msg(id, chat)).unwrap();
        }
        store.mark(&[1, 2], InboxState::Done).unwrap();
        store.mark(&[4], InboxState::Reported).unwrap();
        record(&store, 10);
        record(&store, 20);
        // Old: 1 (done), 3 (still queued), 4 (reported) and chat 10's turn.
        backdate(&store, 1, 10, 31 * day);
        backdate(&store, 3, 30, 31 * day);
        backdate(&store, 4, 40, 31 * day);
        let pruned = store.prune(30 * day).unwrap();
        assert_eq!(pruned, Pruned { inbox: 2, turns: 1 });
        let left: Vec<(String, i64)> = store.counts().unwrap();
        assert_eq!(
            left,
            vec![("done".into(), 1), ("queued".into(), 1)],
            "the fresh finished row and the old unfinished one stay"
        );
        assert!(
            store.turns_of(10).unwrap().is_empty(),
            "the old turn is gone"
        );
        assert_eq!(store.turns_of(20).unwrap().len(), 1, "the fresh turn stays");
    }

    #[test]
    fn a_reset_of_update_ids_moves_the_offset_back_and_accepts_reused_ids() {
        let store = Store::in_memory().unwrap();
        // The old sequence: id 500 handled, 900 still queued.
        store.accept(&msg(500, 1)).unwrap();
        store.mark(&[500], InboxState::Done).unwrap();
        store.accept(&msg(900, 1)).unwrap();
        store.set_offset(5_000_000).unwrap();
        // Telegram restarts at 400: 500 comes again as a new update.
        assert_eq!(store.reset_update_ids(400).unwrap(), 1);
        assert_eq!(store.offset().unwrap(), 400, "the offset moved back");
        assert!(store.accept(&msg(500, 2)).unwrap(), "a reused id is new");
        store.set_offset(501).unwrap();
        assert_eq!(store.offset().unwrap(), 501);
        let open: Vec<i64> = store
            .unfinished()
            .unwrap()
            .iter()
            .map(|r| r.message.update_id)
            .collect();
        assert_eq!(open, vec![500, 900], "the unfinished old row is kept");
    }

    #[test]
    fn agent_groups_are_recorded_and_forgotten() {
        let store = Store::in_memory().unwrap();
        let group = |pgid, start_time, boot: &str| AgentGroup {
            pgid,
            start_time,
            boot_id: boot.into(),
        };
        store.record_group(&group(4242, 777, "boot-a"), 1).unwrap();
        store.record_group(&group(4343, 888, "boot-b"), 2).unwrap();
        store.forget_group(4242).unwrap();
        assert_eq!(store.groups().unwrap(), vec![group(4343, 888, "boot-b")]);
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_a_new_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junk.db");
        std::fs::write(
            &path,
            b"this is not a database, it is a shopping list\n".repeat(200),
        )
        .unwrap();
        let err = Store::open(&path).unwrap_err();
        assert!(matches!(err, StateError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("junk.db"), "{err}");
        assert!(
            std::fs::read(&path)
                .unwrap()
                .starts_with(b"this is not a database"),
            "the file is left as it was"
        );
    }

    #[test]
    fn an_unreadable_path_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = Store::open(dir.path()).unwrap_err();
        assert!(
            matches!(err, StateError::Open { .. } | StateError::Corrupt { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_negative_schema_version_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("odd.db");
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", -3)
            .unwrap();
        assert!(matches!(
            Store::open(&path).unwrap_err(),
            StateError::Corrupt { .. }
        ));
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
                .unwrap();
        }
        assert!(matches!(
            Store::open(&path).unwrap_err(),
            StateError::Newer { .. }
        ));
    }
}

//! The schema: its version, the migrations that take an older file to it,
//! and [`Store::migrate`], run at open.

use std::path::Path;

use super::{StateError, Store};

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 17;

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
    // 7 → 8: the rest of the message as the intake read it, so recovery
    // reads it back whole: where it was written (a private chat or a
    // group), what it asks (empty: the agent; else a command's word, its
    // arguments in `text`) and its album. For the rows written before,
    // the place is what the chat id says once here (the Bot API gives
    // groups negative ids); nothing reading a row guesses it.
    "ALTER TABLE inbox ADD COLUMN place TEXT NOT NULL DEFAULT 'private';
     ALTER TABLE inbox ADD COLUMN ask TEXT NOT NULL DEFAULT '';
     ALTER TABLE inbox ADD COLUMN album TEXT;
     UPDATE inbox SET place = 'group' WHERE chat_id < 0;",
    // 8 → 9: schedules, and the claim of each run: one row per schedule
    // and slot (the unique key), written in the same transaction as the
    // run's inbox row (update id: minus the claim's id, since Telegram's
    // are positive), so a slot runs at most once and is never lost.
    "CREATE TABLE schedules (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        operator_name TEXT UNIQUE,
        chat_id       INTEGER NOT NULL,
        topic         INTEGER NOT NULL DEFAULT 0,
        timing        TEXT NOT NULL,
        tz            TEXT NOT NULL,
        prompt        TEXT NOT NULL,
        made_by       INTEGER NOT NULL,
        origin        TEXT NOT NULL CHECK (origin IN ('operator', 'chat', 'agent')),
        created_at    INTEGER NOT NULL,
        last_slot     INTEGER NOT NULL
     );
     CREATE INDEX schedules_by_conversation ON schedules(chat_id, topic);
     CREATE TABLE schedule_runs (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        schedule_id INTEGER NOT NULL,
        slot        INTEGER NOT NULL,
        missed      INTEGER NOT NULL,
        claimed_at  INTEGER NOT NULL,
        UNIQUE (schedule_id, slot)
     );",
    // 9 → 10: a message whose turn was refused for a usage limit is parked
    // until it runs again.
    "ALTER TABLE inbox ADD COLUMN due_at INTEGER;",
    // 10 → 11: each conversation's model, its sessions' history and what
    // its turns used (issue 22; `conversations.rs`).
    super::conversations::MIGRATION,
    // 11 → 12: messages waiting for Telegram, and each chat's highest
    // known message id (issue 34; `outgoing.rs`).
    super::outgoing::MIGRATION,
    // 12 → 13: "always" rules per conversation (chat and topic) and the
    // project it was in when granted, so a rule granted in one project
    // never runs in another; a kind for a whole ACP request. A rule of
    // before was the chat's, project unknown: it is kept only for the
    // chat's main conversation (topic 0) and when none of the chat's
    // conversations ever chose a project (see `RULES_PER_PROJECT`).
    "CREATE TABLE always_rules (
        chat_id    INTEGER NOT NULL,
        topic      INTEGER NOT NULL,
        project    TEXT NOT NULL,
        kind       TEXT NOT NULL CHECK (kind IN ('tool', 'bash_command', 'request')),
        value      TEXT NOT NULL,
        granted_by INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (chat_id, topic, project, kind, value)
     );
     INSERT INTO always_rules (chat_id, topic, project, kind, value, granted_by, created_at)
        SELECT a.chat_id, 0, '', a.kind, a.value, a.granted_by, a.created_at
        FROM always_allowed a
        WHERE NOT EXISTS (SELECT 1 FROM choices c WHERE c.chat_id = a.chat_id AND c.project <> '');
     DROP TABLE always_allowed;",
    // 13 → 14: files and questions wait for Telegram in `outgoing` too:
    // what they carry besides a text (issue 34; `outgoing.rs`).
    super::outgoing::MIGRATION_KINDS,
    // 14 → 15: how Telegram names each message's sender, for a group's
    // prompt and questions after a restart (a row of before names none).
    "ALTER TABLE inbox ADD COLUMN author_name TEXT NOT NULL DEFAULT '';
     ALTER TABLE inbox ADD COLUMN author_username TEXT;",
    // 15 → 16: topics of a private chat waiting for a name (`topics.rs`).
    super::topics::MIGRATION,
    // 16 → 17: conversations handed off to the host (`handoffs.rs`).
    super::handoffs::MIGRATION,
];

/// The migration (from this version) that drops the old Bash "always"
/// rules, and the query counting them first, for its one log line.
const OLD_BASH_RULES: (i64, &str) = (
    5,
    "SELECT COUNT(*) FROM permissions WHERE rule = 'Bash' OR substr(rule, 1, 5) = 'Bash('",
);

/// The migration (from this version) that keys "always" rules on the
/// conversation and its project, and the query counting the rules it
/// drops (those of a chat that chose a project), for its one log line.
const RULES_PER_PROJECT: (i64, &str) = (
    12,
    "SELECT COUNT(*) FROM always_allowed a
     WHERE EXISTS (SELECT 1 FROM choices c WHERE c.chat_id = a.chat_id AND c.project <> '')",
);

impl Store {
    /// Takes the open file from its version to `target`, one transaction
    /// per step; a negative version is corrupt, a newer one refused.
    pub(super) fn migrate(&self, path: &Path, target: i64) -> Result<(), StateError> {
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
            let counted = [OLD_BASH_RULES, RULES_PER_PROJECT]
                .into_iter()
                .find(|(from, _)| *from == version);
            let dropped: i64 = match counted {
                Some((_, query)) => tx.query_row(query, [], |r| r.get(0))?,
                None => 0,
            };
            tx.execute_batch(MIGRATIONS[usize::try_from(version).unwrap_or(0)])?;
            tx.pragma_update(None, "user_version", version + 1)?;
            tx.commit()?;
            tracing::debug!(path = %path.display(), from = version, to = version + 1, "state store migration step done");
            if dropped > 0 && version == OLD_BASH_RULES.0 {
                tracing::warn!(path = %path.display(), dropped, "dropped {dropped} \"always in this chat\" Bash rule(s) of the old shape (the command's first word); those commands ask again");
            } else if dropped > 0 {
                tracing::warn!(path = %path.display(), dropped, "dropped {dropped} \"always in this chat\" rule(s) of chats that chose a project (the project each was granted in is not known); those tools ask again");
            }
        }
        // One line for the whole way, not one per step (a new file takes
        // them all).
        if found < target {
            tracing::info!(path = %path.display(), from = found, to = target, "state store migrated");
        }
        Ok(())
    }
}

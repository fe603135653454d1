//! What a conversation chose and used: its model (`/model`), the sessions
//! it had (`/sessions`, `/fork`) and what its turns cost (`/usage`).
//!
//! The current session stays in `sessions` (one per conversation, as
//! before); `session_history` keeps every session a conversation used, so
//! `/sessions` can offer an earlier one and `/new` or a fork loses none.
//! `choices` holds the conversation's model, a fork asked for its next
//! session, and the first words of its latest turn (a new session's label).

use rusqlite::{OptionalExtension, Row, params};

use super::{StateError, Store, now_ms};
use crate::ids::Conversation;

/// The migration this file's tables come with (schema 9 → 10); listed last
/// in `schema.rs`, so renumbering it is moving one line.
pub(super) const MIGRATION: &str = "CREATE TABLE choices (
        chat_id       INTEGER NOT NULL,
        topic         INTEGER NOT NULL,
        model         TEXT,
        project       TEXT NOT NULL DEFAULT '',
        fork          INTEGER NOT NULL DEFAULT 0,
        opening_words TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (chat_id, topic)
     );
     CREATE TABLE session_history (
        chat_id     INTEGER NOT NULL,
        topic       INTEGER NOT NULL,
        project     TEXT NOT NULL DEFAULT '',
        session_id  TEXT NOT NULL,
        started_at  INTEGER NOT NULL,
        last_used   INTEGER NOT NULL,
        turns       INTEGER NOT NULL,
        first_words TEXT NOT NULL,
        PRIMARY KEY (chat_id, topic, session_id)
     );
     CREATE INDEX session_history_latest ON session_history(chat_id, topic, project, last_used);
     INSERT INTO session_history (chat_id, topic, session_id, started_at, last_used, turns, first_words)
        SELECT chat_id, topic, session_id, updated_at, updated_at, 0, '' FROM sessions;
     CREATE TABLE usage (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id       INTEGER NOT NULL,
        topic         INTEGER NOT NULL,
        ended_at      INTEGER NOT NULL,
        api_calls     INTEGER NOT NULL,
        input_tokens  INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        cost_usd      REAL NOT NULL
     );
     CREATE INDEX usage_ended ON usage(ended_at);
     CREATE INDEX usage_by_conversation ON usage(chat_id, topic, ended_at);";

/// How many characters of a session's first message label it.
pub const FIRST_WORDS: usize = 48;

/// How many sessions `/sessions` lists.
pub const SESSIONS_LISTED: usize = 10;

/// What a turn needs to open a session: which to resume, with which model,
/// and whether as a fork.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Opening {
    /// The agent session id to resume.
    pub resume: Option<String>,
    /// The conversation's model (`None`: the configured one).
    pub model: Option<String>,
    /// Resume as a copy (`--fork-session`): the copy gets its own id.
    pub fork: bool,
    /// The conversation's project (`/project`); empty: none.
    pub project: String,
}

/// One session of a conversation, as `/sessions` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    /// The agent's session id.
    pub id: String,
    /// When its first turn ended (unix ms).
    pub started_at: i64,
    /// When a turn last used it (unix ms).
    pub last_used: i64,
    /// Turns that used it.
    pub turns: i64,
    /// The start of its first message.
    pub first_words: String,
    /// Whether it is the one the next turn resumes.
    pub current: bool,
}

/// What one turn used, as its agent reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TurnUsage {
    /// Model calls (the agent's `num_turns`).
    pub api_calls: u32,
    /// Tokens read (input, cache writes and reads).
    pub input_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
    /// USD.
    pub cost_usd: f64,
}

/// Sums of turns over a period.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UsageTotals {
    /// Turns with a result.
    pub turns: i64,
    /// Model calls.
    pub api_calls: i64,
    /// Tokens read.
    pub input_tokens: i64,
    /// Tokens written.
    pub output_tokens: i64,
    /// USD.
    pub cost_usd: f64,
}

/// Today (UTC), the last 7 and the last 30 days.
pub type UsagePeriods = [UsageTotals; 3];

/// The starts of the periods of [`UsagePeriods`], for `now` (unix ms).
pub fn period_starts(now: i64) -> [i64; 3] {
    const DAY: i64 = 86_400_000;
    [now - now.rem_euclid(DAY), now - 7 * DAY, now - 30 * DAY]
}

/// The first [`FIRST_WORDS`] characters of `text`, its whitespace runs
/// collapsed.
pub fn first_words(text: &str) -> String {
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match words.char_indices().nth(FIRST_WORDS) {
        Some((cut, _)) => format!("{}…", &words[..cut]),
        None => words,
    }
}

const TOTALS: &str = "SELECT COUNT(*), COALESCE(SUM(api_calls), 0), COALESCE(SUM(input_tokens), 0),
     COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cost_usd), 0.0) FROM usage";

fn totals(r: &Row<'_>) -> rusqlite::Result<UsageTotals> {
    Ok(UsageTotals {
        turns: r.get(0)?,
        api_calls: r.get(1)?,
        input_tokens: r.get(2)?,
        output_tokens: r.get(3)?,
        cost_usd: r.get(4)?,
    })
}

impl Store {
    /// The conversation's model, when it chose one.
    pub fn model(&self, to: Conversation) -> Result<Option<String>, StateError> {
        Ok(self
            .lock()
            .prepare_cached("SELECT model FROM choices WHERE chat_id = ?1 AND topic = ?2")?
            .query_row(params![to.chat.0, to.topic_number()], |r| r.get(0))
            .optional()?
            .flatten())
    }

    /// Sets (or, with `None`, forgets) the conversation's model.
    pub fn set_model(&self, to: Conversation, model: Option<&str>) -> Result<(), StateError> {
        self.lock()
            .prepare_cached(
                "INSERT INTO choices (chat_id, topic, model) VALUES (?1, ?2, ?3)
                 ON CONFLICT(chat_id, topic) DO UPDATE SET model = excluded.model",
            )?
            .execute(params![to.chat.0, to.topic_number(), model])?;
        Ok(())
    }

    /// The conversation's project (empty: none).
    pub fn project(&self, to: Conversation) -> Result<String, StateError> {
        Ok(self
            .lock()
            .prepare_cached("SELECT project FROM choices WHERE chat_id = ?1 AND topic = ?2")?
            .query_row(params![to.chat.0, to.topic_number()], |r| r.get(0))
            .optional()?
            .unwrap_or_default())
    }

    /// Moves the conversation to `project` (empty: none): its current
    /// session becomes the one it last used there, if any; the one it
    /// leaves stays in that project's history.
    pub fn set_project(&self, to: Conversation, project: &str) -> Result<(), StateError> {
        let mut conn = self.lock();
        let tx = conn.savepoint()?;
        let (chat, topic) = (to.chat.0, to.topic_number());
        tx.execute(
            "INSERT INTO choices (chat_id, topic, project) VALUES (?1, ?2, ?3)
             ON CONFLICT(chat_id, topic) DO UPDATE SET project = excluded.project, fork = 0",
            params![chat, topic, project],
        )?;
        let last: Option<String> = tx
            .query_row(
                "SELECT session_id FROM session_history WHERE chat_id = ?1 AND topic = ?2 AND project = ?3
                 ORDER BY last_used DESC, rowid DESC LIMIT 1",
                params![chat, topic, project],
                |r| r.get(0),
            )
            .optional()?;
        match last {
            Some(id) => tx.execute(
                "INSERT INTO sessions (chat_id, topic, session_id, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(chat_id, topic) DO UPDATE SET session_id = excluded.session_id, updated_at = excluded.updated_at",
                params![chat, topic, id, now_ms()],
            )?,
            None => tx.execute(
                "DELETE FROM sessions WHERE chat_id = ?1 AND topic = ?2",
                params![chat, topic],
            )?,
        };
        tx.commit()?;
        Ok(())
    }

    /// What the conversation's next session opens with.
    pub fn opening(&self, to: Conversation) -> Result<Opening, StateError> {
        let resume = self.session(to)?;
        let (model, fork, project) = self
            .lock()
            .prepare_cached(
                "SELECT model, fork, project FROM choices WHERE chat_id = ?1 AND topic = ?2",
            )?
            .query_row(params![to.chat.0, to.topic_number()], |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?,
                    r.get::<_, bool>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .optional()?
            .unwrap_or_default();
        Ok(Opening {
            fork: fork && resume.is_some(),
            resume,
            model,
            project,
        })
    }

    /// Notes the first words of the conversation's latest turn: a session
    /// that turn starts is labelled with them.
    pub fn note_opening(&self, to: Conversation, text: &str) -> Result<(), StateError> {
        self.lock()
            .prepare_cached(
                "INSERT INTO choices (chat_id, topic, opening_words) VALUES (?1, ?2, ?3)
                 ON CONFLICT(chat_id, topic) DO UPDATE SET opening_words = excluded.opening_words",
            )?
            .execute(params![to.chat.0, to.topic_number(), first_words(text)])?;
        Ok(())
    }

    /// A turn used session `id` (called before it becomes the current one):
    /// its history row is made or counted. A new session that a fork made
    /// is labelled as the session it copied; the fork is then done.
    pub(super) fn session_used(&self, to: Conversation, id: &str) -> Result<(), StateError> {
        let mut conn = self.lock();
        let tx = conn.savepoint()?;
        let (chat, topic) = (to.chat.0, to.topic_number());
        let (fork, words, project): (bool, String, String) = tx
            .query_row(
                "SELECT fork, opening_words, project FROM choices WHERE chat_id = ?1 AND topic = ?2",
                params![chat, topic],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?
            .unwrap_or_default();
        let old: Option<String> = tx
            .query_row(
                "SELECT session_id FROM sessions WHERE chat_id = ?1 AND topic = ?2",
                params![chat, topic],
                |r| r.get(0),
            )
            .optional()?;
        let forked = fork && old.as_deref().is_some_and(|old| old != id);
        let label = match (&old, forked) {
            (Some(old), true) => tx
                .query_row(
                    "SELECT first_words FROM session_history WHERE chat_id = ?1 AND topic = ?2 AND session_id = ?3",
                    params![chat, topic, old],
                    |r| r.get(0),
                )
                .optional()?
                .unwrap_or(words),
            _ => words,
        };
        let now = now_ms();
        tx.execute(
            "INSERT INTO session_history (chat_id, topic, project, session_id, started_at, last_used, turns, first_words)
             VALUES (?1, ?2, ?6, ?3, ?4, ?4, 1, ?5)
             ON CONFLICT(chat_id, topic, session_id) DO UPDATE SET last_used = ?4, turns = turns + 1",
            params![chat, topic, id, now, label, project],
        )?;
        if forked {
            tx.execute(
                "UPDATE choices SET fork = 0 WHERE chat_id = ?1 AND topic = ?2",
                params![chat, topic],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The conversation's session was forgotten (`/new`): no fork is due.
    pub(super) fn session_dropped(&self, to: Conversation) -> Result<(), StateError> {
        self.lock()
            .prepare_cached("UPDATE choices SET fork = 0 WHERE chat_id = ?1 AND topic = ?2")?
            .execute(params![to.chat.0, to.topic_number()])?;
        Ok(())
    }

    /// The conversation's latest [`SESSIONS_LISTED`] sessions, newest
    /// first, the current one marked.
    pub fn sessions(&self, to: Conversation) -> Result<Vec<SessionRow>, StateError> {
        let current = self.session(to)?;
        let project = self.project(to)?;
        let conn = self.lock();
        let mut query = conn.prepare_cached(
            "SELECT session_id, started_at, last_used, turns, first_words FROM session_history
             WHERE chat_id = ?1 AND topic = ?2 AND project = ?4
             ORDER BY last_used DESC, rowid DESC LIMIT ?3",
        )?;
        let rows = query.query_map(
            params![
                to.chat.0,
                to.topic_number(),
                SESSIONS_LISTED as i64,
                project
            ],
            |r| {
                let id: String = r.get(0)?;
                Ok(SessionRow {
                    current: current.as_deref() == Some(id.as_str()),
                    id,
                    started_at: r.get(1)?,
                    last_used: r.get(2)?,
                    turns: r.get(3)?,
                    first_words: r.get(4)?,
                })
            },
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Makes session `id` the conversation's current one, if it is one of
    /// its own; answers whether it was.
    pub fn resume(&self, to: Conversation, id: &str) -> Result<bool, StateError> {
        let project = self.project(to)?;
        let known = self
            .lock()
            .prepare_cached(
                "SELECT 1 FROM session_history
                 WHERE chat_id = ?1 AND topic = ?2 AND session_id = ?3 AND project = ?4",
            )?
            .exists(params![to.chat.0, to.topic_number(), id, project])?;
        if known {
            self.session_dropped(to)?;
            self.set_current(to, id)?;
        }
        Ok(known)
    }

    /// Writes the current session without counting a use.
    fn set_current(&self, to: Conversation, id: &str) -> Result<(), StateError> {
        self.lock()
            .prepare_cached(
                "INSERT INTO sessions (chat_id, topic, session_id, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(chat_id, topic) DO UPDATE SET session_id = excluded.session_id, updated_at = excluded.updated_at",
            )?
            .execute(params![to.chat.0, to.topic_number(), id, now_ms()])?;
        Ok(())
    }

    /// `/fork` where it cannot open a topic: `from`'s next turn resumes a
    /// copy of its current session (given `into == from`), or, into another
    /// conversation (a new forum topic), that one's first turn does, with
    /// `from`'s model. Answers the first words of the session copied, or
    /// `None` when `from` has no session to copy.
    pub fn fork(
        &self,
        from: Conversation,
        into: Conversation,
    ) -> Result<Option<String>, StateError> {
        let Some(id) = self.session(from)? else {
            return Ok(None);
        };
        let words: String = self
            .lock()
            .query_row(
                "SELECT first_words FROM session_history WHERE chat_id = ?1 AND topic = ?2 AND session_id = ?3",
                params![from.chat.0, from.topic_number(), id],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or_default();
        if into != from {
            let model = self.model(from)?;
            self.set_model(into, model.as_deref())?;
            let project = self.project(from)?;
            self.lock().execute(
                "UPDATE choices SET project = ?3 WHERE chat_id = ?1 AND topic = ?2",
                params![into.chat.0, into.topic_number(), project],
            )?;
            self.set_current(into, &id)?;
            // The new conversation's history starts with the session it
            // copies, so the copy is labelled as it.
            self.lock().execute(
                "INSERT OR IGNORE INTO session_history (chat_id, topic, project, session_id, started_at, last_used, turns, first_words)
                 VALUES (?1, ?2, ?6, ?3, ?4, ?4, 0, ?5)",
                params![into.chat.0, into.topic_number(), id, now_ms(), words, project],
            )?;
        }
        self.lock().execute(
            "INSERT INTO choices (chat_id, topic, fork) VALUES (?1, ?2, 1)
             ON CONFLICT(chat_id, topic) DO UPDATE SET fork = 1",
            params![into.chat.0, into.topic_number()],
        )?;
        Ok(Some(words))
    }

    /// Records what one turn of `to` used.
    pub fn record_usage(&self, to: Conversation, used: &TurnUsage) -> Result<(), StateError> {
        let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.lock()
            .prepare_cached(
                "INSERT INTO usage (chat_id, topic, ended_at, api_calls, input_tokens, output_tokens, cost_usd)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                to.chat.0,
                to.topic_number(),
                now_ms(),
                used.api_calls,
                tokens(used.input_tokens),
                tokens(used.output_tokens),
                if used.cost_usd.is_finite() { used.cost_usd.max(0.0) } else { 0.0 },
            ])?;
        Ok(())
    }

    /// What `to` used in each period (with `None`: the whole bot), as of
    /// `now`.
    pub fn usage(&self, to: Option<Conversation>, now: i64) -> Result<UsagePeriods, StateError> {
        let conn = self.lock();
        let mut out = UsagePeriods::default();
        for (slot, since) in out.iter_mut().zip(period_starts(now)) {
            *slot = match to {
                Some(to) => conn
                    .prepare_cached(&format!(
                        "{TOTALS} WHERE chat_id = ?1 AND topic = ?2 AND ended_at >= ?3"
                    ))?
                    .query_row(params![to.chat.0, to.topic_number(), since], totals)?,
                None => conn
                    .prepare_cached(&format!("{TOTALS} WHERE ended_at >= ?1"))?
                    .query_row(params![since], totals)?,
            };
        }
        Ok(out)
    }

    /// The `limit` conversations that cost most since `since` (then by
    /// tokens), with their totals.
    pub fn usage_top(
        &self,
        since: i64,
        limit: usize,
    ) -> Result<Vec<(Conversation, UsageTotals)>, StateError> {
        let conn = self.lock();
        let mut query = conn.prepare_cached(
            "SELECT chat_id, topic, COUNT(*), SUM(api_calls), SUM(input_tokens), SUM(output_tokens), SUM(cost_usd)
             FROM usage WHERE ended_at >= ?1 GROUP BY chat_id, topic
             ORDER BY SUM(cost_usd) DESC, SUM(input_tokens) + SUM(output_tokens) DESC LIMIT ?2",
        )?;
        let rows = query.query_map(params![since, limit as i64], |r| {
            let topic: i64 = r.get(1)?;
            let topic = i32::try_from(topic)
                .ok()
                .filter(|t| *t != 0)
                .map(|t| teloxide::types::ThreadId(teloxide::types::MessageId(t)));
            let to = Conversation::new(teloxide::types::ChatId(r.get(0)?), topic);
            Ok((
                to,
                UsageTotals {
                    turns: r.get(2)?,
                    api_calls: r.get(3)?,
                    input_tokens: r.get(4)?,
                    output_tokens: r.get(5)?,
                    cost_usd: r.get(6)?,
                },
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

mod handle;

#[cfg(test)]
mod tests;

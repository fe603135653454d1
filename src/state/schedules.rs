//! Schedules in the store: the operator's (kept equal to the config at
//! start), those made in the chat or by the agent, and the **claim** of a
//! run: one `schedule_runs` row per (schedule, slot), unique, written in
//! the same transaction as the run's inbox row. So a slot runs at most
//! once, even across a crash, and a claimed slot is never lost: recovery
//! finds its inbox row like any accepted message's.

use std::future::Future;

use rusqlite::{OptionalExtension, Row, params};

use super::rows::insert_incoming;
use super::{ReadFailed, StateError, Store, StoreHandle, now_ms};
use crate::ids::Conversation;
use crate::incoming::Incoming;

/// Who made a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The operator, in the config: the chat cannot remove it.
    Operator,
    /// `/schedule` in the chat.
    Chat,
    /// The agent's `schedule` tool.
    Agent,
}

impl Origin {
    fn as_str(self) -> &'static str {
        match self {
            Self::Operator => "operator",
            Self::Chat => "chat",
            Self::Agent => "agent",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "operator" => Self::Operator,
            "agent" => Self::Agent,
            _ => Self::Chat,
        }
    }
}

/// A schedule as stored (its timing as text; `schedule::Timing` reads it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRow {
    /// Its id (shown in the chat, `unschedule {id}`).
    pub id: i64,
    /// The operator's name for it; none for one made in the chat.
    pub operator_name: Option<String>,
    /// Where it runs.
    pub to: Conversation,
    /// `schedule::When::stored`.
    pub timing: String,
    /// Its zone's IANA name.
    pub tz: String,
    /// What the agent is asked.
    pub prompt: String,
    /// Who made it (a Telegram user id; 0 for the operator).
    pub made_by: i64,
    /// How it was made.
    pub origin: Origin,
    /// Unix ms; its first slot is the first after this.
    pub created_at: i64,
    /// The last slot claimed (or skipped), or its creation: the next slot
    /// is the first after it.
    pub last_slot: i64,
}

impl ScheduleRow {
    /// Its name in the chat: the operator's name, or `#id`.
    pub fn name(&self) -> String {
        self.operator_name
            .clone()
            .unwrap_or_else(|| format!("#{}", self.id))
    }
}

/// A schedule to add (its id and times are the store's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSchedule {
    /// Where it runs.
    pub to: Conversation,
    /// `schedule::When::stored`.
    pub timing: String,
    /// Its zone.
    pub tz: String,
    /// What the agent is asked.
    pub prompt: String,
    /// Who made it.
    pub made_by: i64,
    /// How.
    pub origin: Origin,
}

/// What adding a schedule did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// Stored, with this id.
    Id(i64),
    /// The conversation already has this many of its own: refused.
    TooMany(usize),
}

/// What removing one did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    /// Gone.
    Removed,
    /// The operator's: only the config removes it.
    Operator,
    /// No schedule of this conversation has that id.
    NotFound,
}

const COLUMNS: &str =
    "id, operator_name, chat_id, topic, timing, tz, prompt, made_by, origin, created_at, last_slot";

fn read(r: &Row<'_>) -> rusqlite::Result<ScheduleRow> {
    let topic: i64 = r.get(3)?;
    let topic = i32::try_from(topic)
        .ok()
        .filter(|&t| t != 0)
        .map(|t| teloxide::types::ThreadId(teloxide::types::MessageId(t)));
    Ok(ScheduleRow {
        id: r.get(0)?,
        operator_name: r.get(1)?,
        to: Conversation::new(teloxide::types::ChatId(r.get(2)?), topic),
        timing: r.get(4)?,
        tz: r.get(5)?,
        prompt: r.get(6)?,
        made_by: r.get(7)?,
        origin: Origin::parse(&r.get::<_, String>(8)?),
        created_at: r.get(9)?,
        last_slot: r.get(10)?,
    })
}

impl Store {
    /// Every schedule, by id.
    pub fn schedules(&self) -> Result<Vec<ScheduleRow>, StateError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!("SELECT {COLUMNS} FROM schedules ORDER BY id"))?;
        let rows = stmt.query_map([], read)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Makes the operator's schedules those of `wanted` (name, schedule):
    /// a new one is created now, a changed one keeps its last slot, one no
    /// longer in the config is removed.
    pub fn sync_operator_schedules(
        &self,
        wanted: &[(String, NewSchedule)],
    ) -> Result<(), StateError> {
        let mut conn = self.lock();
        let tx = conn.savepoint()?;
        let now = now_ms();
        let names: Vec<String> = {
            let mut stmt =
                tx.prepare("SELECT operator_name FROM schedules WHERE operator_name IS NOT NULL")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        for name in names
            .iter()
            .filter(|n| !wanted.iter().any(|(w, _)| w == *n))
        {
            tx.execute(
                "DELETE FROM schedules WHERE operator_name = ?1",
                params![name],
            )?;
        }
        for (name, s) in wanted {
            tx.execute(
                "INSERT INTO schedules (operator_name, chat_id, topic, timing, tz, prompt, made_by,
                    origin, created_at, last_slot)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, 'operator', ?7, ?7)
                 ON CONFLICT(operator_name) DO UPDATE SET chat_id = excluded.chat_id,
                    topic = excluded.topic, timing = excluded.timing, tz = excluded.tz,
                    prompt = excluded.prompt",
                params![
                    name,
                    s.to.chat.0,
                    s.to.topic_number(),
                    s.timing,
                    s.tz,
                    s.prompt,
                    now
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Adds a schedule made in the chat or by the agent, unless its
    /// conversation already has `max` of its own (the count and the insert
    /// are one transaction).
    pub fn add_schedule(&self, s: &NewSchedule, max: usize) -> Result<Added, StateError> {
        let mut conn = self.lock();
        let tx = conn.savepoint()?;
        let have: i64 = tx.query_row(
            "SELECT COUNT(*) FROM schedules
             WHERE chat_id = ?1 AND topic = ?2 AND operator_name IS NULL",
            params![s.to.chat.0, s.to.topic_number()],
            |r| r.get(0),
        )?;
        let have = usize::try_from(have).unwrap_or(usize::MAX);
        if have >= max {
            return Ok(Added::TooMany(have));
        }
        let now = now_ms();
        tx.execute(
            "INSERT INTO schedules (chat_id, topic, timing, tz, prompt, made_by, origin,
                created_at, last_slot)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
            params![
                s.to.chat.0,
                s.to.topic_number(),
                s.timing,
                s.tz,
                s.prompt,
                s.made_by,
                s.origin.as_str(),
                now
            ],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(Added::Id(id))
    }

    /// Removes schedule `id` of conversation `to` (never the operator's).
    pub fn remove_schedule(&self, id: i64, to: Conversation) -> Result<Removed, StateError> {
        let conn = self.lock();
        let operator: Option<Option<String>> = conn
            .query_row(
                "SELECT operator_name FROM schedules WHERE id = ?1 AND chat_id = ?2 AND topic = ?3",
                params![id, to.chat.0, to.topic_number()],
                |r| r.get(0),
            )
            .optional()?;
        Ok(match operator {
            None => Removed::NotFound,
            Some(Some(_)) => Removed::Operator,
            Some(None) => {
                conn.execute("DELETE FROM schedules WHERE id = ?1", params![id])?;
                Removed::Removed
            }
        })
    }

    /// **Claims** slot `slot` of schedule `id` and queues its run in one
    /// transaction: the claim's unique key, the inbox row (`run` with its
    /// update id set to minus the claim's id), the schedule's last slot
    /// (and, for a schedule that runs once, its removal). `None` when the
    /// slot was claimed before or the schedule is gone: nothing is written.
    pub fn claim_run(
        &self,
        id: i64,
        slot: i64,
        missed: u64,
        once: bool,
        mut run: Incoming,
    ) -> Result<Option<Incoming>, StateError> {
        let mut conn = self.lock();
        let tx = conn.savepoint()?;
        let exists: Option<i64> = tx
            .query_row("SELECT id FROM schedules WHERE id = ?1", params![id], |r| {
                r.get(0)
            })
            .optional()?;
        if exists.is_none() {
            return Ok(None);
        }
        let claimed = tx.execute(
            "INSERT INTO schedule_runs (schedule_id, slot, missed, claimed_at)
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT(schedule_id, slot) DO NOTHING",
            params![
                id,
                slot,
                i64::try_from(missed).unwrap_or(i64::MAX),
                now_ms()
            ],
        )?;
        if claimed == 0 {
            return Ok(None);
        }
        run.update_id = -tx.last_insert_rowid();
        insert_incoming(&tx, &run)?;
        if once {
            tx.execute("DELETE FROM schedules WHERE id = ?1", params![id])?;
        } else {
            tx.execute(
                "UPDATE schedules SET last_slot = MAX(last_slot, ?2) WHERE id = ?1",
                params![id, slot],
            )?;
        }
        tx.commit()?;
        Ok(Some(run))
    }

    /// Moves schedule `id` past `slot` without a run (`catch_up = "skip"`).
    pub fn skip_to(&self, id: i64, slot: i64) -> Result<(), StateError> {
        self.lock().execute(
            "UPDATE schedules SET last_slot = MAX(last_slot, ?2) WHERE id = ?1",
            params![id, slot],
        )?;
        Ok(())
    }

    /// Claimed runs of schedule `id`: (slot, missed), by slot.
    pub fn runs_of(&self, id: i64) -> Result<Vec<(i64, i64)>, StateError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT slot, missed FROM schedule_runs WHERE schedule_id = ?1 ORDER BY slot",
        )?;
        let rows = stmt.query_map(params![id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

impl StoreHandle {
    /// Every schedule, after every job asked before.
    pub fn schedules(
        &self,
    ) -> impl Future<Output = Result<Vec<ScheduleRow>, ReadFailed>> + Send + 'static {
        self.read("reading the schedules", |store| store.schedules())
    }

    /// Makes the operator's schedules those of the config.
    pub fn sync_operator_schedules(
        &self,
        wanted: Vec<(String, NewSchedule)>,
    ) -> impl Future<Output = Option<()>> + Send + 'static {
        self.ask("saving the operator's schedules", move |store| {
            store.sync_operator_schedules(&wanted)
        })
    }

    /// Adds a schedule unless its conversation has `max` (`None`: failed).
    pub fn add_schedule(
        &self,
        s: NewSchedule,
        max: usize,
    ) -> impl Future<Output = Option<Added>> + Send + 'static {
        self.ask("adding a schedule", move |store| {
            store.add_schedule(&s, max)
        })
    }

    /// Removes a schedule of `to` (`None`: failed).
    pub fn remove_schedule(
        &self,
        id: i64,
        to: Conversation,
    ) -> impl Future<Output = Option<Removed>> + Send + 'static {
        self.ask("removing a schedule", move |store| {
            store.remove_schedule(id, to)
        })
    }

    /// Claims a slot and queues its run ([`Store::claim_run`]): the run,
    /// or `Some(None)` when it was claimed before or the schedule is gone;
    /// `None` when the write failed (then nothing was written: the next
    /// start finds the slot unclaimed and catches it up).
    pub fn claim_run(
        &self,
        id: i64,
        slot: i64,
        missed: u64,
        once: bool,
        run: Incoming,
    ) -> impl Future<Output = Option<Option<Incoming>>> + Send + 'static {
        self.ask("claiming a scheduled run", move |store| {
            store.claim_run(id, slot, missed, once, run)
        })
    }

    /// Moves a schedule past `slot` without a run.
    pub fn skip_to(&self, id: i64, slot: i64) {
        self.tell("skipping missed slots", move |store| {
            store.skip_to(id, slot)
        });
    }
}

#[cfg(test)]
mod tests;

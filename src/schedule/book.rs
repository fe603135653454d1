//! The [`ScheduleBook`]: how the chat (`/schedule`, `/schedules`, ❌) and
//! the agent's tools make, list and remove a conversation's schedules. It
//! holds the bounds a schedule made there must keep (the agent is not
//! trusted: it names no chat, only its own conversation's schedules are
//! its to see and remove, none runs more often than
//! `schedules.min_interval`, and a conversation has at most
//! [`MAX_PER_CONVERSATION`] of its own), and wakes the scheduler after a
//! change.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;
use tokio::sync::Notify;

use super::notices;
use super::when::{Timing, When, show_ms, zone};
use crate::config::{Config, PermissionMode};
use crate::ids::{Conversation, Topics};
use crate::state::{
    Added, NewSchedule, Origin, ReadFailed, Removed, ScheduleRow, StoreHandle, now_ms,
};

/// The most schedules one conversation may have of its own (made in the
/// chat or by the agent; the operator's are not counted).
pub const MAX_PER_CONVERSATION: usize = 20;

/// The longest prompt a schedule keeps, in characters.
pub const MAX_PROMPT_CHARS: usize = 4_000;

/// How many coming slots `min_interval` is checked over.
const GAP_SAMPLES: usize = 200;

/// A schedule as the chat and the agent see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// Its id.
    pub id: i64,
    /// `standup` (the operator's) or `#id`.
    pub name: String,
    /// When it runs, in words.
    pub when: String,
    /// Its next slot, on its zone's clock.
    pub next: Option<String>,
    /// The operator's: not removable from the chat (🔒).
    pub locked: bool,
    /// What it asks.
    pub prompt: String,
}

/// The handle on schedules the dispatcher and the turns share.
#[derive(Clone, Debug)]
pub struct ScheduleBook {
    /// The store.
    inbox: StoreHandle,
    /// Wakes the scheduler to read the schedules again.
    changed: Arc<Notify>,
    /// `schedules.timezone`.
    timezone: Tz,
    /// `schedules.min_interval`.
    min_interval: Duration,
    /// `schedules.agent`: what answers a schedule the agent asks to make.
    agent: PermissionMode,
    /// Where a stored schedule's conversation is now (`Topics::now`): one
    /// made in a topic of a private chat is the chat's while the bot's
    /// topics mode is off, listed and removed there as it runs there.
    topics: Topics,
}

impl ScheduleBook {
    /// A book over `inbox` with the bounds of `config.schedules`, for a
    /// bot whose topics are `topics`.
    pub fn new(inbox: &StoreHandle, config: &Config, topics: Topics) -> Self {
        let config = &config.schedules;
        Self {
            inbox: inbox.clone(),
            changed: Arc::new(Notify::new()),
            timezone: zone(&config.timezone).unwrap_or(Tz::UTC),
            min_interval: config.min_interval,
            agent: config.agent,
            topics,
        }
    }

    /// `schedules.agent`: what answers a schedule the agent asks to make.
    pub fn agent_mode(&self) -> PermissionMode {
        self.agent
    }

    /// What the scheduler waits on.
    pub(super) fn changes(&self) -> Arc<Notify> {
        Arc::clone(&self.changed)
    }

    /// The zone of a schedule that names none.
    pub fn timezone(&self) -> Tz {
        self.timezone
    }

    /// Checks `when` and `prompt` against the bounds, then adds the
    /// schedule to `to`; resolves with it as listed, or the reason it was
    /// refused (for the chat or the agent).
    pub fn add(
        &self,
        to: Conversation,
        when: When,
        prompt: String,
        made_by: i64,
        origin: Origin,
    ) -> impl Future<Output = Result<Listed, String>> + Send + 'static {
        let checked = self.check(&when, &prompt);
        let (inbox, changed, tz) = (self.inbox.clone(), self.changes(), self.timezone);
        let new = NewSchedule {
            to,
            timing: when.stored(),
            tz: tz.name().to_owned(),
            prompt: prompt.trim().to_owned(),
            made_by,
            origin,
        };
        async move {
            checked?;
            match inbox.add_schedule(new.clone(), MAX_PER_CONVERSATION).await {
                Some(Added::Id(id)) => {
                    changed.notify_one();
                    let now = now_ms();
                    let row = ScheduleRow {
                        id,
                        operator_name: None,
                        to,
                        timing: new.timing,
                        tz: new.tz,
                        prompt: new.prompt,
                        made_by,
                        origin,
                        created_at: now,
                        last_slot: now,
                    };
                    listed(&row).ok_or_else(|| "the schedule could not be read back".to_owned())
                }
                Some(Added::TooMany(n)) => Err(format!(
                    "this conversation already has {n} schedules of its own, the most it may have; remove one first"
                )),
                None => Err("the schedule could not be saved; try again".to_owned()),
            }
        }
    }

    /// The bounds: a prompt, not too long; a once in the future; no two
    /// runs closer than `min_interval`.
    fn check(&self, when: &When, prompt: &str) -> Result<(), String> {
        if prompt.trim().is_empty() {
            return Err("a schedule needs a prompt: what should the agent be asked?".into());
        }
        if prompt.chars().count() > MAX_PROMPT_CHARS {
            return Err(format!(
                "the prompt is longer than {MAX_PROMPT_CHARS} characters"
            ));
        }
        let timing = Timing {
            when: when.clone(),
            tz: self.timezone,
        };
        let now = now_ms();
        if timing.next_after(now).is_none() {
            return Err("it would never run".into());
        }
        if let Some(gap) = timing.shortest_gap(now, GAP_SAMPLES)
            && gap < self.min_interval
        {
            return Err(format!(
                "it would run every {}, more often than schedules.min_interval ({}) allows",
                humantime::format_duration(gap),
                humantime::format_duration(self.min_interval)
            ));
        }
        Ok(())
    }

    /// Removes schedule `id` of `to` (where it is now: see `topics`);
    /// resolves with what to tell.
    pub fn remove(
        &self,
        id: i64,
        to: Conversation,
    ) -> impl Future<Output = Result<String, String>> + Send + 'static {
        let (inbox, topics, changed) = (self.inbox.clone(), self.topics, self.changes());
        let rows = self.inbox.schedules();
        async move {
            // Removed where it was stored; a row that cannot be read is
            // looked for in `to` itself.
            let stored = rows.await.ok().and_then(|rows| {
                rows.iter()
                    .find(|row| row.id == id && topics.now(row.to) == to)
                    .map(|row| row.to)
            });
            match inbox.remove_schedule(id, stored.unwrap_or(to)).await {
                Some(Removed::Removed) => {
                    changed.notify_one();
                    Ok(notices::removed(id))
                }
                Some(Removed::Operator) => Err(notices::operators(id)),
                Some(Removed::NotFound) => Err(notices::not_here(id)),
                None => Err(notices::NOT_REMOVED.into()),
            }
        }
    }

    /// The schedules of `to` (where they are now: see `topics`), by id.
    pub fn list(
        &self,
        to: Conversation,
    ) -> impl Future<Output = Result<Vec<Listed>, ReadFailed>> + Send + 'static {
        let (ask, topics) = (self.inbox.schedules(), self.topics);
        async move {
            Ok(ask
                .await?
                .iter()
                .filter(|row| topics.now(row.to) == to)
                .filter_map(listed)
                .collect())
        }
    }
}

/// A stored schedule as listed (`None`: its timing no longer reads).
pub fn listed(row: &ScheduleRow) -> Option<Listed> {
    let timing = timing_of(row)?;
    let next = timing.next_after(row.last_slot.max(row.created_at));
    Some(Listed {
        id: row.id,
        name: row.name(),
        when: match &timing.when {
            When::Once(_) => "once".to_owned(),
            other if timing.tz == Tz::UTC => other.to_string(),
            other => format!("{other} ({})", timing.tz.name()),
        },
        next: next.map(|ms| show_ms(ms, timing.tz)),
        locked: row.origin == Origin::Operator,
        prompt: row.prompt.clone(),
    })
}

/// A stored schedule's timing; one that no longer reads is logged.
pub fn timing_of(row: &ScheduleRow) -> Option<Timing> {
    let read = When::from_stored(&row.timing).and_then(|when| {
        Ok(Timing {
            when,
            tz: zone(&row.tz)?,
        })
    });
    match read {
        Ok(timing) => Some(timing),
        Err(err) => {
            tracing::warn!(schedule = row.id, cause = %err, "a stored schedule could not be read; ignored");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Store;

    #[tokio::test]
    async fn a_prompt_may_be_as_long_as_the_bound_and_no_longer() {
        let inbox = StoreHandle::start(Arc::new(Store::in_memory().unwrap()));
        let book = ScheduleBook::new(&inbox, &Config::default(), Topics::default());
        let hourly = When::Every(Duration::from_secs(3600));
        let longest = "a".repeat(MAX_PROMPT_CHARS);
        assert_eq!(book.check(&hourly, &longest), Ok(()));
        // Counted in characters, not bytes.
        assert_eq!(book.check(&hourly, &"é".repeat(MAX_PROMPT_CHARS)), Ok(()));
        let refused = book.check(&hourly, &format!("{longest}a"));
        assert_eq!(
            refused,
            Err(format!(
                "the prompt is longer than {MAX_PROMPT_CHARS} characters"
            ))
        );
    }
}

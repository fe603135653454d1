//! The [`Scheduler`] actor: keeps each schedule's next slot and one timer
//! to the earliest (no polling of the store), claims a due slot and hands
//! its run to the dispatcher ([`RunDue`]). At start it makes the
//! operator's schedules those of the config and catches up the slots
//! missed while the bot was down (`schedules.catch_up`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, Recipient, SpawnHandle,
    WrapFuture,
};
use teloxide::types::{MessageId, UserId};

use super::book::{ScheduleBook, timing_of};
use super::notices;
use super::when::Timing;
use crate::config::{CatchUp, SchedulesConfig};
use crate::incoming::{Ask, ChatKind, Incoming};
use crate::ops::metrics::Metrics;
use crate::state::{NewSchedule, Origin, ReadFailed, ScheduleRow, StoreHandle, now_ms};

/// The longest the timer sleeps before it looks at the wall clock again
/// (a clock set forward, a suspended host).
const MAX_SLEEP: Duration = Duration::from_secs(3600);

/// How long after a failed read of the schedules they are read again.
const REREAD: Duration = Duration::from_secs(30);

/// A claimed run, queued in the inbox: for the dispatcher to route like a
/// message just received (its update id is negative: a run's).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct RunDue(pub Incoming);

/// The host is stopping: no more claims.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopScheduler;

/// Read the schedules again (one was added or removed).
#[derive(Message)]
#[rtype(result = "()")]
struct Reload;

/// What a claim came to.
enum Claim {
    /// Claimed and queued: the run.
    Queued(Incoming),
    /// Claimed before, or the schedule is gone.
    Taken,
    /// The write failed: nothing was claimed.
    Failed,
}

/// One schedule and its next slot.
struct Planned {
    row: ScheduleRow,
    timing: Timing,
    /// Its next slot (unix ms); none: it never runs again.
    next: Option<i64>,
    /// A claim of it is on the store thread.
    claiming: bool,
}

/// The actor.
pub struct Scheduler {
    /// The store.
    inbox: StoreHandle,
    /// Wakes it after a change.
    book: ScheduleBook,
    /// Where runs go.
    dispatcher: Recipient<RunDue>,
    /// `schedules.catch_up`.
    catch_up: CatchUp,
    /// The operator's schedules, by name.
    operator: Vec<(String, NewSchedule)>,
    /// Runs and schedules counted.
    metrics: Arc<Metrics>,
    /// By schedule id.
    entries: HashMap<i64, Planned>,
    /// The one timer, to the earliest next slot.
    timer: Option<SpawnHandle>,
    /// No claims once set.
    stopped: bool,
}

impl Scheduler {
    /// A scheduler for `config`'s schedules and those in the store.
    pub fn new(
        book: ScheduleBook,
        inbox: StoreHandle,
        config: &SchedulesConfig,
        dispatcher: Recipient<RunDue>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            inbox,
            catch_up: config.catch_up,
            operator: operator_schedules(config, &book),
            book,
            dispatcher,
            metrics,
            entries: HashMap::new(),
            timer: None,
            stopped: false,
        }
    }

    /// The store's schedules, read anew; on the `first` read, what they
    /// missed is caught up.
    /// The schedules as read: loaded, or, when the store could not be
    /// read, the ones it has kept, and another read after `REREAD`.
    fn read(
        &mut self,
        rows: Result<Vec<ScheduleRow>, ReadFailed>,
        first: bool,
        ctx: &mut Context<Self>,
    ) {
        match rows {
            Ok(rows) => self.loaded(rows, first, ctx),
            Err(ReadFailed) => {
                tracing::error!(
                    again_in = ?REREAD,
                    "the schedules could not be read; the ones already known keep running"
                );
                ctx.run_later(REREAD, |_, ctx| ctx.notify(Reload));
            }
        }
    }

    fn loaded(&mut self, rows: Vec<ScheduleRow>, first: bool, ctx: &mut Context<Self>) {
        let claiming: Vec<i64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.claiming)
            .map(|(id, _)| *id)
            .collect();
        self.entries.clear();
        let now = now_ms();
        for mut row in rows {
            let Some(timing) = timing_of(&row) else {
                continue;
            };
            let caught_up = first && self.catch_up(&mut row, &timing, now, ctx);
            let next = timing.next_after(row.last_slot.max(row.created_at));
            let id = row.id;
            let claiming = caught_up || claiming.contains(&id);
            self.entries.insert(
                id,
                Planned {
                    row,
                    timing,
                    next,
                    claiming,
                },
            );
        }
        self.metrics.schedules(self.entries.len());
        self.arm(ctx);
    }

    /// The slots `row` missed while the bot was down: one run for all of
    /// them, or none (`schedules.catch_up`). A schedule that never ran has
    /// missed nothing before it was made. `true` when a claim is on its way.
    fn catch_up(
        &mut self,
        row: &mut ScheduleRow,
        timing: &Timing,
        now: i64,
        ctx: &mut Context<Self>,
    ) -> bool {
        let (missed, last) = timing.slots_between(row.last_slot.max(row.created_at), now);
        let Some(last) = last.filter(|_| missed > 0) else {
            return false;
        };
        self.metrics.schedule_runs("missed", missed);
        match self.catch_up {
            CatchUp::Skip => {
                tracing::info!(schedule = row.id, missed, "missed slots skipped");
                self.inbox.skip_to(row.id, last);
                row.last_slot = last;
                false
            }
            CatchUp::Once => {
                tracing::info!(
                    schedule = row.id,
                    missed,
                    "missed slots caught up with one run"
                );
                self.claim(row.clone(), timing.when.is_once(), last, missed, ctx);
                row.last_slot = last;
                true
            }
        }
    }

    /// One timer, to the earliest next slot not being claimed.
    fn arm(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
        if self.stopped {
            return;
        }
        let Some(earliest) = self
            .entries
            .values()
            .filter(|e| !e.claiming)
            .filter_map(|e| e.next)
            .min()
        else {
            return;
        };
        let wait = u64::try_from(earliest.saturating_sub(now_ms())).unwrap_or(0);
        let wait = Duration::from_millis(wait).min(MAX_SLEEP);
        self.timer = Some(ctx.run_later(wait, |act, ctx| {
            act.timer = None;
            act.tick(ctx);
        }));
    }

    /// Claims every due slot (the latest of each schedule's: those before
    /// it, a host suspended past them, are missed).
    fn tick(&mut self, ctx: &mut Context<Self>) {
        let now = now_ms();
        let due: Vec<(ScheduleRow, bool, i64, u64)> = self
            .entries
            .values_mut()
            .filter(|e| !e.claiming && e.next.is_some_and(|n| n <= now))
            .filter_map(|e| {
                let (count, last) = e.timing.slots_between(e.row.last_slot, now);
                let last = last?;
                e.claiming = true;
                Some((
                    e.row.clone(),
                    e.timing.when.is_once(),
                    last,
                    count.saturating_sub(1),
                ))
            })
            .collect();
        for (row, once, slot, missed) in due {
            if missed > 0 {
                self.metrics.schedule_runs("missed", missed);
            }
            self.claim(row, once, slot, missed, ctx);
        }
        self.arm(ctx);
    }

    /// Claims `slot` of `row` and queues its run, in one store job; then
    /// hands the run to the dispatcher.
    fn claim(
        &mut self,
        row: ScheduleRow,
        once: bool,
        slot: i64,
        missed: u64,
        ctx: &mut Context<Self>,
    ) {
        let run = run_of(&row, missed);
        let ask = self.inbox.claim_run(row.id, slot, missed, once, run);
        let id = row.id;
        ctx.spawn(ask.into_actor(self).map(move |claim, act, ctx| {
            let claim = match claim {
                Some(Some(run)) => Claim::Queued(run),
                Some(None) => Claim::Taken,
                None => Claim::Failed,
            };
            act.claimed(id, slot, claim, ctx);
        }));
    }

    fn claimed(&mut self, id: i64, slot: i64, claim: Claim, ctx: &mut Context<Self>) {
        match claim {
            Claim::Queued(run) => {
                tracing::info!(
                    schedule = id,
                    slot,
                    update_id = run.update_id,
                    "scheduled run queued"
                );
                self.dispatcher.do_send(RunDue(run));
            }
            Claim::Taken => tracing::debug!(
                schedule = id,
                slot,
                "slot claimed before, or the schedule is gone"
            ),
            Claim::Failed => {
                // Nothing was written: the next start finds it missed.
                tracing::error!(schedule = id, slot, "a scheduled run could not be claimed");
                self.metrics.schedule_runs("failed", 1);
            }
        }
        if let Some(entry) = self.entries.get_mut(&id) {
            entry.claiming = false;
            entry.row.last_slot = entry.row.last_slot.max(slot);
            entry.next = entry.timing.next_after(entry.row.last_slot);
            if entry.next.is_none() {
                self.entries.remove(&id);
                self.metrics.schedules(self.entries.len());
            }
        }
        self.arm(ctx);
    }
}

/// The run of `row`, marked as a schedule's (`⏰ NAME: prompt`), saying
/// how many slots it stands for when it catches some up.
fn run_of(row: &ScheduleRow, missed: u64) -> Incoming {
    let mut text = notices::run(&row.name(), &row.prompt);
    if missed > 0 {
        text.push_str(&notices::caught_up(missed));
    }
    let (text, _) = crate::incoming::cut(&text);
    let from = UserId(u64::try_from(row.made_by).unwrap_or(0));
    Incoming {
        update_id: 0,
        to: row.to,
        from,
        message_id: MessageId(0),
        date: now_ms() / 1000,
        place: ChatKind::Private,
        ask: Ask::Agent,
        text,
        files: Vec::new(),
        album: None,
        author: crate::incoming::Author::default(),
        source: crate::incoming::Source::of_schedule(from),
    }
}

/// The config's schedules as the store keeps them.
fn operator_schedules(config: &SchedulesConfig, book: &ScheduleBook) -> Vec<(String, NewSchedule)> {
    config
        .list
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            // Validated at load; one that fails here is skipped, not a panic.
            let when = s.when(&format!("schedules.list[{i}]")).ok()?;
            let topic = s.topic.map(|t| teloxide::types::ThreadId(MessageId(t)));
            Some((
                s.name.clone(),
                NewSchedule {
                    to: crate::ids::Conversation::new(teloxide::types::ChatId(s.chat), topic),
                    timing: when.stored(),
                    tz: s
                        .tz
                        .clone()
                        .unwrap_or_else(|| book.timezone().name().to_owned()),
                    prompt: s.prompt.clone(),
                    made_by: 0,
                    origin: Origin::Operator,
                },
            ))
        })
        .collect()
}

impl Actor for Scheduler {
    type Context = Context<Self>;

    /// The operator's schedules saved, every schedule read and caught up;
    /// then a wait on changes.
    fn started(&mut self, ctx: &mut Self::Context) {
        let sync = self.inbox.sync_operator_schedules(self.operator.clone());
        let read = self.inbox.schedules();
        ctx.wait(
            async move {
                sync.await;
                read.await
            }
            .into_actor(self)
            .map(|rows, act, ctx| act.read(rows, true, ctx)),
        );
        let (changes, me) = (self.book.changes(), ctx.address());
        ctx.spawn(
            async move {
                loop {
                    changes.notified().await;
                    if me.try_send(Reload).is_err() {
                        break;
                    }
                }
            }
            .into_actor(self),
        );
    }
}

impl Handler<Reload> for Scheduler {
    type Result = ();

    fn handle(&mut self, _: Reload, ctx: &mut Self::Context) {
        let read = self.inbox.schedules();
        ctx.spawn(
            read.into_actor(self)
                .map(|rows, act, ctx| act.read(rows, false, ctx)),
        );
    }
}

impl Handler<StopScheduler> for Scheduler {
    type Result = ();

    fn handle(&mut self, _: StopScheduler, ctx: &mut Self::Context) {
        self.stopped = true;
        self.arm(ctx);
    }
}

//! The [`StoreHandle`]: the state store's own thread, so no SQLite call
//! ever runs on the actor thread, and the one way to it: [`StoreHandle::read`],
//! [`StoreHandle::ask`] and [`StoreHandle::tell`] run a closure over the
//! [`Store`] there. What happens to an accepted message is in `inbox.rs`.
//!
//! Every call is a job for the store thread, run in the order it was asked.
//! A failed statement is logged and counted ([`StoreHandle::errors`]); the bot
//! goes on with what it has in memory.

mod inbox;

pub use self::inbox::Disposition;

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use teloxide::types::UserId;
use tokio::sync::oneshot;

use super::{AlwaysGrant, AlwaysRule, StateError, Store};
use crate::ids::Conversation;

/// A job for the store thread: it runs its statements and hands back its
/// answer, which goes out once the batch it ran in is committed.
type StoreJob = Box<dyn FnOnce(&Store) -> Answer + Send>;

/// A job's answer to its caller, given whether its batch was committed
/// (`false`: its writes were rolled back with the batch).
type Answer = Box<dyn FnOnce(bool) + Send>;

/// At most this many jobs share one transaction. Each commit writes the
/// pages its jobs changed to the WAL and takes and drops SQLite's file
/// locks; a burst of turns queues several jobs each (accept, started,
/// replying, finished, the turn's record and usage row), and committed one
/// by one they kept the store thread busier than the actors' own thread.
const BATCH_MAX: usize = 256;

/// A store read that failed (logged and counted where it failed): its
/// caller decides what is safe without the answer, or tells the chat; it
/// never stands for "nothing stored".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the state store could not be read")]
pub struct ReadFailed;

/// Row ids, handed out without asking the store thread; and a test hook:
/// how long the next settle write stalls (milliseconds).
#[derive(Debug, Default)]
pub(super) struct RowIds {
    last: AtomicI64,
    settle_stall_ms: AtomicU64,
}

impl RowIds {
    pub(super) fn after(last: i64) -> Self {
        Self {
            last: AtomicI64::new(last),
            settle_stall_ms: AtomicU64::new(0),
        }
    }

    pub(super) fn next(&self) -> i64 {
        self.last.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The stall asked for the next settle write, once.
    pub(super) fn take_settle_stall(&self) -> u64 {
        self.settle_stall_ms.swap(0, Ordering::SeqCst)
    }

    #[cfg(any(test, feature = "test-hooks"))]
    pub(super) fn stall_next_settle(&self, ms: u64) {
        self.settle_stall_ms.store(ms, Ordering::SeqCst);
    }
}

/// The shared part: the way to the store thread and the error count.
struct Shared {
    /// Jobs, in order; the thread ends when the last sender is dropped.
    jobs: std::sync::Mutex<mpsc::Sender<StoreJob>>,
    /// Failed statements since start (a metric, not only a log line).
    errors: AtomicU64,
    /// The outgoing messages' row ids.
    row_ids: RowIds,
    /// Test hook: the next job sleeps this long first (milliseconds).
    #[cfg(any(test, feature = "test-hooks"))]
    stall_next_ms: AtomicU64,
}

/// The durable inbox and the rest of the state store, driven from the
/// store's own thread. Cheap to clone.
#[derive(Clone)]
pub struct StoreHandle {
    /// The thread and the counters.
    shared: Arc<Shared>,
}

impl std::fmt::Debug for StoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHandle")
            .field("errors", &self.errors())
            .finish()
    }
}

/// Waits for a job, then takes those already queued behind it, up to
/// [`BATCH_MAX`] in all; `false` once every sender is gone.
fn gather(jobs: &mpsc::Receiver<StoreJob>, batch: &mut Vec<StoreJob>) -> bool {
    let Ok(first) = jobs.recv() else {
        return false;
    };
    batch.push(first);
    batch.extend(jobs.try_iter().take(BATCH_MAX - 1));
    true
}

/// Runs `batch` (emptying it) in one transaction, then answers each job:
/// a caller waiting on a write hears of it only once it is committed, as
/// when every job was its own transaction. A job whose failure rolled the
/// transaction back (SQLite does so on a full disk or an I/O error) takes
/// the jobs before it along: they are answered as failed, and the rest run
/// in a new transaction. Without a transaction (`BEGIN` failed) the jobs
/// run one by one, each committed by SQLite as it goes.
fn run_batch(store: &Store, batch: &mut Vec<StoreJob>) {
    let mut answers: Vec<Answer> = Vec::with_capacity(batch.len());
    let mut open = store.begin_batch();
    for job in batch.drain(..) {
        answers.push(job(store));
        if open && !store.in_transaction() {
            let lost = answers.len();
            tracing::error!(
                jobs = lost,
                "state store: a failed statement rolled back its batch"
            );
            answers.drain(..).for_each(|answer| answer(false));
            open = store.begin_batch();
        }
    }
    let committed = !open || store.commit_batch();
    answers.into_iter().for_each(|answer| answer(committed));
}

impl StoreHandle {
    /// Starts the store thread over `store`.
    pub fn start(store: Arc<Store>) -> Self {
        let last_row = store.last_outgoing_id().unwrap_or_else(|err| {
            tracing::error!(cause = %err, "state store: reading the last outgoing row failed");
            // Far past any row a store could hold: a new row replaces none.
            i64::MAX / 2
        });
        let (tx, rx) = mpsc::channel::<StoreJob>();
        let spawned = std::thread::Builder::new()
            .name("turnstile-store".into())
            .spawn(move || {
                let mut batch = Vec::with_capacity(BATCH_MAX);
                while gather(&rx, &mut batch) {
                    run_batch(&store, &mut batch);
                }
            });
        if let Err(err) = spawned {
            // Without a thread every job is dropped unanswered and counted.
            tracing::error!(cause = %err, "could not start the state store thread");
        }
        Self {
            shared: Arc::new(Shared {
                jobs: std::sync::Mutex::new(tx),
                errors: AtomicU64::new(0),
                row_ids: RowIds::after(last_row),
                #[cfg(any(test, feature = "test-hooks"))]
                stall_next_ms: AtomicU64::new(0),
            }),
        }
    }

    /// The outgoing messages' row ids.
    pub(super) fn row_ids(&self) -> &RowIds {
        &self.shared.row_ids
    }

    /// Failed store statements since start.
    pub fn errors(&self) -> u64 {
        self.shared.errors.load(Ordering::Relaxed)
    }

    /// Test hook: makes the next store job take `stall` longer, as a slow
    /// disk or a locked file would.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn stall_next_write(&self, stall: Duration) {
        let ms = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX);
        self.shared.stall_next_ms.store(ms, Ordering::SeqCst);
    }

    /// Runs `f` on the store thread, after every job asked before; resolves
    /// with its value, or `None` when it failed (logged and counted, `what`
    /// naming it).
    pub fn ask<T, F>(
        &self,
        what: &'static str,
        f: F,
    ) -> impl Future<Output = Option<T>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, StateError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let shared = Arc::clone(&self.shared);
        self.submit(
            what,
            Box::new(move |store| {
                #[cfg(any(test, feature = "test-hooks"))]
                {
                    let stall = shared.stall_next_ms.swap(0, Ordering::SeqCst);
                    if stall > 0 {
                        std::thread::sleep(Duration::from_millis(stall));
                    }
                }
                let value = match f(store) {
                    Ok(v) => Some(v),
                    Err(err) => {
                        shared.errors.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(cause = %err, "state store: {what} failed");
                        None
                    }
                };
                Box::new(move |committed| {
                    let value = if committed || value.is_none() {
                        value
                    } else {
                        shared.errors.fetch_add(1, Ordering::Relaxed);
                        tracing::error!("state store: {what} failed: its batch was rolled back");
                        None
                    };
                    let _ = tx.send(value);
                })
            }),
        );
        async move { rx.await.ok().flatten() }
    }

    /// Runs `read` on the store thread, after every job asked before; its
    /// value, or [`ReadFailed`] (logged and counted, `what` naming it).
    pub fn read<T, F>(
        &self,
        what: &'static str,
        read: F,
    ) -> impl Future<Output = Result<T, ReadFailed>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, StateError> + Send + 'static,
    {
        let ask = self.ask(what, read);
        async move { ask.await.ok_or(ReadFailed) }
    }

    /// Runs `f` on the store thread without waiting for it (a failure is
    /// logged and counted, `what` naming it).
    pub fn tell<F>(&self, what: &'static str, f: F)
    where
        F: FnOnce(&Store) -> Result<(), StateError> + Send + 'static,
    {
        drop(self.ask(what, f));
    }

    fn submit(&self, what: &'static str, job: StoreJob) {
        let sent = self
            .shared
            .jobs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .send(job);
        if sent.is_err() {
            self.shared.errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!("state store: {what} failed: the store thread is gone");
        }
    }

    /// Records a live agent process group of `chat_id`.
    pub fn record_group(&self, group: super::AgentGroup, chat_id: i64) {
        self.tell("recording an agent process group", move |store| {
            store.record_group(&group, chat_id)
        });
    }

    /// Forgets a reaped agent process group.
    pub fn forget_group(&self, pgid: i64) {
        self.tell("forgetting an agent process group", move |store| {
            store.forget_group(pgid)
        });
    }

    /// **prune**: removes finished rows and turn records older than
    /// `retention` (logged when anything went).
    pub fn prune(&self, retention: Duration) {
        self.tell("pruning old rows", move |store| {
            let pruned = store.prune(retention)?;
            if pruned.inbox + pruned.turns > 0 {
                tracing::info!(
                    inbox = pruned.inbox,
                    turns = pruned.turns,
                    "pruned state older than the retention"
                );
            }
            Ok(())
        });
    }

    /// **reset_update_ids**: Telegram restarted its update ids at `first`
    /// (see [`Store::reset_update_ids`]); runs before any later job.
    pub fn reset_update_ids(&self, first: i64) {
        self.tell("resetting the update offset", move |store| {
            let forgotten = store.reset_update_ids(first)?;
            tracing::warn!(
                first,
                forgotten,
                "Telegram restarted its update ids; the offset moved back"
            );
            Ok(())
        });
    }

    /// How many messages are in each state, after every job asked before.
    pub fn counts(&self) -> impl Future<Output = Vec<(String, i64)>> + Send + 'static {
        let ask = self.ask("counting the inbox", |store| store.counts());
        async move { ask.await.unwrap_or_default() }
    }

    /// Remembers "always in this chat" for `rule` in the conversation `to`
    /// while in `project`, granted by `granted_by` (who pressed the button).
    pub fn allow_always(
        &self,
        to: Conversation,
        project: String,
        rule: AlwaysRule,
        granted_by: UserId,
    ) {
        let by = i64::try_from(granted_by.0).unwrap_or(i64::MAX);
        self.tell("remembering a tool approval", move |store| {
            store.allow_always(to, &project, &rule, by)
        });
    }

    /// The "always" rules of the conversation `to` in `project`, after
    /// every job asked before.
    pub fn always_rules(
        &self,
        to: Conversation,
        project: String,
    ) -> impl Future<Output = Result<Vec<AlwaysGrant>, ReadFailed>> + Send + 'static {
        self.read("reading tool approvals", move |store| {
            store.always_rules(to, &project)
        })
    }

    /// The "always" rules of the conversation `to` in the project it is in
    /// now, and that project (empty: none).
    pub fn always_rules_here(
        &self,
        to: Conversation,
    ) -> impl Future<Output = Result<(String, Vec<AlwaysGrant>), ReadFailed>> + Send + 'static {
        self.read("reading tool approvals", move |store| {
            let project = store.opening(to)?.project;
            let rules = store.always_rules(to, &project)?;
            Ok((project, rules))
        })
    }

    /// Forgets the "always" rules of the conversation `to` in the project
    /// it is in now; resolves with how many there were.
    pub fn clear_always_here(
        &self,
        to: Conversation,
    ) -> impl Future<Output = Option<usize>> + Send + 'static {
        self.ask("clearing tool approvals", move |store| {
            let project = store.opening(to)?.project;
            store.clear_always(to, &project)
        })
    }

    /// The next update id wanted from Telegram, after every job asked before.
    pub fn offset(&self) -> impl Future<Output = Option<i64>> + Send + 'static {
        self.ask("reading the offset", |store| store.offset())
    }

    /// Resolves once every job asked before has run.
    pub fn flushed(&self) -> impl Future<Output = ()> + Send + 'static {
        let ask = self.ask("flushing", |_| Ok(()));
        async move {
            ask.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use teloxide::types::ChatId;

    use super::*;
    use crate::ids::TurnId;
    use crate::incoming::Incoming;

    fn msg(update_id: i64) -> Incoming {
        Incoming {
            update_id,
            to: ChatId(1).into(),
            from: UserId(2),
            message_id: teloxide::types::MessageId(3),
            text: "hi".into(),
            ..Incoming::default()
        }
    }

    #[tokio::test]
    async fn a_read_that_fails_is_an_error_not_what_an_empty_store_holds() {
        let store = Arc::new(Store::in_memory().unwrap());
        store.lock().execute_batch("DROP TABLE choices").unwrap();
        let inbox = StoreHandle::start(store);
        let to = Conversation::from(ChatId(1));
        assert_eq!(
            inbox.read("project", move |s| s.project(to)).await,
            Err(ReadFailed),
            "not \"no project\""
        );
        assert_eq!(
            inbox.read("model", move |s| s.model(to)).await,
            Err(ReadFailed),
            "not the default model"
        );
        let opening = inbox.read("opening", move |s| s.opening(to)).await;
        assert!(opening.is_err(), "not a fresh session");
        assert_eq!(inbox.errors(), 3);
    }

    #[tokio::test]
    async fn what_the_chat_and_the_start_read_fails_as_an_error_not_as_nothing() {
        let store = Arc::new(Store::in_memory().unwrap());
        store
            .lock()
            .execute_batch(
                "DROP TABLE session_history; DROP TABLE usage; DROP TABLE schedule_runs; \
                 DROP TABLE schedules; DROP TABLE inbox; DROP TABLE outgoing_chats; \
                 DROP TABLE outgoing;",
            )
            .unwrap();
        let inbox = StoreHandle::start(store);
        let to = Conversation::from(ChatId(1));
        assert!(inbox.sessions(to).await.is_err(), "not \"no sessions\"");
        assert!(inbox.usage(Some(to)).await.is_err(), "not \"nothing used\"");
        assert!(inbox.usage_top(5).await.is_err());
        assert!(inbox.schedules().await.is_err(), "not \"no schedules\"");
        assert!(inbox.recover().await.is_err(), "not \"nothing to recover\"");
        assert!(inbox.outgoing().await.is_err(), "not \"nothing to send\"");
        assert_eq!(inbox.errors(), 6);
    }

    #[tokio::test]
    async fn jobs_run_in_the_order_they_were_asked() {
        let inbox = StoreHandle::start(Arc::new(Store::in_memory().unwrap()));
        assert_eq!(
            inbox.accept(vec![msg(1), msg(2)], 3).await,
            vec![true, true]
        );
        inbox.turn_started(vec![1, 2], TurnId(1));
        inbox.turn_finished(vec![1], Disposition::Done);
        inbox.turn_finished(vec![2], Disposition::Requeue);
        assert_eq!(
            inbox.counts().await,
            vec![("done".to_string(), 1), ("queued".to_string(), 1)]
        );
        assert_eq!(inbox.offset().await, Some(3));
        assert_eq!(
            inbox.accept(vec![msg(1)], 3).await,
            vec![false],
            "a redelivery"
        );
        assert_eq!(inbox.errors(), 0);
    }

    #[tokio::test]
    async fn a_failed_statement_is_counted() {
        let store = Arc::new(Store::in_memory().unwrap());
        let inbox = StoreHandle::start(Arc::clone(&store));
        inbox.tell("breaking", |s| {
            s.break_for_tests();
            Ok(())
        });
        inbox.turn_finished(vec![1], Disposition::Done);
        inbox.flushed().await;
        assert_eq!(inbox.errors(), 1);
    }

    /// A job writing the update offset `offset`; its answer records
    /// whether it was told committed and the offset another connection to
    /// the file read at that moment.
    fn write_offset(offset: i64, file: &std::path::Path, seen: &Seen) -> StoreJob {
        let (file, seen) = (file.to_path_buf(), Arc::clone(seen));
        Box::new(move |store| {
            store.set_offset(offset).unwrap();
            Box::new(move |committed| {
                let other = Store::open(&file).unwrap();
                seen.lock()
                    .unwrap()
                    .push((offset, committed, other.offset().unwrap()));
            })
        })
    }

    type Seen = Arc<std::sync::Mutex<Vec<(i64, bool, i64)>>>;

    fn batch_store() -> (tempfile::TempDir, std::path::PathBuf, Store, Seen) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("state.db");
        let store = Store::open(&file).unwrap();
        (dir, file, store, Seen::default())
    }

    #[test]
    fn a_write_is_answered_once_its_batch_is_committed() {
        let (_dir, file, store, seen) = batch_store();
        let mut batch = vec![write_offset(5, &file, &seen), write_offset(9, &file, &seen)];
        run_batch(&store, &mut batch);
        assert!(batch.is_empty());
        // Both were written by then, in one transaction: the first's
        // answer already sees the second's offset.
        assert_eq!(*seen.lock().unwrap(), vec![(5, true, 9), (9, true, 9)]);
        assert!(!store.in_transaction());
    }

    #[test]
    fn a_job_that_rolled_the_batch_back_takes_the_jobs_before_it_along() {
        let (_dir, file, store, seen) = batch_store();
        let rollback: StoreJob = Box::new(|store: &Store| {
            // As SQLite does on a full disk or an I/O error.
            store.lock().execute_batch("ROLLBACK").unwrap();
            Box::new(|_| {})
        });
        let mut batch = vec![
            write_offset(5, &file, &seen),
            rollback,
            write_offset(7, &file, &seen),
        ];
        run_batch(&store, &mut batch);
        assert_eq!(*seen.lock().unwrap(), vec![(5, false, 0), (7, true, 7)]);
    }

    #[test]
    fn a_batch_that_cannot_commit_is_rolled_back_and_answered_as_failed() {
        let (_dir, file, store, seen) = batch_store();
        store
            .lock()
            .execute_batch(
                "PRAGMA foreign_keys = ON;
                 CREATE TABLE parent (id INTEGER PRIMARY KEY);
                 CREATE TABLE child (parent REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);",
            )
            .unwrap();
        // A deferred constraint fails at COMMIT, which leaves the
        // transaction open.
        let orphan: StoreJob = Box::new(|store: &Store| {
            store
                .lock()
                .execute("INSERT INTO child VALUES (42)", [])
                .unwrap();
            Box::new(|_| {})
        });
        let mut batch = vec![write_offset(5, &file, &seen), orphan];
        run_batch(&store, &mut batch);
        assert_eq!(*seen.lock().unwrap(), vec![(5, false, 0)]);
        assert!(!store.in_transaction(), "rolled back");
        let mut next = vec![write_offset(6, &file, &seen)];
        run_batch(&store, &mut next);
        assert_eq!(seen.lock().unwrap()[1], (6, true, 6));
    }

    #[test]
    fn a_batch_takes_at_most_batch_max_jobs() {
        let (tx, rx) = mpsc::channel::<StoreJob>();
        for _ in 0..BATCH_MAX + 10 {
            tx.send(Box::new(|_: &Store| Box::new(|_| {}) as Answer))
                .unwrap();
        }
        let mut batch = Vec::new();
        assert!(gather(&rx, &mut batch));
        assert_eq!(batch.len(), BATCH_MAX);
        batch.clear();
        assert!(gather(&rx, &mut batch));
        assert_eq!(batch.len(), 10);
        drop(tx);
        batch.clear();
        assert!(!gather(&rx, &mut batch));
    }

    #[tokio::test]
    async fn a_stalled_job_does_not_block_the_caller() {
        let inbox = StoreHandle::start(Arc::new(Store::in_memory().unwrap()));
        inbox.stall_next_write(Duration::from_millis(300));
        let asked = std::time::Instant::now();
        inbox.turn_started(vec![1], TurnId(1));
        assert!(asked.elapsed() < Duration::from_millis(300));
        inbox.flushed().await;
        assert!(asked.elapsed() >= Duration::from_millis(300));
    }
}

//! A chat's lane: its queue and the worker that drains it, in order. The
//! actor holds a [`Lane`] per chat and sends jobs down its channel; the
//! worker owns the chat's [`Pacing`] and the messages its live slots show.
//! All the two share is the lane's [`Book`], under one lock: the jobs still
//! to run, the turns `/stop` stopped, the live text waiting and the topics
//! with typing queued.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use teloxide::RequestError;
use teloxide::types::{ChatId, MessageId, ThreadId};
use tokio::sync::mpsc;
use tracing::{Instrument, Span};

use super::deliver::Telegram;
use super::jobs::Job;
use super::known::Known;
use super::live::{self, ShownMessage};
use super::pacing::{Bucket, Pacing};
use super::post::{LaneView, Post, lock};
use super::requests::{Show, ShowAs, Slot};
use crate::events::EventBus;
use crate::ids::TurnId;
use crate::ops::WaitingMessage;
use crate::ops::logging::context_span;
use crate::state::StoreHandle;

/// A lane unused for this long (and empty, with no live slot) is dropped
/// and its worker ends.
pub(super) const LANE_IDLE: Duration = Duration::from_secs(60);

/// How many stopped turns a lane remembers. A stopped turn's jobs reach
/// the lane within moments of its stop (its reply relay waits for one
/// store write), and each conversation runs one turn at a time: this many
/// covers as many topics of the chat stopped at once.
const STOPPED_KEPT: usize = 32;

/// What every lane's worker shares.
pub(super) struct OutboxShared {
    pub(super) telegram: Telegram,
    pub(super) events: EventBus,
    /// The pacing all chats share.
    pub(super) global: Arc<Mutex<Bucket>>,
    /// Requests queued or running across all chats.
    pub(super) pending: Pending,
    /// Where messages are kept until Telegram takes them, if anywhere.
    pub(super) store: Option<StoreHandle>,
    /// Each chat's highest known message id while it has no lane.
    pub(super) last_ids: Mutex<HashMap<ChatId, i32>>,
    /// The row of each approval question shown in a chat, by its message
    /// id, until its decision's edit (see `KeptQuestion::shown`).
    pub(super) shown: Mutex<HashMap<(ChatId, i32), i64>>,
    /// When the latest answered `getUpdates` left, its messages known.
    pub(super) polls: tokio::sync::watch::Sender<Option<Instant>>,
}

/// Requests queued or running across all chats (`Flush` waits for none).
pub(super) type Pending = crate::in_flight::InFlight;

/// What the actor and a lane's worker both see, under one lock.
#[derive(Default)]
struct Book {
    /// Jobs queued or running (live text included); the lane is dropped
    /// only at zero, so a chat never has two workers at once.
    pending: usize,
    /// The turns `/stop` stopped, the latest last (at most
    /// [`STOPPED_KEPT`]): what one of them queued is dropped, whenever it
    /// comes.
    stopped: VecDeque<TurnId>,
    /// Live text waiting for a free send: one entry per slot, the latest
    /// [`Show`] of each, oldest slot first.
    light: VecDeque<Slot>,
    shows: HashMap<Slot, Show>,
    /// Topics with a typing request queued: typing is coalesced, so a slow
    /// message never builds a backlog of them.
    typing: HashSet<Option<ThreadId>>,
    /// Live slots showing a message: the lane is kept while one does.
    showing: usize,
}

impl Book {
    /// Whether `/stop` stopped the turn that queued a job (none: a job of
    /// no turn, never dropped).
    fn stopped(&self, turn: Option<TurnId>) -> bool {
        turn.is_some_and(|turn| self.stopped.contains(&turn))
    }

    /// `/stop` stopped `turn`; the oldest one remembered is forgotten when
    /// [`STOPPED_KEPT`] are.
    fn stop(&mut self, turn: TurnId) {
        if self.stopped.contains(&turn) {
            return;
        }
        if self.stopped.len() >= STOPPED_KEPT {
            self.stopped.pop_front();
        }
        self.stopped.push_back(turn);
    }

    /// The oldest live text waiting.
    fn take_show(&mut self) -> Option<Show> {
        while let Some(slot) = self.light.pop_front() {
            if let Some(job) = self.shows.remove(&slot) {
                return Some(job);
            }
        }
        None
    }
}

/// What goes down a lane's channel: a real job (boxed, so an idle lane's
/// queue, a block of slots allocated with the channel, stays small), or
/// word that live text is waiting.
pub(super) enum Down {
    Job(Box<(Job, Option<WaitingMessage>)>),
    Light,
}

/// The actor's end of a chat's lane.
pub(super) struct Lane {
    tx: mpsc::UnboundedSender<Down>,
    book: Arc<Mutex<Book>>,
    /// The chat's message ids the lane knows (shared with its worker).
    known: Arc<Mutex<Known>>,
    /// When a job was last queued.
    last_used: Instant,
}

impl Lane {
    /// A lane for `chat`, and the worker that drains it (to be spawned),
    /// which logs in `lane{chat_id}`.
    pub(super) fn start(
        shared: &Arc<OutboxShared>,
        chat: ChatId,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (tx, rx) = mpsc::unbounded_channel();
        let book = Arc::new(Mutex::new(Book::default()));
        let known = Arc::new(Mutex::new(Known::from(
            lock(&shared.last_ids).remove(&chat),
        )));
        let worker = Worker {
            known: Arc::clone(&known),
            pacing: Pacing::of_chat(&shared.telegram.limits, chat, Arc::clone(&shared.global)),
            shared: Arc::clone(shared),
            chat,
            book: Arc::clone(&book),
            slots: HashMap::new(),
        };
        let lane = Self {
            tx,
            book,
            known,
            last_used: Instant::now(),
        };
        // A root: the lane outlives whichever request started it.
        let span = context_span!(parent: None, "lane", chat_id = chat.0);
        (lane, worker.run(rx).instrument(span))
    }

    /// Queues `job`; gives it back when the worker is gone.
    /// An answer counts as waiting (in the metrics) until it is settled.
    pub(super) fn push(
        &mut self,
        pending: &Pending,
        job: Job,
        waiting: Option<WaitingMessage>,
    ) -> Result<(), Box<Job>> {
        self.last_used = Instant::now();
        pending.add(1);
        lock(&self.book).pending += 1;
        match self.tx.send(Down::Job(Box::new((job, waiting)))) {
            Ok(()) => Ok(()),
            Err(mpsc::error::SendError(Down::Job(queued))) => {
                pending.done(1);
                Err(Box::new(queued.0))
            }
            // Not sent here.
            Err(mpsc::error::SendError(Down::Light)) => Ok(()),
        }
    }

    /// Queues live text, replacing what its slot had waiting.
    pub(super) fn show(&mut self, pending: &Pending, show: Show) {
        self.last_used = Instant::now();
        let chat = show.to.chat;
        let mut book = lock(&self.book);
        let slot = show.slot;
        if book.shows.insert(slot, show).is_some() {
            tracing::trace!(chat_id = chat.0, "live text superseded before it was sent");
            return;
        }
        book.light.push_back(slot);
        book.pending += 1;
        pending.add(1);
        drop(book);
        let _ = self.tx.send(Down::Light);
    }

    /// The highest message id the lane knows.
    pub(super) fn baseline(&self) -> Option<i32> {
        lock(&self.known).baseline()
    }

    /// A message came in: its id is known.
    pub(super) fn seen(&mut self, id: MessageId) {
        lock(&self.known).saw(id);
    }

    /// `/stop` of `turn`: what it queued, before or after this, is dropped
    /// when the worker reaches it, without taking a send. The lane counts
    /// as used: it stays, and remembers the turn, for [`LANE_IDLE`] at
    /// least, while the turn's reply relay may still hand its text over.
    pub(super) fn purge(&mut self, turn: TurnId) {
        self.last_used = Instant::now();
        lock(&self.book).stop(turn);
    }

    /// Marks a typing request of `topic` queued; `false` when one is.
    pub(super) fn typing(&mut self, topic: Option<ThreadId>) -> bool {
        lock(&self.book).typing.insert(topic)
    }

    /// Whether the lane may go: nothing queued, no live slot showing a
    /// message, unused for [`LANE_IDLE`].
    pub(super) fn idle(&self) -> bool {
        let book = lock(&self.book);
        book.pending == 0 && book.showing == 0 && self.last_used.elapsed() >= LANE_IDLE
    }
}

/// A lane's worker: what it owns.
struct Worker {
    shared: Arc<OutboxShared>,
    chat: ChatId,
    book: Arc<Mutex<Book>>,
    pacing: Pacing,
    /// The message each live slot shows.
    slots: HashMap<Slot, ShownMessage>,
    /// The chat's message ids the lane knows.
    known: Arc<Mutex<Known>>,
}

impl Worker {
    /// Runs the chat's jobs one after another, until its lane is dropped:
    /// real requests first, in order; live text only when none is queued
    /// and the chat can spare a send.
    ///
    /// An idle chat keeps its worker for a while, so what an idle worker
    /// holds is kept small: a job's future (the request, its retries) is
    /// boxed while it runs, and the queue holds boxed jobs.
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Down>) {
        self.drain(&mut rx).await;
        // What it knows of the chat outlives the lane.
        if let Some(last) = lock(&self.known).baseline() {
            lock(&self.shared.last_ids).insert(self.chat, last);
        }
    }

    /// The loop of [`Self::run`], until the lane is dropped.
    async fn drain(&mut self, rx: &mut mpsc::UnboundedReceiver<Down>) {
        loop {
            match rx.try_recv() {
                Ok(Down::Job(queued)) => {
                    let (job, _waiting) = *queued;
                    Box::pin(self.real(job)).await;
                    continue;
                }
                Ok(Down::Light) => continue,
                Err(mpsc::error::TryRecvError::Disconnected) => return,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            // Live text waits for a free send; with none queued, for one to come.
            let waiting = !lock(&self.book).shows.is_empty();
            let wait = waiting.then(|| self.pacing.light_wait());
            if wait.is_some_and(|wait| wait.is_zero()) {
                let show = lock(&self.book).take_show();
                if let Some(show) = show {
                    Box::pin(self.show(show)).await;
                    self.finished();
                }
                continue;
            }
            let ready = async move {
                match wait {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                down = rx.recv() => match down {
                    Some(Down::Job(queued)) => {
                        let (job, _waiting) = *queued;
                        Box::pin(self.real(job)).await;
                    }
                    Some(Down::Light) => {}
                    None => return,
                },
                () = ready => {}
            }
        }
    }

    /// One job is over.
    fn finished(&self) {
        lock(&self.book).pending -= 1;
        self.shared.pending.done(1);
    }

    /// Runs a real request, unless `/stop` stopped the turn that queued it.
    async fn real(&mut self, job: Job) {
        let turn = job.turn();
        let purged = {
            let mut book = lock(&self.book);
            if let Job::Typing(_, topic) = &job {
                book.typing.remove(topic);
            }
            book.stopped(turn)
        };
        let kept = job.kept();
        let edited = match &job {
            Job::Edit(id, ..) | Job::Unbutton(id) => Some(*id),
            _ => None,
        };
        let mut shown = None;
        let job = if purged {
            tracing::info!(
                turn_id = turn.map(TurnId::get),
                "a stopped turn's message dropped before Telegram had it"
            );
            job.stopped(self.chat)
        } else {
            Some(job)
        };
        if let Some(job) = job {
            let Worker {
                shared,
                chat,
                book,
                pacing,
                slots,
                known,
            } = self;
            let mut post = Post {
                telegram: &shared.telegram,
                events: &shared.events,
                chat: *chat,
                pacing,
                known,
                polls: &shared.polls,
                shown: None,
            };
            let mut view = View {
                book,
                slots,
                pending: &shared.pending,
                turn,
            };
            // A turn's job logs in `job{turn_id}`, inside the lane's span.
            let span = match turn {
                Some(turn) => context_span!("job", turn_id = turn.get()),
                None => Span::none(),
            };
            post.run(&mut view, job).instrument(span).await;
            shown = post.shown;
        }
        if let (Some((row, file)), Some(store)) = (kept, &self.shared.store) {
            let last = lock(&self.known).baseline();
            match shown {
                // An approval's buttons wait: its row stays until decided.
                Some(id) => {
                    lock(&self.shared.shown).insert((self.chat, id.0), row);
                    store.outgoing_shown(row, self.chat.0, last, id.0);
                }
                None => store.settle_outgoing(row, self.chat.0, last, file),
            }
        }
        let decided = edited.and_then(|id| lock(&self.shared.shown).remove(&(self.chat, id.0)));
        if let (Some(row), Some(store)) = (decided, &self.shared.store) {
            store.settle_outgoing(row, self.chat.0, None, false);
        }
        self.finished();
    }

    /// Sends or edits a slot's live text: one attempt; a 429 holds the chat
    /// and the text waits its turn again (unless a newer one replaced it).
    async fn show(&mut self, show: Show) {
        let chat = self.chat;
        if lock(&self.book).stopped(show.turn) {
            return;
        }
        let rendered = live::live_text(&show.text, show.markdown);
        let draft = show.show_as == ShowAs::Draft && chat.is_user();
        let shown = self.slots.get(&show.slot).map(|s| s.id);
        let wait = self.pacing.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let telegram = &self.shared.telegram;
        match live::show(telegram, chat, &show, &rendered, draft, shown).await {
            Ok(Some(id)) => {
                // A message of the lane's own: no copy of anything.
                lock(&self.known).saw(id);
                self.slots.insert(show.slot, ShownMessage { id, rendered });
                lock(&self.book).showing = self.slots.len();
            }
            Ok(None) => {
                if let Some(shown) = self.slots.get_mut(&show.slot) {
                    shown.rendered = rendered;
                }
            }
            Err(RequestError::RetryAfter(secs)) => {
                tracing::info!(
                    retry_after_s = secs.seconds(),
                    "live text rate limited; the chat waits"
                );
                self.pacing.hold(secs.duration());
                self.put_back(show);
            }
            Err(err) => {
                tracing::debug!(cause = %err, "live text not shown");
            }
        }
    }

    /// Queues live text again after a 429, unless a newer one took its
    /// place; it counts as pending again.
    fn put_back(&self, show: Show) {
        let mut book = lock(&self.book);
        if book.shows.contains_key(&show.slot) {
            return;
        }
        let slot = show.slot;
        book.shows.insert(slot, show);
        book.light.push_front(slot);
        book.pending += 1;
        self.shared.pending.add(1);
    }
}

/// What a real job may touch of its lane.
struct View<'a> {
    book: &'a Mutex<Book>,
    slots: &'a mut HashMap<Slot, ShownMessage>,
    pending: &'a Pending,
    /// The turn that queued the job.
    turn: Option<TurnId>,
}

impl LaneView for View<'_> {
    fn close(&mut self, slot: Slot) -> Option<ShownMessage> {
        let mut book = lock(self.book);
        if book.shows.remove(&slot).is_some() {
            book.pending -= 1;
            self.pending.done(1);
        }
        let shown = self.slots.remove(&slot);
        book.showing = self.slots.len();
        shown
    }

    fn stopped(&self) -> bool {
        lock(self.book).stopped(self.turn)
    }
}

#[cfg(test)]
mod tests {
    use super::super::pacing::{self, RateLimits};
    use super::*;

    /// What lanes share, with a client that is never called.
    fn shared() -> Arc<OutboxShared> {
        let limits = RateLimits::default();
        Arc::new(OutboxShared {
            telegram: Telegram::new(teloxide::Bot::new("1:test"), limits.clone(), Arc::default()),
            events: EventBus::new(),
            global: pacing::global(&limits),
            pending: Pending::default(),
            store: None,
            last_ids: Mutex::default(),
            shown: Mutex::default(),
            polls: tokio::sync::watch::Sender::new(None),
        })
    }

    /// An idle chat keeps its lane (and so its worker) for a while: what an
    /// idle worker holds must stay small (it was 6 KiB a lane, most of an
    /// idle chat's memory, when a job's future was part of the worker's).
    #[test]
    fn an_idle_lane_holds_a_small_worker_and_queue() {
        let shared = shared();
        let (_lane, worker) = Lane::start(&shared, ChatId(7));
        let size = std::mem::size_of_val(&worker);
        assert!(size <= 1024, "an idle chat's worker holds {size} bytes");
        // The channel allocates a block of 32 slots up front.
        assert!(std::mem::size_of::<Down>() <= 8);
    }

    /// A lane unused for [`LANE_IDLE`] may go; a `/stop` keeps it (and what
    /// it remembers of the stopped turn) for as long again.
    #[test]
    fn a_stop_keeps_an_idle_lane_for_the_stopped_turns_later_text() {
        let shared = shared();
        let (mut lane, _worker) = Lane::start(&shared, ChatId(7));
        lane.last_used = (Instant::now().checked_sub(LANE_IDLE))
            .expect("the monotonic clock has run for LANE_IDLE");
        assert!(lane.idle(), "unused for LANE_IDLE: it may go");
        lane.purge(TurnId(7));
        assert!(!lane.idle(), "a lane stopped just now stays");
    }

    /// A lane remembers the latest stopped turns, each once, and no more:
    /// a chat stopped again and again holds a bounded record.
    #[test]
    fn a_lane_remembers_the_latest_stopped_turns_each_once() {
        let mut book = Book::default();
        let last = u64::try_from(STOPPED_KEPT).unwrap() + 1;
        for turn in 1..=last {
            book.stop(TurnId(turn));
        }
        book.stop(TurnId(last));
        assert_eq!(book.stopped.len(), STOPPED_KEPT);
        assert!(!book.stopped(Some(TurnId(1))), "the oldest is forgotten");
        assert!(
            (2..=last).all(|turn| book.stopped(Some(TurnId(turn)))),
            "the latest are remembered: {:?}",
            book.stopped
        );
        assert!(!book.stopped(None), "a job of no turn is never dropped");
    }
}

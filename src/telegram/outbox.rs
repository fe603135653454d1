//! The Outbox: the one way out to Telegram.
//!
//! Each chat has its own FIFO worker, so a chat's requests leave in order;
//! all chats share one global rate limit. A 429 waits its `retry_after`;
//! 5xx answers and connection failures are retried with backoff; a request
//! that may have reached Telegram is never sent again; text over 4096
//! characters is split without breaking code blocks; a 400 "can't parse
//! entities" is retried as plain text; a 403 (bot blocked) is reported and
//! not retried. Typing requests are sent only while their lease is alive.
//!
//! Questions ([`SendQuestion`]: text under callback buttons) and their
//! edits ([`EditQuestion`]) take the same lanes, limits and retry rules; an
//! edit may be repeated (the same edit twice is harmless), a question may
//! not. Callback answers ([`AnswerCallback`]) are no messages: they take no
//! lane and no rate limit, so presses never delay a chat's messages nor
//! wait behind them, and one is dropped once Telegram would no longer take
//! it. Nothing takes a rate-limit slot for a request it then drops.
//! A question is never cut: what does not fit its message goes first as a
//! text file it replies to.
//!
//! The request types are in `outbox/requests.rs`, the retry rules in
//! `outbox/retry.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::{Actor, AsyncContext, Context, Handler};
use teloxide::payloads::{
    AnswerCallbackQuerySetters, SendChatActionSetters, SendDocumentSetters, SendMessageSetters,
    SendPhotoSetters, SetMessageReactionSetters,
};
use teloxide::prelude::Requester;
use teloxide::types::{
    CallbackQueryId, ChatAction, ChatId, InputFile, MessageId, ReactionType, ReplyParameters,
    ThreadId,
};
use teloxide::{ApiError, Bot, RequestError};
use tokio::sync::mpsc;

use crate::events::{BotEvent, EventBus};
use crate::telegram::format::TELEGRAM_TEXT_LIMIT;
use crate::telegram::format::{self, Rendered};

mod live;
mod requests;
mod retry;

pub use requests::{
    AnswerCallback, Button, CALLBACK_ANSWER_WINDOW, Clear, EditQuestion, Flush, Purge,
    QuestionFile, React, SendFile, SendQuestion, SendText, SendTyping, Show, ShowAs, Slot,
    StopOutbox,
};
use requests::{CAPTION_LIMIT, CallbackAnswer, Job, Place, QuestionJob, TextJob, cut};
use retry::{Rule, Sent, classify, deliver, deliver_unpaced, retry_allowed, send_piece};

/// Why a request did not get through.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum OutboxError {
    /// The user blocked the bot (403); not retried.
    #[error("the bot was blocked in this chat")]
    Blocked,
    /// Telegram refused the request; not retried.
    #[error("telegram refused the request: {0}")]
    Refused(String),
    /// Retries ran out.
    #[error("telegram could not be reached: {0}")]
    Unreachable(String),
    /// The request left but no answer came back (the connection failed
    /// after it was written, the answer was not JSON): Telegram may or may
    /// not have it. It is not sent again, so nothing arrives twice.
    #[error("telegram did not confirm the {method} request: {cause}")]
    Unknown {
        /// The Bot API method.
        method: &'static str,
        /// What went wrong.
        cause: String,
    },
    /// The text was empty.
    #[error("the message text is empty")]
    EmptyText,
    /// The outbox has stopped.
    #[error("the outbox has stopped")]
    Stopped,
    /// `/stop` dropped it before it was sent.
    #[error("dropped by /stop before it was sent")]
    Dropped,
    /// The file to send could not be read from its descriptor (it grew
    /// past the limit or was emptied after the check); not retried.
    #[error("the file could not be read: {0}")]
    Unreadable(String),
}

/// Rate limits and retry policy.
#[derive(Debug, Clone)]
pub struct RateLimits {
    /// Messages a chat may burst.
    pub chat_burst: f64,
    /// Messages per second a private chat refills (Telegram: about one).
    pub chat_per_sec: f64,
    /// Messages per second a group refills (Telegram: 20 a minute).
    pub group_per_sec: f64,
    /// Messages all chats may burst.
    pub global_burst: f64,
    /// Messages per second all chats refill.
    pub global_per_sec: f64,
    /// Retries of a 5xx or connection failure.
    pub max_retries: u32,
    /// The first backoff; it doubles per retry.
    pub backoff: Duration,
    /// The longest `retry_after` honoured before giving up.
    pub max_retry_after: Duration,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            chat_burst: 5.0,
            chat_per_sec: 1.0,
            group_per_sec: 20.0 / 60.0,
            global_burst: 30.0,
            global_per_sec: 30.0,
            max_retries: 4,
            backoff: Duration::from_millis(500),
            max_retry_after: Duration::from_secs(300),
        }
    }
}

/// A token bucket that hands out reservations: the wait before the next send.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    burst: f64,
    per_sec: f64,
    at: Instant,
    /// Until when a 429 holds the chat.
    held: Option<Instant>,
}

impl Bucket {
    fn new(burst: f64, per_sec: f64) -> Self {
        Self {
            tokens: burst,
            burst,
            per_sec,
            at: Instant::now(),
            held: None,
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_sec;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
    }

    /// How long until the hold of a 429 is over.
    fn held_for(&self) -> Duration {
        self.held
            .map(|until| until.saturating_duration_since(Instant::now()))
            .unwrap_or_default()
    }

    /// How long until a token is free; takes none.
    fn wait(&mut self) -> Duration {
        self.refill();
        let short = 1.0 - self.tokens;
        let wait = if short <= 0.0 || self.per_sec <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(short / self.per_sec)
        };
        wait.max(self.held_for())
    }

    /// Takes one token, returning how long to wait before using it.
    fn reserve(&mut self) -> Duration {
        self.refill();
        self.tokens -= 1.0;
        let wait = if self.tokens >= 0.0 || self.per_sec <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.per_sec)
        };
        wait.max(self.held_for())
    }

    /// How long live text must wait: it may not take the last token a real
    /// message could use (one is kept back when the burst allows it), nor
    /// go while a 429 holds the chat. Takes nothing.
    fn light_wait(&mut self) -> Duration {
        self.refill();
        let keep = (self.burst - 1.0).clamp(0.0, 1.0);
        let short = 1.0 + keep - self.tokens;
        let wait = if short <= 0.0 || self.per_sec <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(short / self.per_sec)
        };
        wait.max(self.held_for())
    }

    /// Telegram said to wait (a 429): nothing of this chat goes before.
    fn hold(&mut self, wait: Duration) {
        let until = Instant::now() + wait;
        self.held = Some(self.held.map_or(until, |held| held.max(until)));
    }
}

/// A job on a lane's queue, with the purge epoch of its topic when it was
/// queued; boxed, so an idle lane's queue (a block of slots, allocated with
/// the channel) stays small.
type Queued = Box<(Job, u64)>;

/// What every chat worker shares.
struct Shared {
    /// Requests queued or running across all chats.
    pending: AtomicUsize,
    /// Woken each time `pending` drops to zero ([`Flush`] waits on it).
    drained: tokio::sync::Notify,
    bot: Bot,
    limits: RateLimits,
    global: Mutex<Bucket>,
    events: EventBus,
}

/// A chat's queue and its worker's bookkeeping.
struct Lane {
    /// The worker's queue of real requests, each with the purge epoch of
    /// its topic when it was queued.
    tx: mpsc::UnboundedSender<Queued>,
    /// Live text waiting for a free send; the worker takes it only when no
    /// real request is queued.
    light: Arc<LightQueue>,
    /// What the worker shares with the actor: counts, epochs, live slots.
    state: Arc<LaneState>,
    /// Whether a typing request is already queued (typing is coalesced, so
    /// a slow message never builds a backlog of them).
    typing_queued: TypingQueued,
    /// When a job was last queued.
    last_used: Instant,
}

/// The part of a lane its worker and the actor both touch.
#[derive(Default)]
struct LaneState {
    /// Jobs queued or running (light ones included); the lane is dropped
    /// only at zero, so a chat never has two workers at once.
    pending: AtomicUsize,
    /// Per topic, how many times [`Purge`] ran: a job queued under an older
    /// epoch is dropped.
    epochs: Mutex<HashMap<Option<ThreadId>, u64>>,
    /// The message each live slot shows.
    slots: Mutex<HashMap<Slot, Shown>>,
}

/// The message a live slot shows, and its text.
struct Shown {
    id: MessageId,
    rendered: Rendered,
}

impl LaneState {
    fn epoch(&self, topic: Option<ThreadId>) -> u64 {
        lock(&self.epochs).get(&topic).copied().unwrap_or_default()
    }

    /// Whether a job of `topic` queued at `epoch` was purged since.
    fn purged(&self, topic: Option<ThreadId>, epoch: u64) -> bool {
        epoch < self.epoch(topic)
    }
}

/// Live text waiting for a free send: one entry per slot, the latest
/// [`Show`] of each, oldest slot first.
#[derive(Default)]
struct LightQueue {
    inner: Mutex<LightInner>,
    /// Woken when an entry is added.
    wake: tokio::sync::Notify,
}

#[derive(Default)]
struct LightInner {
    order: std::collections::VecDeque<Slot>,
    jobs: HashMap<Slot, (Show, u64)>,
}

impl LightQueue {
    /// Queues `show`, replacing a queued one of its slot; `true` when it is
    /// a new entry (the replaced one was superseded, never sent).
    fn put(&self, show: Show, epoch: u64) -> bool {
        let mut inner = lock(&self.inner);
        let slot = show.slot;
        let new = inner.jobs.insert(slot, (show, epoch)).is_none();
        if new {
            inner.order.push_back(slot);
        }
        drop(inner);
        self.wake.notify_one();
        new
    }

    /// Queues `show` again after a 429, unless a newer one took its place.
    fn put_back(&self, show: Show, epoch: u64) -> bool {
        let mut inner = lock(&self.inner);
        if inner.jobs.contains_key(&show.slot) {
            return false;
        }
        let slot = show.slot;
        inner.jobs.insert(slot, (show, epoch));
        inner.order.push_front(slot);
        true
    }

    fn take(&self) -> Option<(Show, u64)> {
        let mut inner = lock(&self.inner);
        while let Some(slot) = inner.order.pop_front() {
            if let Some(job) = inner.jobs.remove(&slot) {
                return Some(job);
            }
        }
        None
    }

    fn is_empty(&self) -> bool {
        lock(&self.inner).jobs.is_empty()
    }

    /// Drops the queued entry of `slot`; `true` when there was one.
    fn remove(&self, slot: Slot) -> bool {
        lock(&self.inner).jobs.remove(&slot).is_some()
    }

    /// Drops the entries of `topic`; how many.
    fn purge(&self, topic: Option<ThreadId>) -> usize {
        let mut inner = lock(&self.inner);
        let before = inner.jobs.len();
        inner.jobs.retain(|_, (show, _)| show.topic != topic);
        before - inner.jobs.len()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The Outbox actor.
pub struct Outbox {
    /// Everything a worker needs.
    shared: Arc<Shared>,
    /// Each chat's lane.
    lanes: HashMap<ChatId, Lane>,
    /// Set by [`StopOutbox`]: later requests are refused.
    stopped: bool,
    /// Where the workers run.
    workers: Workers,
}

/// Where the chat workers and callback answers run: on a thread of their
/// own (`turnstile-http`), so that Telegram's answers are read as they come
/// however busy the actors' thread is. An HTTP connection's idle time starts
/// only once its answer has been read: read late (the actors' thread busy or
/// stalled), a connection the server had been holding idle for its whole
/// keep-alive looked fresh, and the next message written to it crossed the
/// server's close and was lost (its outcome unknown, never sent again).
/// The actors' thread, should that thread not start.
enum Workers {
    Own(Option<tokio::runtime::Runtime>),
    Here,
}

impl Workers {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("turnstile-http")
            .enable_all()
            .build();
        match runtime {
            Ok(runtime) => Self::Own(Some(runtime)),
            Err(err) => {
                tracing::warn!(cause = %err, "the outbox's thread did not start; its requests run on the actors' thread");
                Self::Here
            }
        }
    }

    fn spawn<F: std::future::Future<Output = ()> + Send + 'static>(&self, work: F) {
        match self {
            Self::Own(Some(runtime)) => {
                // Logged where the actors log (a test's own subscriber too).
                use tracing::instrument::WithSubscriber as _;
                runtime.spawn(work.with_current_subscriber());
            }
            Self::Own(None) | Self::Here => {
                actix::spawn(work);
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // Dropped on the actors' thread: a runtime may not block there.
        if let Self::Own(runtime) = self
            && let Some(runtime) = runtime.take()
        {
            runtime.shutdown_background();
        }
    }
}

/// A lane unused for this long (and empty, with no live slot) is dropped
/// and its worker ends.
const LANE_IDLE: Duration = Duration::from_secs(60);

impl Outbox {
    /// An outbox sending through `bot`.
    pub fn new(bot: Bot, limits: RateLimits, events: EventBus) -> Self {
        let global = Mutex::new(Bucket::new(limits.global_burst, limits.global_per_sec));
        Self {
            shared: Arc::new(Shared {
                pending: AtomicUsize::new(0),
                drained: tokio::sync::Notify::new(),
                bot,
                limits,
                global,
                events,
            }),
            lanes: HashMap::new(),
            stopped: false,
            workers: Workers::start(),
        }
    }

    /// The chat's lane, starting its worker when needed.
    fn lane(&mut self, chat: ChatId) -> &mut Lane {
        let shared = &self.shared;
        let workers = &self.workers;
        let lane = self.lanes.entry(chat).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let light = Arc::new(LightQueue::default());
            let state = Arc::new(LaneState::default());
            let typing_queued = TypingQueued::default();
            workers.spawn(chat_worker(
                Worker {
                    shared: Arc::clone(shared),
                    chat,
                    light: Arc::clone(&light),
                    state: Arc::clone(&state),
                    typing_queued: Arc::clone(&typing_queued),
                    bucket: chat_bucket(&shared.limits, chat),
                },
                rx,
            ));
            Lane {
                tx,
                light,
                state,
                typing_queued,
                last_used: Instant::now(),
            }
        });
        lane.last_used = Instant::now();
        lane
    }

    /// Whether a request is refused because the outbox stopped.
    fn refused(&self, chat: ChatId) -> bool {
        if self.stopped {
            tracing::warn!(
                chat_id = chat.0,
                "request after the outbox stopped; refused"
            );
        }
        self.stopped
    }

    /// Queues a job on the chat's lane (or refuses it once stopped).
    fn enqueue(&mut self, chat: ChatId, job: Job) {
        if self.refused(chat) {
            job.refuse(OutboxError::Stopped);
            return;
        }
        self.shared.pending.fetch_add(1, Ordering::SeqCst);
        let lane = self.lane(chat);
        lane.state.pending.fetch_add(1, Ordering::SeqCst);
        let epoch = lane.state.epoch(job.purgeable().flatten());
        if let Err(mpsc::error::SendError(job)) = lane.tx.send(Box::new((job, epoch))) {
            // The worker is gone (it cannot be while the lane exists, but a
            // job must never vanish): replace the lane and queue again.
            tracing::warn!(chat_id = chat.0, "outbox worker missing; restarting it");
            self.lanes.remove(&chat);
            let lane = self.lane(chat);
            lane.state.pending.fetch_add(1, Ordering::SeqCst);
            let _ = lane.tx.send(job);
        }
    }

    /// Drops idle, empty lanes without live slots; their workers end.
    fn sweep(&mut self, _ctx: &mut Context<Self>) {
        self.lanes.retain(|_, lane| {
            lane.state.pending.load(Ordering::SeqCst) > 0
                || !lock(&lane.state.slots).is_empty()
                || lane.last_used.elapsed() < LANE_IDLE
        });
    }
}

/// A chat's own limit: about one message a second in a private chat, 20 a
/// minute in a group (edits included).
fn chat_bucket(limits: &RateLimits, chat: ChatId) -> Bucket {
    let per_sec = if chat.is_user() {
        limits.chat_per_sec
    } else {
        limits.group_per_sec
    };
    Bucket::new(limits.chat_burst, per_sec)
}

impl Actor for Outbox {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(LANE_IDLE / 2, Self::sweep);
    }
}

impl Handler<SendText> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: SendText, _ctx: &mut Self::Context) {
        if msg.text.trim().is_empty() {
            if let Some(reply) = msg.reply {
                let _ = reply.send(Err(OutboxError::EmptyText));
            }
            return;
        }
        let place = Place {
            topic: msg.topic,
            reply_to: msg.reply_to,
        };
        self.enqueue(
            msg.chat,
            Job::Text(TextJob {
                text: msg.text,
                markdown: msg.markdown,
                place,
                into: msg.into,
                reply: msg.reply,
                turn: msg.turn,
            }),
        );
    }
}

impl Handler<Show> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: Show, _ctx: &mut Self::Context) {
        if msg.text.trim().is_empty() || self.refused(msg.chat) {
            return;
        }
        let chat = msg.chat;
        let lane = self.lane(chat);
        let epoch = lane.state.epoch(msg.topic);
        if lane.light.put(msg, epoch) {
            lane.state.pending.fetch_add(1, Ordering::SeqCst);
            self.shared.pending.fetch_add(1, Ordering::SeqCst);
        } else {
            tracing::trace!(chat_id = chat.0, "live text superseded before it was sent");
        }
    }
}

impl Handler<Clear> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: Clear, _ctx: &mut Self::Context) {
        let chat = msg.chat;
        self.enqueue(chat, Job::Clear(msg));
    }
}

impl Handler<Purge> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: Purge, _ctx: &mut Self::Context) {
        let Some(lane) = self.lanes.get_mut(&msg.chat) else {
            return;
        };
        *lock(&lane.state.epochs).entry(msg.topic).or_default() += 1;
        let dropped = lane.light.purge(msg.topic);
        if dropped > 0 {
            lane.state.pending.fetch_sub(dropped, Ordering::SeqCst);
            done(&self.shared, dropped);
        }
        tracing::info!(
            chat_id = msg.chat.0,
            "queued messages of the conversation dropped (/stop)"
        );
    }
}

/// `n` jobs are over: wakes [`Flush`] when nothing is left.
fn done(shared: &Shared, n: usize) {
    if n > 0 && shared.pending.fetch_sub(n, Ordering::SeqCst) == n {
        shared.drained.notify_waiters();
    }
}

impl Handler<SendQuestion> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: SendQuestion, _ctx: &mut Self::Context) {
        let chat = msg.chat;
        match Job::question(msg) {
            Ok(job) => self.enqueue(chat, job),
            Err((err, reply)) => {
                tracing::warn!(chat_id = chat.0, cause = %err, "question not sent");
                let _ = reply.send(Err(err));
            }
        }
    }
}

impl Handler<EditQuestion> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: EditQuestion, _ctx: &mut Self::Context) {
        if msg.text.trim().is_empty() {
            if let Some(reply) = msg.reply {
                let _ = reply.send(Err(OutboxError::EmptyText));
            }
            return;
        }
        self.enqueue(msg.chat, Job::edit(msg));
    }
}

impl Handler<AnswerCallback> for Outbox {
    type Result = ();

    /// Sent at once from a task of its own, beside the chat's lane: however
    /// many buttons are pressed, the chat's messages and pacing are
    /// untouched. Counted as pending, so [`Flush`] waits for it.
    fn handle(&mut self, msg: AnswerCallback, _ctx: &mut Self::Context) {
        if self.refused(msg.chat) {
            return;
        }
        self.shared.pending.fetch_add(1, Ordering::SeqCst);
        let shared = Arc::clone(&self.shared);
        let answer = CallbackAnswer::new(msg);
        self.workers.spawn(async move {
            answer_callback(&shared, answer).await;
            done(&shared, 1);
        });
    }
}

/// Answers a callback query, with the retry rules of any request but no
/// rate limit, never past its `until`.
async fn answer_callback(shared: &Shared, answer: CallbackAnswer) {
    let CallbackAnswer {
        chat,
        id,
        text,
        alert,
        until,
    } = answer;
    let rule = Rule {
        method: "answerCallbackQuery",
        idempotent: true,
        until: Some(until),
    };
    let result = deliver_unpaced(shared, chat, rule, || {
        let mut request = shared
            .bot
            .answer_callback_query(CallbackQueryId(id.clone()))
            .show_alert(alert);
        if !text.is_empty() {
            request = request.text(text.as_str());
        }
        async move { request.await.map(|_| ()) }
    })
    .await;
    if let Err(err) = result {
        tracing::warn!(chat_id = chat.0, callback_query_id = %id, cause = %err, "callback query not answered");
    }
}

impl Handler<Flush> for Outbox {
    type Result = actix::ResponseFuture<()>;

    fn handle(&mut self, _msg: Flush, _ctx: &mut Self::Context) -> Self::Result {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            loop {
                // Registered before the check, so a drain in between is seen.
                let drained = shared.drained.notified();
                if shared.pending.load(Ordering::SeqCst) == 0 {
                    return;
                }
                drained.await;
            }
        })
    }
}

impl Handler<StopOutbox> for Outbox {
    type Result = ();

    fn handle(&mut self, _msg: StopOutbox, _ctx: &mut Self::Context) {
        self.stopped = true;
    }
}

impl Handler<SendTyping> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: SendTyping, _ctx: &mut Self::Context) {
        if !lock_set(&self.lane(msg.chat).typing_queued).insert(msg.topic) {
            return;
        }
        self.enqueue(msg.chat, Job::Typing(msg.lease, msg.topic));
    }
}

impl Handler<SendFile> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: SendFile, _ctx: &mut Self::Context) {
        self.enqueue(msg.chat, Job::File(msg));
    }
}

impl Handler<React> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: React, _ctx: &mut Self::Context) {
        self.enqueue(msg.chat, Job::React(msg.message_id, msg.emoji, msg.reply));
    }
}

/// Sends a file as a document or a photo; never twice.
async fn send_file(
    shared: &Shared,
    chat: ChatId,
    bucket: &mut Bucket,
    file: &SendFile,
) -> Result<teloxide::types::MessageId, OutboxError> {
    let rule = Rule {
        method: if file.as_photo {
            "sendPhoto"
        } else {
            "sendDocument"
        },
        idempotent: false,
        until: None,
    };
    let caption = file.caption.as_deref().map(|c| cut(c, CAPTION_LIMIT));
    // Read once, off this thread, from the descriptor the turn opened and
    // checked; every attempt sends these bytes.
    let unreadable = |e: &dyn std::fmt::Display| OutboxError::Unreadable(e.to_string());
    let reader = file.file.try_clone().map_err(|e| unreadable(&e))?;
    let bytes = tokio::task::spawn_blocking(move || reader.read())
        .await
        .map_err(|e| unreadable(&e))?
        .map_err(|e| unreadable(&e))?;
    let bytes = bytes::Bytes::from(bytes);
    let name = file.file.name.clone();
    deliver(shared, chat, bucket, rule, || {
        let input = InputFile::memory(bytes.clone()).file_name(name.clone());
        let caption = caption.clone();
        let topic = file.topic;
        let bot = &shared.bot;
        let as_photo = file.as_photo;
        async move {
            let message = if as_photo {
                let mut request = bot.send_photo(chat, input);
                if let Some(caption) = caption {
                    request = request.caption(caption);
                }
                if let Some(topic) = topic {
                    request = request.message_thread_id(topic);
                }
                request.await?
            } else {
                let mut request = bot.send_document(chat, input);
                if let Some(caption) = caption {
                    request = request.caption(caption);
                }
                if let Some(topic) = topic {
                    request = request.message_thread_id(topic);
                }
                request.await?
            };
            Ok(message.id)
        }
    })
    .await
}

/// Sends the text file of a question (from memory, never twice).
async fn send_question_file(
    shared: &Shared,
    chat: ChatId,
    bucket: &mut Bucket,
    topic: Option<ThreadId>,
    file: &QuestionFile,
) -> Result<MessageId, OutboxError> {
    let rule = Rule {
        method: "sendDocument",
        idempotent: false,
        until: None,
    };
    let caption = cut(&file.caption, CAPTION_LIMIT);
    deliver(shared, chat, bucket, rule, || {
        let input = InputFile::memory(file.text.clone().into_bytes()).file_name(file.name.clone());
        let mut request = shared
            .bot
            .send_document(chat, input)
            .caption(caption.clone());
        if let Some(topic) = topic {
            request = request.message_thread_id(topic);
        }
        async move { request.await.map(|message| message.id) }
    })
    .await
}

/// Sends a text's pieces in order; the first one finishes the slot `into`
/// (an edit of the message it shows) when there is one. Stops at the first
/// failure, or when `/stop` purged the conversation meanwhile.
#[allow(clippy::too_many_arguments)]
async fn send_text(
    shared: &Shared,
    chat: ChatId,
    bucket: &mut Bucket,
    lane: &LaneView<'_>,
    text: String,
    markdown: bool,
    mut place: Place,
    into: Option<Slot>,
) -> Result<Vec<MessageId>, (OutboxError, usize)> {
    let pieces = if markdown {
        format::pieces(&text)
    } else {
        format::split(&Rendered::plain(text), TELEGRAM_TEXT_LIMIT)
    };
    let mut ids = Vec::new();
    let mut shown = into.and_then(|slot| lane.close(shared, slot));
    for piece in pieces {
        if lane.state.purged(place.topic, lane.epoch) {
            return Err((OutboxError::Dropped, ids.len()));
        }
        if let Some(Shown {
            id: message_id,
            rendered,
        }) = shown.take()
        {
            if rendered == piece {
                // The preview already shows exactly this piece.
                ids.push(message_id);
                place.reply_to = None;
                continue;
            }
            match live::edit(shared, chat, bucket, message_id, &piece).await {
                Ok(()) => {
                    ids.push(message_id);
                    place.reply_to = None;
                    continue;
                }
                Err(err) => {
                    // The preview is gone (deleted by the user, too old to
                    // edit): the text goes as a new message.
                    tracing::info!(chat_id = chat.0, message_id = message_id.0, cause = %err, "preview not replaced; sending the text anew");
                }
            }
        }
        let sent = send_piece(shared, chat, place, bucket, &piece).await;
        // Only the first piece is a reply.
        place.reply_to = None;
        match sent {
            Ok(id) => ids.push(id),
            Err(err) => return Err((err, ids.len())),
        }
    }
    Ok(ids)
}

/// The topics of a chat (`None`: the chat itself) with a typing request
/// queued: typing is coalesced per topic.
type TypingQueued = Arc<Mutex<std::collections::HashSet<Option<teloxide::types::ThreadId>>>>;

fn lock_set(
    set: &TypingQueued,
) -> std::sync::MutexGuard<'_, std::collections::HashSet<Option<teloxide::types::ThreadId>>> {
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a chat's worker owns.
struct Worker {
    shared: Arc<Shared>,
    chat: ChatId,
    light: Arc<LightQueue>,
    state: Arc<LaneState>,
    typing_queued: TypingQueued,
    bucket: Bucket,
}

/// Runs a chat's jobs one after another, until its lane is dropped: real
/// requests first, in order; live text only when none is queued and the
/// chat can spare a send.
///
/// An idle chat keeps its worker for a while, so what an idle worker holds
/// is kept small: a job's future (the request, its retries) is boxed while
/// it runs, and the queue holds boxed jobs.
async fn chat_worker(mut worker: Worker, mut rx: mpsc::UnboundedReceiver<Queued>) {
    loop {
        match rx.try_recv() {
            Ok(queued) => {
                let (job, epoch) = *queued;
                Box::pin(worker.real(job, epoch)).await;
                continue;
            }
            Err(mpsc::error::TryRecvError::Disconnected) => return,
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
        // Live text waits for a free send; with none queued, for one to come.
        let wait = (!worker.light.is_empty()).then(|| worker.bucket.light_wait());
        if wait.is_some_and(|wait| wait.is_zero()) {
            if let Some((show, epoch)) = worker.light.take() {
                Box::pin(worker.show(show, epoch)).await;
                worker.finished();
            }
            continue;
        }
        let light = Arc::clone(&worker.light);
        let ready = async move {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => light.wake.notified().await,
            }
        };
        tokio::select! {
            biased;
            job = rx.recv() => match job {
                Some(queued) => {
                    let (job, epoch) = *queued;
                    Box::pin(worker.real(job, epoch)).await;
                }
                None => return,
            },
            () = ready => {}
        }
    }
}

impl Worker {
    /// One job is over.
    fn finished(&self) {
        self.state.pending.fetch_sub(1, Ordering::SeqCst);
        done(&self.shared, 1);
    }

    /// Runs a real request, unless `/stop` dropped it after it was queued.
    async fn real(&mut self, job: Job, epoch: u64) {
        if let Job::Typing(_, topic) = &job {
            lock_set(&self.typing_queued).remove(topic);
        }
        match job.purgeable() {
            Some(topic) if self.state.purged(topic, epoch) => job.refuse(OutboxError::Dropped),
            _ => {
                let Worker {
                    shared,
                    chat,
                    bucket,
                    ..
                } = self;
                let lane = LaneView {
                    light: &self.light,
                    state: &self.state,
                    epoch,
                };
                run_job(shared, *chat, bucket, lane, job).await;
            }
        }
        self.finished();
    }

    /// Sends or edits a slot's live text: one attempt; a 429 holds the chat
    /// and the text waits its turn again (unless a newer one replaced it).
    async fn show(&mut self, show: Show, epoch: u64) {
        let chat = self.chat;
        if self.state.purged(show.topic, epoch) {
            return;
        }
        let rendered = live_text(&show.text, show.markdown);
        let draft = show.show_as == ShowAs::Draft && chat.is_user();
        let shown = lock(&self.state.slots).get(&show.slot).map(|s| s.id);
        let global = retry::reserve_global(&self.shared);
        self.bucket.reserve();
        if !global.is_zero() {
            tokio::time::sleep(global).await;
        }
        let answer = live::show(&self.shared, chat, &show, &rendered, draft, shown).await;
        match answer {
            Ok(Some(id)) => {
                lock(&self.state.slots).insert(show.slot, Shown { id, rendered });
            }
            Ok(None) => {
                if let Some(shown) = lock(&self.state.slots).get_mut(&show.slot) {
                    shown.rendered = rendered;
                }
            }
            Err(RequestError::RetryAfter(secs)) => {
                tracing::info!(
                    chat_id = chat.0,
                    retry_after_s = secs.seconds(),
                    "live text rate limited; the chat waits"
                );
                self.bucket.hold(secs.duration());
                if self.light.put_back(show, epoch) {
                    self.requeued();
                }
            }
            Err(err) => {
                tracing::debug!(chat_id = chat.0, cause = %err, "live text not shown");
            }
        }
    }

    /// A light job went back to its queue: it counts as pending again.
    fn requeued(&self) {
        self.state.pending.fetch_add(1, Ordering::SeqCst);
        self.shared.pending.fetch_add(1, Ordering::SeqCst);
    }
}

/// What a real job may touch of its lane.
struct LaneView<'a> {
    light: &'a LightQueue,
    state: &'a LaneState,
    epoch: u64,
}

impl LaneView<'_> {
    /// Ends `slot`: its queued live text is dropped; the message it showed,
    /// if any.
    fn close(&self, shared: &Shared, slot: Slot) -> Option<Shown> {
        if self.light.remove(slot) {
            self.state.pending.fetch_sub(1, Ordering::SeqCst);
            done(shared, 1);
        }
        lock(&self.state.slots).remove(&slot)
    }
}

/// The first 4096 units of what a slot shows.
fn live_text(text: &str, markdown: bool) -> Rendered {
    let rendered = if markdown {
        format::render(text)
    } else {
        Rendered::plain(text)
    };
    format::split(&rendered, TELEGRAM_TEXT_LIMIT)
        .into_iter()
        .next()
        .unwrap_or_default()
}

async fn run_job(shared: &Shared, chat: ChatId, bucket: &mut Bucket, lane: LaneView<'_>, job: Job) {
    match job {
        Job::Typing(lease, topic) => {
            // Stamped before the lease is looked at: a lease ended (on the
            // actors' thread) after this look ended after this stamp.
            let at = Instant::now();
            if !lease.is_live() {
                return;
            }
            shared.events.publish(BotEvent::ChatActionSent { chat, at });
            let mut request = shared.bot.send_chat_action(chat, ChatAction::Typing);
            if let Some(topic) = topic {
                request = request.message_thread_id(topic);
            }
            let answer = request.await;
            shared.events.metrics().telegram("sendChatAction", &answer);
            if let Err(err) = answer {
                // Never retried: a failing typing request must not outlive its lease.
                tracing::debug!(chat_id = chat.0, cause = %err, "sendChatAction failed");
            }
        }
        Job::Text(job) => {
            let reply = job.reply;
            let (topic, turn) = (job.place.topic, job.turn);
            let outcome = send_text(
                shared,
                chat,
                bucket,
                &lane,
                job.text,
                job.markdown,
                job.place,
                job.into,
            )
            .await;
            if let Err((err, delivered)) = &outcome {
                let request = format!("piece {} of a text", delivered + 1);
                if !unconfirmed(shared, chat, bucket, topic, turn, err, &request).await {
                    tracing::warn!(chat_id = chat.0, cause = %err, delivered_pieces = delivered, "message not delivered");
                }
            }
            if let Some(reply) = reply {
                let _ = reply.send(outcome.map_err(|(err, _)| err));
            }
        }
        Job::Clear(clear) => {
            let Some(Shown { id: message_id, .. }) = lane.close(shared, clear.slot) else {
                return;
            };
            let result = match &clear.fold {
                Some(line) => {
                    live::edit(
                        shared,
                        chat,
                        bucket,
                        message_id,
                        &Rendered::plain(cut(line, TELEGRAM_TEXT_LIMIT)),
                    )
                    .await
                }
                None => live::delete(shared, chat, bucket, message_id).await,
            };
            if let Err(err) = result {
                tracing::warn!(chat_id = chat.0, message_id = message_id.0, cause = %err, "live message not cleared");
            }
        }
        Job::React(message_id, emoji, reply) => {
            let mut attempt = 0;
            let result = loop {
                let request = shared
                    .bot
                    .set_message_reaction(chat, message_id)
                    .reaction(vec![ReactionType::Emoji {
                        emoji: emoji.clone(),
                    }]);
                let answer = request.await.map(|_| ());
                shared
                    .events
                    .metrics()
                    .telegram("setMessageReaction", &answer);
                match classify(answer) {
                    Sent::Ok(()) => break Ok(()),
                    // Reactions are idempotent: any retryable failure may retry.
                    Sent::Retry(wait, why) | Sent::RetryIfUnsent(wait, why) => {
                        if !retry_allowed(shared, &mut attempt, wait, chat, &why).await {
                            break Err(OutboxError::Unreachable(why));
                        }
                    }
                    Sent::Plain(why) | Sent::Fail(OutboxError::Refused(why)) => {
                        break Err(OutboxError::Refused(why));
                    }
                    Sent::Fail(err) => break Err(err),
                }
            };
            let _ = reply.send(result);
        }
        Job::File(file) => {
            let result = send_file(shared, chat, bucket, &file).await;
            if let Err(err) = &result {
                let request = format!("the file {}", file.file.name);
                if !unconfirmed(shared, chat, bucket, file.topic, file.turn, err, &request).await {
                    tracing::warn!(chat_id = chat.0, file = %file.file.name, cause = %err, "file not delivered");
                }
            }
            let _ = file.reply.send(result);
        }
        Job::Question(QuestionJob {
            text,
            keyboard,
            topic,
            file,
            reply,
            turn,
        }) => {
            let result = async {
                // The file first: a question never goes without it.
                let file = match &file {
                    Some(file) => {
                        Some(send_question_file(shared, chat, bucket, topic, file).await?)
                    }
                    None => None,
                };
                let rule = Rule {
                    method: "sendMessage",
                    idempotent: false,
                    until: None,
                };
                deliver(shared, chat, bucket, rule, || {
                    let mut request = shared
                        .bot
                        .send_message(chat, text.as_str())
                        .reply_markup(keyboard.clone());
                    if let Some(topic) = topic {
                        request = request.message_thread_id(topic);
                    }
                    if let Some(file) = file {
                        request = request.reply_parameters(ReplyParameters::new(file));
                    }
                    async move { request.await.map(|message| message.id) }
                })
                .await
            }
            .await;
            if let Err(err) = &result {
                let request = match err {
                    OutboxError::Unknown {
                        method: "sendDocument",
                        ..
                    } => "the file of a question",
                    _ => "a question",
                };
                if !unconfirmed(shared, chat, bucket, topic, turn, err, request).await {
                    tracing::warn!(chat_id = chat.0, cause = %err, "question not delivered");
                }
            }
            let _ = reply.send(result);
        }
        Job::Edit(message_id, text, reply) => {
            let rule = Rule {
                method: "editMessageText",
                idempotent: true,
                until: None,
            };
            let result = deliver(shared, chat, bucket, rule, || {
                // No reply_markup: the buttons go.
                let request = shared
                    .bot
                    .edit_message_text(chat, message_id, text.as_str());
                async move {
                    match request.await {
                        Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
                        Err(err) => Err(err),
                    }
                }
            })
            .await;
            if let Err(err) = &result {
                tracing::warn!(chat_id = chat.0, message_id = message_id.0, cause = %err, "question not edited");
            }
            if let Some(reply) = reply {
                let _ = reply.send(result);
            }
        }
    }
}

/// When `err` says a message may or may not have reached the chat (it left,
/// no answer came back): logs it with its chat, turn and request, publishes
/// [`BotEvent::DeliveryUnknown`] and tells the chat (a short notice right
/// behind it, so a user who sees no reply knows to ask again; nothing is
/// sent twice, and the notice is no copy of the message). `false` for any
/// other error.
#[allow(clippy::too_many_arguments)]
async fn unconfirmed(
    shared: &Shared,
    chat: ChatId,
    bucket: &mut Bucket,
    topic: Option<ThreadId>,
    turn: Option<crate::ids::TurnId>,
    err: &OutboxError,
    request: &str,
) -> bool {
    let OutboxError::Unknown { method, cause } = err else {
        return false;
    };
    tracing::warn!(
        chat_id = chat.0,
        turn_id = turn.map(crate::ids::TurnId::get),
        method,
        request,
        cause = %cause,
        "a message may not have reached the chat: its request got no answer after it was sent; not sent again (it could arrive twice); the chat is told"
    );
    shared.events.publish(BotEvent::DeliveryUnknown {
        chat,
        turn,
        method,
        at: Instant::now(),
    });
    let notice = Rendered::plain(crate::chat::notices::DELIVERY_UNKNOWN.to_string());
    let place = Place {
        topic,
        reply_to: None,
    };
    if let Err(err) = send_piece(shared, chat, place, bucket, &notice).await {
        tracing::warn!(chat_id = chat.0, turn_id = turn.map(crate::ids::TurnId::get), cause = %err, "the notice of an unconfirmed message was not delivered");
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle chat keeps its lane (and so its worker) for a while: what an
    /// idle worker holds must stay small (it was 6 KiB a lane, most of an
    /// idle chat's memory, when a job's future was part of the worker's).
    #[test]
    fn an_idle_lane_holds_a_small_worker_and_queue() {
        let limits = RateLimits::default();
        let chat = ChatId(7);
        let shared = Arc::new(Shared {
            pending: AtomicUsize::new(0),
            drained: tokio::sync::Notify::new(),
            bot: Bot::new("1:test"),
            global: Mutex::new(Bucket::new(limits.global_burst, limits.global_per_sec)),
            limits: limits.clone(),
            events: EventBus::new(),
        });
        let worker = Worker {
            shared,
            chat,
            light: Arc::default(),
            state: Arc::default(),
            typing_queued: TypingQueued::default(),
            bucket: chat_bucket(&limits, chat),
        };
        let (_tx, rx) = mpsc::unbounded_channel::<Queued>();
        let worker = chat_worker(worker, rx);
        let size = std::mem::size_of_val(&worker);
        assert!(size <= 1024, "an idle chat's worker holds {size} bytes");
        // The channel allocates a block of 32 slots up front.
        assert!(std::mem::size_of::<Queued>() <= 8);
    }
}

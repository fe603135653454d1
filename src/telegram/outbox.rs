//! The Outbox: the one way out to Telegram.
//!
//! Each chat has its own FIFO worker, so a chat's requests leave in order;
//! all chats share one global rate limit. A 429 waits its `retry_after`;
//! 5xx answers and connection failures are retried with backoff; a request
//! that may have reached Telegram is never sent again; text over 4096
//! characters is split without breaking code blocks; a 400 "can't parse
//! entities" is retried as plain text; a 403 (bot blocked) is reported and
//! not retried. Typing requests are sent only while their lease is alive.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::{Actor, AsyncContext, Context, Handler, Message};
use teloxide::Bot;
use teloxide::RequestError;
use teloxide::payloads::{SendMessageSetters, SetMessageReactionSetters};
use teloxide::prelude::Requester;
use teloxide::types::{ChatAction, ChatId, MessageId, ParseMode, ReactionType};
use tokio::sync::{mpsc, oneshot};

use crate::events::{BotEvent, EventBus};
use crate::telegram::split::{TELEGRAM_TEXT_LIMIT, split_message};

/// Why a request did not get through.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum OutboxError {
    /// The user blocked the bot (403); not retried.
    #[error("the bot was blocked in this chat")]
    Blocked,
    /// Telegram refused the request; not retried.
    #[error("telegram refused the request: {0}")]
    Refused(String),
    /// Retries ran out, or the outcome is unknown and a retry could send twice.
    #[error("telegram could not be reached: {0}")]
    Unreachable(String),
    /// The text was empty.
    #[error("the message text is empty")]
    EmptyText,
    /// The outbox has stopped.
    #[error("the outbox has stopped")]
    Stopped,
}

/// Rate limits and retry policy.
#[derive(Debug, Clone)]
pub struct RateLimits {
    /// Messages a chat may burst.
    pub chat_burst: f64,
    /// Messages per second a chat refills.
    pub chat_per_sec: f64,
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
}

impl Bucket {
    fn new(burst: f64, per_sec: f64) -> Self {
        Self {
            tokens: burst,
            burst,
            per_sec,
            at: Instant::now(),
        }
    }

    /// Takes one token, returning how long to wait before using it.
    fn reserve(&mut self) -> Duration {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_sec;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 || self.per_sec <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.per_sec)
        }
    }
}

/// Sends text to a chat. Always queued, even when the sender goes away;
/// `reply` (when given) gets the ids of the sent messages.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SendText {
    /// Where.
    pub chat: ChatId,
    /// What; split when longer than Telegram allows.
    pub text: String,
    /// Who wants to know how it went.
    pub reply: Option<oneshot::Sender<Result<Vec<MessageId>, OutboxError>>>,
}

impl SendText {
    /// A message nobody waits on.
    pub fn new(chat: ChatId, text: impl Into<String>) -> Self {
        Self {
            chat,
            text: text.into(),
            reply: None,
        }
    }

    /// A message and the receiver of its outcome.
    pub fn tracked(
        chat: ChatId,
        text: impl Into<String>,
    ) -> (Self, oneshot::Receiver<Result<Vec<MessageId>, OutboxError>>) {
        let (tx, rx) = oneshot::channel();
        (
            Self {
                chat,
                text: text.into(),
                reply: Some(tx),
            },
            rx,
        )
    }
}

/// Shows "typing…" in a chat while `lease` is alive.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SendTyping {
    /// Where.
    pub chat: ChatId,
    /// Checked right before the request leaves: a dead lease sends nothing.
    pub lease: crate::chat::typing::TypingLease,
}

/// Sets a reaction on a message; `reply` gets the outcome.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct React {
    /// Where.
    pub chat: ChatId,
    /// Which message.
    pub message_id: MessageId,
    /// The emoji.
    pub emoji: String,
    /// Who wants to know how it went.
    pub reply: oneshot::Sender<Result<(), OutboxError>>,
}

/// One queued request of a chat.
enum Job {
    Text(
        String,
        Option<oneshot::Sender<Result<Vec<MessageId>, OutboxError>>>,
    ),
    Typing(crate::chat::typing::TypingLease),
    React(MessageId, String, oneshot::Sender<Result<(), OutboxError>>),
}

/// Resolves once every queued request has been sent or has failed.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Flush;

/// Refuses every later request (after a flush, at the end of a stop).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopOutbox;

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
    /// The worker's queue.
    tx: mpsc::UnboundedSender<Job>,
    /// Jobs queued or running; the lane is dropped only at zero, so a
    /// chat never has two workers at once.
    pending: Arc<AtomicUsize>,
    /// Whether a typing request is already queued (typing is coalesced, so
    /// a slow message never builds a backlog of them).
    typing_queued: Arc<AtomicBool>,
    /// When a job was last queued.
    last_used: Instant,
}

/// The Outbox actor.
pub struct Outbox {
    /// Everything a worker needs.
    shared: Arc<Shared>,
    /// Each chat's lane.
    lanes: HashMap<ChatId, Lane>,
    /// Set by [`StopOutbox`]: later requests are refused.
    stopped: bool,
}

/// A lane unused for this long (and empty) is dropped and its worker ends.
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
        }
    }

    /// The chat's lane, starting its worker when needed.
    fn lane(&mut self, chat: ChatId) -> &mut Lane {
        let shared = &self.shared;
        let lane = self.lanes.entry(chat).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let pending = Arc::new(AtomicUsize::new(0));
            let typing_queued = Arc::new(AtomicBool::new(false));
            actix::spawn(chat_worker(
                Arc::clone(shared),
                chat,
                rx,
                Arc::clone(&pending),
                Arc::clone(&typing_queued),
            ));
            Lane {
                tx,
                pending,
                typing_queued,
                last_used: Instant::now(),
            }
        });
        lane.last_used = Instant::now();
        lane
    }

    /// Queues a job on the chat's lane (or refuses it once stopped).
    fn enqueue(&mut self, chat: ChatId, job: Job) {
        if self.stopped {
            tracing::warn!(
                chat_id = chat.0,
                "request after the outbox stopped; refused"
            );
            match job {
                Job::Text(_, Some(reply)) => {
                    let _ = reply.send(Err(OutboxError::Stopped));
                }
                Job::React(_, _, reply) => {
                    let _ = reply.send(Err(OutboxError::Stopped));
                }
                Job::Text(_, None) | Job::Typing(_) => {}
            }
            return;
        }
        self.shared.pending.fetch_add(1, Ordering::SeqCst);
        let lane = self.lane(chat);
        lane.pending.fetch_add(1, Ordering::SeqCst);
        if let Err(mpsc::error::SendError(job)) = lane.tx.send(job) {
            // The worker is gone (it cannot be while the lane exists, but a
            // job must never vanish): replace the lane and queue again.
            tracing::warn!(chat_id = chat.0, "outbox worker missing; restarting it");
            self.lanes.remove(&chat);
            let lane = self.lane(chat);
            lane.pending.fetch_add(1, Ordering::SeqCst);
            let _ = lane.tx.send(job);
        }
    }

    /// Drops idle, empty lanes; their workers end.
    fn sweep(&mut self, _ctx: &mut Context<Self>) {
        self.lanes.retain(|_, lane| {
            lane.pending.load(Ordering::SeqCst) > 0 || lane.last_used.elapsed() < LANE_IDLE
        });
    }
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
        self.enqueue(msg.chat, Job::Text(msg.text, msg.reply));
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
        if self
            .lane(msg.chat)
            .typing_queued
            .swap(true, Ordering::SeqCst)
        {
            return;
        }
        self.enqueue(msg.chat, Job::Typing(msg.lease));
    }
}

impl Handler<React> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: React, _ctx: &mut Self::Context) {
        self.enqueue(msg.chat, Job::React(msg.message_id, msg.emoji, msg.reply));
    }
}

/// Runs a chat's jobs one after another, until its lane is dropped.
async fn chat_worker(
    shared: Arc<Shared>,
    chat: ChatId,
    mut rx: mpsc::UnboundedReceiver<Job>,
    pending: Arc<AtomicUsize>,
    typing_queued: Arc<AtomicBool>,
) {
    let mut bucket = Bucket::new(shared.limits.chat_burst, shared.limits.chat_per_sec);
    while let Some(job) = rx.recv().await {
        if matches!(job, Job::Typing(_)) {
            typing_queued.store(false, Ordering::SeqCst);
        }
        run_job(&shared, chat, &mut bucket, job).await;
        pending.fetch_sub(1, Ordering::SeqCst);
        if shared.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
            shared.drained.notify_waiters();
        }
    }
}

async fn run_job(shared: &Shared, chat: ChatId, bucket: &mut Bucket, job: Job) {
    match job {
        Job::Typing(lease) => {
            if !lease.is_live() {
                return;
            }
            shared.events.publish(BotEvent::ChatActionSent {
                chat,
                at: Instant::now(),
            });
            if let Err(err) = shared.bot.send_chat_action(chat, ChatAction::Typing).await {
                // Never retried: a failing typing request must not outlive its lease.
                tracing::debug!(chat_id = chat.0, cause = %err, "sendChatAction failed");
            }
        }
        Job::Text(text, reply) => {
            let mut ids = Vec::new();
            let mut outcome = Ok(());
            for piece in split_message(&text, TELEGRAM_TEXT_LIMIT) {
                match send_piece(shared, chat, bucket, &piece).await {
                    Ok(id) => ids.push(id),
                    Err(err) => {
                        outcome = Err(err);
                        break;
                    }
                }
            }
            if let Err(err) = &outcome {
                tracing::warn!(chat_id = chat.0, cause = %err, delivered_pieces = ids.len(), "message not delivered");
            }
            if let Some(reply) = reply {
                let _ = reply.send(outcome.map(|()| ids));
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
                match classify(request.await.map(|_| ())) {
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
    }
}

/// What a request's answer means for the next step.
enum Sent<T> {
    Ok(T),
    /// Not delivered; safe to send again after the wait.
    Retry(Duration, String),
    /// Unknown whether it was delivered; only idempotent requests retry.
    RetryIfUnsent(Duration, String),
    /// The formatting was refused; send as plain text.
    Plain(String),
    /// Final.
    Fail(OutboxError),
}

fn classify<T>(result: Result<T, RequestError>) -> Sent<T> {
    use teloxide::ApiError;
    match result {
        Ok(v) => Sent::Ok(v),
        Err(RequestError::RetryAfter(secs)) => Sent::Retry(
            secs.duration(),
            format!("rate limited for {}s", secs.seconds()),
        ),
        Err(RequestError::Api(ApiError::CantParseEntities(why))) => Sent::Plain(why),
        Err(RequestError::Api(
            ApiError::BotBlocked
            | ApiError::UserDeactivated
            | ApiError::BotKicked
            | ApiError::BotKickedFromSupergroup,
        )) => Sent::Fail(OutboxError::Blocked),
        Err(RequestError::Api(ApiError::Unknown(why))) if is_server_error(&why) => {
            Sent::Retry(Duration::ZERO, why)
        }
        Err(RequestError::Api(api)) => Sent::Fail(OutboxError::Refused(api.to_string())),
        Err(RequestError::InvalidJson { .. }) => Sent::RetryIfUnsent(
            Duration::ZERO,
            "telegram answered something that is not JSON".into(),
        ),
        Err(RequestError::Network(err)) if err.is_connect() => {
            Sent::Retry(Duration::ZERO, err.to_string())
        }
        Err(RequestError::Network(err)) => Sent::RetryIfUnsent(Duration::ZERO, err.to_string()),
        Err(other) => Sent::Fail(OutboxError::Unreachable(other.to_string())),
    }
}

/// Telegram's 5xx descriptions (teloxide keeps only the description).
fn is_server_error(description: &str) -> bool {
    [
        "Internal Server Error",
        "Bad Gateway",
        "Service Unavailable",
        "Gateway Timeout",
    ]
    .iter()
    .any(|s| description.contains(s))
}

/// Sleeps before a retry when one is allowed; `false` when retries ran out.
async fn retry_allowed(
    shared: &Shared,
    attempt: &mut u32,
    wait: Duration,
    chat: ChatId,
    why: &str,
) -> bool {
    *attempt += 1;
    let limits = &shared.limits;
    if *attempt > limits.max_retries || wait > limits.max_retry_after {
        tracing::warn!(
            chat_id = chat.0,
            attempts = *attempt,
            cause = why,
            "giving up on a telegram request"
        );
        return false;
    }
    let wait = if wait.is_zero() {
        limits.backoff * 2u32.saturating_pow(*attempt - 1)
    } else {
        wait
    };
    tracing::info!(
        chat_id = chat.0,
        attempt = *attempt,
        wait_ms = wait.as_millis() as u64,
        cause = why,
        "retrying a telegram request"
    );
    tokio::time::sleep(wait).await;
    true
}

async fn send_piece(
    shared: &Shared,
    chat: ChatId,
    bucket: &mut Bucket,
    piece: &str,
) -> Result<MessageId, OutboxError> {
    let mut formatted = true;
    let mut attempt = 0;
    loop {
        let wait = bucket.reserve().max(reserve_global(shared));
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let mut request = shared.bot.send_message(chat, piece);
        if formatted {
            // Agents write loose Markdown; the legacy mode accepts most of it
            // and a refusal falls back to plain text below.
            #[allow(deprecated)]
            let mode = ParseMode::Markdown;
            request = request.parse_mode(mode);
        }
        match classify(request.await) {
            Sent::Ok(message) => return Ok(message.id),
            Sent::Plain(why) if formatted => {
                tracing::info!(chat_id = chat.0, cause = %why, "formatting refused; sending as plain text");
                formatted = false;
            }
            Sent::Plain(why) => return Err(OutboxError::Refused(why)),
            Sent::Retry(wait, why) => {
                if !retry_allowed(shared, &mut attempt, wait, chat, &why).await {
                    return Err(OutboxError::Unreachable(why));
                }
            }
            Sent::RetryIfUnsent(_, why) => {
                // The message may have been delivered: sending it again could duplicate it.
                tracing::warn!(chat_id = chat.0, cause = %why, "sendMessage outcome unknown; not retried");
                return Err(OutboxError::Unreachable(why));
            }
            Sent::Fail(OutboxError::Blocked) => {
                tracing::warn!(
                    chat_id = chat.0,
                    "the bot is blocked in this chat; message dropped"
                );
                return Err(OutboxError::Blocked);
            }
            Sent::Fail(err) => return Err(err),
        }
    }
}

fn reserve_global(shared: &Shared) -> Duration {
    match shared.global.lock() {
        Ok(mut bucket) => bucket.reserve(),
        Err(poisoned) => poisoned.into_inner().reserve(),
    }
}

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
//! Questions ([`SendQuestion`]: text under callback buttons), their edits
//! ([`EditQuestion`]) and callback answers ([`AnswerCallback`]) take the
//! same lanes, limits and retry rules; an edit may be repeated (the same
//! edit twice is harmless), a question may not, and a callback answer is
//! dropped once Telegram would no longer take it.
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
use teloxide::types::{CallbackQueryId, ChatAction, ChatId, InputFile, ReactionType};
use teloxide::{ApiError, Bot, RequestError};
use tokio::sync::mpsc;

use crate::events::{BotEvent, EventBus};
use crate::telegram::split::{TELEGRAM_TEXT_LIMIT, split_message};

mod requests;
mod retry;

pub use requests::{
    AnswerCallback, Button, CALLBACK_ANSWER_WINDOW, EditQuestion, Flush, React, SendFile,
    SendQuestion, SendText, SendTyping, StopOutbox,
};
use requests::{CAPTION_LIMIT, Job, Place, cut};
use retry::{Rule, Sent, classify, deliver, retry_allowed, send_piece};

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
    typing_queued: TypingQueued,
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
            let typing_queued = TypingQueued::default();
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
            job.refuse(OutboxError::Stopped);
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
        let place = Place {
            topic: msg.topic,
            reply_to: msg.reply_to,
        };
        self.enqueue(msg.chat, Job::Text(msg.text, place, msg.reply));
    }
}

impl Handler<SendQuestion> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: SendQuestion, _ctx: &mut Self::Context) {
        let chat = msg.chat;
        match Job::question(msg) {
            Ok(job) => self.enqueue(chat, job),
            Err((err, msg)) => {
                tracing::warn!(chat_id = chat.0, cause = %err, "question not sent");
                let _ = msg.reply.send(Err(err));
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

    fn handle(&mut self, msg: AnswerCallback, _ctx: &mut Self::Context) {
        self.enqueue(msg.chat, Job::answer(msg));
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
    deliver(shared, chat, bucket, rule, || {
        let input = InputFile::file(file.path.clone());
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

/// The topics of a chat (`None`: the chat itself) with a typing request
/// queued: typing is coalesced per topic.
type TypingQueued = Arc<Mutex<std::collections::HashSet<Option<teloxide::types::ThreadId>>>>;

fn lock_set(
    set: &TypingQueued,
) -> std::sync::MutexGuard<'_, std::collections::HashSet<Option<teloxide::types::ThreadId>>> {
    set.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs a chat's jobs one after another, until its lane is dropped.
async fn chat_worker(
    shared: Arc<Shared>,
    chat: ChatId,
    mut rx: mpsc::UnboundedReceiver<Job>,
    pending: Arc<AtomicUsize>,
    typing_queued: TypingQueued,
) {
    let mut bucket = Bucket::new(shared.limits.chat_burst, shared.limits.chat_per_sec);
    while let Some(job) = rx.recv().await {
        if let Job::Typing(_, topic) = &job {
            lock_set(&typing_queued).remove(topic);
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
        Job::Typing(lease, topic) => {
            if !lease.is_live() {
                return;
            }
            shared.events.publish(BotEvent::ChatActionSent {
                chat,
                at: Instant::now(),
            });
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
        Job::Text(text, mut place, reply) => {
            let mut ids = Vec::new();
            let mut outcome = Ok(());
            for piece in split_message(&text, TELEGRAM_TEXT_LIMIT) {
                let sent = send_piece(shared, chat, place, bucket, &piece).await;
                // Only the first piece is a reply.
                place.reply_to = None;
                match sent {
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
                tracing::warn!(chat_id = chat.0, path = %file.path.display(), cause = %err, "file not delivered");
            }
            let _ = file.reply.send(result);
        }
        Job::Question(text, keyboard, topic, reply) => {
            let rule = Rule {
                method: "sendMessage",
                idempotent: false,
                until: None,
            };
            let result = deliver(shared, chat, bucket, rule, || {
                let mut request = shared
                    .bot
                    .send_message(chat, text.as_str())
                    .reply_markup(keyboard.clone());
                if let Some(topic) = topic {
                    request = request.message_thread_id(topic);
                }
                async move { request.await.map(|message| message.id) }
            })
            .await;
            if let Err(err) = &result {
                tracing::warn!(chat_id = chat.0, cause = %err, "question not delivered");
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
        Job::Answer {
            id,
            text,
            alert,
            until,
        } => {
            let rule = Rule {
                method: "answerCallbackQuery",
                idempotent: true,
                until: Some(until),
            };
            let result = deliver(shared, chat, bucket, rule, || {
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
    }
}

//! The Outbox: the one way out to Telegram.
//!
//! Each chat has its own lane, drained in order by a worker of its own, so
//! a chat's requests leave in order; all chats share one global rate limit.
//! A 429 waits its `retry_after`; 5xx answers and connection failures are
//! retried with backoff; a request that may have reached Telegram is never
//! sent again; text over 4096 characters is split without breaking code
//! blocks; a 400 "can't parse entities" is retried as plain text; a 403
//! (bot blocked) is reported and not retried. Typing requests are sent only
//! while their lease is alive.
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
//! The parts, each with one job: this actor routes each request to its
//! chat's lane (`outbox/lane.rs`: the queue, its order, the worker);
//! `pacing.rs` is the token buckets; `send.rs` runs each kind of job and
//! `deliver.rs` is the one delivery and retry path they all take; the
//! requests are in `requests.rs`, the jobs they become in `jobs.rs`, the
//! live slots' requests in `live.rs`, the errors in `error.rs`, the thread
//! the workers run on in `workers.rs`; `resend.rs` settles an unknown
//! outcome, with what a lane knows of its chat's ids (`known.rs`);
//! `unbutton.rs` takes an expired question's buttons away. The
//! types they all share are in `post.rs`, below them all: the files form
//! layers (`lane` over `send` over `resend` over `jobs` over `post`).

use std::collections::HashMap;
use std::sync::Arc;

use actix::{Actor, AsyncContext, Context, Handler};
use teloxide::Bot;
use teloxide::types::ChatId;
use tracing::Instrument as _;

use crate::events::{EventBus, FeedItem};
use crate::ops::Metrics;
use crate::ops::logging::context_span;
use crate::state::{Kept, KeptQuestion, LeftToSend, StoreHandle};

mod deliver;
mod error;
mod jobs;
mod keyboard;
mod known;
mod lane;
mod live;
mod pacing;
mod post;
mod recover;
mod requests;
mod resend;
mod send;
mod unbutton;
mod workers;

pub use deliver::MAX_IN_FLIGHT;
pub use error::{OutboxError, TelegramRefusal, Unreachable};
pub use keyboard::{Button, ButtonStyle};
pub use pacing::RateLimits;
pub use requests::{
    AnswerCallback, CALLBACK_ANSWER_WINDOW, Clear, CreateTopic, EditQuestion, Flush, Polled, Purge,
    QuestionFile, React, RenameTopic, Seen, SendFile, SendQuestion, SendText, SendTyping, Show,
    ShowAs, Slot, StopOutbox,
};
pub use unbutton::Unbutton;

use deliver::Telegram;
use jobs::{CallbackAnswer, FileJob, Job, TextJob};
use lane::{LANE_IDLE, Lane, OutboxShared, Pending};
use post::{Anchor, Provenance, lock};
use workers::Workers;

/// The Outbox actor: routes each request to its chat's lane.
pub struct Outbox {
    /// Everything a worker needs.
    shared: Arc<OutboxShared>,
    /// Each chat's lane.
    lanes: HashMap<ChatId, Lane>,
    /// Set by [`StopOutbox`]: later requests are refused.
    stopped: bool,
    /// Where the workers run.
    workers: Workers,
}

impl Outbox {
    /// An outbox sending through `bot`, counting its requests in `metrics`
    /// and publishing what it did on `events`.
    pub fn new(bot: Bot, limits: RateLimits, metrics: Arc<Metrics>, events: EventBus) -> Self {
        Self::build(bot, limits, metrics, events, None)
    }

    /// An outbox keeping each message in `store` until Telegram takes it;
    /// what a previous process left (`left`) goes first, in order, each
    /// message counted as possibly sent before.
    pub fn durable(
        bot: Bot,
        limits: RateLimits,
        metrics: Arc<Metrics>,
        events: EventBus,
        store: StoreHandle,
        mut left: LeftToSend,
    ) -> Self {
        let last_ids = left.last_ids.iter().map(|&(chat, id)| (ChatId(chat), id));
        let mut outbox = Self::build(bot, limits, metrics, events, Some(store));
        lock(&outbox.shared.last_ids).extend(last_ids);
        let now = (std::time::Instant::now(), crate::state::now_ms());
        let rows = std::mem::take(&mut left.rows);
        for row in rows {
            let chat = ChatId(row.chat_id);
            // A copy sent before, if any, came after both the chat's highest
            // id known when the row before it was settled and the message
            // it answers.
            let known = lock(&outbox.shared.last_ids).get(&chat).copied();
            let baseline = known.max(row.reply_to).max(row.after_id);
            let age = u64::try_from(now.1.saturating_sub(row.created_at)).unwrap_or(0);
            let born = now
                .0
                .checked_sub(std::time::Duration::from_millis(age))
                .unwrap_or(now.0);
            let origin = Provenance {
                born,
                turn: None,
                prior: Some(baseline),
            };
            let (id, file) = (row.id, matches!(row.kept, Some(Kept::File(_))));
            if let Some(Kept::Question(KeptQuestion {
                shown: Some(message_id),
                ..
            })) = row.kept
            {
                // Settled once the edit that takes its buttons is done.
                lock(&outbox.shared.shown).insert((chat, message_id), id);
                outbox.enqueue(chat, recover::ended(&row.text, message_id));
                continue;
            }
            match recover::job(row, origin, left.spooled(id)) {
                Some(job) => outbox.enqueue(chat, job),
                None => {
                    if let Some(store) = &outbox.shared.store {
                        store.settle_outgoing(id, chat.0, None, file);
                    }
                }
            }
        }
        outbox
    }

    fn build(
        bot: Bot,
        limits: RateLimits,
        metrics: Arc<Metrics>,
        events: EventBus,
        store: Option<StoreHandle>,
    ) -> Self {
        Self {
            shared: Arc::new(OutboxShared {
                global: pacing::global(&limits),
                telegram: Telegram::new(bot, limits, metrics),
                events,
                pending: Pending::default(),
                store,
                last_ids: std::sync::Mutex::default(),
                shown: std::sync::Mutex::default(),
                polls: tokio::sync::watch::Sender::new(None),
            }),
            lanes: HashMap::new(),
            stopped: false,
            workers: Workers::start(),
        }
    }

    /// The chat's lane, starting its worker when needed.
    fn lane(&mut self, chat: ChatId) -> &mut Lane {
        let (shared, workers) = (&self.shared, &self.workers);
        self.lanes.entry(chat).or_insert_with(|| {
            let (lane, worker) = Lane::start(shared, chat);
            workers.spawn(worker);
            lane
        })
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
        let shared = Arc::clone(&self.shared);
        let waiting = || {
            job.waits_as()
                .map(|(method, born)| shared.telegram.metrics.outbox().waiting(method, born))
        };
        let waiting = waiting();
        if let Err(job) = self.lane(chat).push(&shared.pending, job, waiting) {
            // The worker is gone (it cannot be while the lane exists, but a
            // job must never vanish): replace the lane and queue again.
            tracing::warn!(chat_id = chat.0, "outbox worker missing; restarting it");
            self.lanes.remove(&chat);
            let waiting = job
                .waits_as()
                .map(|(method, born)| shared.telegram.metrics.outbox().waiting(method, born));
            if let Err(job) = self.lane(chat).push(&shared.pending, *job, waiting) {
                job.refuse(OutboxError::Stopped);
            }
        }
    }

    /// What the lane of `chat` knows now exists before any copy of the
    /// message of row `kept` can leave: a baseline for the next process,
    /// should it find the row.
    fn placed(&mut self, chat: ChatId, kept: Option<i64>) {
        let after = self.lane(chat).baseline();
        if let (Some(row), Some(after), Some(store)) = (kept, after, &self.shared.store) {
            store.outgoing_after(row, after);
        }
    }

    /// Drops idle, empty lanes without live slots; their workers end.
    fn sweep(&mut self, _ctx: &mut Context<Self>) {
        self.lanes.retain(|_, lane| !lane.idle());
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
            if let (Some(row), Some(store)) = (msg.kept, &self.shared.store) {
                store.settle_outgoing(row, msg.to.chat.0, None, false);
            }
            if let Some(reply) = msg.reply {
                let _ = reply.send(Err(OutboxError::EmptyText));
            }
            return;
        }
        let text = msg.text.clone();
        self.shared.events.feed(msg.to, FeedItem::Said { text });
        let place = Anchor {
            topic: msg.to.topic,
            reply_to: msg.reply_to,
        };
        let kept = msg.kept.or_else(|| {
            let store = self.shared.store.as_ref()?;
            let reply_to = msg.reply_to.map(|m| m.0);
            Some(store.keep_outgoing(msg.to, reply_to, &msg.text, msg.markdown))
        });
        self.placed(msg.to.chat, kept);
        self.enqueue(
            msg.to.chat,
            Job::Text(TextJob {
                text: msg.text,
                markdown: msg.markdown,
                place,
                into: msg.into,
                reply: msg.reply,
                origin: Provenance::now(msg.turn),
                kept,
            }),
        );
    }
}

impl Handler<Show> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: Show, _ctx: &mut Self::Context) {
        if msg.text.trim().is_empty() || self.refused(msg.to.chat) {
            return;
        }
        let shared = Arc::clone(&self.shared);
        self.lane(msg.to.chat).show(&shared.pending, msg);
    }
}

impl Handler<Clear> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: Clear, _ctx: &mut Self::Context) {
        self.enqueue(msg.to.chat, Job::Clear(msg));
    }
}

impl Handler<Purge> for Outbox {
    type Result = ();

    /// The lane is started if the chat has none: what the turn's reply
    /// relay still holds comes later, and is dropped there.
    fn handle(&mut self, msg: Purge, _ctx: &mut Self::Context) {
        self.lane(msg.to.chat).purge(msg.turn);
        tracing::info!(
            chat_id = msg.to.chat.0,
            turn_id = msg.turn.get(),
            "what the stopped turn queued is dropped (/stop)"
        );
    }
}

impl Handler<SendQuestion> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: SendQuestion, _ctx: &mut Self::Context) {
        let to = msg.to;
        match Job::question(msg) {
            Ok(mut job) => {
                if let (Job::Question(question), Some(store)) = (&mut job, &self.shared.store) {
                    let kept = KeptQuestion {
                        buttons: question
                            .buttons
                            .iter()
                            .map(|row| {
                                row.iter()
                                    .map(|b| (b.label.clone(), b.data.clone()))
                                    .collect()
                            })
                            .collect(),
                        file: question
                            .file
                            .as_ref()
                            .map(|f| (f.name.clone(), f.caption.clone(), f.text.clone())),
                        ends_with_process: question.ends_with_process,
                        shown: None,
                    };
                    question.kept = Some(store.keep_outgoing_question(to, &question.text, kept));
                    self.placed(to.chat, question.kept);
                }
                self.enqueue(to.chat, job);
            }
            Err((err, reply)) => {
                tracing::warn!(chat_id = to.chat.0, cause = %err, "question not sent");
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
        self.shared.pending.add(1);
        let shared = Arc::clone(&self.shared);
        let span = context_span!(parent: None, "callback", chat_id = msg.chat.0);
        let answer = CallbackAnswer::new(msg);
        self.workers.spawn(
            async move {
                send::answer_callback(&shared.telegram, answer).await;
                shared.pending.done(1);
            }
            .instrument(span),
        );
    }
}

impl Handler<Flush> for Outbox {
    type Result = actix::ResponseFuture<()>;

    fn handle(&mut self, _msg: Flush, _ctx: &mut Self::Context) -> Self::Result {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move { shared.pending.drained().await })
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
        if !self.lane(msg.to.chat).typing(msg.to.topic) {
            return;
        }
        self.enqueue(msg.to.chat, Job::Typing(msg.lease, msg.to.topic));
    }
}

impl Handler<SendFile> for Outbox {
    type Result = ();

    fn handle(&mut self, mut msg: SendFile, _ctx: &mut Self::Context) {
        if let (None, Some(store)) = (msg.kept, &self.shared.store) {
            msg.kept = msg.keep_in(store);
        }
        self.placed(msg.to.chat, msg.kept);
        let origin = Provenance::now(msg.turn);
        let job = FileJob { send: msg, origin };
        self.enqueue(job.send.to.chat, Job::File(job));
    }
}

impl Handler<CreateTopic> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: CreateTopic, _ctx: &mut Self::Context) {
        self.enqueue(msg.chat, Job::Topic(msg.name, msg.reply));
    }
}

impl Handler<RenameTopic> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: RenameTopic, _ctx: &mut Self::Context) {
        self.enqueue(msg.chat, Job::Rename(msg.topic, msg.name));
    }
}

impl Handler<React> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: React, _ctx: &mut Self::Context) {
        self.enqueue(msg.chat, Job::React(msg.message_id, msg.emoji, msg.reply));
    }
}

impl Handler<Unbutton> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: Unbutton, _ctx: &mut Self::Context) {
        self.enqueue(msg.chat, Job::Unbutton(msg.message_id));
    }
}

impl Handler<Polled> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: Polled, _ctx: &mut Self::Context) {
        self.shared.polls.send_if_modified(|last| {
            let later = last.is_none_or(|last| last < msg.left);
            if later {
                *last = Some(msg.left);
            }
            later
        });
    }
}

impl Handler<Seen> for Outbox {
    type Result = ();

    fn handle(&mut self, msg: Seen, _ctx: &mut Self::Context) {
        if self.stopped {
            return;
        }
        self.lane(msg.chat).seen(msg.message_id);
    }
}

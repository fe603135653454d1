//! Intake: long-polls `getUpdates`, reads each message for the bot once
//! into an [`Incoming`] (written to the inbox before the offset moves past
//! it) and hands it to the dispatcher; a button press is read once too,
//! into a [`Press`].

use std::time::Duration;

use actix::{
    Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, Message, Recipient,
    WrapFuture,
};
use teloxide::Bot;
use teloxide::payloads::{GetUpdates, GetUpdatesSetters};
use teloxide::types::{AllowedUpdate, Message as TgMessage, Update, UpdateKind};
use teloxide::{ApiError, RequestError};
use tracing::{Span, field};

use self::polled::{PollUpdates, PolledUpdate};
use crate::config::AccessConfig;
use crate::ids::{Conversation, Topics};
use crate::incoming::{Ask, Author, ChatKind, Incoming, Parsed, Press, cut, parse, strip_address};
use crate::ops::logging::context_span;
use crate::ops::panics::contain;
use crate::shutdown::Shutdown;
use crate::state::{StoreHandle, UPDATE_ID_RESET_GAP};
use crate::telegram::addressing::{Addressing, NotForUs};
use crate::telegram::files::attachments;

/// The update kinds turnstile handles (`allowed_updates`): messages and
/// presses of its buttons.
pub const ALLOWED_UPDATES: [AllowedUpdate; 2] =
    [AllowedUpdate::Message, AllowedUpdate::CallbackQuery];

/// What the intake hands the dispatcher, in the order Telegram sent it.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub enum UpdateReceived {
    /// A message for the bot, read once (and in the inbox).
    Message(Incoming),
    /// A press of one of the bot's buttons, read once (not in the inbox).
    Press(Press),
    /// Every message of the batch (one `getUpdates` answer) was handed
    /// over: messages that came together may now start their turn. With
    /// when that `getUpdates` left: every update Telegram had then has been
    /// read.
    DeliveryEnd(std::time::Instant),
}

/// Stops polling; resolves once no further update will be handed over.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopIntake;

/// The long-polling actor.
pub struct Intake {
    /// The Telegram client.
    bot: Bot,
    /// `getUpdates` timeout.
    poll_timeout: Duration,
    /// Where updates go.
    to: Recipient<UpdateReceived>,
    /// Ends polling when the host stops.
    shutdown: Shutdown,
    /// The next update id wanted; everything below it has been handed over.
    offset: i32,
    /// The durable inbox: an update is written there before the offset
    /// moves past it.
    inbox: StoreHandle,
    /// Which messages are for this bot; the others are never handed over.
    addressing: Addressing,
    /// Who may talk to the bot: a stranger's message is written to the
    /// inbox without its text and files (the dispatcher refuses it).
    access: AccessConfig,
    /// Counts polls (and `/healthz` reads when the last one answered).
    metrics: Option<std::sync::Arc<crate::ops::Metrics>>,
}

impl Intake {
    /// An intake handing updates to `to`.
    pub fn new(
        bot: Bot,
        poll_timeout: Duration,
        to: Recipient<UpdateReceived>,
        shutdown: Shutdown,
        inbox: StoreHandle,
        addressing: Addressing,
        access: AccessConfig,
    ) -> Self {
        Self {
            bot,
            poll_timeout,
            to,
            shutdown,
            offset: 0,
            inbox,
            addressing,
            access,
            metrics: None,
        }
    }

    /// Whether the message is for this bot (`telegram::addressing`).
    fn for_us(&mut self, message: &TgMessage) -> bool {
        match self.addressing.check(message) {
            Ok(()) => true,
            Err(why) => {
                let why = match why {
                    NotForUs::OtherBotsCommand => "a command for another bot",
                    NotForUs::NotAddressed => "a group message not addressed to the bot",
                };
                tracing::debug!("{why}; not taken");
                false
            }
        }
    }

    /// Counts each poll into `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: std::sync::Arc<crate::ops::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// What the dispatcher gets of an update: a message for the bot, read
    /// once; a button press; nothing for the rest. Runs in the update's
    /// span, which a message gives its chat.
    fn take(&mut self, update: Update) -> Option<UpdateReceived> {
        let update_id = i64::from(update.id.0);
        match update.kind {
            UpdateKind::Message(message) => {
                Span::current().record("chat_id", message.chat.id.0);
                if !self.for_us(&message) {
                    return None;
                }
                let me = self.addressing.me();
                read(update_id, &message, &me.username, me.topics, &self.access)
                    .map(UpdateReceived::Message)
            }
            UpdateKind::CallbackQuery(query) => {
                let press = Press::read(&query, self.addressing.me().topics);
                Span::current().record("chat_id", press.to.chat.0);
                Some(UpdateReceived::Press(press))
            }
            UpdateKind::Error(raw) => {
                let shown: String = raw.to_string().chars().take(200).collect();
                tracing::warn!(raw = %shown, "update could not be parsed; skipped");
                None
            }
            other => {
                tracing::debug!(kind = ?std::mem::discriminant(&other), "update kind not handled; skipped");
                None
            }
        }
    }

    /// Writes a batch to the inbox (moving the offset past it), then hands
    /// over, in order, each update that was not there already; then polls
    /// again. Nothing else is handled meanwhile.
    fn accept(
        &mut self,
        updates: Vec<PolledUpdate>,
        left: std::time::Instant,
        ctx: &mut Context<Self>,
    ) {
        let updates: Vec<Update> = updates
            .into_iter()
            .map(|polled| {
                self.note_topic_name(&polled);
                polled.update
            })
            .collect();
        let ids: Vec<i64> = updates.iter().map(|u| i64::from(u.id.0)).collect();
        // The offset moves past every update; only those for the bot go on.
        let taken = take_each(updates, |u| self.take(u));
        let rows: Vec<Incoming> = taken
            .iter()
            .filter_map(|taken| match taken {
                UpdateReceived::Message(m) => Some(m.clone()),
                UpdateReceived::Press(_) | UpdateReceived::DeliveryEnd(_) => None,
            })
            .collect();
        let next = match reset_start(i64::from(self.offset), &ids) {
            Some(first) => {
                // Ordered before the batch's write on the store thread.
                self.inbox.reset_update_ids(first);
                ids.iter()
                    .fold(first, |offset, id| offset.max(id.saturating_add(1)))
            }
            None => ids.iter().fold(i64::from(self.offset), |offset, id| {
                offset.max(id.saturating_add(1))
            }),
        };
        let next = i32::try_from(next).unwrap_or(i32::MAX);
        let written = self.inbox.accept(rows, i64::from(next));
        ctx.wait(written.into_actor(self).map(move |fresh, act, ctx| {
            let mut fresh = fresh.into_iter();
            for taken in taken {
                // A store failure must not lose the message: hand it over anyway.
                match &taken {
                    UpdateReceived::Message(m) if !fresh.next().unwrap_or(true) => {
                        tracing::info!(
                            update_id = m.update_id,
                            "update already in the inbox; not handled again"
                        );
                    }
                    _ => act.to.do_send(taken),
                }
            }
            act.to.do_send(UpdateReceived::DeliveryEnd(left));
            act.offset = next;
            act.poll(ctx, Duration::ZERO);
        }));
    }

    /// A topic of a private chat the user started without a title waits
    /// for a name from its first message; one the user renamed never gets
    /// one (`chat::naming`). Written before the batch's messages.
    fn note_topic_name(&self, polled: &PolledUpdate) {
        let UpdateKind::Message(message) = &polled.update.kind else {
            return;
        };
        let chat = message.chat.id;
        let topics = self.addressing.me().topics;
        let Some(topic) = topics
            .of(chat, message.thread_id, true)
            .filter(|_| chat.is_user())
        else {
            return;
        };
        let to = Conversation::new(chat, Some(topic));
        if polled.unnamed_topic {
            tracing::debug!(
                topic = topic.0.0,
                "a topic started without a title waits for a name"
            );
            self.inbox
                .tell("noting a topic waits for a name", move |store| {
                    store.await_name(to)
                });
        } else if message
            .forum_topic_edited()
            .is_some_and(|e| e.name.is_some())
        {
            tracing::debug!(
                topic = topic.0.0,
                "a topic renamed by the user keeps its name"
            );
            self.inbox.tell("noting a topic was named", move |store| {
                store.take_unnamed(to).map(drop)
            });
        }
    }

    /// One long poll, then the next.
    fn poll(&mut self, ctx: &mut Context<Self>, backoff: Duration) {
        if self.shutdown.is_stopping() {
            ctx.stop();
            return;
        }
        let payload = PollUpdates(
            GetUpdates::new()
                .offset(self.offset)
                .timeout(self.poll_timeout.as_secs().min(u64::from(u32::MAX)) as u32)
                .allowed_updates(ALLOWED_UPDATES.to_vec()),
        );
        let bot = self.bot.clone();
        let shutdown = self.shutdown.clone();
        let left = std::time::Instant::now();
        let fut = async move {
            tokio::select! {
                // Through `call`: no 10 s pause after a 5xx on top of the backoff.
                result = crate::telegram::call::call(&bot, &payload) => Some(result),
                () = shutdown.stopped() => None,
            }
        };
        ctx.spawn(fut.into_actor(self).map(move |result, act, ctx| {
            let Some(result) = result else {
                ctx.stop();
                return;
            };
            if let Some(metrics) = &act.metrics {
                metrics.telegram("getUpdates", &result);
                if result.is_ok() {
                    metrics.polled();
                }
            }
            match result {
                // Inbox first, then hand over, then advance past it.
                Ok(updates) => act.accept(updates, left, ctx),
                Err(RequestError::RetryAfter(secs)) => {
                    tracing::warn!(retry_after = secs.seconds(), "getUpdates rate limited");
                    ctx.run_later(secs.duration(), |act, ctx| act.poll(ctx, Duration::ZERO));
                }
                Err(err) => {
                    let next = (backoff * 2).clamp(Duration::from_millis(250), Duration::from_secs(30));
                    let retry_in_ms = next.as_millis() as u64;
                    match &err {
                        RequestError::Api(ApiError::TerminatedByOtherGetUpdates) => tracing::error!(
                            retry_in_ms,
                            "another process is polling this bot token (409 Conflict): only one may run; retrying"
                        ),
                        RequestError::Api(ApiError::CantGetUpdates) => tracing::error!(
                            retry_in_ms,
                            "a webhook was set on this bot token while running (409 Conflict); remove it; retrying"
                        ),
                        _ => tracing::warn!(cause = %err, retry_in_ms, "getUpdates failed"),
                    }
                    ctx.run_later(next, move |act, ctx| act.poll(ctx, next));
                }
            }
        }));
    }
}

impl Actor for Intake {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let offset = self.inbox.offset();
        ctx.wait(offset.into_actor(self).map(|offset, act, ctx| {
            act.offset = i32::try_from(offset.unwrap_or(0)).unwrap_or(0);
            act.poll(ctx, Duration::ZERO);
        }));
    }
}

impl Handler<StopIntake> for Intake {
    type Result = ();

    fn handle(&mut self, _msg: StopIntake, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// Runs `take` on each update, keeping what it gave, each in the span
/// `update{update_id, chat_id}` (`take` records the chat). An update whose
/// reading panics is dropped with an ERROR log; the offset still moves past
/// it, so it is not fetched again and the intake goes on with the next one.
fn take_each<T>(updates: Vec<Update>, mut take: impl FnMut(Update) -> Option<T>) -> Vec<T> {
    let mut taken = Vec::with_capacity(updates.len());
    for update in updates {
        let span = context_span!("update", update_id = update.id.0, chat_id = field::Empty);
        let _in = span.enter();
        match contain(|| take(update)) {
            Ok(Some(value)) => taken.push(value),
            Ok(None) => {}
            Err(panic) => tracing::error!(
                %panic,
                "reading the update panicked; dropped, and the offset moves past it"
            ),
        }
    }
    taken
}

/// Reads a message for the bot once, into what the inbox stores and the
/// dispatcher acts on: its conversation, sender, place, what it asks (the
/// command parsed from the table, after the bot's address is taken off),
/// its text (cut to `incoming::MAX_INPUT_CHARS`), files and album. `None`
/// when it carries nothing to answer (no sender; no text and no files; only
/// the bot's address) or is a command for another bot. A stranger's message
/// (`AccessConfig::admits`) keeps no text, command or files: it is refused,
/// and what they wrote never reaches the state file. Logs in the update's
/// span, which names it and its chat.
pub(crate) fn read(
    update_id: i64,
    message: &TgMessage,
    me: &str,
    topics: Topics,
    access: &AccessConfig,
) -> Option<Incoming> {
    let chat = message.chat.id;
    let Some(user) = message.from.as_ref() else {
        tracing::debug!("message without a sender; skipped");
        return None;
    };
    let files = attachments(message);
    let Some(text) = message
        .text()
        .or(message.caption())
        .or(if files.is_empty() { None } else { Some("") })
    else {
        tracing::debug!("message without text or files; skipped");
        return None;
    };
    let group = message.chat.is_group() || message.chat.is_supergroup();
    let mut incoming = Incoming {
        update_id,
        to: Conversation::new(
            chat,
            topics.of(chat, message.thread_id, message.is_topic_message),
        ),
        from: user.id,
        message_id: message.id,
        date: message.date.timestamp(),
        place: if group {
            ChatKind::Group
        } else {
            ChatKind::Private
        },
        album: message.media_group_id().map(|g| g.0.clone()),
        ..Incoming::default()
    };
    if !access.admits(user.id.0, chat.0) {
        return Some(incoming);
    }
    incoming.author = Author {
        name: user.full_name(),
        username: user.username.clone(),
    };
    let text = strip_address(text, me);
    let text = text.trim();
    if text.is_empty() && files.is_empty() {
        tracing::debug!("empty message; skipped");
        return None;
    }
    match parse(text, me) {
        Parsed::Text => {
            let (text, was_cut) = cut(text);
            if was_cut {
                tracing::warn!(
                    "message cut to {} characters",
                    crate::incoming::MAX_INPUT_CHARS
                );
            }
            incoming.text = text;
            incoming.files = files;
        }
        Parsed::Known(command, args) => {
            incoming.ask = Ask::Command(command);
            incoming.text = args.to_string();
        }
        Parsed::Unknown(word) => incoming.ask = Ask::Unknown(word),
        Parsed::ForAnotherBot => {
            tracing::debug!("command for another bot; skipped");
            return None;
        }
    }
    Some(incoming)
}

/// The rule for Telegram's reset of update ids (after about a week without
/// updates they restart at a random, lower number): a batch holding an id
/// more than [`UPDATE_ID_RESET_GAP`] below the stored `offset` starts a new
/// sequence at its lowest id, which is returned; the offset then moves back
/// and old finished rows stop deduping (see `Store::reset_update_ids`).
/// Telegram never sends ids below the offset asked for otherwise, so a
/// smaller gap is treated as usual (the offset never moves back).
fn reset_start(offset: i64, ids: &[i64]) -> Option<i64> {
    let lowest = ids.iter().copied().min()?;
    (offset > 0 && lowest.saturating_add(UPDATE_ID_RESET_GAP) < offset).then_some(lowest)
}

mod polled;

#[cfg(test)]
mod tests;

//! Intake: long-polls `getUpdates` and hands each update to the dispatcher,
//! advancing the offset only past updates it has handed over.

use std::sync::Arc;
use std::time::Duration;

use actix::{
    Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, Message, Recipient,
    WrapFuture,
};
use teloxide::Bot;
use teloxide::RequestError;
use teloxide::payloads::GetUpdatesSetters;
use teloxide::prelude::Requester;
use teloxide::requests::Request;
use teloxide::types::{Update, UpdateKind};

use crate::shutdown::Shutdown;
use crate::state::{InboxMessage, Store, log_failure};

/// An update received from Telegram, in order.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct UpdateReceived(pub Update);

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
    store: Arc<Store>,
}

impl Intake {
    /// An intake handing updates to `to`.
    pub fn new(
        bot: Bot,
        poll_timeout: Duration,
        to: Recipient<UpdateReceived>,
        shutdown: Shutdown,
        store: Arc<Store>,
    ) -> Self {
        let offset = log_failure(store.offset(), "reading the update offset").unwrap_or(0);
        Self {
            bot,
            poll_timeout,
            to,
            shutdown,
            offset: i32::try_from(offset).unwrap_or(0),
            store,
        }
    }

    /// Writes a message update to the inbox; `false` for one already there.
    fn accept(&self, update: &Update) -> bool {
        let UpdateKind::Message(message) = &update.kind else {
            return true;
        };
        let (Some(text), Some(user)) =
            (message.text().or(message.caption()), message.from.as_ref())
        else {
            return true;
        };
        let row = InboxMessage {
            update_id: i64::from(update.id.0),
            chat_id: message.chat.id.0,
            user_id: i64::try_from(user.id.0).unwrap_or(i64::MAX),
            message_id: i64::from(message.id.0),
            text: text.to_string(),
            date: message.date.timestamp(),
        };
        // A store failure must not lose the message: hand it over anyway.
        log_failure(self.store.accept(&row), "writing the inbox").unwrap_or(true)
    }

    /// One long poll, then the next.
    fn poll(&mut self, ctx: &mut Context<Self>, backoff: Duration) {
        if self.shutdown.is_stopping() {
            ctx.stop();
            return;
        }
        let request = self
            .bot
            .get_updates()
            .offset(self.offset)
            .timeout(self.poll_timeout.as_secs().min(u64::from(u32::MAX)) as u32);
        let shutdown = self.shutdown.clone();
        let fut = async move {
            tokio::select! {
                result = request.send() => Some(result),
                () = shutdown.stopped() => None,
            }
        };
        ctx.spawn(fut.into_actor(self).map(move |result, act, ctx| {
            let Some(result) = result else {
                ctx.stop();
                return;
            };
            match result {
                Ok(updates) => {
                    for update in updates {
                        let id = update.id.0;
                        // Inbox first, then hand over, then advance past it.
                        if act.accept(&update) {
                            act.to.do_send(UpdateReceived(update));
                        } else {
                            tracing::info!(update_id = id, "update already in the inbox; not handled again");
                        }
                        act.offset = act.offset.max(i32::try_from(id).unwrap_or(i32::MAX).saturating_add(1));
                        log_failure(act.store.set_offset(i64::from(act.offset)), "saving the update offset");
                    }
                    act.poll(ctx, Duration::ZERO);
                }
                Err(RequestError::RetryAfter(secs)) => {
                    tracing::warn!(retry_after = secs.seconds(), "getUpdates rate limited");
                    ctx.run_later(secs.duration(), |act, ctx| act.poll(ctx, Duration::ZERO));
                }
                Err(err) => {
                    let next = (backoff * 2).clamp(Duration::from_millis(250), Duration::from_secs(30));
                    tracing::warn!(cause = %err, retry_in_ms = next.as_millis() as u64, "getUpdates failed");
                    ctx.run_later(next, move |act, ctx| act.poll(ctx, next));
                }
            }
        }));
    }
}

impl Actor for Intake {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.poll(ctx, Duration::ZERO);
    }
}

impl Handler<StopIntake> for Intake {
    type Result = ();

    fn handle(&mut self, _msg: StopIntake, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

//! Intake: long-polls `getUpdates` and hands each update to the dispatcher,
//! advancing the offset only past updates it has handed over.

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
use teloxide::types::Update;

use crate::shutdown::Shutdown;

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
}

impl Intake {
    /// An intake handing updates to `to`.
    pub fn new(
        bot: Bot,
        poll_timeout: Duration,
        to: Recipient<UpdateReceived>,
        shutdown: Shutdown,
    ) -> Self {
        Self {
            bot,
            poll_timeout,
            to,
            shutdown,
            offset: 0,
        }
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
                        // Hand over first, then advance past it.
                        act.to.do_send(UpdateReceived(update));
                        act.offset = act.offset.max(i32::try_from(id).unwrap_or(i32::MAX).saturating_add(1));
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

//! A chat tool whose work is a Telegram request runs outside the turn
//! actor: a [`PendingTool`] answers the agent when the work is done, or
//! drops the result when the turn ended meanwhile. A `send` is answered
//! when Telegram took its text or [`DELIVERY_WAIT`] after it was accepted
//! for delivery, whichever comes first.

use std::time::Duration;

use actix::{Handler, Message};
use tracing::Instrument as _;

use super::TurnActor;
use super::watchdogs::TelegramAnswered;
use crate::agent::{Responder, ToolReply};
use crate::chat::notices::bounded;
use crate::telegram::outbox::OutboxError;

/// A delivery from the turn reached Telegram.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(super) struct Delivered;

impl Handler<Delivered> for TurnActor {
    type Result = ();

    fn handle(&mut self, _msg: Delivered, _ctx: &mut Self::Context) {
        self.said.delivered_now();
    }
}

/// A tool's work finished: the turn answers the agent, unless it ended
/// meanwhile.
#[derive(Message)]
#[rtype(result = "()")]
struct ToolWorkDone(PendingTool, ToolReply);

impl Handler<ToolWorkDone> for TurnActor {
    type Result = ();

    fn handle(&mut self, ToolWorkDone(pending, value): ToolWorkDone, _ctx: &mut Self::Context) {
        let open = self.phase.holds_chat();
        pending.finish(open, value);
    }
}

/// A tool call waiting for its work (a Telegram request) to finish.
pub(super) struct PendingTool {
    id: String,
    tool: &'static str,
    reply: Responder<ToolReply>,
    shutdown: crate::shutdown::Shutdown,
}

impl PendingTool {
    /// Hands `value` to the turn, which answers the agent with it while it
    /// holds the chat; a turn that is gone drops it.
    pub(super) fn done(self, turn: &actix::Addr<TurnActor>, value: ToolReply) {
        match turn.try_send(ToolWorkDone(self, value)) {
            Ok(()) => {}
            Err(actix::dev::SendError::Full(msg)) => turn.do_send(msg),
            Err(actix::dev::SendError::Closed(ToolWorkDone(pending, value))) => {
                pending.finish(false, value);
            }
        }
    }

    /// Answers the agent while the turn is `open`, or, when the turn ended
    /// or the host began stopping meanwhile, logs the result and drops it.
    fn finish(self, open: bool, value: ToolReply) {
        if open && !self.shutdown.is_closing() {
            self.reply.answer(value);
            return;
        }
        let (ok, error) = match &value {
            ToolReply::Ok(_) => (true, String::new()),
            ToolReply::Error(e) | ToolReply::Refused(e) | ToolReply::Failed(e) => {
                (false, bounded(e, 500))
            }
        };
        tracing::warn!(
            call_id = %self.id,
            tool = %self.tool,
            ok,
            error = %error,
            "tool result arrived after the turn ended; dropped (the agent may run it again)"
        );
        self.reply.refuse("the turn has ended");
    }
}

/// Answers a tool call once the outbox says how its delivery went. A
/// delivery is recorded (`Delivered`) before the agent hears back, so the
/// result text is never sent again.
pub(super) fn answer_when_delivered<T: Send + 'static>(
    rx: tokio::sync::oneshot::Receiver<Result<T, OutboxError>>,
    pending: PendingTool,
    turn: actix::Addr<TurnActor>,
    ok: impl FnOnce(T) -> String + Send + 'static,
) {
    actix::spawn(
        async move {
            let outcome = rx.await;
            turn.do_send(TelegramAnswered);
            let value = match outcome {
                Ok(Ok(sent)) => {
                    turn.do_send(Delivered);
                    ToolReply::Ok(ok(sent))
                }
                Ok(Err(err)) => ToolReply::Error(err.to_string()),
                Err(_) => ToolReply::Failed("the outbox has stopped".into()),
            };
            pending.done(&turn, value);
        }
        .in_current_span(),
    );
}

/// How long a `send` waits for Telegram once its text is accepted for
/// delivery, before it is answered as accepted: Telegram being slow or
/// unreachable holds the agent no longer than this.
const DELIVERY_WAIT: Duration = Duration::from_secs(2);

/// Answers a `send` when Telegram took its text (`delivered`), or
/// [`DELIVERY_WAIT`] after it was accepted for delivery (`accepted`: kept
/// in the state store and handed to the outbox), whichever comes first. A
/// text that reached Telegram or was accepted counts as the turn's reply
/// (`Delivered`) before the agent hears back.
pub(super) fn answer_when_delivered_or_accepted(
    (mut delivered, accepted): (
        tokio::sync::oneshot::Receiver<Result<Vec<teloxide::types::MessageId>, OutboxError>>,
        tokio::sync::oneshot::Receiver<()>,
    ),
    pending: PendingTool,
    turn: actix::Addr<TurnActor>,
    cut: Option<usize>,
) {
    let cut_note = move || match cut {
        Some(kept) => format!(
            ", cut after {kept} bytes: the turn's limit of text (turn.max_output) was reached"
        ),
        None => String::new(),
    };
    actix::spawn(
        async move {
            let waited = async {
                match accepted.await {
                    Ok(()) => tokio::time::sleep(DELIVERY_WAIT).await,
                    // Never accepted: only Telegram's answer tells.
                    Err(_) => std::future::pending().await,
                }
            };
            let reply = tokio::select! {
                outcome = &mut delivered => match outcome {
                    Ok(Ok(ids)) => ToolReply::Ok(format!("delivered as {} message(s){}", ids.len(), cut_note())),
                    Ok(Err(err)) => ToolReply::Error(err.to_string()),
                    Err(_) => ToolReply::Failed("the outbox has stopped".into()),
                },
                () = waited => ToolReply::Ok(format!(
                    "accepted for delivery{}: Telegram has not confirmed it yet; it reaches the chat \
                     in order, waiting out any outage. Do not send it again",
                    cut_note()
                )),
            };
            turn.do_send(TelegramAnswered);
            if let ToolReply::Ok(_) = reply {
                turn.do_send(Delivered);
            }
            pending.done(&turn, reply);
        }
        .in_current_span(),
    );
}

impl TurnActor {
    /// A tool call whose work runs outside the actor (so its result is
    /// seen even when the turn has ended by then).
    pub(super) fn pending_tool(
        &self,
        id: String,
        tool: &'static str,
        reply: Responder<ToolReply>,
    ) -> PendingTool {
        PendingTool {
            id,
            tool,
            reply,
            shutdown: self.deps.books.shutdown.clone(),
        }
    }
}

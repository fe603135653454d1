//! Settling an unknown outcome: a message whose request got no answer may
//! or may not be in the chat. The Bot API has no idempotency key, so the
//! lane sends it again and reads the answer's message id.
//!
//! Telegram numbers a chat's messages in order. The lane keeps what it
//! [`Known`]s of its chat: the highest message id it has seen (its own
//! confirmed messages and the incoming messages it replies to) and which
//! ids those were. The highest id seen before the first copy left is its
//! baseline `B`. When the copy sent again gets id `M` and every id between
//! `B` and `M` is one the lane knows (in particular when `M = B + 1`), no
//! message at all was made in between, so the first copy never arrived:
//! nothing shows twice, and nothing is marked. Otherwise the first copy
//! may be among those ids, and the copy sent again is marked as a resend
//! (a short reply to it). No probe is made: an edit of a candidate id
//! could overwrite another message.
//!
//! Messages the user wrote while Telegram was unreachable take ids too, and
//! the lane knows them only once the intake has polled them. So before it
//! marks a copy, the lane waits, at most [`POLL_WAIT`], for a `getUpdates`
//! that left after the copy did to be answered: every message made before
//! the copy is then known, and only the ids still unknown count. Only this
//! chat's lane waits; the others go on.

use std::time::{Duration, Instant};

use teloxide::RequestError;
use teloxide::payloads::{GetMe, SendMessage};
use teloxide::types::{MessageId, ReplyParameters, ThreadId};

use super::deliver::{RequestTerms, deliver};
use super::error::OutboxError;
use super::post::{Post, Provenance, lock};
use crate::chat::notices::RESENT;
use crate::events::BotEvent;
use crate::telegram::call::{call, with_sources};

/// How long a lane waits for a `getUpdates` that left after a copy sent
/// again, before it marks the copy without knowing what that poll brings.
pub(super) const POLL_WAIT: Duration = Duration::from_secs(5);

impl Post<'_> {
    /// Sends a message (`request` makes each attempt) until Telegram takes
    /// it or it is too old; a request that got no answer is sent again, and
    /// the copy that arrives is marked as a resend unless the chat's
    /// message ids prove it the only one. `prior`: the message may have left
    /// before.
    pub(super) async fn settle<F, Fut>(
        &mut self,
        terms: RequestTerms,
        topic: Option<ThreadId>,
        origin: Provenance,
        mut request: F,
    ) -> Result<MessageId, OutboxError>
    where
        F: FnMut(bool) -> Option<Fut>,
        Fut: Future<Output = Result<MessageId, RequestError>>,
    {
        let (terms, turn, mut prior) = (terms.answer(origin.born), origin.turn, origin.prior);
        loop {
            // Taken before it leaves: the lane is the only sender here.
            let baseline = lock(self.known).baseline();
            let left = Instant::now();
            let sent = deliver(self.telegram, Some(&mut *self.pacing), terms, &mut request).await;
            match sent {
                Ok(id) => {
                    if let Some(first) = prior {
                        self.resent(terms.method, topic, first, left, id).await;
                    }
                    lock(self.known).saw(id);
                    return Ok(id);
                }
                Err(OutboxError::Unknown { method, cause }) => {
                    let first = *prior.get_or_insert(baseline);
                    tracing::warn!(
                        method,
                        cause = %with_sources(&cause),
                        baseline = first,
                        "a message may or may not have reached the chat (its request got no answer); sending it again"
                    );
                    self.events.publish(BotEvent::DeliveryUnknown {
                        chat: self.chat,
                        turn,
                        method,
                        at: Instant::now(),
                    });
                    self.until_answered(origin.born).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// After an unknown outcome: waits until Telegram answers a request
    /// that makes nothing (`getMe`), or the message's age bound. A copy sent
    /// into the same dead path (a half-open connection that still carries
    /// requests out) could arrive again with no answer, and show a third
    /// time; sent once Telegram answers, it shows at most once more.
    async fn until_answered(&self, born: Instant) {
        let limits = &self.telegram.limits;
        let expires = born + limits.max_pending_age;
        loop {
            tokio::time::sleep(limits.backoff.min(limits.max_backoff)).await;
            if Instant::now() >= expires {
                return;
            }
            let payload = GetMe::new();
            let probe = call(&self.telegram.bot, &payload);
            if let Ok(Ok(_)) = tokio::time::timeout(limits.request_timeout, probe).await {
                return;
            }
        }
    }

    /// Waits, at most [`POLL_WAIT`], until a `getUpdates` that left at
    /// `since` or later was answered and its messages are known.
    async fn polled_since(&self, since: Instant) {
        let mut polls = self.polls.subscribe();
        let polled = polls.wait_for(|last| last.is_some_and(|last| last >= since));
        if tokio::time::timeout(POLL_WAIT, polled).await.is_err() {
            tracing::debug!("no poll answered in time; what it brings stays unknown");
        }
    }

    /// A copy sent again at `left` arrived as `got`: marked as a resend
    /// unless no other copy can be in the chat.
    async fn resent(
        &mut self,
        method: &'static str,
        topic: Option<ThreadId>,
        baseline: Option<i32>,
        left: Instant,
        got: MessageId,
    ) {
        let metrics = &self.telegram.metrics;
        let mut ruled_out = lock(self.known).ruled_out(baseline, got);
        if !ruled_out && baseline.is_some() {
            // The ids between may be the user's, not polled yet.
            self.polled_since(left).await;
            ruled_out = lock(self.known).ruled_out(baseline, got);
        }
        if ruled_out {
            metrics.outbox().resent(method, false);
            tracing::info!(
                method,
                message_id = got.0,
                "sent again; the first copy provably never arrived"
            );
            return;
        }
        metrics.outbox().resent(method, true);
        tracing::warn!(
            method,
            message_id = got.0,
            baseline,
            "sent again; the first copy may have arrived too, so this one is marked as a resend"
        );
        let (telegram, chat) = (self.telegram, self.chat);
        let terms = RequestTerms::once("sendMessage").answer(Instant::now());
        loop {
            let sent = deliver(telegram, Some(&mut *self.pacing), terms, |_| {
                let mut payload = SendMessage::new(chat, RESENT);
                payload.message_thread_id = topic;
                payload.reply_parameters = Some(ReplyParameters::new(got));
                Some(async move { call(&telegram.bot, &payload).await.map(|m| m.id) })
            })
            .await;
            match sent {
                Ok(id) => return lock(self.known).saw(id),
                // A mark twice does no harm; a mark lost would.
                Err(OutboxError::Unknown { .. }) => {}
                Err(err) => {
                    return tracing::warn!(cause = %err, "the mark of a resend was not sent");
                }
            }
        }
    }
}

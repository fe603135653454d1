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

use std::time::Instant;

use teloxide::RequestError;
use teloxide::payloads::{GetMe, SendMessage};
use teloxide::types::{MessageId, ReplyParameters, ThreadId};

use super::deliver::{Rule, deliver};
use super::error::OutboxError;
use super::jobs::Place;
use super::lane::lock;
use super::send::Post;
use crate::chat::notices::{RESENT, undelivered};
use crate::events::BotEvent;
use crate::ids::TurnId;
use crate::telegram::call::{call, with_sources};
use crate::telegram::format::Rendered;

/// How many of the most recent ids are remembered: an unknown outcome
/// spanning more is simply marked. A fixed window, so what a lane keeps of
/// its chat does not grow with the messages it has seen.
const WINDOW: i32 = 1_024;
/// The window's bitmap, in 64-bit words.
const WORDS: usize = WINDOW as usize / 64;

/// The message ids a lane knows in its chat.
#[derive(Debug)]
pub(super) struct Known {
    /// The highest id seen.
    highest: Option<i32>,
    /// Which of the ids `highest - WINDOW + 1 ..= highest` are known not to
    /// be an unconfirmed copy: bit `id mod WINDOW`.
    explained: [u64; WORDS],
}

impl Known {
    /// A lane that knows its chat's messages up to `highest` (kept in the
    /// state store across restarts).
    pub(super) fn from(highest: Option<i32>) -> Self {
        Self {
            highest,
            explained: [0; WORDS],
        }
    }

    /// Where `id`'s bit is.
    fn bit(id: i32) -> (usize, u64) {
        let at = id.rem_euclid(WINDOW) as usize;
        (at / 64, 1 << (at % 64))
    }

    /// `id` exists and is no unconfirmed copy: a message of the lane's,
    /// confirmed, or an incoming one.
    pub(super) fn saw(&mut self, id: MessageId) {
        let id = id.0;
        // In i64: ids come from Telegram, and no difference of two may wrap.
        let gap = self
            .highest
            .map(|highest| i64::from(id) - i64::from(highest));
        match (self.highest, gap) {
            (Some(_), Some(gap)) if gap <= 0 => {
                if gap <= -i64::from(WINDOW) {
                    return; // older than the window: nothing to remember
                }
            }
            (Some(highest), Some(gap)) if gap < i64::from(WINDOW) => {
                // The ids the window now takes in are not known yet.
                for fresh in highest + 1..id {
                    let (word, mask) = Self::bit(fresh);
                    self.explained[word] &= !mask;
                }
                self.highest = Some(id);
            }
            _ => {
                self.explained = [0; WORDS];
                self.highest = Some(id);
            }
        }
        let (word, mask) = Self::bit(id);
        self.explained[word] |= mask;
    }

    /// Whether `id` is known to be no unconfirmed copy.
    fn explained(&self, id: i32) -> bool {
        let Some(highest) = self.highest else {
            return false;
        };
        let behind = i64::from(highest) - i64::from(id);
        if behind < 0 || behind >= i64::from(WINDOW) {
            return false;
        }
        let (word, mask) = Self::bit(id);
        self.explained[word] & mask != 0
    }

    /// The highest id seen: a request's baseline, taken before it leaves.
    pub(super) fn baseline(&self) -> Option<i32> {
        self.highest
    }

    /// Whether a copy sent again as `got`, after a first copy that left
    /// when the highest id seen was `baseline`, is provably the only one:
    /// every id between the two is known.
    pub(super) fn ruled_out(&self, baseline: Option<i32>, got: MessageId) -> bool {
        let Some(baseline) = baseline else {
            return false;
        };
        // The ids between the two, all of which must be known.
        let between = i64::from(got.0) - i64::from(baseline) - 1;
        if !(0..=i64::from(WINDOW)).contains(&between) {
            return false;
        }
        (baseline + 1..got.0).all(|id| self.explained(id))
    }
}

/// Where a message's first copy may already be: `Some(baseline)` for a
/// message that may have left before (recovered after a restart, or whose
/// request got no answer), with the highest id seen when it first left.
pub(super) type Prior = Option<Option<i32>>;

/// Where a message comes from: when it was first queued (its age bound
/// counts from there), the turn that sent it, and where its first copy may
/// already be.
#[derive(Debug, Clone, Copy)]
pub(super) struct Origin {
    pub(super) born: Instant,
    pub(super) turn: Option<TurnId>,
    pub(super) prior: Prior,
}

impl Origin {
    /// A message queued now, by `turn`.
    pub(super) fn now(turn: Option<TurnId>) -> Self {
        Self {
            born: Instant::now(),
            turn,
            prior: None,
        }
    }
}

impl Post<'_> {
    /// Sends a message (`request` makes each attempt) until Telegram takes
    /// it or it is too old; a request that got no answer is sent again, and
    /// the copy that arrives is marked as a resend unless the chat's
    /// message ids prove it the only one. `prior`: the message may have left
    /// before.
    pub(super) async fn settle<F, Fut>(
        &mut self,
        rule: Rule,
        topic: Option<ThreadId>,
        origin: Origin,
        mut request: F,
    ) -> Result<MessageId, OutboxError>
    where
        F: FnMut(bool) -> Option<Fut>,
        Fut: Future<Output = Result<MessageId, RequestError>>,
    {
        let (rule, turn, mut prior) = (rule.answer(origin.born), origin.turn, origin.prior);
        loop {
            // Taken before it leaves: the lane is the only sender here.
            let baseline = lock(self.known).baseline();
            let sent = deliver(self.telegram, Some(&mut *self.pacing), rule, &mut request).await;
            match sent {
                Ok(id) => {
                    if let Some(first) = prior {
                        self.resent(rule.method, topic, first, id).await;
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

    /// A copy sent again arrived as `got`: marked as a resend unless no
    /// other copy can be in the chat.
    async fn resent(
        &mut self,
        method: &'static str,
        topic: Option<ThreadId>,
        baseline: Option<i32>,
        got: MessageId,
    ) {
        let metrics = &self.telegram.metrics;
        let ruled_out = lock(self.known).ruled_out(baseline, got);
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
        let rule = Rule::once("sendMessage").answer(Instant::now());
        loop {
            let sent = deliver(telegram, Some(&mut *self.pacing), rule, |_| {
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

    /// When `err` says an answer outlived `telegram.max_pending_age`: logs
    /// it, counts it and tells the chat (once Telegram takes that). `false`
    /// for any other error.
    pub(super) async fn expired(
        &mut self,
        topic: Option<ThreadId>,
        err: &OutboxError,
        what: &str,
    ) -> bool {
        let OutboxError::Expired { method } = err else {
            return false;
        };
        let age = self.telegram.limits.max_pending_age;
        self.telegram.metrics.outbox().dropped(method);
        tracing::error!(
            method,
            max_pending_age = %humantime::format_duration(age),
            "telegram did not take a message within telegram.max_pending_age; dropped, the chat is told"
        );
        let notice = Rendered::plain(undelivered(what, age));
        let place = Place {
            topic,
            reply_to: None,
        };
        if let Err(err) = self.piece(place, &notice, Origin::now(None)).await {
            tracing::warn!(cause = %err, "the notice of a dropped message was not delivered");
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_copy_with_no_unknown_id_before_it_is_the_only_one() {
        let mut known = Known::from(Some(10));
        // Nothing made between: the first copy never arrived.
        assert!(known.ruled_out(Some(10), MessageId(11)));
        // One id unaccounted for: it may be the first copy.
        assert!(!known.ruled_out(Some(10), MessageId(12)));
        // Our own confirmed message in between is accounted for.
        known.saw(MessageId(11));
        assert!(known.ruled_out(Some(10), MessageId(12)));
        // No baseline (nothing known of the chat): never ruled out.
        assert!(!known.ruled_out(None, MessageId(1)));
        // An id at or below the baseline cannot be a later copy's.
        assert!(!known.ruled_out(Some(10), MessageId(10)));
        assert_eq!(known.baseline(), Some(11));
    }

    #[test]
    fn what_a_lane_knows_is_a_window_of_fixed_size() {
        let mut known = Known::from(Some(0));
        // Thousands of messages later, only the recent window is known,
        // in the same fixed memory.
        for id in 1..=5_000 {
            known.saw(MessageId(id));
        }
        assert_eq!(std::mem::size_of::<Known>(), 8 + WINDOW as usize / 8);
        assert!(known.ruled_out(Some(5_000 - WINDOW), MessageId(5_001)));
        // An id that left the window is no longer known.
        assert!(!known.ruled_out(Some(5_000 - WINDOW - 1), MessageId(5_001)));
        // Ids the window took in by a jump are not known.
        known.saw(MessageId(5_010));
        assert!(!known.ruled_out(Some(5_000), MessageId(5_011)));
        known.saw(MessageId(5_005));
        assert!(!known.ruled_out(Some(5_004), MessageId(5_011)));
        for id in 5_001..5_010 {
            known.saw(MessageId(id));
        }
        assert!(known.ruled_out(Some(4_999), MessageId(5_011)));
        // A late id from before the window changes nothing.
        known.saw(MessageId(1));
        assert_eq!(known.baseline(), Some(5_010));
        // A jump past the whole window forgets it all.
        known.saw(MessageId(9_000));
        assert!(!known.ruled_out(Some(8_998), MessageId(9_001)));
        assert!(known.ruled_out(Some(9_000), MessageId(9_001)));
    }
}

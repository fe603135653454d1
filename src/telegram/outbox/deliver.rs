//! One delivery and retry path for every request: [`deliver`] sends it
//! (under the chat's [`Pacing`] when given), `classify` (`error.rs`) reads the answer
//! and the [`RequestTerms`] of the request decides the next step: a 429 waits its
//! `retry_after`, a 5xx or failed connection is retried with backoff (an
//! answer's until Telegram takes it, up to its age bound), an attempt gets
//! no more than the request timeout, an unknown outcome is retried here only
//! when sending twice does no harm (a message's is its sender's to settle),
//! refused formatting goes once more as plain text, a refusal is final.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use teloxide::{Bot, RequestError};

use super::error::{OutboxError, Sent, Unreachable, classify};
use super::pacing::{Pacing, RateLimits};
use crate::ops::Metrics;
use crate::telegram::call::with_sources;

/// At most this many of the outbox's requests are out at once, across all
/// chats; the rest wait their turn in the order they asked. Each request
/// out holds an HTTP connection: when 10,000 chats answered at once, the
/// bot opened thousands, the server's accept queue overflowed, and
/// messages written to connections it never accepted had an unknown
/// outcome (a notice instead of the answer, 493 of 10,000 in the scale
/// benchmark). Telegram itself takes about 30 messages a second.
pub const MAX_IN_FLIGHT: usize = 64;

/// What sending a request takes: the client, the retry policy, the counts,
/// and the bound on requests out at once.
pub(super) struct Telegram {
    pub(super) bot: Bot,
    pub(super) limits: RateLimits,
    pub(super) metrics: Arc<Metrics>,
    in_flight: tokio::sync::Semaphore,
}

impl Telegram {
    pub(super) fn new(bot: Bot, limits: RateLimits, metrics: Arc<Metrics>) -> Self {
        Self {
            bot,
            limits,
            metrics,
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
        }
    }
}

/// How a request may be repeated.
#[derive(Debug, Clone, Copy)]
pub(super) struct RequestTerms {
    /// The Bot API method, for the logs and the counts.
    pub(super) method: &'static str,
    /// Sending it twice does no harm (an edit, typing, a reaction), so a
    /// request whose outcome is unknown may be sent again; otherwise (a
    /// message) the caller decides ([`OutboxError::Unknown`]).
    pub(super) idempotent: bool,
    /// Useless after this: no wait, request or retry reaches past it.
    pub(super) until: Option<Instant>,
    /// Refused formatting: the request goes once more as plain text.
    pub(super) plain_fallback: bool,
    /// An answer (a message, a file, a question) first queued at this
    /// instant: retried, however often, until Telegram takes it or it is
    /// `max_pending_age` old. Without it, retries end after `max_retries`.
    pub(super) born: Option<Instant>,
    /// An upload: each attempt may take four times `request_timeout`.
    pub(super) upload: bool,
}

impl RequestTerms {
    /// A request that may go twice, with no deadline.
    pub(super) fn idempotent(method: &'static str) -> Self {
        Self {
            method,
            idempotent: true,
            until: None,
            plain_fallback: false,
            born: None,
            upload: false,
        }
    }

    /// A request that must never go twice unawares (a message, a file).
    pub(super) fn once(method: &'static str) -> Self {
        Self {
            idempotent: false,
            ..Self::idempotent(method)
        }
    }

    /// The same terms for an answer queued at `born`: it waits out any
    /// outage, up to `max_pending_age`.
    pub(super) fn answer(self, born: Instant) -> Self {
        Self {
            born: Some(born),
            ..self
        }
    }

    /// The same terms, trying again as plain text when the formatting is
    /// refused.
    pub(super) fn or_plain(self) -> Self {
        Self {
            plain_fallback: true,
            ..self
        }
    }

    /// When an answer is dropped as too old.
    fn expires(self, limits: &RateLimits) -> Option<Instant> {
        self.born.map(|born| born + limits.max_pending_age)
    }
}

/// Sends a request under `pacing` (the chat's and the global limit; none
/// when `None`) with the retry rules of its `terms`. `request(plain)` makes
/// each attempt (`plain`: without its formatting), or `None` when it is no
/// longer wanted (a typing request whose lease ended): nothing more is
/// sent, and the answer is [`OutboxError::Dropped`]. A request that would
/// only go after `terms.until` is dropped before it takes a token; an answer
/// that would only go after its age bound is [`OutboxError::Expired`].
pub(super) async fn deliver<T, F, Fut>(
    telegram: &Telegram,
    mut pacing: Option<&mut Pacing>,
    terms: RequestTerms,
    mut request: F,
) -> Result<T, OutboxError>
where
    F: FnMut(bool) -> Option<Fut>,
    Fut: Future<Output = Result<T, RequestError>>,
{
    let mut attempt = 0;
    let mut plain = false;
    let expires = terms.expires(&telegram.limits);
    loop {
        // Looked at first, taken only when the request will go: a request
        // dropped as too late leaves the chat's pacing as it was.
        let wait = pacing.as_deref_mut().map_or(Duration::ZERO, Pacing::wait);
        if terms
            .until
            .is_some_and(|until| Instant::now() + wait >= until)
        {
            return Err(late(terms));
        }
        if expires.is_some_and(|at| Instant::now() + wait >= at) {
            return Err(expired(terms));
        }
        let wait = pacing
            .as_deref_mut()
            .map_or(Duration::ZERO, Pacing::reserve);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let result = match attempt_once(telegram, terms, plain, &mut request).await {
            Attempt::Answered(result) => result,
            Attempt::Late => return Err(late(terms)),
            Attempt::Dropped => return Err(OutboxError::Dropped),
        };
        telegram.metrics.telegram(terms.method, &result);
        if let (Err(RequestError::Network(net)), Some(pacing)) = (&result, pacing.as_deref_mut())
            && net.is_connect()
        {
            // Never reached Telegram: it took nothing of the chat's budget.
            pacing.give_back();
        }
        let (wait, why) = match classify(result) {
            Sent::Ok(value) => return Ok(value),
            Sent::Retry(wait, why) => (wait, why),
            Sent::RetryIfUnsent(why) if terms.idempotent => (Duration::ZERO, why),
            Sent::RetryIfUnsent(why) => {
                // It may have arrived: whoever queued it decides whether,
                // and how, it goes again (it knows the chat's message ids).
                telegram.metrics.unknown_outcome(terms.method);
                return Err(OutboxError::Unknown {
                    method: terms.method,
                    cause: why,
                });
            }
            Sent::Plain(why) if terms.plain_fallback && !plain => {
                tracing::info!(method = terms.method, cause = %why, "formatting refused; sending as plain text");
                plain = true;
                continue;
            }
            Sent::Plain(why) => return Err(OutboxError::refused(why)),
            Sent::Fail(OutboxError::Blocked) => {
                tracing::warn!(
                    method = terms.method,
                    "the bot is blocked in this chat; request dropped"
                );
                return Err(OutboxError::Blocked);
            }
            Sent::Fail(err) => return Err(err),
        };
        match retry(telegram, terms, &mut attempt, wait, &why).await {
            Next::Again => {}
            Next::Late => return Err(late(terms)),
            Next::Expired => return Err(expired(terms)),
            Next::GiveUp => return Err(OutboxError::Unreachable(Unreachable::GaveUp(why))),
        }
    }
}

/// How one attempt went.
enum Attempt<T> {
    /// Telegram's answer, or why none came.
    Answered(Result<T, RequestError>),
    /// Its deadline came first.
    Late,
    /// It is no longer wanted.
    Dropped,
}

/// One attempt: a place among the requests out, then the request, its
/// answer awaited no longer than the request timeout (no answer in time is
/// an unknown outcome: it may have been written).
async fn attempt_once<T, F, Fut>(
    telegram: &Telegram,
    terms: RequestTerms,
    plain: bool,
    request: &mut F,
) -> Attempt<T>
where
    F: FnMut(bool) -> Option<Fut>,
    Fut: Future<Output = Result<T, RequestError>>,
{
    // Taken before the request is made: a typing request whose lease
    // ended while it waited is not made.
    let Some(Ok(out)) = within(terms.until, telegram.in_flight.acquire()).await else {
        return Attempt::Late;
    };
    let Some(sending) = request(plain) else {
        return Attempt::Dropped;
    };
    let mut timeout = telegram.limits.request_timeout;
    if terms.upload {
        timeout = timeout.saturating_mul(4);
    }
    let answered = within(terms.until, tokio::time::timeout(timeout, sending)).await;
    // Not held through a retry's wait.
    drop(out);
    match answered {
        None => Attempt::Late,
        Some(Ok(result)) => Attempt::Answered(result),
        Some(Err(_)) => Attempt::Answered(Err(timed_out(timeout))),
    }
}

/// No answer within `timeout`: an error that reads as an unknown outcome.
fn timed_out(timeout: Duration) -> RequestError {
    let why = format!("no answer within {}", humantime::format_duration(timeout));
    RequestError::Io(Arc::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        why,
    )))
}

/// The answer to `sending`, unless `until` comes first.
async fn within<T>(until: Option<Instant>, sending: impl Future<Output = T>) -> Option<T> {
    match until {
        Some(until) => {
            let until = tokio::time::Instant::from_std(until);
            tokio::time::timeout_at(until, sending).await.ok()
        }
        None => Some(sending.await),
    }
}

/// A request that would only have gone after it was useful.
fn late(terms: RequestTerms) -> OutboxError {
    OutboxError::Unreachable(Unreachable::TooLate {
        method: terms.method,
    })
}

/// An answer that Telegram did not take within its age bound.
fn expired(terms: RequestTerms) -> OutboxError {
    OutboxError::Expired {
        method: terms.method,
    }
}

/// After a failure that may be retried.
enum Next {
    /// The wait is over: again.
    Again,
    /// No time is left before the request's deadline.
    Late,
    /// The answer would only go after its age bound.
    Expired,
    /// Retries ran out.
    GiveUp,
}

/// Sleeps before a retry when one is allowed: an answer's retries never run
/// out (its backoff stays under `max_backoff`, a 429's wait is honoured
/// whatever it is) until its age bound; any other request's end after
/// `max_retries`.
async fn retry(
    telegram: &Telegram,
    terms: RequestTerms,
    attempt: &mut u32,
    wait: Duration,
    why: &RequestError,
) -> Next {
    let limits = &telegram.limits;
    let patient = terms.born.is_some();
    let next = if !wait.is_zero() {
        wait
    } else if patient {
        (limits.backoff * 2u32.saturating_pow((*attempt).min(16))).min(limits.max_backoff)
    } else {
        limits.backoff * 2u32.saturating_pow(*attempt)
    };
    if terms
        .until
        .is_some_and(|until| Instant::now() + next >= until)
    {
        tracing::warn!(method = terms.method, cause = %with_sources(why), "no time left to retry");
        return Next::Late;
    }
    if terms
        .expires(limits)
        .is_some_and(|at| Instant::now() + next >= at)
    {
        return Next::Expired;
    }
    *attempt = attempt.saturating_add(1);
    if !patient && (*attempt > limits.max_retries || wait > limits.max_retry_after) {
        tracing::warn!(
            method = terms.method,
            attempts = *attempt,
            cause = %with_sources(why),
            "giving up on a telegram request"
        );
        return Next::GiveUp;
    }
    tracing::info!(
        method = terms.method,
        attempt = *attempt,
        wait_ms = next.as_millis() as u64,
        cause = %with_sources(why),
        "retrying a telegram request"
    );
    tokio::time::sleep(next).await;
    telegram.metrics.retried();
    Next::Again
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use teloxide::types::ChatId;

    use super::super::pacing;
    use super::*;

    #[tokio::test]
    async fn a_request_too_late_to_be_useful_takes_no_slot() {
        let limits = RateLimits {
            chat_burst: 5.0,
            group_per_sec: 20.0 / 60.0,
            ..RateLimits::default()
        };
        // Never called: nothing here reaches the network.
        let telegram = Telegram::new(Bot::new("1:x"), limits.clone(), Arc::default());
        // A group whose burst is used up: its next send waits 3 s.
        let mut pacing = Pacing::of_chat(&limits, ChatId(-5), pacing::global(&limits));
        for _ in 0..5 {
            pacing.parts().0.reserve();
        }
        let before = pacing.wait();
        assert!(before > Duration::from_secs(2), "{before:?}");
        let terms = RequestTerms {
            until: Some(Instant::now() + Duration::from_secs(1)),
            ..RequestTerms::idempotent("answerCallbackQuery")
        };
        let calls = Cell::new(0);
        let sent = deliver(&telegram, Some(&mut pacing), terms, |_| {
            calls.set(calls.get() + 1);
            Some(async { Ok::<(), RequestError>(()) })
        })
        .await;
        assert!(matches!(sent, Err(OutboxError::Unreachable(_))), "{sent:?}");
        assert_eq!(calls.get(), 0, "nothing was sent");
        let after = pacing.wait();
        assert!(
            after <= before,
            "the dropped request took the chat's slot: {before:?}, then {after:?}"
        );
        let global = pacing.parts().1.tokens();
        assert!(global > 29.5, "it took a global slot: {global} left of 30");
    }

    #[tokio::test]
    async fn an_attempt_that_never_reached_telegram_takes_no_token() {
        // A port nothing listens on: every connection is refused.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let url = format!("http://{closed}/").parse().expect("a url");
        let bot = Bot::new("1:x").set_api_url(url);
        let limits = RateLimits {
            chat_per_sec: 1e-6,
            global_per_sec: 1e-6,
            max_retries: 3,
            backoff: Duration::from_millis(1),
            ..RateLimits::default()
        };
        let telegram = Telegram::new(bot.clone(), limits.clone(), Arc::default());
        let mut pacing = Pacing::of_chat(&limits, ChatId(5), pacing::global(&limits));
        let attempts = Cell::new(0);
        let sent = deliver(
            &telegram,
            Some(&mut pacing),
            RequestTerms::once("sendMessage"),
            |_| {
                attempts.set(attempts.get() + 1);
                let bot = bot.clone();
                let payload = teloxide::payloads::GetMe::new();
                Some(async move { crate::telegram::call::call(&bot, &payload).await })
            },
        )
        .await;
        assert!(matches!(sent, Err(OutboxError::Unreachable(_))), "{sent:?}");
        assert_eq!(attempts.get(), 4, "the first and 3 retries");
        let (chat, global) = pacing.parts();
        let (chat, global) = (chat.tokens(), global.tokens());
        assert!(chat > 4.99, "refused attempts took {} of 5", 5.0 - chat);
        assert!(
            global > 29.99,
            "refused attempts took {} of 30",
            30.0 - global
        );
    }

    #[tokio::test]
    async fn a_request_waiting_to_retry_holds_no_place_among_those_out() {
        let telegram = Telegram::new(Bot::new("1:x"), RateLimits::default(), Arc::default());
        let attempts = Cell::new(0);
        let delivering = deliver(&telegram, None, RequestTerms::once("sendMessage"), |_| {
            attempts.set(attempts.get() + 1);
            let first = attempts.get() == 1;
            Some(async move {
                if first {
                    Err(RequestError::RetryAfter(
                        teloxide::types::Seconds::from_seconds(1),
                    ))
                } else {
                    Ok(())
                }
            })
        });
        // Polled after the delivery first waits: the 429's retry_after.
        let watching = async {
            assert_eq!(attempts.get(), 1, "the first attempt was answered");
            telegram.in_flight.available_permits()
        };
        let (sent, free_while_waiting) = tokio::join!(delivering, watching);
        assert!(sent.is_ok(), "{sent:?}");
        assert_eq!(attempts.get(), 2);
        assert_eq!(free_while_waiting, MAX_IN_FLIGHT);
        assert_eq!(telegram.in_flight.available_permits(), MAX_IN_FLIGHT);
    }
}

//! How a request's answer decides the next step: [`classify`] turns
//! teloxide's result into a [`Sent`], [`retry_allowed`] waits before a
//! retry (or gives up), [`send_piece`] sends one piece of text and
//! [`deliver`] sends any other request under the chat's and the global
//! rate limits ([`deliver_unpaced`]: under none).

use std::future::Future;
use std::time::{Duration, Instant};

use teloxide::RequestError;
use teloxide::payloads::SendMessageSetters;
use teloxide::prelude::Requester;
use teloxide::requests::HasPayload;
use teloxide::types::{ChatId, MessageId, ReplyParameters};

use super::{Bucket, OutboxError, Place, Shared};
use crate::telegram::format::Rendered;

/// What a request's answer means for the next step.
pub(super) enum Sent<T> {
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

pub(super) fn classify<T>(result: Result<T, RequestError>) -> Sent<T> {
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
        Err(RequestError::Network(err)) => Sent::RetryIfUnsent(Duration::ZERO, with_sources(&*err)),
        Err(other) => Sent::Fail(OutboxError::Unreachable(other.to_string())),
    }
}

/// An error and what caused it, as one line ("error sending request:
/// connection closed before message completed").
fn with_sources(err: &(dyn std::error::Error + 'static)) -> String {
    let mut line = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
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
pub(super) async fn retry_allowed(
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
    shared.events.metrics().retried();
    true
}

pub(super) async fn send_piece(
    shared: &Shared,
    chat: ChatId,
    place: Place,
    bucket: &mut Bucket,
    piece: &Rendered,
) -> Result<MessageId, OutboxError> {
    let mut formatted = !piece.entities.is_empty();
    let mut attempt = 0;
    loop {
        let wait = bucket.reserve().max(reserve_global(shared));
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let mut request = shared.bot.send_message(chat, piece.text.as_str());
        if let Some(topic) = place.topic {
            request = request.message_thread_id(topic);
        }
        if let Some(message) = place.reply_to {
            request = request
                .reply_parameters(ReplyParameters::new(message).allow_sending_without_reply());
        }
        if formatted {
            // Entities, never a parse mode: nothing in the text can fail to
            // parse. Should Telegram refuse them all the same, the piece goes
            // again as plain text below, once.
            request = request.entities(piece.entities.clone());
        }
        // Through `call`: no 10 s pause after a 5xx before the retry rules.
        let answer = crate::telegram::call::call(&shared.bot, request.payload_ref()).await;
        shared.events.metrics().telegram("sendMessage", &answer);
        match classify(answer) {
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
                // The message may have been delivered: sending it again could
                // duplicate it. Whoever queued it reports it (it knows the turn).
                return Err(unknown(shared, "sendMessage", why));
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

/// A request of `method` that may or may not have reached Telegram: counted
/// (`turnstile_telegram_unknown_outcome_total`), never sent again.
fn unknown(shared: &Shared, method: &'static str, cause: String) -> OutboxError {
    shared.events.metrics().unknown_outcome(method);
    OutboxError::Unknown { method, cause }
}

pub(super) fn reserve_global(shared: &Shared) -> Duration {
    match shared.global.lock() {
        Ok(mut bucket) => bucket.reserve(),
        Err(poisoned) => poisoned.into_inner().reserve(),
    }
}

/// How long until the global limit has a token free; takes none.
fn global_wait(shared: &Shared) -> Duration {
    match shared.global.lock() {
        Ok(mut bucket) => bucket.wait(),
        Err(poisoned) => poisoned.into_inner().wait(),
    }
}

/// How a request other than text may be repeated.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rule {
    /// The Bot API method, for the logs.
    pub(super) method: &'static str,
    /// Sending it twice does no harm (an edit), so a request whose outcome
    /// is unknown may be sent again; otherwise (a message) it may not.
    pub(super) idempotent: bool,
    /// Useless after this: no wait, request or retry reaches past it.
    pub(super) until: Option<Instant>,
}

/// Sends `request` under the chat's and the global rate limits, with the
/// retry rules of text: a 429 waits its `retry_after`, a 5xx or failed
/// connection is retried with backoff, an unknown outcome is retried only
/// when `rule.idempotent`, a refusal is final.
pub(super) async fn deliver<T, F, Fut>(
    shared: &Shared,
    chat: ChatId,
    bucket: &mut Bucket,
    rule: Rule,
    request: F,
) -> Result<T, OutboxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RequestError>>,
{
    attempts(shared, chat, Some(bucket), rule, request).await
}

/// [`deliver`] under no rate limit (a callback answer, which is no message).
pub(super) async fn deliver_unpaced<T, F, Fut>(
    shared: &Shared,
    chat: ChatId,
    rule: Rule,
    request: F,
) -> Result<T, OutboxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RequestError>>,
{
    attempts(shared, chat, None, rule, request).await
}

/// The attempts of [`deliver`]: under the chat's `bucket` and the global
/// limit when given, under none otherwise. A request that would only go
/// after its `rule.until` is dropped before it takes a token.
async fn attempts<T, F, Fut>(
    shared: &Shared,
    chat: ChatId,
    mut bucket: Option<&mut Bucket>,
    rule: Rule,
    mut request: F,
) -> Result<T, OutboxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RequestError>>,
{
    let late = || OutboxError::Unreachable(format!("{} is too late to be useful", rule.method));
    let mut attempt = 0;
    loop {
        // Looked at first, taken only when the request will go: a request
        // dropped as too late leaves the chat's pacing as it was.
        let wait = bucket
            .as_deref_mut()
            .map_or(Duration::ZERO, |b| b.wait().max(global_wait(shared)));
        if rule
            .until
            .is_some_and(|until| Instant::now() + wait >= until)
        {
            return Err(late());
        }
        let wait = bucket
            .as_deref_mut()
            .map_or(Duration::ZERO, |b| b.reserve().max(reserve_global(shared)));
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let result = match rule.until {
            Some(until) => {
                let until = tokio::time::Instant::from_std(until);
                match tokio::time::timeout_at(until, request()).await {
                    Ok(result) => result,
                    Err(_) => return Err(late()),
                }
            }
            None => request().await,
        };
        shared.events.metrics().telegram(rule.method, &result);
        let (wait, why) = match classify(result) {
            Sent::Ok(value) => return Ok(value),
            Sent::Retry(wait, why) => (wait, why),
            Sent::RetryIfUnsent(wait, why) if rule.idempotent => (wait, why),
            Sent::RetryIfUnsent(_, why) => {
                // It may have arrived: sending it again could duplicate it.
                return Err(unknown(shared, rule.method, why));
            }
            Sent::Plain(why) | Sent::Fail(OutboxError::Refused(why)) => {
                return Err(OutboxError::Refused(why));
            }
            Sent::Fail(err) => return Err(err),
        };
        let next = if wait.is_zero() {
            shared.limits.backoff * 2u32.saturating_pow(attempt)
        } else {
            wait
        };
        if rule
            .until
            .is_some_and(|until| Instant::now() + next >= until)
        {
            tracing::warn!(chat_id = chat.0, method = rule.method, cause = %why, "no time left to retry");
            return Err(late());
        }
        if !retry_allowed(shared, &mut attempt, wait, chat, &why).await {
            return Err(OutboxError::Unreachable(why));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    use super::super::RateLimits;
    use super::*;
    use crate::events::EventBus;

    fn shared() -> Shared {
        let limits = RateLimits::default();
        Shared {
            pending: AtomicUsize::new(0),
            drained: tokio::sync::Notify::new(),
            // Never called: nothing here reaches the network.
            bot: teloxide::Bot::new("1:x"),
            global: Mutex::new(Bucket::new(limits.global_burst, limits.global_per_sec)),
            limits,
            events: EventBus::new(),
        }
    }

    #[tokio::test]
    async fn a_request_too_late_to_be_useful_takes_no_slot() {
        let shared = shared();
        // A group whose burst is used up: its next send waits 3 s.
        let mut bucket = Bucket::new(5.0, 20.0 / 60.0);
        for _ in 0..5 {
            bucket.reserve();
        }
        let before = bucket.wait();
        assert!(before > Duration::from_secs(2), "{before:?}");
        let rule = Rule {
            method: "answerCallbackQuery",
            idempotent: true,
            until: Some(Instant::now() + Duration::from_secs(1)),
        };
        let calls = Cell::new(0);
        let sent = deliver(&shared, ChatId(-5), &mut bucket, rule, || {
            calls.set(calls.get() + 1);
            async { Ok::<(), RequestError>(()) }
        })
        .await;
        assert!(matches!(sent, Err(OutboxError::Unreachable(_))), "{sent:?}");
        assert_eq!(calls.get(), 0, "nothing was sent");
        let after = bucket.wait();
        assert!(
            after <= before,
            "the dropped request took the chat's slot: {before:?}, then {after:?}"
        );
        let global = shared.global.lock().expect("global bucket").tokens;
        assert!(global > 29.5, "it took a global slot: {global} left of 30");
    }
}

//! Why a request did not get through: [`OutboxError`], which keeps what
//! Telegram (or the network) answered as its source; and what an answer
//! means for the next step ([`classify`]).

use std::sync::Arc;
use std::time::Duration;

use teloxide::{ApiError, RequestError};

/// Why a request did not get through.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OutboxError {
    /// The user blocked the bot (403); not retried.
    #[error("the bot was blocked in this chat")]
    Blocked,
    /// Telegram refused the request, or it was refused before it left;
    /// not retried.
    #[error("telegram refused the request: {0}")]
    Refused(#[source] TelegramRefusal),
    /// Retries ran out, or no time was left to send it.
    #[error("telegram could not be reached: {0}")]
    Unreachable(#[source] Unreachable),
    /// The request left but no answer came back (the connection failed
    /// after it was written, the answer was not JSON, none came in time):
    /// Telegram may or may not have it. A message's lane settles it (it
    /// sends it again and reads the message ids); see docs/behaviour.md.
    #[error("telegram did not confirm the {method} request: {}", crate::telegram::call::with_sources(.cause))]
    Unknown {
        /// The Bot API method.
        method: &'static str,
        /// What went wrong.
        #[source]
        cause: RequestError,
    },
    /// An answer Telegram did not take within `telegram.max_pending_age`:
    /// dropped, and the chat told.
    #[error("telegram did not take the {method} request within telegram.max_pending_age")]
    Expired {
        /// The Bot API method.
        method: &'static str,
    },
    /// The text was empty.
    #[error("the message text is empty")]
    EmptyText,
    /// The outbox has stopped.
    #[error("the outbox has stopped")]
    Stopped,
    /// `/stop` dropped it before it was sent.
    #[error("dropped by /stop before it was sent")]
    Dropped,
    /// The file to send could not be read from its descriptor (it grew
    /// past the limit or was emptied after the check); not retried.
    #[error("the file could not be read: {0}")]
    Unreadable(#[source] Arc<std::io::Error>),
}

/// Why a request was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TelegramRefusal {
    /// Telegram's answer.
    #[error("{0}")]
    Telegram(#[source] RequestError),
    /// A check of the outbox's own, before it left (a question too long,
    /// bad callback data).
    #[error("{0}")]
    Check(String),
}

/// Why a request could not get through.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unreachable {
    /// The last failure once retries ran out.
    #[error("{}", crate::telegram::call::with_sources(.0))]
    GaveUp(#[source] RequestError),
    /// It would only have gone after it was useful (a callback answer).
    #[error("{method} is too late to be useful")]
    TooLate {
        /// The Bot API method.
        method: &'static str,
    },
}

impl OutboxError {
    /// A refusal of the outbox's own.
    pub(crate) fn check(why: impl Into<String>) -> Self {
        Self::Refused(TelegramRefusal::Check(why.into()))
    }

    /// Telegram's refusal.
    pub(crate) fn refused(answer: RequestError) -> Self {
        Self::Refused(TelegramRefusal::Telegram(answer))
    }
}

/// Errors compare by kind and text (their sources are not comparable).
impl PartialEq for OutboxError {
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.to_string() == other.to_string()
    }
}

/// What a request's answer means for the next step.
pub(super) enum Sent<T> {
    Ok(T),
    /// Not delivered; safe to send again after the wait.
    Retry(Duration, RequestError),
    /// Unknown whether it was delivered; only idempotent requests retry.
    RetryIfUnsent(RequestError),
    /// The formatting was refused; send as plain text.
    Plain(RequestError),
    /// Final.
    Fail(OutboxError),
}

pub(super) fn classify<T>(result: Result<T, RequestError>) -> Sent<T> {
    let err = match result {
        Ok(v) => return Sent::Ok(v),
        Err(err) => err,
    };
    match &err {
        RequestError::RetryAfter(secs) => Sent::Retry(secs.duration(), err),
        RequestError::Api(ApiError::CantParseEntities(_)) => Sent::Plain(err),
        RequestError::Api(
            ApiError::BotBlocked
            | ApiError::UserDeactivated
            | ApiError::BotKicked
            | ApiError::BotKickedFromSupergroup,
        ) => Sent::Fail(OutboxError::Blocked),
        RequestError::Api(ApiError::Unknown(why)) if is_server_error(why) => {
            Sent::Retry(Duration::ZERO, err)
        }
        RequestError::Api(_) => Sent::Fail(OutboxError::refused(err)),
        RequestError::InvalidJson { .. } => Sent::RetryIfUnsent(err),
        RequestError::Network(net) if net.is_connect() => Sent::Retry(Duration::ZERO, err),
        RequestError::Network(_) => Sent::RetryIfUnsent(err),
        // No answer in time: it may have been written.
        RequestError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
            Sent::RetryIfUnsent(err)
        }
        RequestError::MigrateToChatId(_) | RequestError::Io(_) => {
            Sent::Fail(OutboxError::Unreachable(Unreachable::GaveUp(err)))
        }
    }
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

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use teloxide::ApiError;

    use super::*;

    #[test]
    fn an_error_keeps_what_telegram_answered_as_its_source() {
        let answer = RequestError::Api(ApiError::Unknown("Bad Gateway".into()));
        let err = OutboxError::Unreachable(Unreachable::GaveUp(answer));
        let source = err.source().expect("the failure is kept");
        let answer = source
            .source()
            .and_then(|s| s.downcast_ref::<RequestError>())
            .expect("Telegram's answer is kept");
        assert!(matches!(answer, RequestError::Api(ApiError::Unknown(d)) if d == "Bad Gateway"));
        let refused = OutboxError::refused(RequestError::Api(ApiError::MessageToEditNotFound));
        let api = refused
            .source()
            .and_then(|s| s.source())
            .and_then(|s| s.downcast_ref::<RequestError>());
        assert!(matches!(
            api,
            Some(RequestError::Api(ApiError::MessageToEditNotFound))
        ));
        let io = OutboxError::Unreadable(Arc::new(std::io::Error::other("gone")));
        assert!(io.source().is_some_and(|s| s.is::<Arc<std::io::Error>>()));
    }
}

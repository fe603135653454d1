//! A Bot API call without teloxide's pause after a 5xx: teloxide's own
//! request path sleeps 10 s after any server error before it returns, on
//! top of the outbox's and the intake's own backoff. [`call`] sends the
//! same payload through the same `Bot` (client, URL, token) and reads the
//! answer itself, mapping it to the same [`RequestError`]s.

use std::sync::Arc;

use serde::Deserialize;
use serde::Serialize;
use serde::de::DeserializeOwned;
use teloxide::requests::Payload;
use teloxide::types::{ChatId, Seconds};
use teloxide::{ApiError, Bot, RequestError};

/// `parameters` of a refusal.
#[derive(Deserialize, Default)]
struct Parameters {
    retry_after: Option<u32>,
    migrate_to_chat_id: Option<i64>,
}

/// Telegram's envelope.
#[derive(Deserialize)]
struct Envelope<T> {
    ok: bool,
    result: Option<T>,
    description: Option<String>,
    parameters: Option<Parameters>,
}

/// Sends `payload` as JSON to its method and returns its result; a 429 is
/// [`RequestError::RetryAfter`], a refusal [`RequestError::Api`] (a 5xx as
/// `ApiError::Unknown` with Telegram's description), a transport failure
/// [`RequestError::Network`]: no sleep anywhere.
pub async fn call<P>(bot: &Bot, payload: &P) -> Result<P::Output, RequestError>
where
    P: Payload + Serialize,
    P::Output: DeserializeOwned,
{
    let mut url = bot.api_url();
    if let Ok(mut segments) = url.path_segments_mut() {
        segments.pop_if_empty();
        segments.push(&format!("bot{}", bot.token()));
        segments.push(P::NAME);
    }
    let response = bot.client().post(url).json(payload).send().await?;
    let status = response.status();
    let raw = response.text().await?;
    parse(&raw, status.as_u16())
}

pub(crate) fn parse<T: DeserializeOwned>(raw: &str, status: u16) -> Result<T, RequestError> {
    let invalid = |source: serde_json::Error| RequestError::InvalidJson {
        source: Arc::new(source),
        raw: raw.into(),
    };
    // Straight from the text: some of teloxide's types (an `Update`) do not
    // deserialize from a `serde_json::Value`.
    let envelope: Envelope<T> = serde_json::from_str(raw).map_err(invalid)?;
    if envelope.ok {
        return match envelope.result {
            Some(result) => Ok(result),
            None => serde_json::from_str::<T>("null").map_err(invalid),
        };
    }
    let parameters = envelope.parameters.unwrap_or_default();
    if let Some(secs) = parameters.retry_after {
        return Err(RequestError::RetryAfter(Seconds::from_seconds(secs)));
    }
    if let Some(chat) = parameters.migrate_to_chat_id {
        return Err(RequestError::MigrateToChatId(ChatId(chat)));
    }
    let description = envelope
        .description
        .unwrap_or_else(|| format!("HTTP {status}"));
    let api = serde_json::from_value::<ApiError>(serde_json::Value::String(description.clone()))
        .unwrap_or(ApiError::Unknown(description));
    Err(RequestError::Api(api))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_teloxide_errors() {
        let ok: bool = parse(r#"{"ok":true,"result":true}"#, 200).unwrap();
        assert!(ok);
        let limited = parse::<bool>(
            r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 3","parameters":{"retry_after":3}}"#,
            429,
        );
        assert!(matches!(limited, Err(RequestError::RetryAfter(s)) if s.seconds() == 3));
        let bad = parse::<bool>(
            r#"{"ok":false,"error_code":502,"description":"Bad Gateway"}"#,
            502,
        );
        assert!(matches!(bad, Err(RequestError::Api(ApiError::Unknown(d))) if d == "Bad Gateway"));
        let blocked = parse::<bool>(
            r#"{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked by the user"}"#,
            403,
        );
        assert!(matches!(
            blocked,
            Err(RequestError::Api(ApiError::BotBlocked))
        ));
        assert!(matches!(
            parse::<bool>("<html>502</html>", 502),
            Err(RequestError::InvalidJson { .. })
        ));
    }
}

//! A Bot API call without teloxide's pause after a 5xx: teloxide's own
//! request path sleeps 10 s after any server error before it returns, on
//! top of the outbox's and the intake's own backoff. [`call`] sends the
//! same payload through the same `Bot` (client, URL, token) and reads the
//! answer itself, mapping it to the same [`RequestError`]s. Every method
//! the bot sends goes this way: JSON payloads through [`call`], uploads
//! (`sendDocument`, `sendPhoto`) as `multipart/form-data` through
//! [`call_with_file`].

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
    let request = bot.client().post(method_url(bot, P::NAME)).json(payload);
    answer(request).await
}

/// A file sent with a request: the part named `field` (`document`,
/// `photo`), carrying `bytes` as the file `name`.
#[derive(Debug, Clone)]
pub struct FilePart {
    /// The payload's field the file is.
    pub field: &'static str,
    /// The file's name in the chat.
    pub name: String,
    /// Its content.
    pub bytes: bytes::Bytes,
}

/// [`call`] for a request that carries a file: `payload` goes as
/// `multipart/form-data`, one text part per field (strings as they are,
/// numbers and objects as JSON, absent fields left out, as teloxide encodes
/// them), and `file` as a file part in place of the payload's own
/// `file.field`. Every attempt sends the same bytes (no copy).
pub async fn call_with_file<P>(
    bot: &Bot,
    payload: &P,
    file: &FilePart,
) -> Result<P::Output, RequestError>
where
    P: Payload + Serialize,
    P::Output: DeserializeOwned,
{
    // A payload that does not encode never left: no answer to wait for.
    let form = multipart(payload, file)
        .map_err(|err| RequestError::Io(Arc::new(std::io::Error::other(err))))?;
    let request = bot.client().post(method_url(bot, P::NAME)).multipart(form);
    answer(request).await
}

/// The form of `payload` with `file` in place of its `file.field`.
fn multipart<P: Serialize>(
    payload: &P,
    file: &FilePart,
) -> Result<reqwest::multipart::Form, serde_json::Error> {
    let mut form = reqwest::multipart::Form::new();
    for (name, text) in text_fields(payload)? {
        if name != file.field {
            form = form.text(name, text);
        }
    }
    let body = reqwest::Body::from(file.bytes.clone());
    let part = reqwest::multipart::Part::stream_with_length(body, file.bytes.len() as u64)
        .file_name(file.name.clone());
    Ok(form.part(file.field, part))
}

/// The fields of `payload` as the text of multipart parts.
fn text_fields<P: Serialize>(payload: &P) -> Result<Vec<(String, String)>, serde_json::Error> {
    let serde_json::Value::Object(fields) = serde_json::to_value(payload)? else {
        return Err(serde::ser::Error::custom("a payload is an object"));
    };
    Ok(fields
        .into_iter()
        .filter(|(_, value)| !value.is_null())
        .map(|(name, value)| match value {
            serde_json::Value::String(text) => (name, text),
            other => (name, other.to_string()),
        })
        .collect())
}

/// `{api_url}/bot{token}/{method}`.
fn method_url(bot: &Bot, method: &str) -> reqwest::Url {
    let mut url = bot.api_url();
    if let Ok(mut segments) = url.path_segments_mut() {
        segments.pop_if_empty();
        segments.push(&format!("bot{}", bot.token()));
        segments.push(method);
    }
    url
}

/// Sends `request` and reads its answer.
async fn answer<T: DeserializeOwned>(request: reqwest::RequestBuilder) -> Result<T, RequestError> {
    let response = request.send().await?;
    let status = response.status();
    let raw = response.text().await?;
    parse(&raw, status.as_u16())
}

/// An error and what caused it, as one line ("error sending request:
/// connection closed before message completed").
pub(crate) fn with_sources(err: &(dyn std::error::Error + 'static)) -> String {
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

    #[test]
    fn a_payload_becomes_text_parts_and_its_file_a_file_part() {
        use teloxide::payloads::SendDocument;
        use teloxide::types::{InputFile, ThreadId};
        let bytes = bytes::Bytes::from_static(b"hello");
        let mut payload = SendDocument::new(ChatId(-5), InputFile::memory(bytes.clone()));
        payload.caption = Some("a file".into());
        payload.message_thread_id = Some(ThreadId(teloxide::types::MessageId(7)));
        let mut fields = text_fields(&payload).expect("an object");
        fields.sort();
        let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["caption", "chat_id", "document", "message_thread_id"],
            "absent fields are left out"
        );
        assert_eq!(fields[0].1, "a file", "a string goes as it is");
        assert_eq!(fields[1].1, "-5", "a number as its digits");
        assert_eq!(fields[3].1, "7");
        let file = FilePart {
            field: "document",
            name: "notes.txt".into(),
            bytes,
        };
        let form = multipart(&payload, &file).expect("a form");
        assert!(form.boundary().len() > 10);
    }
}

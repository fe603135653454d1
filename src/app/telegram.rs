//! What the start asks of Telegram: a client for the configured Bot API,
//! who the bot is (`getMe`, retried while the network fails), and that no
//! webhook takes its updates. Every call goes through [`call`]: no 10 s
//! pause after a 5xx on top of the start's own backoff.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use teloxide::Bot;
use teloxide::requests::Payload;
use teloxide::types::UserId;

use super::StartError;
use crate::config::Config;
use crate::ids::Topics;
use crate::telegram::addressing::BotIdentity;
use crate::telegram::call::call;

/// A webhook on the token makes every `getUpdates` fail with 409: with
/// `delete`, it is removed (and said so); otherwise it is an error. A
/// failure to ask is logged and start-up goes on (the poll would say more).
pub(super) async fn check_webhook(bot: &Bot, delete: bool) -> Result<(), StartError> {
    use teloxide::payloads::{DeleteWebhook, GetWebhookInfo};
    let info = match call(bot, &GetWebhookInfo::new()).await {
        Ok(info) => info,
        Err(err) => {
            tracing::warn!(cause = %err, "getWebhookInfo failed; going on");
            return Ok(());
        }
    };
    let Some(url) = info.url else {
        return Ok(());
    };
    let url = url.to_string();
    if !delete {
        return Err(StartError::WebhookSet { url });
    }
    match call(bot, &DeleteWebhook::new()).await {
        Ok(_) => {
            tracing::warn!(url = %url, "a webhook was set on the token; removed (telegram.delete_webhook)");
            Ok(())
        }
        Err(err) => {
            tracing::error!(url = %url, cause = %err, "the webhook could not be removed");
            Err(StartError::WebhookSet { url })
        }
    }
}

/// `getMe` as Bot API 9.3 answers it: teloxide 0.17's `Me` has no
/// `has_topics_enabled`.
#[derive(Debug, Clone, Serialize)]
struct GetMe {}

impl Payload for GetMe {
    type Output = Me;
    const NAME: &'static str = "getMe";
}

/// What the start reads of the bot's `User`.
#[derive(Debug, Clone, Deserialize)]
struct Me {
    id: UserId,
    username: Option<String>,
    /// Its topics mode in private chats (BotFather); absent: off.
    #[serde(default)]
    has_topics_enabled: bool,
}

/// Asks Telegram who the bot is (`getMe`): a 401 or 404 is
/// [`StartError::TokenRejected`] at once; any other failure is logged with
/// its cause and retried with backoff (250 ms doubling to 30 s).
pub(super) async fn identify(bot: &Bot) -> Result<BotIdentity, StartError> {
    let mut backoff = Duration::from_millis(250);
    loop {
        match call(bot, &GetMe {}).await {
            Ok(me) => {
                let username = me.username.unwrap_or_default();
                tracing::info!(
                    bot_id = me.id.0,
                    username = %username,
                    private_topics = me.has_topics_enabled,
                    "telegram knows the bot"
                );
                return Ok(BotIdentity {
                    id: me.id,
                    username,
                    topics: Topics {
                        private: me.has_topics_enabled,
                    },
                });
            }
            Err(teloxide::RequestError::Api(teloxide::ApiError::InvalidToken)) => {
                return Err(StartError::TokenRejected);
            }
            Err(err) => {
                let (kind, cause) = request_failure(&err);
                let host = api_host(bot.api_url());
                let retry_at =
                    chrono::Utc::now() + chrono::Duration::from_std(backoff).unwrap_or_default();
                let retry_at = retry_at.format("%H:%M:%SZ");
                let retry_in = humantime::format_duration(backoff);
                tracing::warn!(
                    kind,
                    "getMe failed: {kind} error reaching {host}: {cause}; retrying in {retry_in} (at {retry_at})"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// `host:port` of the Bot API, for the log (never the path: it holds the
/// token).
fn api_host(url: reqwest::Url) -> String {
    let host = url.host_str().unwrap_or("?");
    match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// What kind of failure a request met, and its root cause: for a network
/// error the class found along its source chain ("DNS", "connect", "TLS",
/// "timeout", …) and the innermost cause (`Connection refused (os error
/// 111)`) instead of reqwest's "error sending request"; otherwise what the
/// Bot API said.
fn request_failure(err: &teloxide::RequestError) -> (&'static str, String) {
    use std::error::Error as _;
    let teloxide::RequestError::Network(network) = err else {
        return ("Bot API", err.to_string());
    };
    let network: &reqwest::Error = network;
    let mut texts = Vec::new();
    let mut io_kinds = Vec::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = network.source();
    while let Some(cause) = source {
        texts.push(cause.to_string());
        // An I/O error's `source()` skips the error it wraps (rustls's,
        // itself often wrapped in another I/O error): go into it.
        source = match cause.downcast_ref::<std::io::Error>() {
            Some(io) => {
                io_kinds.push(io.kind());
                io.get_ref()
                    .map(|inner| inner as &(dyn std::error::Error + 'static))
            }
            None => cause.source(),
        };
    }
    let all = texts.join(": ").to_lowercase();
    let kind = if network.is_timeout() || io_kinds.contains(&std::io::ErrorKind::TimedOut) {
        "timeout"
    } else if all.contains("dns error") || all.contains("failed to lookup address") {
        "DNS"
    } else if ["certificate", "tls", "handshake", "ssl"]
        .iter()
        .any(|w| all.contains(w))
        // rustls's errors reach here as invalid data on the connection,
        // which a TCP connect alone never is.
        || (network.is_connect() && io_kinds.contains(&std::io::ErrorKind::InvalidData))
    {
        "TLS"
    } else if network.is_connect() {
        "connect"
    } else if network.is_body() || network.is_decode() {
        "response"
    } else {
        "network"
    };
    let cause = texts.last().cloned().unwrap_or_else(|| network.to_string());
    (kind, cause)
}

/// A Telegram client for `config`, with an HTTP timeout longer than the long poll.
pub fn telegram_client(config: &Config) -> Result<Bot, StartError> {
    let url =
        reqwest::Url::parse(&config.telegram.api_url).map_err(|source| StartError::BadApiUrl {
            url: config.telegram.api_url.clone(),
            source,
        })?;
    let client = teloxide::net::default_reqwest_settings()
        .timeout(
            config
                .telegram
                .poll_timeout
                .saturating_add(Duration::from_secs(15)),
        )
        // Never write a request to a connection the server may be closing
        // for idleness: a message on it would be lost, not known to be.
        .pool_idle_timeout(config.telegram.pool_idle_timeout)
        .build()
        .map_err(StartError::Client)?;
    Ok(Bot::with_client(config.telegram.token.0.clone(), client).set_api_url(url))
}

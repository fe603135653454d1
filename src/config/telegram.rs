//! `[telegram]`: where the Bot API is, how it is polled, how long an
//! answer may wait for it; and the token, which never prints.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `[telegram]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TelegramConfig {
    /// Base URL of the Bot API; a test points it at a local fake.
    pub api_url: String,
    /// Long-poll timeout of `getUpdates`.
    #[serde(with = "humantime_serde")]
    pub poll_timeout: Duration,
    /// Remove a webhook found on the token at start (otherwise its presence
    /// is an error: Telegram refuses `getUpdates` while one is set).
    pub delete_webhook: bool,
    /// A kept-alive connection to the Bot API unused this long is not used
    /// again: below the server's own keep-alive, so no request is ever
    /// written to a connection the server is closing (such a message would
    /// be lost: it cannot be sent again without risking a duplicate).
    #[serde(with = "humantime_serde")]
    pub pool_idle_timeout: Duration,
    /// A message, file or question Telegram has not taken after this long
    /// (it was unreachable, slow, or answering 5xx all along) is dropped,
    /// logged at ERROR and counted, and the chat told once Telegram is
    /// back. Until then it waits, across restarts: no count of retries
    /// ends it. Between 1 minute and 365 days.
    #[serde(with = "humantime_serde")]
    pub max_pending_age: Duration,
    /// The bot token. Never read from the file or logged: it comes from
    /// `TELEGRAM_BOT_TOKEN` only.
    #[serde(skip)]
    pub token: Secret,
}

/// A value that never prints.
#[derive(Clone, Default, PartialEq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            api_url: "https://api.telegram.org".into(),
            poll_timeout: Duration::from_secs(30),
            delete_webhook: false,
            pool_idle_timeout: Duration::from_secs(4),
            max_pending_age: Duration::from_secs(24 * 60 * 60),
            token: Secret::default(),
        }
    }
}

//! Why the bot could not start, and the exit code each reason gets.

/// Errors that stop the bot from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `telegram.api_url` is not a URL.
    #[error("telegram.api_url {url:?} is not a valid URL: {source}")]
    BadApiUrl {
        /// The value.
        url: String,
        /// Why it does not parse.
        source: url_parse::Error,
    },
    /// The HTTP client could not be built.
    #[error("could not build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The agent backend could not be set up.
    #[error("agent backend: {0}")]
    Backend(#[source] crate::agent::ScenarioError),
    /// `agent.sandbox` asks for bubblewrap and it cannot run: a
    /// configuration error, exit 2.
    #[error("{0}")]
    Sandbox(String),
    /// `ops.listen` could not be bound (taken, or not this host's): a
    /// configuration error, exit 2.
    #[error("ops.listen {listen}: cannot listen there: {source}")]
    Ops {
        /// The value.
        listen: String,
        /// Why.
        source: std::io::Error,
    },
    /// The state store could not be opened.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// `getMe` answered 401 or 404: the token is wrong or revoked.
    #[error("Telegram rejected the bot token (check TELEGRAM_BOT_TOKEN)")]
    TokenRejected,
    /// A webhook is set on the token and `telegram.delete_webhook` is off.
    #[error(
        "a webhook is set on this bot token ({url}): Telegram refuses getUpdates while one is set; \
         remove it, or set telegram.delete_webhook = true to have turnstile remove it"
    )]
    WebhookSet {
        /// Where it points.
        url: String,
    },
}

impl StartError {
    /// The process exit code for this error: 3 for a rejected token (a
    /// service manager should not restart on it), 2 for a sandbox that
    /// cannot run or an `ops.listen` that cannot be bound (as for bad
    /// configuration), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::TokenRejected | Self::WebhookSet { .. } => 3,
            Self::Sandbox(_) | Self::Ops { .. } => 2,
            _ => 1,
        }
    }
}

mod url_parse {
    pub type Error = <reqwest::Url as std::str::FromStr>::Err;
}

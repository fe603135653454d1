//! [`ConfigError`]: why a configuration could not be loaded.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;

use toml::Value;

use super::{ENV_PREFIX, TOKEN_CREDENTIAL, TOKEN_ENV};

/// Why a configuration could not be loaded. Every message names the key (or
/// the file, or the variable) and the offending value, and never contains the
/// bot token.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file `{}`: {source}", .path.display())]
    Read {
        /// The file that was asked for.
        path: PathBuf,
        /// Why it could not be read.
        source: io::Error,
    },
    /// The config file is not valid TOML.
    #[error("cannot parse config file `{}`: {message}", .path.display())]
    Parse {
        /// The file that was read.
        path: PathBuf,
        /// The TOML parser's message, with line and column. Text rather than
        /// the parser's error, which may quote the token: this is scrubbed.
        message: String,
    },
    /// The config file has a section or key that turnstile does not know.
    #[error(
        "unknown config key `{key}`{}{}",
        did_you_mean(.suggestion.as_deref()),
        token_hint(.key == "telegram.token")
    )]
    UnknownKey {
        /// The dotted key path, e.g. `turn.post_result_grce`.
        key: String,
        /// The known key nearest to it, when one is near enough to be what
        /// was meant, e.g. `turn.post_result_grace`.
        suggestion: Option<String>,
    },
    /// A `TURNSTILE_*` environment variable names no config key.
    #[error(
        "unknown environment variable `{var}`: it names no config key \
         (expected TURNSTILE_<SECTION>_<KEY>){}{}",
        did_you_mean(.suggestion.as_deref()),
        token_hint(.var == "TURNSTILE_TELEGRAM_TOKEN")
    )]
    UnknownEnv {
        /// The variable's name (its value is not shown).
        var: String,
        /// The variable nearest to it that names a key, when one is near
        /// enough to be what was meant.
        suggestion: Option<String>,
    },
    /// A key has a value of the wrong type, or one that fails validation.
    #[error("bad value for `{key}`: {value}: {reason}")]
    BadValue {
        /// The dotted key path, e.g. `turn.post_result_grace`.
        key: String,
        /// The offending value as TOML, e.g. `"5 parsecs"` (strings quoted).
        value: String,
        /// What is wrong with it, and where it came from if not the file.
        reason: String,
    },
    /// `TELEGRAM_BOT_TOKEN` is unset, empty or only whitespace, and no
    /// systemd credential holds the token.
    #[error(
        "{TOKEN_ENV} is not set (or is empty): the bot token is read only from \
         this environment variable or, under systemd, from the credential \
         `{TOKEN_CREDENTIAL}` (LoadCredential=), never from the config file"
    )]
    MissingToken,
    /// `$CREDENTIALS_DIRECTORY/telegram-bot-token` exists but could not be
    /// read.
    #[error("cannot read the token's credential `{}`: {source}", .path.display())]
    Credential {
        /// The credential file.
        path: PathBuf,
        /// Why it could not be read.
        source: io::Error,
    },
}

/// `; did you mean `NAME`?` when a name near the unknown one is known.
pub(super) fn did_you_mean(suggestion: Option<&str>) -> String {
    suggestion.map_or_else(String::new, |name| format!("; did you mean `{name}`?"))
}

/// The extra advice for someone who tried to put the token in the config.
pub(super) fn token_hint(is_token: bool) -> &'static str {
    if is_token {
        "; the bot token is read only from the environment variable TELEGRAM_BOT_TOKEN"
    } else {
        ""
    }
}

impl ConfigError {
    /// Says which environment variable set a bad value, if one did.
    pub(super) fn set_by(self, origins: &BTreeMap<String, String>) -> Self {
        match self {
            Self::BadValue { key, value, reason } => {
                let reason = match origins.get(&key) {
                    Some(var) => format!("{reason} (set by {var})"),
                    None => reason,
                };
                Self::BadValue { key, value, reason }
            }
            // An entry a variable added to a table (`TURNSTILE_AGENT_NETWORK_MDOE`)
            // that the table does not have: the variable is at fault.
            Self::UnknownKey { key, suggestion } => match origins.get(&key) {
                Some(var) => Self::UnknownEnv {
                    var: var.clone(),
                    suggestion: suggestion.map(|near| env_name(&near)),
                },
                None => Self::UnknownKey { key, suggestion },
            },
            other => other,
        }
    }
}

/// The variable that sets the dotted `key`: `TURNSTILE_AGENT_NETWORK_MODE`.
fn env_name(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.replace('.', "_").to_uppercase())
}

/// A [`ConfigError::BadValue`] for `key`.
pub(super) fn bad_value(key: &str, value: &Value, reason: impl Into<String>) -> ConfigError {
    ConfigError::BadValue {
        key: key.to_owned(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

//! Configuration: one TOML file, then `TURNSTILE_<SECTION>_<KEY>` environment
//! overrides, then the bot token from `TELEGRAM_BOT_TOKEN`.
//!
//! [`Config::load`] works in four steps, and stops at the first error:
//!
//! 1. The file is parsed into a TOML table and every section and key in it is
//!    checked against the keys of [`Config::default`] serialized to TOML, so the
//!    set of known keys can never drift from the structs below. A key whose
//!    default is a table (`agent.env`) is free-form: any entry is allowed.
//! 2. Every `TURNSTILE_*` environment variable is matched against the same key
//!    set and its text is coerced by the type of the key's default (string,
//!    integer, or comma-separated list). `TURNSTILE_AGENT_ENV_<NAME>` sets the
//!    entry `agent.env.<NAME>`. A variable that names no key is an error.
//! 3. The merged table is deserialized; a bad value is located key by key so
//!    the error names `section.key` and the offending value.
//! 4. The result is validated ([`Config::validate`]) and the token is read.
//!
//! No error message ever contains the token: every message is scrubbed of it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::{Table, Value};

/// The environment variable the bot token is read from (and the only place
/// it is read from).
pub const TOKEN_ENV: &str = "TELEGRAM_BOT_TOKEN";

/// The prefix of the environment variables that override config keys:
/// `TURNSTILE_<SECTION>_<KEY>`.
pub const ENV_PREFIX: &str = "TURNSTILE_";

/// `TURNSTILE_*` variables that are not config keys: `TURNSTILE_LOG` is the
/// log filter read by the binary; the other marks a restarted process.
pub const NOT_CONFIG_VARS: &[&str] = &["TURNSTILE_LOG", RESTARTED_FROM_ENV];

/// Set by `/restart` for the new process: the chat to tell it is back.
pub const RESTARTED_FROM_ENV: &str = "TURNSTILE_RESTARTED_FROM_CHAT";

/// What a secret is shown as.
const REDACTED: &str = "<redacted>";

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
        /// The TOML parser's message, with line and column.
        message: String,
    },
    /// The config file has a section or key that turnstile does not know.
    #[error("unknown config key `{key}`{}", token_hint(.key == "telegram.token"))]
    UnknownKey {
        /// The dotted key path, e.g. `turn.post_result_grce`.
        key: String,
    },
    /// A `TURNSTILE_*` environment variable names no config key.
    #[error(
        "unknown environment variable `{var}`: it names no config key \
         (expected TURNSTILE_<SECTION>_<KEY>){}",
        token_hint(.var == "TURNSTILE_TELEGRAM_TOKEN")
    )]
    UnknownEnv {
        /// The variable's name (its value is not shown).
        var: String,
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
    /// `TELEGRAM_BOT_TOKEN` is unset, empty or only whitespace.
    #[error(
        "{TOKEN_ENV} is not set (or is empty): the bot token is read only from \
         this environment variable, never from the config file"
    )]
    MissingToken,
}

/// The extra advice for someone who tried to put the token in the config.
fn token_hint(is_token: bool) -> &'static str {
    if is_token {
        "; the bot token is read only from the environment variable TELEGRAM_BOT_TOKEN"
    } else {
        ""
    }
}

impl ConfigError {
    /// Replaces every occurrence of `token` in the error's text.
    fn redact(self, token: &str) -> Self {
        if token.is_empty() {
            return self;
        }
        let scrub = |text: String| text.replace(token, REDACTED);
        match self {
            // A path and an I/O error hold nothing read from the file or from
            // the environment's values.
            Self::Read { .. } | Self::MissingToken => self,
            Self::Parse { path, message } => Self::Parse {
                path,
                message: scrub(message),
            },
            Self::UnknownKey { key } => Self::UnknownKey { key: scrub(key) },
            Self::UnknownEnv { var } => Self::UnknownEnv { var: scrub(var) },
            Self::BadValue { key, value, reason } => Self::BadValue {
                key: scrub(key),
                value: scrub(value),
                reason: scrub(reason),
            },
        }
    }

    /// Says which environment variable set a bad value, if one did.
    fn set_by(self, origins: &BTreeMap<String, String>) -> Self {
        match self {
            Self::BadValue { key, value, reason } => {
                let reason = match origins.get(&key) {
                    Some(var) => format!("{reason} (set by {var})"),
                    None => reason,
                };
                Self::BadValue { key, value, reason }
            }
            other => other,
        }
    }
}

/// A [`ConfigError::BadValue`] for `key`.
fn bad_value(key: &str, value: &Value, reason: impl Into<String>) -> ConfigError {
    ConfigError::BadValue {
        key: key.to_owned(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// The whole effective configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How to reach Telegram.
    pub telegram: TelegramConfig,
    /// Who may talk to the bot.
    pub access: AccessConfig,
    /// Which agent answers, and how it is started.
    pub agent: AgentConfig,
    /// The turn contract's clocks and terminators.
    pub turn: TurnConfig,
    /// Queueing and concurrency across chats.
    pub dispatcher: DispatcherConfig,
    /// Where durable state lives.
    pub state: StateConfig,
}

/// `[telegram]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TelegramConfig {
    /// Base URL of the Bot API; a test points it at a local fake.
    pub api_url: String,
    /// Long-poll timeout of `getUpdates`.
    #[serde(with = "humantime_serde")]
    pub poll_timeout: Duration,
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

/// `[access]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AccessConfig {
    /// Telegram user ids whose messages reach an agent.
    pub allowed_users: Vec<i64>,
    /// Telegram user ids that may also use `/status` and `/restart`
    /// (admins are always allowed users).
    pub admins: Vec<i64>,
    /// At most one refusal per user per this long.
    #[serde(with = "humantime_serde")]
    pub refusal_cooldown: Duration,
}

/// `[agent]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// `"scripted"` or `"claude"`.
    pub backend: String,
    /// The agent executable (for `claude`).
    pub command: String,
    /// Extra arguments for the agent executable.
    pub args: Vec<String>,
    /// Extra environment for the agent process.
    pub env: BTreeMap<String, String>,
    /// Working directory of the agent process; empty means turnstile's own.
    pub workdir: PathBuf,
    /// Scenario file for the `scripted` backend; empty means the built-in echo.
    pub script: PathBuf,
    /// The system prompt given to the agent (`claude`).
    pub system_prompt: String,
    /// Tools besides the chat tools the agent may use without asking
    /// (`claude`; any other tool is denied with a message the model reads).
    pub allowed_tools: Vec<String>,
    /// The model (`claude`); empty means the CLI's default.
    pub model: String,
    /// Model turns per user turn (`claude`); 0 means no limit.
    pub max_turns: u32,
    /// How long a chat's agent process stays warm between turns; `0s`
    /// closes it after every turn.
    #[serde(with = "humantime_serde")]
    pub keep_warm: Duration,
    /// At most this many agent processes are kept warm across all chats;
    /// past it, a process is closed after its turn.
    pub max_warm: usize,
    /// Whether turns end through the PostToolBatch hook (`claude`); off only
    /// to compare API calls with and without it.
    pub batch_hook: bool,
}

/// The longest duration any key accepts (longer ones are surely typos, and
/// would overflow clock arithmetic).
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The largest count any key accepts.
pub const MAX_COUNT: usize = 1_000_000;

/// The default `agent.system_prompt`.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant in a Telegram chat. Reply to the user with the `send` tool (Markdown allowed); when your reply is complete, call `end_turn` (it can carry your last message). Text you write outside these tools is not shown to the user.";

/// `[turn]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TurnConfig {
    /// After `result`, how long the agent has to settle before it is force-closed.
    #[serde(with = "humantime_serde")]
    pub post_result_grace: Duration,
    /// Before `result`, the longest silence from the agent.
    #[serde(with = "humantime_serde")]
    pub no_progress_timeout: Duration,
    /// The wall-clock budget of one turn.
    #[serde(with = "humantime_serde")]
    pub max_duration: Duration,
    /// The dispatcher's backstop: a chat holding a turn longer is force-released.
    #[serde(with = "humantime_serde")]
    pub hard_deadline: Duration,
    /// How often the typing indicator is renewed (Telegram shows it for 5 s).
    #[serde(with = "humantime_serde")]
    pub typing_interval: Duration,
    /// Bare tool names that end a turn.
    pub terminator_tools: Vec<String>,
}

/// `[dispatcher]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DispatcherConfig {
    /// Turns running at once across all chats.
    pub max_concurrent_turns: usize,
    /// Pending messages per chat before new ones are refused.
    pub queue_limit: usize,
    /// Messages of one chat arriving within this window become one turn.
    #[serde(with = "humantime_serde")]
    pub merge_window: Duration,
    /// How long a stop waits for in-flight turns.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
    /// A chat supervisor with nothing to do for this long is evicted.
    #[serde(with = "humantime_serde")]
    pub idle_eviction: Duration,
    /// What happens after a restart or crash to a message whose turn was
    /// interrupted before it replied: `report` (tell the chat) or `retry`
    /// (run it again). One that had replied is always reported.
    pub on_interrupted: String,
}

/// `[state]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StateConfig {
    /// The SQLite file.
    pub path: PathBuf,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            api_url: "https://api.telegram.org".into(),
            poll_timeout: Duration::from_secs(30),
            token: Secret::default(),
        }
    }
}

impl Default for AccessConfig {
    fn default() -> Self {
        Self {
            allowed_users: Vec::new(),
            admins: Vec::new(),
            refusal_cooldown: Duration::from_secs(60),
        }
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            backend: "scripted".into(),
            command: "claude".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            workdir: PathBuf::new(),
            script: PathBuf::new(),
            system_prompt: DEFAULT_SYSTEM_PROMPT.into(),
            allowed_tools: Vec::new(),
            model: String::new(),
            max_turns: 0,
            keep_warm: Duration::from_secs(600),
            max_warm: 32,
            batch_hook: true,
        }
    }
}

impl Default for TurnConfig {
    fn default() -> Self {
        Self {
            post_result_grace: Duration::from_secs(5),
            no_progress_timeout: Duration::from_secs(300),
            max_duration: Duration::from_secs(1800),
            hard_deadline: Duration::from_secs(3600),
            typing_interval: Duration::from_secs(4),
            terminator_tools: vec!["end_turn".into()],
        }
    }
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        Self {
            max_concurrent_turns: 8,
            queue_limit: 20,
            merge_window: Duration::from_millis(1500),
            drain_timeout: Duration::from_secs(30),
            idle_eviction: Duration::from_secs(600),
            on_interrupted: "report".into(),
        }
    }
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            path: PathBuf::from("turnstile.db"),
        }
    }
}

impl Config {
    /// Loads the effective configuration: the defaults, then the TOML file at
    /// `path` (`None` means all defaults), then the `TURNSTILE_*` overrides
    /// found in `env`, then the token from `env["TELEGRAM_BOT_TOKEN"]`
    /// (surrounding whitespace trimmed). The result is validated.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the file, key or variable at fault: an
    /// unreadable or malformed file, an unknown key or `TURNSTILE_*` variable,
    /// a value of the wrong type or out of range, or a missing token.
    pub fn load(path: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let token = env.get(TOKEN_ENV).map_or("", |token| token.trim());
        let file = match path {
            Some(path) => read_file(path),
            None => Ok(Table::new()),
        };
        file.and_then(|file| Self::from_table(file, env, token))
            .map_err(|err| err.redact(token))
    }

    /// [`Config::load`] with this process's environment. A variable whose
    /// name or value is not UTF-8 is read lossily.
    ///
    /// # Errors
    ///
    /// As [`Config::load`].
    pub fn from_env_and_file(path: Option<&Path>) -> Result<Self, ConfigError> {
        let env: BTreeMap<String, String> = std::env::vars_os()
            .map(|(name, value)| {
                (
                    name.to_string_lossy().into_owned(),
                    value.to_string_lossy().into_owned(),
                )
            })
            .collect();
        Self::load(path, &env)
    }

    /// Checks the values that parse but cannot work: zero clocks, no
    /// terminator tool, no turn slot or queue room, an unknown backend, an API
    /// URL that is not http(s). The token is not checked here.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BadValue`] naming the first offending key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let turn = &self.turn;
        let clocks = [
            ("turn.typing_interval", turn.typing_interval),
            ("turn.post_result_grace", turn.post_result_grace),
            ("turn.no_progress_timeout", turn.no_progress_timeout),
            ("turn.max_duration", turn.max_duration),
            ("turn.hard_deadline", turn.hard_deadline),
        ];
        for (key, clock) in clocks {
            if clock.is_zero() {
                let shown = Value::from(humantime::format_duration(clock).to_string());
                return Err(bad_value(key, &shown, "must be greater than zero"));
            }
        }
        if turn.terminator_tools.is_empty() {
            return Err(bad_value(
                "turn.terminator_tools",
                &Value::Array(Vec::new()),
                "must name at least one tool",
            ));
        }
        let dispatcher = &self.dispatcher;
        let counts = [
            (
                "dispatcher.max_concurrent_turns",
                dispatcher.max_concurrent_turns,
            ),
            ("dispatcher.queue_limit", dispatcher.queue_limit),
            ("agent.max_warm", self.agent.max_warm.max(1)),
        ];
        for (key, count) in counts {
            if count == 0 {
                return Err(bad_value(key, &Value::Integer(0), "must be at least 1"));
            }
            if count > MAX_COUNT {
                let shown = Value::Integer(i64::try_from(count).unwrap_or(i64::MAX));
                return Err(bad_value(
                    key,
                    &shown,
                    format!("must be at most {MAX_COUNT}"),
                ));
            }
        }
        let durations = [
            ("telegram.poll_timeout", self.telegram.poll_timeout),
            ("access.refusal_cooldown", self.access.refusal_cooldown),
            ("agent.keep_warm", self.agent.keep_warm),
            ("turn.typing_interval", turn.typing_interval),
            ("turn.post_result_grace", turn.post_result_grace),
            ("turn.no_progress_timeout", turn.no_progress_timeout),
            ("turn.max_duration", turn.max_duration),
            ("turn.hard_deadline", turn.hard_deadline),
            ("dispatcher.merge_window", dispatcher.merge_window),
            ("dispatcher.drain_timeout", dispatcher.drain_timeout),
            ("dispatcher.idle_eviction", dispatcher.idle_eviction),
        ];
        for (key, duration) in durations {
            if duration > MAX_DURATION {
                let shown = Value::from(humantime::format_duration(duration).to_string());
                return Err(bad_value(key, &shown, "must be at most 365 days"));
            }
        }
        let backend = self.agent.backend.as_str();
        if !matches!(backend, "scripted" | "claude") {
            return Err(bad_value(
                "agent.backend",
                &Value::from(backend),
                "expected \"scripted\" or \"claude\"",
            ));
        }
        let on_interrupted = self.dispatcher.on_interrupted.as_str();
        if !matches!(on_interrupted, "report" | "retry") {
            return Err(bad_value(
                "dispatcher.on_interrupted",
                &Value::from(on_interrupted),
                "expected \"report\" or \"retry\"",
            ));
        }
        let api_url = self.telegram.api_url.as_str();
        let host = api_url
            .strip_prefix("https://")
            .or_else(|| api_url.strip_prefix("http://"));
        match host {
            Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => Ok(()),
            _ => Err(bad_value(
                "telegram.api_url",
                &Value::from(api_url),
                "expected an http:// or https:// URL",
            )),
        }
    }

    /// The effective configuration as TOML, durations as humantime strings.
    /// The token, when set, is shown as `token = "<redacted>"` under
    /// `[telegram]`; the text never contains the token itself.
    #[must_use]
    pub fn to_redacted_toml(&self) -> String {
        let mut table = match Table::try_from(self) {
            Ok(table) => table,
            Err(err) => return format!("# cannot render the config: {err}\n"),
        };
        let token = self.telegram.token.0.as_str();
        if !token.is_empty() {
            // Should the token have been copied into another value too.
            table = scrub_table(table, token);
            if let Some(Value::Table(telegram)) = table.get_mut("telegram") {
                telegram.insert("token".into(), Value::from(REDACTED));
            }
        }
        toml::to_string(&table).unwrap_or_else(|err| format!("# cannot render the config: {err}\n"))
    }

    /// Steps 1 to 4 of the module docs, on a parsed file.
    fn from_table(
        file: Table,
        env: &BTreeMap<String, String>,
        token: &str,
    ) -> Result<Self, ConfigError> {
        let defaults = default_table();
        let mut sections = check_keys(file, &defaults)?;
        let origins = apply_env(&mut sections, &defaults, env)?;
        let mut config = deserialize(&sections, &defaults).map_err(|err| err.set_by(&origins))?;
        config.validate().map_err(|err| err.set_by(&origins))?;
        if token.is_empty() {
            return Err(ConfigError::MissingToken);
        }
        config.telegram.token = Secret(token.to_owned());
        Ok(config)
    }
}

/// `table` with every occurrence of the (non-empty) `token` in its keys and
/// strings replaced.
fn scrub_table(table: Table, token: &str) -> Table {
    table
        .into_iter()
        .map(|(key, value)| (key.replace(token, REDACTED), scrub_value(value, token)))
        .collect()
}

/// `value` with every occurrence of the (non-empty) `token` replaced.
fn scrub_value(value: Value, token: &str) -> Value {
    match value {
        Value::String(text) => Value::String(text.replace(token, REDACTED)),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|item| scrub_value(item, token))
                .collect(),
        ),
        Value::Table(table) => Value::Table(scrub_table(table, token)),
        other => other,
    }
}

/// The file's sections, each a table of keys.
type Sections = BTreeMap<String, Table>;

/// `Config::default()` as TOML: the source of the set of known keys, their
/// types and which of them are durations.
fn default_table() -> Table {
    // Serializing plain structs of strings, integers, lists, maps and
    // durations cannot fail; the unit tests load the defaults through here.
    Table::try_from(Config::default()).expect("the default config serializes to a TOML table")
}

/// Reads and parses the config file.
fn read_file(path: &Path) -> Result<Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    text.parse::<Table>().map_err(|err| ConfigError::Parse {
        path: path.to_owned(),
        message: err.to_string().trim_end().to_owned(),
    })
}

/// Step 1: every section of `file` is a known table and every key in it is
/// known. Entries of free-form tables (`agent.env`) are not checked here.
fn check_keys(file: Table, defaults: &Table) -> Result<Sections, ConfigError> {
    let mut sections = Sections::new();
    for (section, value) in file {
        let Some(Value::Table(known)) = defaults.get(&section) else {
            return Err(ConfigError::UnknownKey { key: section });
        };
        let Value::Table(entries) = value else {
            let reason = format!("expected a table `[{section}]`");
            return Err(bad_value(&section, &value, reason));
        };
        if let Some(key) = entries.keys().find(|key| !known.contains_key(*key)) {
            return Err(ConfigError::UnknownKey {
                key: format!("{section}.{key}"),
            });
        }
        sections.insert(section, entries);
    }
    Ok(sections)
}

/// Where a `TURNSTILE_*` variable points.
enum EnvTarget<'d> {
    /// A key: `TURNSTILE_TURN_POST_RESULT_GRACE`.
    Key {
        section: &'d str,
        key: &'d str,
        default: &'d Value,
    },
    /// An entry of a free-form table: `TURNSTILE_AGENT_ENV_<NAME>`.
    Entry {
        section: &'d str,
        key: &'d str,
        name: &'d str,
    },
}

/// Step 2: applies every `TURNSTILE_*` variable of `env` to `sections`, and
/// returns which variable set which dotted key.
fn apply_env(
    sections: &mut Sections,
    defaults: &Table,
    env: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut origins = BTreeMap::new();
    for (var, raw) in env
        .iter()
        .filter(|(var, _)| var.starts_with(ENV_PREFIX) && !NOT_CONFIG_VARS.contains(&var.as_str()))
    {
        let Some(target) = env_target(var, defaults) else {
            return Err(ConfigError::UnknownEnv { var: var.clone() });
        };
        match target {
            EnvTarget::Key {
                section,
                key,
                default,
            } => {
                let value = coerce(raw, default, section, key, var)?;
                let section_table = sections.entry(section.to_owned()).or_default();
                section_table.insert(key.to_owned(), value);
                origins.insert(format!("{section}.{key}"), var.clone());
            }
            EnvTarget::Entry { section, key, name } => {
                let section_table = sections.entry(section.to_owned()).or_default();
                let slot = section_table
                    .entry(key)
                    .or_insert_with(|| Value::Table(Table::new()));
                let Value::Table(entries) = slot else {
                    return Err(bad_value(
                        &format!("{section}.{key}"),
                        slot,
                        "expected a table",
                    ));
                };
                entries.insert(name.to_owned(), Value::from(raw.as_str()));
                origins.insert(format!("{section}.{key}.{name}"), var.clone());
            }
        }
    }
    Ok(origins)
}

/// Matches `TURNSTILE_<SECTION>_<KEY>` (or `TURNSTILE_<SECTION>_<KEY>_<NAME>`
/// for a free-form table) against the known keys.
fn env_target<'d>(var: &'d str, defaults: &'d Table) -> Option<EnvTarget<'d>> {
    let rest = var.strip_prefix(ENV_PREFIX)?;
    for (section, known) in defaults {
        let (Value::Table(known), Some(rest)) = (known, strip_word(rest, section)) else {
            continue;
        };
        if let Some((key, default)) = known.iter().find(|(key, _)| rest == key.to_uppercase()) {
            return Some(EnvTarget::Key {
                section,
                key,
                default,
            });
        }
        for (key, default) in known {
            if let (Value::Table(_), Some(name)) = (default, strip_word(rest, key))
                && !name.is_empty()
            {
                return Some(EnvTarget::Entry { section, key, name });
            }
        }
    }
    None
}

/// `text` without a leading `WORD_` (`word` uppercased).
fn strip_word<'t>(text: &'t str, word: &str) -> Option<&'t str> {
    text.strip_prefix(&word.to_uppercase())?.strip_prefix('_')
}

/// Turns the text of an environment variable into a value of the same type
/// as the key's default.
fn coerce(
    raw: &str,
    default: &Value,
    section: &str,
    key: &str,
    var: &str,
) -> Result<Value, ConfigError> {
    let dotted = format!("{section}.{key}");
    let bad = |reason: String| {
        bad_value(
            &dotted,
            &Value::from(raw),
            format!("{reason} (set by {var})"),
        )
    };
    match default {
        Value::String(_) => Ok(Value::from(raw)),
        Value::Integer(_) => raw
            .trim()
            .parse::<i64>()
            .map(Value::Integer)
            .map_err(|err| bad(format!("expected an integer: {err}"))),
        Value::Array(_) => {
            let items: Vec<&str> = match raw.trim() {
                "" => Vec::new(),
                list => list.split(',').map(str::trim).collect(),
            };
            // An empty default says nothing of the element type: ask serde.
            let integers = probe(section, key, Value::Array(vec![Value::Integer(0)])).is_ok();
            if !integers {
                return Ok(Value::Array(items.into_iter().map(Value::from).collect()));
            }
            items
                .into_iter()
                .map(|item| {
                    item.parse::<i64>().map(Value::Integer).map_err(|_| {
                        bad(format!(
                            "expected a comma-separated list of integers; `{item}` is not one"
                        ))
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
        Value::Table(_) => Err(bad(format!(
            "a table cannot be set whole; set its entries with {var}_<NAME>"
        ))),
        Value::Boolean(_) => match raw.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Value::Boolean(true)),
            "false" | "0" | "no" | "off" => Ok(Value::Boolean(false)),
            _ => Err(bad("expected true or false".to_owned())),
        },
        Value::Float(_) | Value::Datetime(_) => Err(bad(
            "this kind of value cannot be set from the environment".to_owned(),
        )),
    }
}

/// Deserializes a config holding only `section.key = value`.
fn probe(section: &str, key: &str, value: Value) -> Result<Config, toml::de::Error> {
    let section_table = Table::from_iter([(key.to_owned(), value)]);
    Table::from_iter([(section.to_owned(), Value::Table(section_table))]).try_into()
}

/// Step 3: deserializes the merged sections; on failure, names the key.
fn deserialize(sections: &Sections, defaults: &Table) -> Result<Config, ConfigError> {
    let table: Table = sections
        .iter()
        .map(|(section, entries)| (section.clone(), Value::Table(entries.clone())))
        .collect();
    table.try_into::<Config>().map_err(|err| {
        locate_bad_value(sections, defaults).unwrap_or_else(|| ConfigError::BadValue {
            key: "config".to_owned(),
            value: String::new(),
            reason: err.message().to_owned(),
        })
    })
}

/// Tries each key alone to find the one whose value does not deserialize.
fn locate_bad_value(sections: &Sections, defaults: &Table) -> Option<ConfigError> {
    for (section, entries) in sections {
        for (key, value) in entries {
            let default = defaults.get(section)?.get(key)?;
            if let (Value::Table(_), Value::Table(given)) = (default, value) {
                for (name, entry) in given {
                    let alone = Table::from_iter([(name.clone(), entry.clone())]);
                    if let Err(err) = probe(section, key, Value::Table(alone)) {
                        return Some(bad_value(
                            &format!("{section}.{key}.{name}"),
                            entry,
                            err.message(),
                        ));
                    }
                }
            }
            if let Err(err) = probe(section, key, value.clone()) {
                let reason = if is_duration(default) {
                    duration_reason(value)
                } else {
                    err.message().to_owned()
                };
                return Some(bad_value(&format!("{section}.{key}"), value, reason));
            }
        }
    }
    None
}

/// Whether a default value is a duration: a string that humantime parses.
fn is_duration(default: &Value) -> bool {
    matches!(default, Value::String(text) if humantime::parse_duration(text).is_ok())
}

/// Why `value` is not a duration.
fn duration_reason(value: &Value) -> String {
    let example = "write a duration such as \"500ms\", \"5s\" or \"10m\"";
    match value {
        Value::String(text) => match humantime::parse_duration(text) {
            Err(err) => format!("not a duration ({err}); {example}"),
            Ok(_) => format!("not a valid duration; {example}"),
        },
        _ => format!("expected a string; {example}"),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    const TOKEN: &str = "123456:SECRET-token-value";

    /// An environment holding the token and `vars`.
    fn env(vars: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut env = BTreeMap::from([(TOKEN_ENV.to_owned(), TOKEN.to_owned())]);
        env.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        env
    }

    /// A temporary config file holding `text`.
    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        file.write_all(text.as_bytes()).expect("write temp file");
        file
    }

    fn load_text(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let file = file(text);
        Config::load(Some(file.path()), &env(vars))
    }

    fn load_err(text: &str, vars: &[(&str, &str)]) -> ConfigError {
        match load_text(text, vars) {
            Ok(config) => panic!("expected an error, loaded {config:?}"),
            Err(err) => err,
        }
    }

    /// Asserts `err` is a `BadValue` for `key` and returns its message.
    fn assert_bad_value(err: &ConfigError, want_key: &str) -> String {
        match err {
            ConfigError::BadValue { key, .. } => assert_eq!(key, want_key, "{err}"),
            other => panic!("expected BadValue for `{want_key}`, got {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains(&format!("`{want_key}`")), "{message}");
        message
    }

    fn default_with_token() -> Config {
        let mut config = Config::default();
        config.telegram.token = Secret(TOKEN.to_owned());
        config
    }

    #[test]
    fn defaults_load_with_only_a_token() {
        let config = Config::load(None, &env(&[])).expect("defaults load");
        assert_eq!(config, default_with_token());
        assert_eq!(config.telegram.token.0, TOKEN);
    }

    #[test]
    fn refusal_cooldown_defaults_to_60s() {
        assert_eq!(
            Config::default().access.refusal_cooldown,
            Duration::from_secs(60)
        );
    }

    #[test]
    fn token_is_trimmed() {
        let vars = BTreeMap::from([(TOKEN_ENV.to_owned(), format!(" {TOKEN}\n"))]);
        let config = Config::load(None, &vars).expect("loads");
        assert_eq!(config.telegram.token.0, TOKEN);
    }

    #[test]
    fn file_values_are_read() {
        let config = load_text(
            r#"
            [telegram]
            api_url = "http://127.0.0.1:8081"
            poll_timeout = "10s"
            [access]
            allowed_users = [1, 2]
            admins = [2]
            refusal_cooldown = "2m"
            [agent]
            backend = "claude"
            args = ["--verbose"]
            workdir = "/srv/agent"
            [turn]
            post_result_grace = "500ms"
            terminator_tools = ["end_turn", "reply"]
            [dispatcher]
            max_concurrent_turns = 2
            merge_window = "0s"
            [state]
            path = "/var/lib/turnstile.db"
            "#,
            &[],
        )
        .expect("loads");
        assert_eq!(config.telegram.api_url, "http://127.0.0.1:8081");
        assert_eq!(config.telegram.poll_timeout, Duration::from_secs(10));
        assert_eq!(config.access.allowed_users, vec![1, 2]);
        assert_eq!(config.access.admins, vec![2]);
        assert_eq!(config.access.refusal_cooldown, Duration::from_secs(120));
        assert_eq!(config.agent.backend, "claude");
        assert_eq!(config.agent.args, vec!["--verbose".to_owned()]);
        assert_eq!(config.agent.workdir, PathBuf::from("/srv/agent"));
        assert_eq!(config.turn.post_result_grace, Duration::from_millis(500));
        assert_eq!(config.turn.terminator_tools, vec!["end_turn", "reply"]);
        assert_eq!(config.turn.max_duration, TurnConfig::default().max_duration);
        assert_eq!(config.dispatcher.max_concurrent_turns, 2);
        assert_eq!(config.dispatcher.merge_window, Duration::ZERO);
        assert_eq!(config.state.path, PathBuf::from("/var/lib/turnstile.db"));
    }

    #[test]
    fn env_override_beats_file() {
        let config = load_text(
            "[turn]\npost_result_grace = \"9s\"\n",
            &[
                ("TURNSTILE_TURN_POST_RESULT_GRACE", "2s"),
                ("TURNSTILE_DISPATCHER_MAX_CONCURRENT_TURNS", "4"),
                ("TURNSTILE_TELEGRAM_API_URL", "http://localhost:9"),
            ],
        )
        .expect("loads");
        assert_eq!(config.turn.post_result_grace, Duration::from_secs(2));
        assert_eq!(config.dispatcher.max_concurrent_turns, 4);
        assert_eq!(config.telegram.api_url, "http://localhost:9");
    }

    #[test]
    fn env_overrides_apply_without_a_file() {
        let config =
            Config::load(None, &env(&[("TURNSTILE_STATE_PATH", "/tmp/x.db")])).expect("loads");
        assert_eq!(config.state.path, PathBuf::from("/tmp/x.db"));
    }

    #[test]
    fn other_env_vars_are_ignored() {
        let config =
            Config::load(None, &env(&[("HOME", "/root"), ("TURNSTILEX", "1")])).expect("loads");
        assert_eq!(config, default_with_token());
    }

    #[test]
    fn unknown_key_in_file_names_the_dotted_key() {
        let err = load_err("[turn]\npost_result_grce = \"5s\"\n", &[]);
        assert!(
            matches!(&err, ConfigError::UnknownKey { key } if key == "turn.post_result_grce"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "unknown config key `turn.post_result_grce`"
        );
    }

    #[test]
    fn unknown_section_in_file_is_named() {
        let err = load_err("[turns]\nmax_duration = \"5s\"\n", &[]);
        assert!(
            matches!(&err, ConfigError::UnknownKey { key } if key == "turns"),
            "{err:?}"
        );
    }

    #[test]
    fn top_level_key_that_is_not_a_table_is_rejected() {
        let err = load_err("turn = \"fast\"\n", &[]);
        let message = assert_bad_value(&err, "turn");
        assert!(message.contains("\"fast\""), "{message}");
    }

    #[test]
    fn token_in_file_is_rejected_with_a_hint() {
        let err = load_err(&format!("[telegram]\ntoken = \"{TOKEN}\"\n"), &[]);
        let message = err.to_string();
        assert!(message.contains("`telegram.token`"), "{message}");
        assert!(message.contains(TOKEN_ENV), "{message}");
        assert!(!message.contains(TOKEN), "{message}");
    }

    #[test]
    fn unknown_env_var_is_rejected() {
        let err = Config::load(None, &env(&[("TURNSTILE_TURN_POST_RESULT_GRCE", "2s")]))
            .expect_err("unknown variable");
        assert!(
            matches!(&err, ConfigError::UnknownEnv { var } if var == "TURNSTILE_TURN_POST_RESULT_GRCE"),
            "{err:?}"
        );
        assert!(err.to_string().contains("TURNSTILE_TURN_POST_RESULT_GRCE"));
    }

    #[test]
    fn env_var_names_are_matched_exactly() {
        for var in [
            "TURNSTILE_",
            "TURNSTILE_TURN",
            "TURNSTILE_TURN_",
            "TURNSTILE_turn_post_result_grace",
            "TURNSTILE_TURNPOST_RESULT_GRACE",
            "TURNSTILE_AGENT_ENV_",
            "TURNSTILE_TURN_POST_RESULT_GRACE_X",
        ] {
            let err = Config::load(None, &env(&[(var, "2s")])).expect_err(var);
            assert!(
                matches!(&err, ConfigError::UnknownEnv { var: got } if got == var),
                "{var}: {err:?}"
            );
        }
    }

    #[test]
    fn token_env_var_under_the_prefix_gets_a_hint() {
        let err = Config::load(None, &env(&[("TURNSTILE_TELEGRAM_TOKEN", "abc")]))
            .expect_err("not a key");
        assert!(matches!(err, ConfigError::UnknownEnv { .. }), "{err:?}");
        assert!(err.to_string().contains(TOKEN_ENV), "{err}");
    }

    #[test]
    fn bad_duration_names_the_key_and_the_value() {
        let err = load_err("[turn]\npost_result_grace = \"5 parsecs\"\n", &[]);
        let message = assert_bad_value(&err, "turn.post_result_grace");
        assert!(
            message.starts_with("bad value for `turn.post_result_grace`: \"5 parsecs\": "),
            "{message}"
        );
        assert!(
            message.contains("unknown time unit \"parsecs\""),
            "{message}"
        );
    }

    #[test]
    fn duration_given_as_a_number_is_rejected() {
        let err = load_err("[dispatcher]\nmerge_window = 1500\n", &[]);
        let message = assert_bad_value(&err, "dispatcher.merge_window");
        assert!(message.contains("1500"), "{message}");
        assert!(message.contains("expected a string"), "{message}");
    }

    #[test]
    fn bad_duration_from_env_names_the_variable() {
        let err = Config::load(None, &env(&[("TURNSTILE_TURN_MAX_DURATION", "forever")]))
            .expect_err("bad duration");
        let message = assert_bad_value(&err, "turn.max_duration");
        assert!(message.contains("\"forever\""), "{message}");
        assert!(message.contains("TURNSTILE_TURN_MAX_DURATION"), "{message}");
    }

    #[test]
    fn bad_type_in_file_names_the_key() {
        let err = load_err("[dispatcher]\nqueue_limit = \"many\"\n", &[]);
        let message = assert_bad_value(&err, "dispatcher.queue_limit");
        assert!(message.contains("\"many\""), "{message}");
        let err = load_err("[dispatcher]\nqueue_limit = -1\n", &[]);
        assert_bad_value(&err, "dispatcher.queue_limit");
    }

    #[test]
    fn bad_integer_from_env_names_the_key() {
        let err = Config::load(None, &env(&[("TURNSTILE_DISPATCHER_QUEUE_LIMIT", "lots")]))
            .expect_err("bad integer");
        let message = assert_bad_value(&err, "dispatcher.queue_limit");
        assert!(
            message.contains("\"lots\": expected an integer"),
            "{message}"
        );
        assert!(
            message.contains("TURNSTILE_DISPATCHER_QUEUE_LIMIT"),
            "{message}"
        );
    }

    #[test]
    fn missing_token_is_an_error() {
        let err = Config::load(None, &BTreeMap::new()).expect_err("no token");
        assert!(matches!(err, ConfigError::MissingToken), "{err:?}");
        assert!(err.to_string().contains(TOKEN_ENV));
        for empty in ["", "  \n"] {
            let vars = BTreeMap::from([(TOKEN_ENV.to_owned(), empty.to_owned())]);
            let err = Config::load(None, &vars).expect_err("empty token");
            assert!(matches!(err, ConfigError::MissingToken), "{err:?}");
        }
    }

    #[test]
    fn on_interrupted_must_be_report_or_retry() {
        let ok = Config::load(
            None,
            &env(&[("TURNSTILE_DISPATCHER_ON_INTERRUPTED", "retry")]),
        )
        .expect("loads");
        assert_eq!(ok.dispatcher.on_interrupted, "retry");
        let err = Config::load(
            None,
            &env(&[("TURNSTILE_DISPATCHER_ON_INTERRUPTED", "shrug")]),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("dispatcher.on_interrupted"),
            "{err}"
        );
    }

    #[test]
    fn absurd_durations_and_counts_are_rejected() {
        let err = Config::load(
            None,
            &env(&[("TURNSTILE_TELEGRAM_POLL_TIMEOUT", "18446744073709551615s")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("telegram.poll_timeout"), "{err}");
        let err = Config::load(
            None,
            &env(&[("TURNSTILE_TURN_POST_RESULT_GRACE", "400days")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("turn.post_result_grace"), "{err}");
        let err = Config::load(
            None,
            &env(&[(
                "TURNSTILE_DISPATCHER_MAX_CONCURRENT_TURNS",
                "9000000000000000000",
            )]),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("dispatcher.max_concurrent_turns"),
            "{err}"
        );
    }

    #[test]
    fn boolean_env() {
        let off =
            Config::load(None, &env(&[("TURNSTILE_AGENT_BATCH_HOOK", "false")])).expect("loads");
        assert!(!off.agent.batch_hook);
        let on = Config::load(None, &env(&[("TURNSTILE_AGENT_BATCH_HOOK", "1")])).expect("loads");
        assert!(on.agent.batch_hook);
        let err = Config::load(None, &env(&[("TURNSTILE_AGENT_BATCH_HOOK", "maybe")])).unwrap_err();
        assert!(err.to_string().contains("agent.batch_hook"), "{err}");
    }

    #[test]
    fn comma_list_env() {
        let config = Config::load(
            None,
            &env(&[
                ("TURNSTILE_ACCESS_ALLOWED_USERS", "1, 2,3"),
                ("TURNSTILE_AGENT_ARGS", "--model,opus"),
                ("TURNSTILE_TURN_TERMINATOR_TOOLS", "end_turn,reply"),
            ]),
        )
        .expect("loads");
        assert_eq!(config.access.allowed_users, vec![1, 2, 3]);
        assert_eq!(config.agent.args, vec!["--model", "opus"]);
        assert_eq!(config.turn.terminator_tools, vec!["end_turn", "reply"]);
    }

    #[test]
    fn empty_env_list_is_an_empty_list() {
        let config = load_text(
            "[access]\nadmins = [7]\n",
            &[("TURNSTILE_ACCESS_ADMINS", "")],
        )
        .expect("loads");
        assert!(config.access.admins.is_empty());
    }

    #[test]
    fn bad_integer_in_env_list_is_named() {
        let err = Config::load(None, &env(&[("TURNSTILE_ACCESS_ALLOWED_USERS", "1,bob")]))
            .expect_err("bad list");
        let message = assert_bad_value(&err, "access.allowed_users");
        assert!(message.contains("\"1,bob\""), "{message}");
        assert!(message.contains("`bob`"), "{message}");
    }

    #[test]
    fn agent_env_from_file_and_env() {
        let config = load_text(
            "[agent.env]\nHTTPS_PROXY = \"http://proxy:3128\"\nLANG = \"C\"\n",
            &[
                ("TURNSTILE_AGENT_ENV_LANG", "C.UTF-8"),
                ("TURNSTILE_AGENT_ENV_NO_PROXY", "localhost"),
            ],
        )
        .expect("loads");
        let want = BTreeMap::from([
            ("HTTPS_PROXY".to_owned(), "http://proxy:3128".to_owned()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
            ("NO_PROXY".to_owned(), "localhost".to_owned()),
        ]);
        assert_eq!(config.agent.env, want);
    }

    #[test]
    fn agent_env_entry_must_be_a_string() {
        let err = load_err("[agent.env]\nDEBUG = 1\n", &[]);
        let message = assert_bad_value(&err, "agent.env.DEBUG");
        assert!(message.contains(": 1: "), "{message}");
    }

    #[test]
    fn agent_env_set_whole_is_rejected() {
        let err = Config::load(None, &env(&[("TURNSTILE_AGENT_ENV", "A=1")]))
            .expect_err("table set whole");
        let message = assert_bad_value(&err, "agent.env");
        assert!(message.contains("TURNSTILE_AGENT_ENV_<NAME>"), "{message}");
    }

    #[test]
    fn agent_env_entry_over_a_non_table_is_rejected() {
        let err = load_err(
            "[agent]\nenv = \"A=1\"\n",
            &[("TURNSTILE_AGENT_ENV_B", "2")],
        );
        assert_bad_value(&err, "agent.env");
    }

    #[test]
    fn debug_never_contains_the_token() {
        let config = Config::load(None, &env(&[])).expect("loads");
        let debug = format!("{config:?} {config:#?}");
        assert!(!debug.contains(TOKEN), "{debug}");
        assert!(debug.contains(REDACTED), "{debug}");
    }

    #[test]
    fn redacted_toml_never_contains_the_token() {
        let config = load_text(
            "[agent.env]\nA = \"1\"\n",
            &[("TURNSTILE_DISPATCHER_MERGE_WINDOW", "1500ms")],
        )
        .expect("loads");
        let text = config.to_redacted_toml();
        assert!(!text.contains(TOKEN), "{text}");
        assert!(text.contains("token = \"<redacted>\""), "{text}");
        assert!(text.contains("merge_window = \"1s 500ms\""), "{text}");
        // Apart from the token line, it loads back to the same config.
        let mut table: Table = text.parse().expect("valid TOML");
        if let Some(Value::Table(telegram)) = table.get_mut("telegram") {
            assert_eq!(telegram.remove("token"), Some(Value::from(REDACTED)));
        }
        let reloaded = Config::from_table(table, &env(&[]), TOKEN).expect("reloads");
        assert_eq!(reloaded, config);
    }

    #[test]
    fn redacted_toml_scrubs_a_token_stored_elsewhere() {
        let mut config = default_with_token();
        config.telegram.api_url = format!("https://api.telegram.org/bot{TOKEN}");
        let text = config.to_redacted_toml();
        assert!(!text.contains(TOKEN), "{text}");
    }

    #[test]
    fn redacted_toml_keeps_its_token_line_with_a_short_token() {
        let mut config = Config::default();
        config.telegram.token = Secret("tok".to_owned());
        config
            .agent
            .env
            .insert("tok".to_owned(), "tok tok".to_owned());
        config.agent.args = vec!["--tok".to_owned()];
        let text = config.to_redacted_toml();
        assert!(text.contains("\ntoken = \"<redacted>\"\n"), "{text}");
        assert!(text.contains("<redacted> <redacted>"), "{text}");
        assert!(text.contains("--<redacted>"), "{text}");
        assert!(!text.replace("token", "").contains("tok"), "{text}");
    }

    #[test]
    fn redacted_toml_without_a_token_has_no_token_line() {
        let text = Config::default().to_redacted_toml();
        assert!(!text.contains("token"), "{text}");
    }

    #[test]
    fn errors_never_contain_the_token() {
        let err = load_err(&format!("[turn]\nmax_duration = \"{TOKEN}\"\n"), &[]);
        assert_bad_value(&err, "turn.max_duration");
        let message = format!("{err} {err:?}");
        assert!(!message.contains(TOKEN), "{message}");
        assert!(message.contains(REDACTED), "{message}");

        let err = load_err(&format!("[telegram]\n\"{TOKEN}\" = 1\n"), &[]);
        assert!(matches!(err, ConfigError::UnknownKey { .. }), "{err:?}");
        let message = format!("{err} {err:?}");
        assert!(!message.contains(TOKEN), "{message}");

        let var = format!("TURNSTILE_{TOKEN}");
        let err = Config::load(None, &env(&[(&var, "1")])).expect_err("unknown variable");
        assert!(matches!(err, ConfigError::UnknownEnv { .. }), "{err:?}");
        let message = format!("{err} {err:?}");
        assert!(!message.contains(TOKEN), "{message}");

        let err = load_err(&format!("[turn]\nx = \"{TOKEN}\" junk\n"), &[]);
        assert!(matches!(err, ConfigError::Parse { .. }), "{err:?}");
        let message = format!("{err} {err:?}");
        assert!(!message.contains(TOKEN), "{message}");
    }

    #[test]
    fn parse_error_names_the_file() {
        let file = file("[turn\n");
        let err = Config::load(Some(file.path()), &env(&[])).expect_err("bad TOML");
        assert!(matches!(err, ConfigError::Parse { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains(&file.path().display().to_string()),
            "{message}"
        );
        assert!(message.contains("line 1"), "{message}");
    }

    #[test]
    fn read_error_names_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("absent.toml");
        let err = Config::load(Some(&path), &env(&[])).expect_err("no file");
        assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("absent.toml"), "{message}");
        assert!(message.contains("No such file"), "{message}");
    }

    #[test]
    fn zero_typing_interval_is_rejected() {
        let err = load_err("[turn]\ntyping_interval = \"0s\"\n", &[]);
        let message = assert_bad_value(&err, "turn.typing_interval");
        assert!(message.contains("\"0s\""), "{message}");
        assert!(message.contains("greater than zero"), "{message}");
    }

    #[test]
    fn every_turn_clock_must_be_non_zero() {
        for key in [
            "typing_interval",
            "post_result_grace",
            "no_progress_timeout",
            "max_duration",
            "hard_deadline",
        ] {
            let err = load_err(&format!("[turn]\n{key} = \"0ms\"\n"), &[]);
            assert_bad_value(&err, &format!("turn.{key}"));
        }
    }

    #[test]
    fn validation_names_env_variable() {
        let err =
            Config::load(None, &env(&[("TURNSTILE_TURN_HARD_DEADLINE", "0s")])).expect_err("zero");
        let message = assert_bad_value(&err, "turn.hard_deadline");
        assert!(
            message.contains("TURNSTILE_TURN_HARD_DEADLINE"),
            "{message}"
        );
    }

    #[test]
    fn terminator_tools_must_not_be_empty() {
        let err = load_err("[turn]\nterminator_tools = []\n", &[]);
        assert_bad_value(&err, "turn.terminator_tools");
    }

    #[test]
    fn dispatcher_counts_must_be_at_least_one() {
        for key in ["max_concurrent_turns", "queue_limit"] {
            let err = load_err(&format!("[dispatcher]\n{key} = 0\n"), &[]);
            let message = assert_bad_value(&err, &format!("dispatcher.{key}"));
            assert!(message.contains(": 0: "), "{message}");
        }
    }

    #[test]
    fn unknown_backend_is_rejected() {
        let err = load_err("[agent]\nbackend = \"gpt\"\n", &[]);
        let message = assert_bad_value(&err, "agent.backend");
        assert!(message.contains("\"gpt\""), "{message}");
    }

    #[test]
    fn bad_backend_names_the_key_and_the_value() {
        let err = load_err("[agent]\nbackend = \"gpt\"\n", &[]);
        assert_bad_value(&err, "agent.backend");
        assert_eq!(
            err.to_string(),
            "bad value for `agent.backend`: \"gpt\": expected \"scripted\" or \"claude\""
        );
        let err = Config::load(None, &env(&[("TURNSTILE_AGENT_BACKEND", "gpt")]))
            .expect_err("bad backend");
        assert_bad_value(&err, "agent.backend");
        assert_eq!(
            err.to_string(),
            "bad value for `agent.backend`: \"gpt\": expected \"scripted\" or \"claude\" \
             (set by TURNSTILE_AGENT_BACKEND)"
        );
    }

    #[test]
    fn bad_on_interrupted_names_the_key_and_the_value() {
        let err = load_err("[dispatcher]\non_interrupted = \"shrug\"\n", &[]);
        assert_bad_value(&err, "dispatcher.on_interrupted");
        assert_eq!(
            err.to_string(),
            "bad value for `dispatcher.on_interrupted`: \"shrug\": expected \"report\" or \"retry\""
        );
        let err = Config::load(
            None,
            &env(&[("TURNSTILE_DISPATCHER_ON_INTERRUPTED", "shrug")]),
        )
        .expect_err("bad on_interrupted");
        assert_bad_value(&err, "dispatcher.on_interrupted");
        assert_eq!(
            err.to_string(),
            "bad value for `dispatcher.on_interrupted`: \"shrug\": expected \"report\" or \"retry\" \
             (set by TURNSTILE_DISPATCHER_ON_INTERRUPTED)"
        );
    }

    #[test]
    fn choices_load_from_file_and_env() {
        let config = load_text(
            "[agent]\nbackend = \"claude\"\n[dispatcher]\non_interrupted = \"retry\"\n",
            &[],
        )
        .expect("loads");
        assert_eq!(config.agent.backend, "claude");
        assert_eq!(config.dispatcher.on_interrupted, "retry");
        let config = Config::load(
            None,
            &env(&[
                ("TURNSTILE_AGENT_BACKEND", "claude"),
                ("TURNSTILE_DISPATCHER_ON_INTERRUPTED", "report"),
            ]),
        )
        .expect("loads");
        assert_eq!(config.agent.backend, "claude");
        assert_eq!(config.dispatcher.on_interrupted, "report");
    }

    #[test]
    fn choice_of_the_wrong_type_names_the_key() {
        let err = load_err("[agent]\nbackend = 1\n", &[]);
        let message = assert_bad_value(&err, "agent.backend");
        assert!(message.contains(": 1: "), "{message}");
        let err = load_err("[dispatcher]\non_interrupted = true\n", &[]);
        let message = assert_bad_value(&err, "dispatcher.on_interrupted");
        assert!(message.contains(": true: "), "{message}");
    }

    #[test]
    fn api_url_must_be_http() {
        for url in [
            "ftp://api.telegram.org",
            "api.telegram.org",
            "https://",
            "http:// x",
        ] {
            let err = load_err(&format!("[telegram]\napi_url = \"{url}\"\n"), &[]);
            assert_bad_value(&err, "telegram.api_url");
        }
        for url in ["http://127.0.0.1:1234", "https://api.telegram.org"] {
            load_text(&format!("[telegram]\napi_url = \"{url}\"\n"), &[]).expect(url);
        }
    }

    const EXAMPLE: &str = include_str!("../config.example.toml");

    #[test]
    fn example_config_equals_the_defaults() {
        let table: Table = EXAMPLE.parse().expect("example is valid TOML");
        let config = Config::from_table(table, &env(&[]), TOKEN).expect("example loads");
        assert_eq!(config, default_with_token());
    }

    #[test]
    fn example_config_documents_every_key_and_its_env_name() {
        let example: Table = EXAMPLE.parse().expect("example is valid TOML");
        assert!(EXAMPLE.contains(TOKEN_ENV));
        for (section, known) in default_table() {
            let Value::Table(known) = known else {
                panic!("top-level `{section}` is not a section");
            };
            for (key, default) in known {
                let var = format!(
                    "{ENV_PREFIX}{}_{}",
                    section.to_uppercase(),
                    key.to_uppercase()
                );
                assert!(EXAMPLE.contains(&var), "example lacks `{var}`");
                match default {
                    Value::Table(_) => assert!(
                        EXAMPLE.contains(&format!("# [{section}.{key}]")),
                        "example lacks a commented `[{section}.{key}]`"
                    ),
                    _ => assert!(
                        example
                            .get(&section)
                            .and_then(|entries| entries.get(&key))
                            .is_some(),
                        "example lacks `{section}.{key}`"
                    ),
                }
            }
        }
    }
}

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
//!    the error names `section.key` and the offending value. A key that is a
//!    choice ([`Backend`], [`OnInterrupted`]) is checked here.
//! 4. The result is validated ([`Config::validate`]) and the token is read.
//!
//! No error message ever contains the token: every message is scrubbed of it.
//!
//! # Layout
//!
//! - this file: the schema and its defaults, [`Config::load`] (steps 1, 3
//!   and 4) and the error type;
//! - `env`: step 2, the `TURNSTILE_<SECTION>_<KEY>` overlay, and
//!   [`Config::from_env_and_file`], which reads this process's environment;
//! - `validate`: [`Config::validate`], the bounds ([`MAX_DURATION`],
//!   [`MAX_COUNT`]) and cross-key checks;
//! - `redact`: what may be shown: [`Config::to_redacted_toml`] (printed by
//!   `check-config`) and the scrubbing of the token from errors.

mod choices;
mod env;
mod redact;
mod sealing;
mod validate;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::{Table, Value};

pub use self::choices::{
    Backend, GroupMode, Keep, LogFormat, OnInterrupted, PermissionMode, Sandbox, SettingSource,
    Stream,
};
use self::env::apply_env;
pub use self::env::{ENV_PREFIX, NOT_CONFIG_VARS};
pub use self::validate::{MAX_COUNT, MAX_DURATION};

/// The environment variable the bot token is read from (and the only place
/// it is read from).
pub const TOKEN_ENV: &str = "TELEGRAM_BOT_TOKEN";

/// Set by systemd's `LoadCredential=`: the folder holding the service's
/// credentials. When [`TOKEN_ENV`] is unset, the token is read from the file
/// [`TOKEN_CREDENTIAL`] in it.
pub const CREDENTIALS_ENV: &str = "CREDENTIALS_DIRECTORY";

/// The credential's name (`LoadCredential=telegram-bot-token:/etc/…`).
pub const TOKEN_CREDENTIAL: &str = "telegram-bot-token";

/// Set by `/restart` for the new process: the chat to tell it is back.
pub const RESTARTED_FROM_ENV: &str = "TURNSTILE_RESTARTED_FROM_CHAT";

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

/// The extra advice for someone who tried to put the token in the config.
fn token_hint(is_token: bool) -> &'static str {
    if is_token {
        "; the bot token is read only from the environment variable TELEGRAM_BOT_TOKEN"
    } else {
        ""
    }
}

impl ConfigError {
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
    /// Files users send.
    pub files: FilesConfig,
    /// The health and metrics endpoint.
    pub ops: OpsConfig,
    /// How the binary logs.
    pub log: LogConfig,
    /// What the chat sees while the agent works.
    pub progress: ProgressConfig,
    /// The file this configuration was read from (absolute), if any: the
    /// agent's workdir must not contain it, and the sandbox hides it.
    #[serde(skip)]
    pub file: Option<PathBuf>,
    /// systemd's `$CREDENTIALS_DIRECTORY`, when set: it may hold the token,
    /// so the sandbox hides it.
    #[serde(skip)]
    pub credentials: Option<PathBuf>,
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
    /// Remove a webhook found on the token at start (otherwise its presence
    /// is an error: Telegram refuses `getUpdates` while one is set).
    pub delete_webhook: bool,
    /// A kept-alive connection to the Bot API unused this long is not used
    /// again: below the server's own keep-alive, so no request is ever
    /// written to a connection the server is closing (such a message would
    /// be lost: it cannot be sent again without risking a duplicate).
    #[serde(with = "humantime_serde")]
    pub pool_idle_timeout: Duration,
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
    /// Chat ids (groups) where everyone may talk to the bot, besides the
    /// allowed users.
    pub allowed_chats: Vec<i64>,
    /// Which group messages the bot takes.
    pub group_mode: GroupMode,
}

/// `[files]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FilesConfig {
    /// The largest file fetched from a message, in bytes.
    pub max_download: u64,
    /// The command that transcribes a voice note (`{file}` its path), its
    /// standard output the text; empty: the agent gets the audio file.
    pub transcribe: Vec<String>,
    /// How long a transcription may take.
    #[serde(with = "humantime_serde")]
    pub transcribe_timeout: Duration,
}

impl Default for FilesConfig {
    fn default() -> Self {
        Self {
            max_download: 20 * 1024 * 1024,
            transcribe: Vec::new(),
            transcribe_timeout: Duration::from_secs(120),
        }
    }
}

/// `[agent]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Which agent answers.
    pub backend: Backend,
    /// The agent executable (for `claude`).
    pub command: String,
    /// Extra arguments for the agent executable.
    pub args: Vec<String>,
    /// Extra environment for the agent process.
    pub env: BTreeMap<String, String>,
    /// Working directory of each chat's agent process, `{chat}` filled
    /// with the chat id; relative to the state file's directory. Created
    /// 0700 on first use; must not contain the state or config file.
    pub workdir: PathBuf,
    /// Scenario file for the `scripted` backend; empty means the built-in echo.
    pub script: PathBuf,
    /// The system prompt given to the agent (`claude`).
    pub system_prompt: String,
    /// Tools besides the chat tools the agent may use without asking
    /// (`claude`), passed unchanged to the CLI's `--allowedTools`: names, or
    /// the CLI's own patterns (`Bash(cargo test:*)`), which it enforces
    /// itself. Any other tool is decided by `permission_mode`.
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
    /// Names of turnstile's own environment variables passed on to the
    /// agent process, besides its small base (`claude`).
    pub pass_env: Vec<String>,
    /// Which of the operator's Claude settings apply (`claude`); none by
    /// default, so only what turnstile passes counts.
    pub setting_sources: Vec<SettingSource>,
    /// The operator's own MCP servers for the agent, in the shape of
    /// Claude's `mcpServers` (`claude`).
    pub mcp_servers: BTreeMap<String, serde_json::Value>,
    /// Tools the agent may never use (`claude`: `--disallowedTools`).
    pub denied_tools: Vec<String>,
    /// What answers a tool the agent asks to run that neither
    /// `allowed_tools` nor `denied_tools` decides.
    pub permission_mode: PermissionMode,
    /// The OS sandbox around the agent process (`claude`); bubblewrap by
    /// default, probed at start, `"none"` only when asked for.
    pub sandbox: Sandbox,
    /// An argv prefix the agent command runs under (`claude`), with
    /// `{chat}` and `{workdir}` placeholders; empty runs it directly.
    pub launcher: Vec<String>,
}

/// The default `agent.workdir`: one directory per chat beside the state file.
pub const DEFAULT_WORKDIR: &str = "workspaces/{chat}";

/// The default `agent.system_prompt`.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant in a Telegram chat. Reply to the user with the `send` tool (Markdown allowed); when your reply is complete, call `end_turn` (it can carry your last message). Text you write outside these tools is not shown to the user. Files the user sends are saved under `inbox/` in your working directory; `send_file` sends a file from it.";

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
    /// Each chat's backstop: a turn holding the chat longer is force-released.
    #[serde(with = "humantime_serde")]
    pub hard_deadline: Duration,
    /// How often the typing indicator is renewed (Telegram shows it for 5 s).
    #[serde(with = "humantime_serde")]
    pub typing_interval: Duration,
    /// Bare tool names that end a turn.
    pub terminator_tools: Vec<String>,
    /// How long a tool approval waits for a person before it is denied.
    #[serde(with = "humantime_serde")]
    pub approval_timeout: Duration,
    /// Messages (texts and files) the agent may send in one turn.
    pub max_messages: u32,
    /// Bytes of text the agent may send in one turn.
    pub max_output: u64,
}

/// `[progress]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ProgressConfig {
    /// A turn running longer than this gets a status message.
    #[serde(with = "humantime_serde")]
    pub after: Duration,
    /// The shortest time between two edits of the status or the preview.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// What becomes of the status message at the end of the turn.
    pub keep: Keep,
    /// How an answer shows while it is written.
    pub stream: Stream,
}

impl Default for ProgressConfig {
    fn default() -> Self {
        Self {
            after: Duration::from_secs(3),
            interval: Duration::from_secs(2),
            keep: Keep::Delete,
            stream: Stream::Edit,
        }
    }
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
    /// interrupted before it replied. One that had replied is always reported.
    pub on_interrupted: OnInterrupted,
}

/// `[state]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StateConfig {
    /// The SQLite file.
    pub path: PathBuf,
    /// How long finished inbox rows and turn records are kept; pruned at
    /// start and once a day.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
}

/// `[ops]`
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OpsConfig {
    /// `host:port` serving `GET /healthz` and `GET /metrics`; empty: off.
    pub listen: String,
}

/// `[log]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `"text"` or `"json"` (one object per line).
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
        }
    }
}

impl Default for TelegramConfig {
    fn default() -> Self {
        Self {
            api_url: "https://api.telegram.org".into(),
            poll_timeout: Duration::from_secs(30),
            delete_webhook: false,
            pool_idle_timeout: Duration::from_secs(4),
            token: Secret::default(),
        }
    }
}

impl AccessConfig {
    /// Whether `user` is an admin.
    pub fn is_admin(&self, user: u64) -> bool {
        self.admins.iter().any(|&a| u64::try_from(a) == Ok(user))
    }

    /// Whether `user` is an allowed user (admins are).
    pub fn is_allowed(&self, user: u64) -> bool {
        self.is_admin(user)
            || self
                .allowed_users
                .iter()
                .any(|&a| u64::try_from(a) == Ok(user))
    }

    /// Whether everyone in `chat` may talk to the bot.
    pub fn is_allowed_chat(&self, chat: i64) -> bool {
        self.allowed_chats.contains(&chat)
    }

    /// Whether `user` may talk to the bot in `chat`: an allowed user
    /// anywhere, anyone in an allowed chat.
    pub fn admits(&self, user: u64, chat: i64) -> bool {
        self.is_allowed(user) || self.is_allowed_chat(chat)
    }
}

impl Default for AccessConfig {
    fn default() -> Self {
        Self {
            allowed_users: Vec::new(),
            admins: Vec::new(),
            refusal_cooldown: Duration::from_secs(60),
            allowed_chats: Vec::new(),
            group_mode: GroupMode::Mention,
        }
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            backend: Backend::Scripted,
            command: "claude".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            workdir: PathBuf::from(DEFAULT_WORKDIR),
            script: PathBuf::new(),
            system_prompt: DEFAULT_SYSTEM_PROMPT.into(),
            allowed_tools: Vec::new(),
            model: String::new(),
            max_turns: 0,
            keep_warm: Duration::from_secs(600),
            max_warm: 32,
            batch_hook: true,
            pass_env: Vec::new(),
            setting_sources: Vec::new(),
            mcp_servers: BTreeMap::new(),
            denied_tools: Vec::new(),
            permission_mode: PermissionMode::Ask,
            sandbox: Sandbox::Bubblewrap,
            launcher: Vec::new(),
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
            approval_timeout: Duration::from_secs(600),
            max_messages: 30,
            max_output: 64 * 1024,
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
            on_interrupted: OnInterrupted::Report,
        }
    }
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            path: PathBuf::from("turnstile.db"),
            retention: Duration::from_secs(30 * 86_400),
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
        let token = token_from(env)?;
        let token = token.trim();
        let file = match path {
            Some(path) => read_file(path),
            None => Ok(Table::new()),
        };
        file.and_then(|file| Self::from_table(file, env, token, path))
            .map_err(|err| err.redact(token))
    }

    /// As [`Config::load`], for a command that never talks to Telegram
    /// (`backup`): the token is not needed, so not read.
    ///
    /// # Errors
    ///
    /// As [`Config::load`], but never [`ConfigError::MissingToken`].
    pub fn load_offline(
        path: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let file = match path {
            Some(path) => read_file(path)?,
            None => Table::new(),
        };
        let mut config = Self::from_table(file, env, "offline", path)?;
        config.telegram.token = Secret::default();
        Ok(config)
    }

    /// Steps 1 to 4 of the module docs, on a parsed file.
    fn from_table(
        file: Table,
        env: &BTreeMap<String, String>,
        token: &str,
        path: Option<&Path>,
    ) -> Result<Self, ConfigError> {
        let defaults = default_table();
        let mut sections = check_keys(file, &defaults)?;
        let origins = apply_env(&mut sections, &defaults, env)?;
        let mut config = deserialize(&sections, &defaults).map_err(|err| err.set_by(&origins))?;
        config.file = path.map(|path| sealing::absolute(&sealing::cwd(), path));
        config.validate().map_err(|err| err.set_by(&origins))?;
        if token.is_empty() {
            return Err(ConfigError::MissingToken);
        }
        config.telegram.token = Secret(token.to_owned());
        config.credentials = env
            .get(CREDENTIALS_ENV)
            .filter(|dir| !dir.is_empty())
            .map(|dir| sealing::absolute(&sealing::cwd(), Path::new(dir)));
        Ok(config)
    }
}

/// The token: `TELEGRAM_BOT_TOKEN` when it is set and not blank, otherwise
/// the systemd credential `$CREDENTIALS_DIRECTORY/telegram-bot-token` when
/// there is one, otherwise empty (a [`ConfigError::MissingToken`] later).
fn token_from(env: &BTreeMap<String, String>) -> Result<String, ConfigError> {
    if let Some(token) = env.get(TOKEN_ENV).filter(|t| !t.trim().is_empty()) {
        return Ok(token.clone());
    }
    let Some(dir) = env.get(CREDENTIALS_ENV).filter(|d| !d.is_empty()) else {
        return Ok(String::new());
    };
    let path = Path::new(dir).join(TOKEN_CREDENTIAL);
    match std::fs::read_to_string(&path) {
        Ok(token) => Ok(token),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(String::new()),
        Err(source) => Err(ConfigError::Credential { path, source }),
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

    pub(super) const TOKEN: &str = "123456:SECRET-token-value";

    /// An environment holding the token and `vars`.
    pub(super) fn env(vars: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut env = BTreeMap::from([(TOKEN_ENV.to_owned(), TOKEN.to_owned())]);
        env.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        env
    }

    /// A temporary config file holding `text`.
    pub(super) fn file(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        file.write_all(text.as_bytes()).expect("write temp file");
        file
    }

    pub(super) fn load_text(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let file = file(text);
        Config::load(Some(file.path()), &env(vars))
    }

    pub(super) fn load_err(text: &str, vars: &[(&str, &str)]) -> ConfigError {
        match load_text(text, vars) {
            Ok(config) => panic!("expected an error, loaded {config:?}"),
            Err(err) => err,
        }
    }

    /// Asserts `err` is a `BadValue` for `key` and returns its message.
    pub(super) fn assert_bad_value(err: &ConfigError, want_key: &str) -> String {
        match err {
            ConfigError::BadValue { key, .. } => assert_eq!(key, want_key, "{err}"),
            other => panic!("expected BadValue for `{want_key}`, got {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains(&format!("`{want_key}`")), "{message}");
        message
    }

    pub(super) fn default_with_token() -> Config {
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
    fn the_token_comes_from_the_systemd_credential_when_the_variable_is_unset() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join(TOKEN_CREDENTIAL), format!("{TOKEN}\n")).unwrap();
        let dir_text = dir.path().to_string_lossy().into_owned();
        let vars = BTreeMap::from([(CREDENTIALS_ENV.to_owned(), dir_text.clone())]);
        let config = Config::load(None, &vars).expect("loads");
        assert_eq!(config.telegram.token.0, TOKEN);
        // The variable, when set, wins over the credential.
        let vars = BTreeMap::from([
            (CREDENTIALS_ENV.to_owned(), dir_text.clone()),
            (TOKEN_ENV.to_owned(), "77:from-env".to_owned()),
        ]);
        assert_eq!(
            Config::load(None, &vars).unwrap().telegram.token.0,
            "77:from-env"
        );
        // A credentials folder without the token is a missing token.
        std::fs::remove_file(dir.path().join(TOKEN_CREDENTIAL)).unwrap();
        let vars = BTreeMap::from([(CREDENTIALS_ENV.to_owned(), dir_text)]);
        let err = Config::load(None, &vars).expect_err("no token");
        assert!(matches!(err, ConfigError::MissingToken), "{err:?}");
        assert!(err.to_string().contains(TOKEN_CREDENTIAL), "{err}");
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
    fn bad_type_in_file_names_the_key() {
        let err = load_err("[dispatcher]\nqueue_limit = \"many\"\n", &[]);
        let message = assert_bad_value(&err, "dispatcher.queue_limit");
        assert!(message.contains("\"many\""), "{message}");
        let err = load_err("[dispatcher]\nqueue_limit = -1\n", &[]);
        assert_bad_value(&err, "dispatcher.queue_limit");
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
    fn agent_env_entry_must_be_a_string() {
        let err = load_err("[agent.env]\nDEBUG = 1\n", &[]);
        let message = assert_bad_value(&err, "agent.env.DEBUG");
        assert!(message.contains(": 1: "), "{message}");
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

    const EXAMPLE: &str = include_str!("../config.example.toml");

    #[test]
    fn example_config_equals_the_defaults() {
        let table: Table = EXAMPLE.parse().expect("example is valid TOML");
        let config = Config::from_table(table, &env(&[]), TOKEN, None).expect("example loads");
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

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
//! - this file: the schema and its defaults;
//! - `load`: [`Config::load`] (steps 1, 3 and 4);
//! - `error`: [`ConfigError`];
//! - `telegram`: `[telegram]` and the [`Secret`] that never prints;
//! - `env`: step 2, the `TURNSTILE_<SECTION>_<KEY>` overlay, and
//!   [`Config::from_env_and_file`], which reads this process's environment;
//! - `validate`: [`Config::validate`], the bounds ([`MAX_DURATION`],
//!   [`MAX_COUNT`]) and cross-key checks;
//! - `redact`: what may be shown: [`Config::to_redacted_toml`] (printed by
//!   `check-config`) and the scrubbing of the token from errors;
//! - `wording`: serde's messages in plain words, and the known key nearest
//!   to a misspelled one (`did you mean …?`).

mod enums;
mod env;
mod error;
mod load;
mod network;
mod places;
mod progress;
mod projects;
mod redact;
mod schedules;
mod sealing;
mod telegram;
mod validate;
mod wording;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use self::enums::{
    Backend, Busy, CatchUp, GroupMode, Keep, LogFormat, NetworkMode, OnInterrupted, PermissionMode,
    Sandbox, SettingSource, Stream,
};
pub use self::env::{ENV_PREFIX, NOT_CONFIG_VARS};
pub use self::error::ConfigError;
use self::error::bad_value;
use self::load::{Sections, probe};
pub use self::network::{HostPattern, HostRule, NetworkConfig, NetworkPolicy, normal_host};
pub use self::progress::ProgressConfig;
pub use self::projects::{MAX_PROJECT_NAME, ProjectConfig, is_project_name};
pub use self::schedules::{OperatorSchedule, SchedulesConfig};
pub use self::telegram::{Secret, TelegramConfig};
pub use self::validate::{MAX_COUNT, MAX_DURATION, MAX_MODEL_NAME, is_model_name};

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

/// Set by `/restart` on the re-executed process: the descriptor of what
/// the previous process handed over (`agent::host::handover`).
pub const HANDOVER_FD_ENV: &str = "TURNSTILE_HANDOVER_FD";

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
    /// Prompts that run on their own, on time.
    pub schedules: SchedulesConfig,
    /// Directories a conversation may move its agent to (`/project`).
    pub projects: BTreeMap<String, ProjectConfig>,
    /// The file this configuration was read from (absolute), if any: the
    /// agent's workdir must not contain it, and the sandbox hides it.
    #[serde(skip)]
    pub file: Option<PathBuf>,
    /// systemd's `$CREDENTIALS_DIRECTORY`, when set: it may hold the token,
    /// so the sandbox hides it.
    #[serde(skip)]
    pub credentials: Option<PathBuf>,
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
    /// At most one refusal per user per this long (in a private chat:
    /// strangers in a group get none).
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
    /// The models a conversation may switch to with `/model`; empty turns
    /// switching off.
    pub models: Vec<String>,
    /// Model turns per user turn (`claude`); 0 means no limit.
    pub max_turns: u32,
    /// How long a chat's agent process stays warm between turns; `0s`
    /// closes it after every turn.
    #[serde(with = "humantime_serde")]
    pub keep_warm: Duration,
    /// At most this many agent processes are kept warm across all chats;
    /// past it, a process is closed after its turn.
    pub max_warm: usize,
    /// A turn the model API refused for a usage limit runs again this long
    /// later (its messages parked meanwhile); `0s` reports the refusal.
    #[serde(with = "humantime_serde")]
    pub limit_retry: Duration,
    /// Each further refusal doubles the wait, up to this.
    #[serde(with = "humantime_serde")]
    pub limit_retry_max: Duration,
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
    /// The sandboxed agent's network: its own namespace, out only through
    /// turnstile's proxy to allowed hosts (`[agent.network]`).
    pub network: NetworkConfig,
    /// `acp`: the authentication method (an id of the agent's
    /// `authMethods`, such as `gemini-api-key`) to use when the agent
    /// offers it; empty authenticates with none.
    pub auth_method: String,
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

/// `[dispatcher]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DispatcherConfig {
    /// Turns running at once across all chats.
    pub max_concurrent_turns: usize,
    /// Pending messages per chat before new ones are refused.
    pub queue_limit: usize,
    /// Messages of one chat arriving within this window become one turn
    /// (besides those of one delivery and one album, which always do).
    #[serde(with = "humantime_serde")]
    pub merge_window: Duration,
    /// A message for a conversation whose turn is running: `steer` it into
    /// the turn, or `queue` it for the next.
    pub busy: Busy,
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
            models: Vec::new(),
            max_turns: 0,
            keep_warm: Duration::from_secs(600),
            max_warm: 32,
            limit_retry: Duration::from_secs(15 * 60),
            limit_retry_max: Duration::from_secs(2 * 3600),
            batch_hook: true,
            pass_env: Vec::new(),
            setting_sources: Vec::new(),
            mcp_servers: BTreeMap::new(),
            denied_tools: Vec::new(),
            permission_mode: PermissionMode::Ask,
            sandbox: Sandbox::Bubblewrap,
            launcher: Vec::new(),
            network: NetworkConfig::default(),
            auth_method: String::new(),
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
            // Zero: a lone message starts its turn at once. Messages that
            // arrive together (one delivery, an album) are still one turn,
            // and anything later is steered into it (`busy`).
            merge_window: Duration::ZERO,
            busy: Busy::Steer,
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

#[cfg(test)]
mod tests;

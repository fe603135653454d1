//! [`Config::validate`]: the values that parse but cannot work, and the
//! bounds every duration and count must keep.

use std::time::Duration;

use toml::Value;

use super::{Backend, Config, ConfigError, GroupMode, PermissionMode, Sandbox, bad_value};

/// The longest duration any key accepts (longer ones are surely typos, and
/// would overflow clock arithmetic).
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The shortest `telegram.max_pending_age`: an outage of a few seconds
/// must never cost an answer.
pub const MIN_PENDING_AGE: Duration = Duration::from_secs(60);

/// The largest `files.max_download`: 2000 MB, what a local Bot API server
/// hands out (Telegram's own servers stop at 20 MB).
pub const MAX_DOWNLOAD: u64 = 2_000 * 1024 * 1024;

/// The largest `turn.max_output`: 16 MiB of text in one turn.
pub const MAX_OUTPUT: u64 = 16 * 1024 * 1024;

/// The longest name in `agent.models`.
pub const MAX_MODEL_NAME: usize = 64;

/// Whether `name` may be passed as `--model NAME`: 1 to [`MAX_MODEL_NAME`]
/// letters, digits and `.-_:@/`, not starting with `-`.
pub fn is_model_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_MODEL_NAME
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:@/".contains(&b))
}

/// The largest count any key accepts.
pub const MAX_COUNT: usize = 1_000_000;

impl Config {
    /// Checks the values that parse but cannot work: zero clocks, no
    /// terminator tool, no turn slot or queue room, an API URL that is not
    /// http(s), a duration or count too large, and the agent's sealing keys
    /// (`sealing`). The token is not checked here.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BadValue`] naming the first offending key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_turn()?;
        self.check_bounds()?;
        self.check_files()?;
        self.check_endpoints()?;
        self.schedules.check()?;
        self.check_models()?;
        self.check_sealing()?;
        self.check_network()?;
        self.check_projects()?;
        self.check_places()
    }

    /// `agent.models`: each a model name a chat may pick (1 to
    /// [`MAX_MODEL_NAME`] letters, digits and `.-_:@/`, not starting with
    /// `-`), none twice.
    fn check_models(&self) -> Result<(), ConfigError> {
        let models = &self.agent.models;
        for (i, name) in models.iter().enumerate() {
            let shown = || Value::Array(models.iter().cloned().map(Value::String).collect());
            if !is_model_name(name) {
                return Err(bad_value(
                    "agent.models",
                    &shown(),
                    format!(
                        "{name:?} is not a model name (1 to {MAX_MODEL_NAME} letters, digits and .-_:@/, not starting with -)"
                    ),
                ));
            }
            if models[..i].contains(name) {
                return Err(bad_value(
                    "agent.models",
                    &shown(),
                    format!("{name:?} is listed twice"),
                ));
            }
        }
        Ok(())
    }

    /// The turn's clocks (none zero) and limits, and its terminator tools.
    fn check_turn(&self) -> Result<(), ConfigError> {
        let turn = &self.turn;
        let clocks = [
            ("turn.typing_interval", turn.typing_interval),
            ("turn.post_result_grace", turn.post_result_grace),
            ("turn.no_progress_timeout", turn.no_progress_timeout),
            ("turn.max_duration", turn.max_duration),
            ("turn.hard_deadline", turn.hard_deadline),
            ("progress.interval", self.progress.interval),
        ];
        for (key, clock) in clocks {
            if clock.is_zero() {
                let shown = Value::from(humantime::format_duration(clock).to_string());
                return Err(bad_value(key, &shown, "must be greater than zero"));
            }
        }
        if turn.max_messages == 0 {
            return Err(bad_value(
                "turn.max_messages",
                &Value::Integer(0),
                "must be at least 1",
            ));
        }
        if turn.max_output == 0 || turn.max_output > MAX_OUTPUT {
            return Err(bad_value(
                "turn.max_output",
                &Value::Integer(i64::try_from(turn.max_output).unwrap_or(i64::MAX)),
                format!("must be between 1 and {MAX_OUTPUT} bytes"),
            ));
        }
        if turn.terminator_tools.is_empty() {
            return Err(bad_value(
                "turn.terminator_tools",
                &Value::Array(Vec::new()),
                "must name at least one tool",
            ));
        }
        Ok(())
    }

    /// Every count and duration within its bounds.
    fn check_bounds(&self) -> Result<(), ConfigError> {
        let dispatcher = &self.dispatcher;
        let turn = &self.turn;
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
            (
                "telegram.pool_idle_timeout",
                self.telegram.pool_idle_timeout,
            ),
            ("telegram.max_pending_age", self.telegram.max_pending_age),
            ("access.refusal_cooldown", self.access.refusal_cooldown),
            ("agent.keep_warm", self.agent.keep_warm),
            ("agent.limit_retry", self.agent.limit_retry),
            ("agent.limit_retry_max", self.agent.limit_retry_max),
            ("turn.typing_interval", turn.typing_interval),
            ("turn.post_result_grace", turn.post_result_grace),
            ("turn.no_progress_timeout", turn.no_progress_timeout),
            ("turn.max_duration", turn.max_duration),
            ("turn.hard_deadline", turn.hard_deadline),
            ("dispatcher.merge_window", dispatcher.merge_window),
            ("dispatcher.drain_timeout", dispatcher.drain_timeout),
            ("dispatcher.idle_eviction", dispatcher.idle_eviction),
            ("files.transcribe_timeout", self.files.transcribe_timeout),
            ("progress.after", self.progress.after),
            ("progress.interval", self.progress.interval),
            ("schedules.min_interval", self.schedules.min_interval),
        ];
        for (key, duration) in durations {
            if duration > MAX_DURATION {
                let shown = Value::from(humantime::format_duration(duration).to_string());
                return Err(bad_value(key, &shown, "must be at most 365 days"));
            }
        }
        let age = self.telegram.max_pending_age;
        if age < MIN_PENDING_AGE {
            let shown = Value::from(humantime::format_duration(age).to_string());
            return Err(bad_value(
                "telegram.max_pending_age",
                &shown,
                "must be at least 1 minute",
            ));
        }
        let agent = &self.agent;
        if agent.limit_retry_max < agent.limit_retry {
            let shown = Value::from(humantime::format_duration(agent.limit_retry_max).to_string());
            return Err(bad_value(
                "agent.limit_retry_max",
                &shown,
                "must be at least agent.limit_retry",
            ));
        }
        Ok(())
    }

    /// The received files' size limit and the transcription command.
    fn check_files(&self) -> Result<(), ConfigError> {
        let max_download = self.files.max_download;
        if max_download == 0 || max_download > MAX_DOWNLOAD {
            return Err(bad_value(
                "files.max_download",
                &Value::Integer(i64::try_from(max_download).unwrap_or(i64::MAX)),
                format!("must be between 1 and {MAX_DOWNLOAD} bytes"),
            ));
        }
        if !self.files.transcribe.is_empty() && self.files.transcribe_timeout.is_zero() {
            return Err(bad_value(
                "files.transcribe_timeout",
                &Value::from("0s"),
                "must be greater than zero when files.transcribe is set",
            ));
        }
        if self
            .files
            .transcribe
            .first()
            .is_some_and(|c| c.trim().is_empty())
        {
            return Err(bad_value(
                "files.transcribe",
                &Value::Array(
                    self.files
                        .transcribe
                        .iter()
                        .map(|a| Value::from(a.as_str()))
                        .collect(),
                ),
                "the first item must name the command",
            ));
        }
        Ok(())
    }

    /// The Bot API's URL and the `[ops]` listen address.
    fn check_endpoints(&self) -> Result<(), ConfigError> {
        let api_url = self.telegram.api_url.as_str();
        let host = api_url
            .strip_prefix("https://")
            .or_else(|| api_url.strip_prefix("http://"));
        match host {
            Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => {}
            _ => {
                return Err(bad_value(
                    "telegram.api_url",
                    &Value::from(api_url),
                    "expected an http:// or https:// URL",
                ));
            }
        }
        let listen = self.ops.listen.trim();
        if !listen.is_empty() && listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(bad_value(
                "ops.listen",
                &Value::from(listen),
                "expected an address and port, like 127.0.0.1:9464",
            ));
        }
        Ok(())
    }
}

impl Config {
    /// What is allowed but worth saying out loud (`check-config` prints each
    /// on stderr, a start logs each): settings that give the agent more than
    /// the defaults do.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.schedules.agent == PermissionMode::Allow {
            warnings.push(
                "schedules.agent = \"allow\": the agent makes schedules without asking anyone; what it schedules runs later as a prompt of the chat"
                    .to_string(),
            );
        }
        if self.agent.permission_mode == PermissionMode::Allow {
            warnings.push(
                "agent.permission_mode = \"allow\": every tool the agent asks for runs without asking anyone (agent.denied_tools still applies)"
                    .to_string(),
            );
        }
        if self.agent.backend != Backend::Scripted && self.agent.sandbox == Sandbox::None {
            warnings.push(
                "agent.sandbox = \"none\": the agent runs unconfined as turnstile's user; it can \
                 read the state file and other chats' workdirs, and only its process group is \
                 killed when its session ends: a background job of a Bash command (which the \
                 CLI starts in a session of its own) or anything started with setsid outlives it \
                 (the default \"bubblewrap\" seals it); it also shares the host's network \
                 (agent.network needs the sandbox)"
                    .to_string(),
            );
        }
        warnings.extend(self.network_warning());
        if !self.agent.setting_sources.is_empty() {
            let sources: Vec<&str> = self
                .agent
                .setting_sources
                .iter()
                .map(|s| s.as_str())
                .collect();
            warnings.push(format!(
                "agent.setting_sources = {sources:?}: the CLI reads settings (permissions, hooks) \
                 from files the agent itself can write (its workdir's .claude/, its home); an \
                 agent can widen its own permissions for its next session"
            ));
        }
        let listen = self.ops.listen.trim();
        if let Ok(addr) = listen.parse::<std::net::SocketAddr>()
            && !addr.ip().is_loopback()
        {
            warnings.push(format!(
                "ops.listen = \"{listen}\" is not a loopback address: /healthz and /metrics \
                 (chat counts, turn figures) are served without authentication to whoever \
                 reaches it"
            ));
        }
        let access = &self.access;
        if access.allowed_users.is_empty()
            && access.admins.is_empty()
            && access.allowed_chats.is_empty()
        {
            warnings.push(
                "access.allowed_users, access.admins and access.allowed_chats are all empty: \
                 nobody can talk to the bot (every message is refused); add your Telegram user \
                 id to access.allowed_users"
                    .to_string(),
            );
        }
        if access.group_mode == GroupMode::All {
            warnings.push(
                "access.group_mode = \"all\": Telegram gives a bot every group message only \
                 when its privacy mode is off (BotFather: /setprivacy, Disable; then remove and \
                 re-add the bot to the groups it is already in) or it is an admin of the group; \
                 with privacy mode on (the default) it gets little more than commands and \
                 replies to it"
                    .to_string(),
            );
        }
        if self.agent.backend != Backend::Scripted {
            warnings.extend(self.agent_program_warning());
            warnings.extend(self.unset_pass_env_warnings());
        }
        warnings.extend(self.sharing_warnings());
        warnings.extend(self.acp_allowed_tools_warnings());
        warnings
    }

    /// `agent.allowed_tools` and `[projects.*] allowed_tools` with the
    /// `acp` backend, where they allow nothing: a request's tool is
    /// `acp:<kind>` and its title the agent's own words, which no entry
    /// matches.
    fn acp_allowed_tools_warnings(&self) -> Vec<String> {
        if self.agent.backend != Backend::Acp {
            return Vec::new();
        }
        let projects = self
            .projects
            .iter()
            .filter(|(_, p)| !p.allowed_tools.is_empty())
            .map(|(name, p)| (format!("projects.{name}.allowed_tools"), &p.allowed_tools));
        std::iter::once(("agent.allowed_tools".to_owned(), &self.agent.allowed_tools))
            .filter(|(_, tools)| !tools.is_empty())
            .chain(projects)
            .map(|(key, tools)| {
                format!(
                    "{key} = {tools:?} does not apply to the acp backend: an ACP request's \
                     tool is `acp:<kind>` and its title is the agent's own words, so no entry \
                     ever lets one run unasked; every request is decided by \
                     agent.denied_tools (a whole title), agent.permission_mode, or the chat \
                     (\"Always in this chat\" remembers that exact request); remove the key"
                )
            })
            .collect()
    }

    /// The program the `claude` backend starts, when it cannot be found on
    /// `PATH` (the agent's, `agent.env.PATH` if set) or is not executable:
    /// `agent.launcher`'s first word when there is one (the command then
    /// runs wherever the launcher takes it), else `agent.command`. A
    /// relative path with a slash is resolved in each chat's workdir and
    /// not checked.
    fn agent_program_warning(&self) -> Option<String> {
        let (key, program) = match self.agent.launcher.first() {
            Some(first) => ("agent.launcher", first.as_str()),
            None => ("agent.command", self.agent.command.as_str()),
        };
        let path = self
            .agent
            .env
            .get("PATH")
            .cloned()
            .or_else(|| std::env::var("PATH").ok())
            .unwrap_or_default();
        match find_executable(program, &path) {
            Lookup::Found => None,
            Lookup::Unchecked => None,
            Lookup::Missing if program.starts_with('/') => Some(format!(
                "{key} = \"{program}\": no such file; the agent cannot start (every turn \
                 fails)"
            )),
            Lookup::Missing => Some(format!(
                "{key} = \"{program}\": not found on PATH ({path}); the agent cannot start \
                 (every turn fails): install it, or give its full path; the service's PATH \
                 may differ from this shell's"
            )),
            Lookup::NotExecutable(file) => Some(format!(
                "{key} = \"{program}\": {} is not executable; the agent cannot start (every \
                 turn fails)",
                file.display()
            )),
        }
    }
}

/// Where a program was looked for.
#[derive(Debug, PartialEq)]
enum Lookup {
    /// An executable file.
    Found,
    /// Nothing by that name.
    Missing,
    /// Only a file that may not be executed.
    NotExecutable(std::path::PathBuf),
    /// A relative path with a slash: not checked.
    Unchecked,
}

/// Looks `program` up as `execvp` would: an absolute path as it is, a bare
/// name in each directory of `path`.
fn find_executable(program: &str, path: &str) -> Lookup {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |file: &std::path::Path| {
        std::fs::metadata(file).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let candidates: Vec<std::path::PathBuf> = if program.starts_with('/') {
        vec![program.into()]
    } else if program.contains('/') || program.is_empty() {
        return Lookup::Unchecked;
    } else {
        std::env::split_paths(path)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join(program))
            .collect()
    };
    if candidates.iter().any(|file| executable(file)) {
        return Lookup::Found;
    }
    match candidates.into_iter().find(|file| file.is_file()) {
        Some(file) => Lookup::NotExecutable(file),
        None => Lookup::Missing,
    }
}

#[cfg(test)]
mod tests;

//! The agent's sealing keys: where each chat's workdir and home are, and
//! the checks of `agent.workdir`, `agent.launcher`, `agent.pass_env`,
//! `agent.env`, `agent.mcp_servers` and `agent.denied_tools`.

use std::path::{Component, Path, PathBuf};

use toml::Value;

use super::{Config, ConfigError, ENV_PREFIX, TOKEN_ENV, bad_value};

/// The placeholder for the chat id.
const CHAT: &str = "{chat}";
/// The placeholder for the chat's workdir (launcher only).
const WORKDIR: &str = "{workdir}";
/// turnstile's own MCP server, which no operator server may replace.
const OWN_SERVER: &str = "telegram-tools";
/// The state path that is no file.
const IN_MEMORY: &str = ":memory:";

/// turnstile's working directory (`/` when it cannot be read).
pub(super) fn cwd() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
}

/// `path` made absolute against `base`, with `.` and `..` resolved
/// lexically (symlinks are not followed).
#[must_use]
pub fn absolute(base: &Path, path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_owned()
    } else {
        base.join(path)
    };
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

impl Config {
    /// The state file, absolute; `None` when the state is in memory.
    #[must_use]
    pub fn state_file(&self) -> Option<PathBuf> {
        let path = &self.state.path;
        if path.as_os_str().is_empty() || path == Path::new(IN_MEMORY) {
            return None;
        }
        Some(absolute(&cwd(), path))
    }

    /// Where relative agent paths start: the state file's directory
    /// (turnstile's own when the state is in memory).
    #[must_use]
    pub fn state_dir(&self) -> PathBuf {
        self.state_file()
            .and_then(|file| file.parent().map(Path::to_owned))
            .unwrap_or_else(cwd)
    }

    /// `agent.workdir`, absolute, `{chat}` unfilled (empty: the default).
    #[must_use]
    pub fn agent_workdir(&self) -> PathBuf {
        let workdir = &self.agent.workdir;
        let workdir = if workdir.as_os_str().is_empty() {
            Path::new(super::DEFAULT_WORKDIR)
        } else {
            workdir.as_path()
        };
        absolute(&self.state_dir(), workdir)
    }

    /// Each chat's agent home under the sandbox (`HOME` and
    /// `CLAUDE_CONFIG_DIR` unless `agent.env` sets them): `homes/{chat}`
    /// beside the state file, kept so that `--resume` finds its session.
    #[must_use]
    pub fn agent_home(&self) -> PathBuf {
        self.state_dir().join("homes").join(CHAT)
    }

    /// Checks the sealing keys (see the module docs).
    pub(super) fn check_sealing(&self) -> Result<(), ConfigError> {
        let agent = &self.agent;
        let workdir = agent.workdir.to_string_lossy();
        check_placeholders("agent.workdir", &workdir, &[CHAT])?;
        for arg in &agent.launcher {
            check_placeholders("agent.launcher", arg, &[CHAT, WORKDIR])?;
        }
        if agent.launcher.first().is_some_and(String::is_empty) {
            return Err(bad_value(
                "agent.launcher",
                &Value::from(""),
                "the first element is the program to run and must not be empty",
            ));
        }
        for name in &agent.pass_env {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(bad_value(
                    "agent.pass_env",
                    &Value::from(name.as_str()),
                    "not an environment variable name",
                ));
            }
            check_not_forbidden("agent.pass_env", name)?;
        }
        for name in agent.env.keys() {
            check_not_forbidden(&format!("agent.env.{name}"), name)?;
        }
        for (name, server) in &agent.mcp_servers {
            check_server(name, server)?;
        }
        for tool in &agent.denied_tools {
            if tool.trim().is_empty() || tool.contains(',') {
                return Err(bad_value(
                    "agent.denied_tools",
                    &Value::from(tool.as_str()),
                    "one tool name (or rule such as \"Bash(rm *)\") per entry, without commas",
                ));
            }
        }
        self.check_workdir()
    }

    /// No chat's workdir may contain the state file or the config file.
    fn check_workdir(&self) -> Result<(), ConfigError> {
        let shown = self.agent.workdir.to_string_lossy().into_owned();
        self.check_workdir_at("agent.workdir", &shown, &self.agent_workdir())
    }

    /// `workdir` (absolute, set by `key` as `shown`) is a workdir: it
    /// contains neither the state file nor the config file.
    pub(super) fn check_workdir_at(
        &self,
        key: &str,
        shown: &str,
        workdir: &Path,
    ) -> Result<(), ConfigError> {
        check_placeholders(key, shown, &[CHAT])?;
        let files = [
            ("the state file", "state.path", self.state_file()),
            ("the config file", "--config", self.file.clone()),
        ];
        for (what, from, file) in files {
            let Some(file) = file else { continue };
            if workdir_contains(workdir, &file) {
                return Err(bad_value(
                    key,
                    &Value::from(shown),
                    format!(
                        "the agent's workdir `{}` contains {what} `{}` ({from}): the agent \
                         could read it; put the workdir elsewhere",
                        workdir.display(),
                        file.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Every `{…}` in `text` is one of `allowed`.
impl Config {
    /// A variable `agent.pass_env` names that turnstile's own environment
    /// lacks: the agent goes without it (a credential not exported is the
    /// usual first-hour failure, told only at the first turn otherwise).
    pub(super) fn unset_pass_env_warnings(&self) -> Vec<String> {
        self.agent
            .pass_env
            .iter()
            .filter(|name| std::env::var_os(name.as_str()).is_none())
            .map(|name| {
                format!(
                    "agent.pass_env names {name}, which is not set in turnstile's environment: \
                     the agent starts without it (export it before starting turnstile)"
                )
            })
            .collect()
    }
}

fn check_placeholders(key: &str, text: &str, allowed: &[&str]) -> Result<(), ConfigError> {
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let tail = &rest[start..];
        let Some(end) = tail.find('}') else {
            return Err(bad_value(key, &Value::from(text), "an unclosed `{`"));
        };
        let placeholder = &tail[..=end];
        if !allowed.contains(&placeholder) {
            return Err(bad_value(
                key,
                &Value::from(text),
                format!(
                    "unknown placeholder `{placeholder}`; known: {}",
                    allowed.join(", ")
                ),
            ));
        }
        rest = &tail[end + 1..];
    }
    Ok(())
}

/// The bot token and `TURNSTILE_*` never reach an agent.
fn check_not_forbidden(key: &str, name: &str) -> Result<(), ConfigError> {
    if name == TOKEN_ENV || name.starts_with(ENV_PREFIX) {
        return Err(bad_value(
            key,
            &Value::from(name),
            "the bot token and TURNSTILE_* variables never reach the agent",
        ));
    }
    Ok(())
}

/// An `agent.mcp_servers` entry has the shape of one of Claude's
/// `mcpServers`: a table with `command` (stdio) or `url` (`type` "sse" or
/// "http"). Its values are not shown in the error (its `env` may hold
/// secrets).
fn check_server(name: &str, server: &serde_json::Value) -> Result<(), ConfigError> {
    let key = format!("agent.mcp_servers.{name}");
    let fail = |reason: &str| Err(bad_value(&key, &Value::from(name), reason));
    if name == OWN_SERVER {
        return fail("this name is turnstile's own server");
    }
    if name.is_empty() || name.contains("__") {
        return fail("a server name must be non-empty and without `__`");
    }
    let Some(table) = server.as_object() else {
        return fail("expected a table with `command` or `url`");
    };
    let text = |field: &str| table.get(field).and_then(serde_json::Value::as_str);
    let kind = match table.get("type") {
        None => None,
        Some(kind) => match kind.as_str() {
            Some(kind @ ("stdio" | "sse" | "http")) => Some(kind),
            _ => return fail("`type` must be \"stdio\", \"sse\" or \"http\""),
        },
    };
    let ok = match kind {
        None => text("command").is_some() || text("url").is_some(),
        Some("stdio") => text("command").is_some(),
        Some(_) => text("url").is_some(),
    };
    if !ok {
        return fail("expected a string `command` (stdio) or `url` (sse, http)");
    }
    if let Some(env) = table.get("env")
        && !env
            .as_object()
            .is_some_and(|env| env.values().all(serde_json::Value::is_string))
    {
        return fail("`env` must be a table of strings");
    }
    Ok(())
}

/// Whether some chat's workdir from `template` (absolute, `{chat}`
/// placeholders allowed) is `file` or one of its ancestors.
#[must_use]
pub fn workdir_contains(template: &Path, file: &Path) -> bool {
    let mut file_parts = file.components();
    template.components().all(|pattern| {
        file_parts.next().is_some_and(|part| {
            component_matches(
                &pattern.as_os_str().to_string_lossy(),
                &part.as_os_str().to_string_lossy(),
            )
        })
    })
}

/// Whether a path component `name` can come from `pattern` with each
/// `{chat}` filled by a chat id.
fn component_matches(pattern: &str, name: &str) -> bool {
    let Some((prefix, rest)) = pattern.split_once(CHAT) else {
        return pattern == name;
    };
    let Some(tail) = name.strip_prefix(prefix) else {
        return false;
    };
    // A chat id, then `_` and a topic number in a forum topic.
    let digits = tail.strip_prefix('-').unwrap_or(tail);
    let id_len = digits.chars().take_while(char::is_ascii_digit).count();
    if id_len == 0 {
        return false;
    }
    let after = &digits[id_len..];
    if component_matches(rest, after) {
        return true;
    }
    after.strip_prefix('_').is_some_and(|topic| {
        let len = topic.chars().take_while(char::is_ascii_digit).count();
        len > 0 && component_matches(rest, &topic[len..])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_bad_value, load_err, load_text};

    #[test]
    fn absolute_resolves_dots() {
        assert_eq!(
            absolute(Path::new("/a/b"), Path::new("../c/./d")),
            PathBuf::from("/a/c/d")
        );
        assert_eq!(
            absolute(Path::new("/x"), Path::new("/y/z")),
            PathBuf::from("/y/z")
        );
    }

    #[test]
    fn a_workdir_contains_a_file_under_some_chat_dir() {
        let t = Path::new("/srv/ws/{chat}");
        assert!(workdir_contains(t, Path::new("/srv/ws/12/state.db")));
        assert!(workdir_contains(t, Path::new("/srv/ws/-100/x/y")));
        assert!(workdir_contains(t, Path::new("/srv/ws/-100_42/state.db")));
        assert!(!workdir_contains(t, Path::new("/srv/ws/-100_/state.db")));
        assert!(!workdir_contains(t, Path::new("/srv/ws/state.db")));
        assert!(!workdir_contains(t, Path::new("/srv/state.db")));
        assert!(!workdir_contains(t, Path::new("/srv/ws/abc/state.db")));
        let t = Path::new("/srv/chat-{chat}.d");
        assert!(workdir_contains(t, Path::new("/srv/chat-5.d/s.db")));
        assert!(!workdir_contains(t, Path::new("/srv/chat-5/s.db")));
        assert!(workdir_contains(Path::new("/srv"), Path::new("/srv/s.db")));
        assert!(!workdir_contains(Path::new("/srv/a"), Path::new("/srv")));
    }

    #[test]
    fn the_workdir_defaults_to_one_per_chat_beside_the_state_file() {
        let config = load_text("[state]\npath = \"/var/lib/t/t.db\"\n", &[]).expect("loads");
        assert_eq!(
            config.agent_workdir(),
            PathBuf::from("/var/lib/t/workspaces/{chat}")
        );
        assert_eq!(
            config.agent_home(),
            PathBuf::from("/var/lib/t/homes/{chat}")
        );
        let config = load_text(
            "[agent]\nworkdir = \"../ws/{chat}\"\n[state]\npath = \"/var/lib/t/t.db\"\n",
            &[],
        )
        .expect("loads");
        assert_eq!(config.agent_workdir(), PathBuf::from("/var/lib/ws/{chat}"));
    }

    #[test]
    fn a_workdir_holding_the_state_file_is_refused_naming_both() {
        let err = load_err(
            "[agent]\nworkdir = \"/var/lib/t\"\n[state]\npath = \"/var/lib/t/t.db\"\n",
            &[],
        );
        let message = assert_bad_value(&err, "agent.workdir");
        assert!(message.contains("`/var/lib/t`"), "{message}");
        assert!(message.contains("`/var/lib/t/t.db`"), "{message}");
    }

    #[test]
    fn bad_placeholders_are_refused() {
        let err = load_err("[agent]\nworkdir = \"/w/{chat_id}\"\n", &[]);
        let message = assert_bad_value(&err, "agent.workdir");
        assert!(message.contains("`{chat_id}`"), "{message}");
        let err = load_err("[agent]\nlauncher = [\"ssh\", \"{host}\"]\n", &[]);
        assert_bad_value(&err, "agent.launcher");
        let err = load_err("[agent]\nlauncher = [\"ssh\", \"{chat\"]\n", &[]);
        assert_bad_value(&err, "agent.launcher");
        let err = load_err("[agent]\nworkdir = \"/w/{workdir}\"\n", &[]);
        assert_bad_value(&err, "agent.workdir");
        load_text(
            "[agent]\nlauncher = [\"ssh\", \"h\", \"cd {workdir} && x {chat}\"]\n",
            &[],
        )
        .expect("known placeholders load");
    }

    #[test]
    fn the_token_and_turnstile_vars_cannot_be_passed() {
        for name in ["TELEGRAM_BOT_TOKEN", "TURNSTILE_LOG"] {
            let err = load_err(&format!("[agent]\npass_env = [\"{name}\"]\n"), &[]);
            assert_bad_value(&err, "agent.pass_env");
        }
        let err = load_err("[agent.env]\nTELEGRAM_BOT_TOKEN = \"x\"\n", &[]);
        assert_bad_value(&err, "agent.env.TELEGRAM_BOT_TOKEN");
        let err = load_err("[agent]\npass_env = [\"A=B\"]\n", &[]);
        assert_bad_value(&err, "agent.pass_env");
    }

    #[test]
    fn mcp_servers_have_the_shape_of_claudes() {
        load_text(
            "[agent.mcp_servers.fs]\ncommand = \"mcp-fs\"\nargs = [\"/srv\"]\nenv = { K = \"v\" }\n\
             [agent.mcp_servers.web]\ntype = \"http\"\nurl = \"https://mcp.example/\"\n",
            &[],
        )
        .expect("loads");
        for (text, name) in [
            (
                "[agent.mcp_servers.telegram-tools]\ncommand = \"x\"\n",
                "telegram-tools",
            ),
            ("[agent.mcp_servers.a]\nargs = []\n", "a"),
            (
                "[agent.mcp_servers.a]\ntype = \"sdk\"\ncommand = \"x\"\n",
                "a",
            ),
            (
                "[agent.mcp_servers.a]\ntype = \"http\"\ncommand = \"x\"\n",
                "a",
            ),
            (
                "[agent.mcp_servers.a]\ncommand = \"x\"\nenv = { K = 1 }\n",
                "a",
            ),
            ("[agent.mcp_servers]\na = \"x\"\n", "a"),
        ] {
            let err = load_err(text, &[]);
            assert_bad_value(&err, &format!("agent.mcp_servers.{name}"));
        }
        let err = load_err(
            "[agent.mcp_servers.a]\nenv = { SECRET = \"hunter2\" }\n",
            &[],
        );
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn denied_tools_are_one_per_entry() {
        let err = load_err("[agent]\ndenied_tools = [\"Bash,Write\"]\n", &[]);
        assert_bad_value(&err, "agent.denied_tools");
        load_text(
            "[agent]\ndenied_tools = [\"Bash(rm *)\", \"WebFetch\"]\n",
            &[],
        )
        .expect("loads");
    }
}

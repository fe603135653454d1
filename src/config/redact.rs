//! What may be shown of a configuration: [`Config::to_redacted_toml`], which
//! `check-config` prints, and the scrubbing of the token from every
//! [`ConfigError`].

use toml::{Table, Value};

use super::{Config, ConfigError};

/// What a secret is shown as.
const REDACTED: &str = "<redacted>";

impl ConfigError {
    /// Replaces every occurrence of `token` in the error's text.
    pub(super) fn redact(self, token: &str) -> Self {
        if token.is_empty() {
            return self;
        }
        let scrub = |text: String| text.replace(token, REDACTED);
        match self {
            // A path and an I/O error hold nothing read from the file or from
            // the environment's values.
            Self::Read { .. } | Self::MissingToken | Self::Credential { .. } => self,
            Self::Parse { path, message } => Self::Parse {
                path,
                message: scrub(message),
            },
            Self::UnknownKey { key, suggestion } => Self::UnknownKey {
                key: scrub(key),
                suggestion: suggestion.map(scrub),
            },
            Self::UnknownEnv { var, suggestion } => Self::UnknownEnv {
                var: scrub(var),
                suggestion: suggestion.map(scrub),
            },
            Self::BadValue { key, value, reason } => Self::BadValue {
                key: scrub(key),
                value: scrub(value),
                reason: scrub(reason),
            },
        }
    }
}

impl Config {
    /// The effective configuration as TOML, durations as humantime strings.
    /// The token, when set, is shown as `token = "<redacted>"` under
    /// `[telegram]`; the text never contains the token itself. The values of
    /// `agent.env` and of the MCP servers' `env` and `headers` are shown as
    /// `"<redacted>"` too.
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
        if let Some(Value::Table(agent)) = table.get_mut("agent") {
            redact_agent(agent);
        }
        toml::to_string(&table).unwrap_or_else(|err| format!("# cannot render the config: {err}\n"))
    }
}

/// The agent's secrets: the values of `agent.env`, and of each
/// `agent.mcp_servers` entry's `env` and `headers` (names are kept).
fn redact_agent(agent: &mut Table) {
    let hide = |entries: &mut Table| {
        for (_, value) in entries.iter_mut() {
            *value = Value::from(REDACTED);
        }
    };
    if let Some(Value::Table(env)) = agent.get_mut("env") {
        hide(env);
    }
    if let Some(Value::Table(servers)) = agent.get_mut("mcp_servers") {
        for (_, server) in servers.iter_mut() {
            let Value::Table(server) = server else {
                continue;
            };
            for field in ["env", "headers"] {
                if let Some(Value::Table(entries)) = server.get_mut(field) {
                    hide(entries);
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;
    use crate::config::tests::{
        TOKEN, assert_bad_value, default_with_token, env, load_err, load_text,
    };

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
            "[agent]\nargs = [\"-v\"]\n",
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
        let mut reloaded = Config::from_table(table, &env(&[]), TOKEN, None).expect("reloads");
        reloaded.file.clone_from(&config.file);
        assert_eq!(reloaded, config);
    }

    #[test]
    fn redacted_toml_hides_the_agents_env_and_mcp_secrets() {
        let config = load_text(
            "[agent.env]\nAPI_KEY = \"sk-env-secret\"\n\
             [agent.mcp_servers.fs]\ncommand = \"mcp-fs\"\nenv = { T = \"mcp-env-secret\" }\n\
             [agent.mcp_servers.web]\nurl = \"https://x.example\"\n\
             headers = { Authorization = \"Bearer hdr-secret\" }\n",
            &[],
        )
        .expect("loads");
        let text = config.to_redacted_toml();
        for secret in ["sk-env-secret", "mcp-env-secret", "hdr-secret"] {
            assert!(!text.contains(secret), "{text}");
        }
        for kept in ["API_KEY", "mcp-fs", "Authorization", "https://x.example"] {
            assert!(text.contains(kept), "{kept} missing: {text}");
        }
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
        config.agent.system_prompt = "tok tok".to_owned();
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
}

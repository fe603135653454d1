//! Step 2 of [`Config::load`]: the `TURNSTILE_<SECTION>_<KEY>` environment
//! overlay. Each variable is matched against the known keys (those of the
//! defaults) and its text is coerced by the type of the key's default.

use std::collections::BTreeMap;
use std::path::Path;

use toml::{Table, Value};

use super::wording::closest;
use super::{Config, ConfigError, HANDOVER_FD_ENV, RESTARTED_FROM_ENV, Sections, bad_value, probe};

/// The prefix of the environment variables that override config keys:
/// `TURNSTILE_<SECTION>_<KEY>`.
pub const ENV_PREFIX: &str = "TURNSTILE_";

/// `TURNSTILE_*` variables that are not config keys: `TURNSTILE_LOG` is the
/// log filter read by the binary; the other marks a restarted process.
pub const NOT_CONFIG_VARS: &[&str] = &["TURNSTILE_LOG", RESTARTED_FROM_ENV, HANDOVER_FD_ENV];

impl Config {
    /// [`Config::load`] with this process's environment. A variable whose
    /// name or value is not UTF-8 is read lossily.
    ///
    /// # Errors
    ///
    /// As [`Config::load`].
    pub fn from_env_and_file(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load(path, &process_env())
    }

    /// [`Config::load_offline`] with this process's environment.
    ///
    /// # Errors
    ///
    /// As [`Config::load_offline`].
    pub fn offline_from_env_and_file(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_offline(path, &process_env())
    }
}

/// This process's environment, read lossily.
fn process_env() -> BTreeMap<String, String> {
    std::env::vars_os()
        .map(|(name, value)| {
            (
                name.to_string_lossy().into_owned(),
                value.to_string_lossy().into_owned(),
            )
        })
        .collect()
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
pub(super) fn apply_env(
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
            let known = env_names(defaults);
            let suggestion = closest(var, known.iter().map(String::as_str));
            return Err(ConfigError::UnknownEnv {
                suggestion: suggestion.map(str::to_owned),
                var: var.clone(),
            });
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
            if let (Value::Table(fields), Some(name)) = (default, strip_word(rest, key))
                && !name.is_empty()
            {
                // A table with fields of its own (`[agent.network]`) names
                // them in lowercase; a free-form one (`agent.env`) as given.
                let name = fields
                    .keys()
                    .find(|field| field.to_uppercase() == name)
                    .map_or(name, String::as_str);
                return Some(EnvTarget::Entry { section, key, name });
            }
        }
    }
    None
}

/// Every variable that names a key (`TURNSTILE_<SECTION>_<KEY>`, and
/// `…_<FIELD>` for each field of a table with fields of its own), and the
/// `TURNSTILE_*` variables that are not keys: what a misspelled name may
/// have meant.
fn env_names(defaults: &Table) -> Vec<String> {
    let mut names: Vec<String> = NOT_CONFIG_VARS.iter().map(|&var| var.to_owned()).collect();
    for (section, known) in defaults {
        let Value::Table(known) = known else {
            continue;
        };
        for (key, default) in known {
            let name = format!("{ENV_PREFIX}{section}_{key}").to_uppercase();
            if let Value::Table(fields) = default {
                names.extend(
                    fields
                        .keys()
                        .map(|field| format!("{name}_{}", field.to_uppercase())),
                );
            }
            names.push(name);
        }
    }
    names
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
            .map_err(|_| bad("expected a whole number".to_owned())),
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
                            "expected a comma-separated list of whole numbers; `{item}` is not one"
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::config::tests::{assert_bad_value, default_with_token, env, load_err, load_text};
    use crate::config::{Config, TOKEN_ENV};

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
    fn unknown_env_var_is_rejected() {
        let err = Config::load(None, &env(&[("TURNSTILE_TURN_POST_RESULT_GRCE", "2s")]))
            .expect_err("unknown variable");
        assert!(
            matches!(&err, ConfigError::UnknownEnv { var, .. } if var == "TURNSTILE_TURN_POST_RESULT_GRCE"),
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
                matches!(&err, ConfigError::UnknownEnv { var: got, .. } if got == var),
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
    fn bad_duration_from_env_names_the_variable() {
        let err = Config::load(None, &env(&[("TURNSTILE_TURN_MAX_DURATION", "forever")]))
            .expect_err("bad duration");
        let message = assert_bad_value(&err, "turn.max_duration");
        assert!(message.contains("\"forever\""), "{message}");
        assert!(message.contains("TURNSTILE_TURN_MAX_DURATION"), "{message}");
    }

    #[test]
    fn bad_integer_from_env_names_the_key() {
        let err = Config::load(None, &env(&[("TURNSTILE_DISPATCHER_QUEUE_LIMIT", "lots")]))
            .expect_err("bad integer");
        let message = assert_bad_value(&err, "dispatcher.queue_limit");
        assert!(
            message.contains("\"lots\": expected a whole number"),
            "{message}"
        );
        assert!(
            message.contains("TURNSTILE_DISPATCHER_QUEUE_LIMIT"),
            "{message}"
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
}

//! [`Config::load`]: steps 1, 3 and 4 of the module docs (the file's keys
//! checked, the merged table deserialized key by key, the result validated
//! and the token read).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use toml::{Table, Value};

use super::env::apply_env;
use super::wording::{closest, plain, unknown_field};
use super::{
    CREDENTIALS_ENV, Config, ConfigError, Secret, TOKEN_CREDENTIAL, TOKEN_ENV, bad_value, sealing,
};

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
    pub(super) fn from_table(
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
pub(super) fn token_from(env: &BTreeMap<String, String>) -> Result<String, ConfigError> {
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
pub(super) type Sections = BTreeMap<String, Table>;

/// `Config::default()` as TOML: the source of the set of known keys, their
/// types and which of them are durations.
pub(super) fn default_table() -> Table {
    // Serializing plain structs of strings, integers, lists, maps and
    // durations cannot fail; the unit tests load the defaults through here.
    Table::try_from(Config::default()).expect("the default config serializes to a TOML table")
}

/// Reads and parses the config file.
pub(super) fn read_file(path: &Path) -> Result<Table, ConfigError> {
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
pub(super) fn check_keys(file: Table, defaults: &Table) -> Result<Sections, ConfigError> {
    let mut sections = Sections::new();
    for (section, value) in file {
        let Some(Value::Table(known)) = defaults.get(&section) else {
            let suggestion = closest(&section, defaults.keys().map(String::as_str));
            return Err(ConfigError::UnknownKey {
                suggestion: suggestion.map(str::to_owned),
                key: section,
            });
        };
        let Value::Table(entries) = value else {
            let reason = if section == "schedules" {
                "expected a table `[schedules]`; write each schedule as `[[schedules.list]]`"
                    .to_owned()
            } else {
                format!("expected a table `[{section}]`")
            };
            return Err(bad_value(&section, &value, reason));
        };
        // `[projects.NAME]`: the names are the operator's; each table's
        // keys are checked when it is read (`ProjectConfig`).
        let free_form = section == "projects";
        if let Some(key) = entries
            .keys()
            .find(|key| !free_form && !known.contains_key(*key))
        {
            let suggestion = closest(key, known.keys().map(String::as_str));
            return Err(ConfigError::UnknownKey {
                key: format!("{section}.{key}"),
                suggestion: suggestion.map(|near| format!("{section}.{near}")),
            });
        }
        sections.insert(section, entries);
    }
    Ok(sections)
}

/// Deserializes a config holding only `section.key = value`.
pub(super) fn probe(section: &str, key: &str, value: Value) -> Result<Config, toml::de::Error> {
    let section_table = Table::from_iter([(key.to_owned(), value)]);
    Table::from_iter([(section.to_owned(), Value::Table(section_table))]).try_into()
}

/// Step 3: deserializes the merged sections; on failure, names the key.
pub(super) fn deserialize(sections: &Sections, defaults: &Table) -> Result<Config, ConfigError> {
    let table: Table = sections
        .iter()
        .map(|(section, entries)| (section.clone(), Value::Table(entries.clone())))
        .collect();
    table.try_into::<Config>().map_err(|err| {
        locate_bad_value(sections, defaults).unwrap_or_else(|| ConfigError::BadValue {
            key: "config".to_owned(),
            value: String::new(),
            reason: plain(err.message()),
        })
    })
}

/// Tries each key alone to find the one whose value does not deserialize;
/// a table's entries (`[agent.network]`, `[projects.NAME]`) one by one.
pub(super) fn locate_bad_value(sections: &Sections, defaults: &Table) -> Option<ConfigError> {
    for (section, entries) in sections {
        for (key, value) in entries {
            let dotted = format!("{section}.{key}");
            // None: an entry of a free-form section (`projects.NAME`).
            let default = defaults.get(section).and_then(|known| known.get(key));
            if let Value::Table(given) = value
                && default.is_none_or(Value::is_table)
            {
                for (name, entry) in given {
                    let alone = Table::from_iter([(name.clone(), entry.clone())]);
                    if let Err(err) = probe(section, key, Value::Table(alone)) {
                        return Some(explain(&format!("{dotted}.{name}"), entry, err.message()));
                    }
                }
            }
            if let Err(err) = probe(section, key, value.clone()) {
                if default.is_some_and(is_duration) {
                    return Some(bad_value(&dotted, value, duration_reason(value)));
                }
                return Some(explain(&dotted, value, err.message()));
            }
        }
    }
    None
}

/// The error for `key = value`, which serde refused with `message`: an
/// unknown key when `key` itself is a field its table does not have (with
/// the nearest one it has), else a bad value in plain words.
fn explain(key: &str, value: &Value, message: &str) -> ConfigError {
    if let Some((field, known)) = unknown_field(message)
        && let Some((parent, name)) = key.rsplit_once('.')
        && name == field
    {
        let suggestion = closest(&field, known.iter().map(String::as_str));
        return ConfigError::UnknownKey {
            key: key.to_owned(),
            suggestion: suggestion.map(|near| format!("{parent}.{near}")),
        };
    }
    bad_value(key, value, plain(message))
}

/// Whether a default value is a duration: a string that humantime parses.
pub(super) fn is_duration(default: &Value) -> bool {
    matches!(default, Value::String(text) if humantime::parse_duration(text).is_ok())
}

/// Why `value` is not a duration.
pub(super) fn duration_reason(value: &Value) -> String {
    let example = "write a duration such as \"500ms\", \"5s\" or \"10m\"";
    match value {
        Value::String(text) => match humantime::parse_duration(text) {
            Err(err) => format!("not a duration ({err}); {example}"),
            Ok(_) => format!("not a valid duration; {example}"),
        },
        _ => format!("expected a string; {example}"),
    }
}

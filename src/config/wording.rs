//! What a config error says, in the words of whoever wrote the file: serde's
//! messages (`invalid type: string "x", expected usize`) put as `expected a
//! whole number (0 or more), got the text "x"`, and the known name closest
//! to a misspelled one (`did you mean …?`).

/// serde's message about a value, in plain words; a message of no known
/// shape is returned as it is.
pub(super) fn plain(message: &str) -> String {
    let message = message.trim();
    for head in ["invalid type: ", "invalid value: "] {
        if let Some((got, expected)) = message
            .strip_prefix(head)
            .and_then(|rest| rest.rsplit_once(", expected "))
        {
            return format!(
                "expected {}, got {}",
                expected_words(expected),
                got_words(got)
            );
        }
    }
    if let Some((field, known)) = unknown_field(message) {
        return match closest(&field, known.iter().map(String::as_str)) {
            Some(near) => format!("unknown key `{field}`; did you mean `{near}`?"),
            None => format!("unknown key `{field}`"),
        };
    }
    if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        return format!("the key `{field}` is missing");
    }
    message.to_owned()
}

/// What serde expected, in words.
fn expected_words(expected: &str) -> String {
    let words = match expected {
        "usize" | "u64" => "a whole number (0 or more)",
        "u32" => "a whole number from 0 to 4294967295",
        "u16" => "a whole number from 0 to 65535",
        "u8" => "a whole number from 0 to 255",
        "i64" | "i32" | "i16" | "i8" | "isize" => "a whole number",
        "f64" | "f32" => "a number",
        "a boolean" => "true or false",
        "a string" | "path string" | "a borrowed string" | "a character" => "text in quotes",
        "a sequence" => "a list in square brackets",
        "a map" => "a table",
        other if other.starts_with("struct ") => "a table",
        other => return other.to_owned(),
    };
    words.to_owned()
}

/// What serde was given (its `Unexpected`), in words.
fn got_words(got: &str) -> String {
    let quoted = |prefix: &str| {
        got.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('`'))
            .and_then(|rest| rest.strip_suffix('`'))
            .map(str::to_owned)
    };
    if let Some(text) = got.strip_prefix("string ") {
        return format!("the text {text}");
    }
    if let Some(number) = quoted("integer ").or_else(|| quoted("floating point ")) {
        return format!("the number {number}");
    }
    if let Some(value) = quoted("boolean ") {
        return value;
    }
    if let Some(character) = quoted("character ") {
        return format!("the text \"{character}\"");
    }
    match got {
        "sequence" => "a list".to_owned(),
        "map" => "a table".to_owned(),
        other => other.to_owned(),
    }
}

/// serde's `unknown field `x`, expected one of `a`, `b``: the field and the
/// names it knows.
pub(super) fn unknown_field(message: &str) -> Option<(String, Vec<String>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let known = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    Some((field.to_owned(), known))
}

/// The name in `known` nearest to `given` (letter case aside), if one is
/// near enough to be a misspelling of it: at most 2 edits, or a fifth of
/// its length for a long name (a swap of two letters counts as one edit).
pub(super) fn closest<'k>(
    given: &str,
    known: impl IntoIterator<Item = &'k str>,
) -> Option<&'k str> {
    let given = given.to_lowercase();
    let bound = (given.chars().count() / 5).max(2);
    known
        .into_iter()
        .map(|name| (strsim::osa_distance(&given, &name.to_lowercase()), name))
        .filter(|(distance, _)| *distance <= bound)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_types_become_words() {
        for (message, want) in [
            (
                "invalid type: string \"x\", expected usize",
                "expected a whole number (0 or more), got the text \"x\"",
            ),
            (
                "invalid value: integer `-1`, expected u64",
                "expected a whole number (0 or more), got the number -1",
            ),
            (
                "invalid type: floating point `1.5`, expected i64",
                "expected a whole number, got the number 1.5",
            ),
            (
                "invalid value: integer `70000`, expected u16",
                "expected a whole number from 0 to 65535, got the number 70000",
            ),
            (
                "invalid type: string \"yes\", expected a boolean",
                "expected true or false, got the text \"yes\"",
            ),
            (
                "invalid type: integer `5`, expected path string",
                "expected text in quotes, got the number 5",
            ),
            (
                "invalid type: string \"x\", expected a sequence",
                "expected a list in square brackets, got the text \"x\"",
            ),
            (
                "invalid type: boolean `true`, expected a map",
                "expected a table, got true",
            ),
            (
                "invalid type: sequence, expected struct NetworkConfig",
                "expected a table, got a list",
            ),
            (
                "unknown field `evry`, expected one of `name`, `chat`, `every`",
                "unknown key `evry`; did you mean `every`?",
            ),
            (
                "unknown field `zzzzzz`, expected `mode` or `allow`",
                "unknown key `zzzzzz`",
            ),
            ("missing field `chat`", "the key `chat` is missing"),
            ("something else", "something else"),
        ] {
            assert_eq!(plain(message), want, "{message}");
        }
    }

    #[test]
    fn closest_finds_a_misspelling_and_nothing_far() {
        let keys = ["poll_timeout", "api_url", "delete_webhook"];
        assert_eq!(closest("poll_timout", keys), Some("poll_timeout"));
        assert_eq!(closest("poll_timoeut", keys), Some("poll_timeout"));
        assert_eq!(closest("Poll_Timeout", keys), Some("poll_timeout"));
        assert_eq!(closest("api_ulr", keys), Some("api_url"));
        assert_eq!(closest("colour", keys), None);
        assert_eq!(closest("x", keys), None);
    }

    #[test]
    fn unknown_field_reads_each_shape_of_the_list() {
        assert_eq!(
            unknown_field("unknown field `a`, expected one of `b`, `c`"),
            Some(("a".to_owned(), vec!["b".to_owned(), "c".to_owned()]))
        );
        assert_eq!(
            unknown_field("unknown field `a`, expected `b` or `c`"),
            Some(("a".to_owned(), vec!["b".to_owned(), "c".to_owned()]))
        );
        assert_eq!(
            unknown_field("unknown field `a`, there are no fields"),
            Some(("a".to_owned(), Vec::new()))
        );
        assert_eq!(unknown_field("invalid type"), None);
    }
}

/// Every key loaded with values of the wrong type, from the file and from
/// the environment: each refusal names the key and says what is expected
/// in words, never in Rust's types; a misspelled key or variable gets the
/// nearest known one.
#[cfg(test)]
mod sweep {
    use toml::{Table, Value};

    use crate::config::ConfigError;
    use crate::config::load::{default_table, is_duration};
    use crate::config::tests::{env, load_text};

    /// Words of Rust's types and serde's vocabulary: none may reach the
    /// operator.
    const RUST_WORDS: &[&str] = &[
        "usize", "u64", "u32", "u16", "u8", "isize", "i64", "i32", "f64", "sequence", "map",
        "struct", "invalid", "untagged", "variant", "enum", "Given",
    ];

    fn leak(message: &str) -> Option<&'static str> {
        message
            .split(|c: char| !c.is_ascii_alphanumeric())
            .find_map(|word| RUST_WORDS.iter().find(|rust| **rust == word).copied())
    }

    /// Values of every TOML type, and a negative number.
    fn wrong_values() -> Vec<Value> {
        vec![
            Value::from("x"),
            Value::Integer(-1),
            Value::Float(1.5),
            Value::Boolean(true),
            Value::Array(vec![Value::from("x")]),
            Value::Array(vec![Value::Integer(1)]),
            Value::Table(Table::from_iter([("k".to_owned(), Value::Integer(1))])),
        ]
    }

    /// What the message for `default`'s key given `"x"` must say.
    fn expected_for(default: &Value) -> Option<&'static str> {
        match default {
            Value::Integer(_) => Some("expected a whole number"),
            Value::Boolean(_) => Some("expected true or false"),
            _ => None,
        }
    }

    #[test]
    fn a_wrong_value_in_the_file_is_told_in_words_for_every_key() {
        let defaults = default_table();
        let mut refused = 0;
        for (section, known) in &defaults {
            let Value::Table(known) = known else { continue };
            for (key, default) in known {
                for value in wrong_values() {
                    let text = Table::from_iter([(
                        section.clone(),
                        Value::Table(Table::from_iter([(key.clone(), value.clone())])),
                    )])
                    .to_string();
                    let Err(err) = load_text(&text, &[]) else {
                        continue;
                    };
                    refused += 1;
                    let message = err.to_string();
                    assert!(
                        message.contains(&format!("`{section}.{key}")),
                        "{section}.{key} = {value}: {message}"
                    );
                    assert_eq!(leak(&message), None, "{section}.{key} = {value}: {message}");
                    if value.is_str()
                        && let Some(words) = expected_for(default)
                    {
                        assert!(message.contains(words), "{section}.{key}: {message}");
                    }
                    if is_duration(default) && value.is_integer() {
                        assert!(message.contains("a duration"), "{section}.{key}: {message}");
                    }
                }
            }
        }
        assert!(
            refused > 100,
            "only {refused} refusals: the sweep saw too few keys"
        );
    }

    #[test]
    fn a_wrong_value_from_the_environment_is_told_in_words_for_every_key() {
        let defaults = default_table();
        let mut refused = 0;
        for (section, known) in &defaults {
            let Value::Table(known) = known else { continue };
            for (key, default) in known {
                let var = format!("TURNSTILE_{section}_{key}").to_uppercase();
                for raw in ["x", "-1", "1.5", "99999999999999999999"] {
                    let Err(err) = crate::config::Config::load(None, &env(&[(&var, raw)])) else {
                        continue;
                    };
                    refused += 1;
                    let message = err.to_string();
                    assert!(message.contains(&var), "{var}={raw}: {message}");
                    assert_eq!(leak(&message), None, "{var}={raw}: {message}");
                    if raw == "x"
                        && let Some(words) = expected_for(default)
                    {
                        assert!(message.contains(words), "{var}: {message}");
                    }
                }
            }
        }
        assert!(
            refused > 50,
            "only {refused} refusals: the sweep saw too few keys"
        );
    }

    #[test]
    fn a_table_within_a_section_names_its_entry_in_words() {
        for (text, key, words) in [
            (
                "[projects.web]\nworkdir = 5\n",
                "projects.web.workdir",
                "expected text in quotes, got the number 5",
            ),
            (
                "[projects.web]\nusers = [\"bob\"]\n",
                "projects.web.users",
                "expected a whole number (0 or more), got the text \"bob\"",
            ),
            (
                "[agent.network]\nallow = 5\n",
                "agent.network.allow",
                "expected a list of hosts",
            ),
            (
                "[agent.network]\nmode = 5\n",
                "agent.network.mode",
                "expected text in quotes, got the number 5",
            ),
        ] {
            let message = load_text(text, &[]).expect_err(text).to_string();
            assert!(message.contains(&format!("`{key}`")), "{text}: {message}");
            assert!(message.contains(words), "{text}: {message}");
            assert_eq!(leak(&message), None, "{text}: {message}");
        }
    }

    fn unknown_key(err: &ConfigError) -> (&str, Option<&str>) {
        match err {
            ConfigError::UnknownKey { key, suggestion } => (key, suggestion.as_deref()),
            other => panic!("expected UnknownKey, got {other:?}"),
        }
    }

    #[test]
    fn a_misspelled_key_gets_the_nearest_known_one() {
        for (text, key, near) in [
            (
                "[telegram]\npoll_timout = \"5s\"\n",
                "telegram.poll_timout",
                Some("telegram.poll_timeout"),
            ),
            (
                "[telgram]\npoll_timeout = \"5s\"\n",
                "telgram",
                Some("telegram"),
            ),
            (
                "[dispatcher]\nmax_concurent_turns = 2\n",
                "dispatcher.max_concurent_turns",
                Some("dispatcher.max_concurrent_turns"),
            ),
            (
                "[agent.network]\nmoed = \"host\"\n",
                "agent.network.moed",
                Some("agent.network.mode"),
            ),
            (
                "[projects.web]\nworkdir = \"/tmp/w\"\nmodle = \"opus\"\n",
                "projects.web.modle",
                Some("projects.web.model"),
            ),
            ("[turn]\ncolour = 1\n", "turn.colour", None),
        ] {
            let err = load_text(text, &[]).expect_err(text);
            assert_eq!(unknown_key(&err), (key, near), "{text}");
            let message = err.to_string();
            match near {
                Some(near) => assert!(
                    message.ends_with(&format!("; did you mean `{near}`?")),
                    "{message}"
                ),
                None => assert!(!message.contains("did you mean"), "{message}"),
            }
        }
    }

    #[test]
    fn a_misspelled_variable_gets_the_nearest_known_one() {
        for (var, near) in [
            (
                "TURNSTILE_TELEGRAM_POLL_TIMOUT",
                Some("TURNSTILE_TELEGRAM_POLL_TIMEOUT"),
            ),
            (
                "TURNSTILE_TELGRAM_POLL_TIMEOUT",
                Some("TURNSTILE_TELEGRAM_POLL_TIMEOUT"),
            ),
            (
                "TURNSTILE_AGENT_NETWORK_MDOE",
                Some("TURNSTILE_AGENT_NETWORK_MODE"),
            ),
            ("TURNSTILE_LGO", Some("TURNSTILE_LOG")),
            ("TURNSTILE_NOTHING_LIKE_IT", None),
        ] {
            let err = crate::config::Config::load(None, &env(&[(var, "5s")])).expect_err(var);
            match &err {
                ConfigError::UnknownEnv {
                    var: got,
                    suggestion,
                } => {
                    assert_eq!((got.as_str(), suggestion.as_deref()), (var, near));
                }
                other => panic!("{var}: expected UnknownEnv, got {other:?}"),
            }
            if let Some(near) = near {
                assert!(
                    err.to_string().contains(&format!("did you mean `{near}`?")),
                    "{err}"
                );
            }
        }
    }
}

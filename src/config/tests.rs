use std::io::Write as _;

use toml::{Table, Value};

use super::load::*;
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
        matches!(&err, ConfigError::UnknownKey { key, .. } if key == "turn.post_result_grce"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "unknown config key `turn.post_result_grce`; did you mean `turn.post_result_grace`?"
    );
}

#[test]
fn unknown_section_in_file_is_named() {
    let err = load_err("[turns]\nmax_duration = \"5s\"\n", &[]);
    assert!(
        matches!(&err, ConfigError::UnknownKey { key, .. } if key == "turns"),
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
        "bad value for `agent.backend`: \"gpt\": expected \"scripted\", \"claude\" or \"acp\""
    );
    let err =
        Config::load(None, &env(&[("TURNSTILE_AGENT_BACKEND", "gpt")])).expect_err("bad backend");
    assert_bad_value(&err, "agent.backend");
    assert_eq!(
        err.to_string(),
        "bad value for `agent.backend`: \"gpt\": expected \"scripted\", \"claude\" or \"acp\" \
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

const EXAMPLE: &str = include_str!("../../config.example.toml");

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

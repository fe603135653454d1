use super::*;
use crate::config::tests::{assert_bad_value, env, load_err, load_text};

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
fn the_bounds_of_a_turn_and_its_progress_are_checked() {
    let err = load_err("[turn]\nmax_messages = 0\n", &[]);
    assert_bad_value(&err, "turn.max_messages");
    let err = load_err("[turn]\nmax_output = 0\n", &[]);
    assert_bad_value(&err, "turn.max_output");
    let err = load_err("[turn]\nmax_output = 99999999999\n", &[]);
    let message = assert_bad_value(&err, "turn.max_output");
    assert!(message.contains("between 1 and"), "{message}");
    let err = load_err("[progress]\ninterval = \"0s\"\n", &[]);
    assert_bad_value(&err, "progress.interval");
    let err = load_err("[progress]\nstream = \"sometimes\"\n", &[]);
    let message = assert_bad_value(&err, "progress.stream");
    assert!(
        message.contains("\"edit\", \"draft\" or \"off\""),
        "{message}"
    );
    let config = Config::load(
        None,
        &env(&[
            ("TURNSTILE_PROGRESS_KEEP", "fold"),
            ("TURNSTILE_PROGRESS_AFTER", "500ms"),
        ]),
    )
    .expect("valid");
    assert_eq!(config.progress.keep, crate::config::Keep::Fold);
    assert_eq!(config.progress.after, Duration::from_millis(500));
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

/// What keeps the other warnings out of a test: someone may talk to
/// the bot, and the `claude` backend's program is found.
const QUIET: &[(&str, &str)] = &[
    ("TURNSTILE_ACCESS_ALLOWED_USERS", "1"),
    ("TURNSTILE_AGENT_COMMAND", "sh"),
];

/// The warnings of a config from `text` (and [`QUIET`]).
fn warnings_of(text: &str) -> Vec<String> {
    load_text(text, QUIET)
        .unwrap_or_else(|err| panic!("{text}: {err}"))
        .warnings()
}

#[test]
fn nobody_allowed_group_mode_all_and_a_missing_cli_are_warned_about() {
    let nobody = load_text("", &[]).expect("defaults").warnings();
    assert_eq!(nobody.len(), 1, "{nobody:?}");
    assert!(
        nobody[0].contains("nobody can talk to the bot"),
        "{nobody:?}"
    );
    let all = warnings_of("[access]\ngroup_mode = \"all\"\n");
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(all[0].contains("privacy mode"), "{all:?}");
    let missing = load_text(
        "[agent]\nbackend = \"claude\"\ncommand = \"no-such-cli-zq9\"\n",
        &[("TURNSTILE_ACCESS_ALLOWED_USERS", "1")],
    )
    .expect("loads")
    .warnings();
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(missing[0].contains("not found on PATH"), "{missing:?}");
}

#[test]
fn a_program_is_looked_up_as_execvp_would() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir(&first).unwrap();
    std::fs::create_dir(&second).unwrap();
    std::fs::write(first.join("cli"), "").unwrap();
    let path = std::env::join_paths([&first, &second]).unwrap();
    let path = path.to_str().unwrap();
    assert_eq!(
        find_executable("cli", path),
        Lookup::NotExecutable(first.join("cli"))
    );
    std::fs::write(second.join("cli"), "").unwrap();
    std::fs::set_permissions(second.join("cli"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        find_executable("cli", path),
        Lookup::Found,
        "the next one runs"
    );
    assert_eq!(find_executable("other", path), Lookup::Missing);
    assert_eq!(find_executable("./cli", path), Lookup::Unchecked);
    assert_eq!(find_executable("cli", "relative:dirs"), Lookup::Missing);
}

#[test]
fn no_sandbox_with_the_claude_backend_is_warned_about() {
    let warnings = warnings_of("[agent]\nbackend = \"claude\"\nsandbox = \"none\"\n");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("agent.sandbox = \"none\": the agent runs unconfined"),
        "{warnings:?}"
    );
    assert!(warnings[0].contains("outlives it"), "{warnings:?}");
    assert_eq!(
        warnings_of("[agent]\nbackend = \"claude\"\n"),
        Vec::<String>::new(),
        "bubblewrap is the default"
    );
    assert_eq!(
        warnings_of("[agent]\nsandbox = \"none\"\n"),
        Vec::<String>::new(),
        "the scripted backend runs no agent process"
    );
}

#[test]
fn setting_sources_are_warned_about() {
    let warnings = warnings_of("[agent]\nsetting_sources = [\"project\", \"local\"]\n");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(
            "agent.setting_sources = [\"project\", \"local\"]: the CLI reads settings"
        ),
        "{warnings:?}"
    );
    assert!(
        warnings[0].contains("the agent itself can write"),
        "{warnings:?}"
    );
}

#[test]
fn agent_schedules_made_unasked_are_warned_about_and_a_bad_value_named() {
    let warnings = warnings_of("[schedules]\nagent = \"allow\"\n");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("schedules.agent = \"allow\""),
        "{warnings:?}"
    );
    assert!(warnings_of("[schedules]\nagent = \"ask\"\n").is_empty());
    let err = load_text("[schedules]\nagent = \"maybe\"\n", QUIET)
        .expect_err("a bad value")
        .to_string();
    assert!(err.contains("agent") && err.contains("maybe"), "{err}");
}

#[test]
fn ops_listen_off_loopback_is_warned_about() {
    for listen in ["0.0.0.0:9464", "[::]:9464", "192.168.1.5:9464"] {
        let warnings = warnings_of(&format!("[ops]\nlisten = \"{listen}\"\n"));
        assert_eq!(warnings.len(), 1, "{listen}: {warnings:?}");
        assert!(
            warnings[0].starts_with(&format!(
                "ops.listen = \"{listen}\" is not a loopback address"
            )),
            "{warnings:?}"
        );
    }
    for listen in ["127.0.0.1:9464", "127.0.0.2:1", "[::1]:9464"] {
        let warnings = warnings_of(&format!("[ops]\nlisten = \"{listen}\"\n"));
        assert!(warnings.is_empty(), "{listen}: {warnings:?}");
    }
}

#[test]
fn permission_mode_allow_is_warned_about_and_nothing_else_is() {
    assert_eq!(warnings_of(""), Vec::<String>::new());
    for mode in ["ask", "deny"] {
        let config =
            load_text(&format!("[agent]\npermission_mode = \"{mode}\"\n"), QUIET).expect(mode);
        assert!(config.warnings().is_empty(), "{mode}");
    }
    let config = load_text("[agent]\npermission_mode = \"allow\"\n", QUIET).expect("allow");
    let warnings = config.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("agent.permission_mode = \"allow\": every tool"),
        "{warnings:?}"
    );
}

#[test]
fn schedules_are_read_and_each_bad_one_is_named() {
    let ok = "[schedules]\ntimezone = \"Europe/Berlin\"\ncatch_up = \"skip\"\n\
              [[schedules.list]]\nname = \"standup\"\nchat = -100\ncron = \"0 9 * * 1-5\"\nprompt = \"hi\"\n\
              [[schedules.list]]\nname = \"ping\"\nchat = 5\ntopic = 3\nevery = \"30m\"\ntz = \"UTC\"\nprompt = \"p\"\n";
    let config = load_text(ok, &[]).unwrap();
    assert_eq!(config.schedules.list.len(), 2);
    assert_eq!(config.schedules.catch_up, crate::config::CatchUp::Skip);
    assert_eq!(config.schedules.list[1].topic, Some(3));
    let one =
        |body: &str| format!("[[schedules.list]]\nname = \"a\"\nchat = 1\nprompt = \"p\"\n{body}");
    let message = assert_bad_value(
        &load_err(&one("cron = \"61 * * * *\"\n"), &[]),
        "schedules.list[0].cron",
    );
    assert!(message.contains("bad cron expression"), "{message}");
    assert_bad_value(
        &load_err(&one("every = \"soon\"\n"), &[]),
        "schedules.list[0].every",
    );
    let message = assert_bad_value(
        &load_err(&one("every = \"1m\"\ncron = \"* * * * *\"\n"), &[]),
        "schedules.list[0]",
    );
    assert!(message.contains("exactly one of"), "{message}");
    assert_bad_value(&load_err(&one(""), &[]), "schedules.list[0]");
    assert_bad_value(
        &load_err(&one("every = \"1m\"\ntz = \"Mars/Base\"\n"), &[]),
        "schedules.list[0].tz",
    );
    let twice = format!("{}{}", one("every = \"1m\"\n"), one("every = \"2m\"\n"));
    assert_bad_value(&load_err(&twice, &[]), "schedules.list[1].name");
    assert_bad_value(
        &load_err("[schedules]\ntimezone = \"Nowhere\"\n", &[]),
        "schedules.timezone",
    );
    assert_bad_value(
        &load_err("[schedules]\ncatch_up = \"all\"\n", &[]),
        "schedules.catch_up",
    );
    assert_bad_value(
        &load_err("[schedules]\nmin_interval = \"0s\"\n", &[]),
        "schedules.min_interval",
    );
    let err = load_err("[[schedules]]\nname = \"a\"\n", &[]);
    assert!(err.to_string().contains("[[schedules.list]]"), "{err}");
    let err = load_err(
        "[[schedules.list]]\nname = \"a\"\nchat = 1\nprompt = \"p\"\nevery = \"1m\"\nwhen = 2\n",
        &[],
    );
    assert!(err.to_string().contains("schedules.list"), "{err}");
}

#[test]
fn agent_models_must_be_model_names_listed_once() {
    let ok = Config::load(
        None,
        &env(&[(
            "TURNSTILE_AGENT_MODELS",
            "sonnet,claude-opus-4-1,openai/gpt-5:free",
        )]),
    )
    .unwrap();
    assert_eq!(ok.agent.models.len(), 3);
    for bad in [
        "sonnet,sonnet",
        "--dangerous",
        "a b",
        "ok,",
        &"m".repeat(65),
    ] {
        let err = Config::load(None, &env(&[("TURNSTILE_AGENT_MODELS", bad)])).unwrap_err();
        assert!(err.to_string().contains("agent.models"), "{bad}: {err}");
    }
}

#[test]
fn a_pending_age_under_a_minute_or_over_a_year_is_refused_by_name() {
    let err = Config::load(None, &env(&[("TURNSTILE_TELEGRAM_MAX_PENDING_AGE", "30s")]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("telegram.max_pending_age")
            && err.contains("30s")
            && err.contains("at least 1 minute"),
        "{err}"
    );
    let err = Config::load(
        None,
        &env(&[("TURNSTILE_TELEGRAM_MAX_PENDING_AGE", "400days")]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("telegram.max_pending_age"), "{err}");
    let err = Config::load(
        None,
        &env(&[("TURNSTILE_TELEGRAM_MAX_PENDING_AGE", "soon")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("telegram.max_pending_age") && err.contains("soon"),
        "{err}"
    );
    let config =
        Config::load(None, &env(&[("TURNSTILE_TELEGRAM_MAX_PENDING_AGE", "2h")])).expect("loads");
    assert_eq!(config.telegram.max_pending_age, Duration::from_secs(7200));
    let config = Config::load(None, &env(&[])).expect("loads");
    assert_eq!(config.telegram.max_pending_age, Duration::from_secs(86_400));
}

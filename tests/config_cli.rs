//! The real binary refuses a bad configuration before anything starts, with
//! exit code 2 and a message naming the key (or variable) and the value, and
//! never shows the bot token.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tempfile::TempDir;

/// A token no message may ever contain.
const TOKEN: &str = "424242:TOKEN-Do-Not-Leak-zq9Xv7";
/// Its distinctive part, should only that leak.
const TOKEN_SECRET: &str = "Do-Not-Leak-zq9Xv7";
/// A run that does not stop by itself means the config was accepted.
const EXIT_WITHIN: Duration = Duration::from_secs(30);

/// What a run of the binary left behind.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// A scratch directory for config files; the binary runs inside it.
fn scratch() -> TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn write(dir: &TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write config file");
    path
}

/// Runs `turnstile args` in `dir` with only PATH and `env`; kills it and
/// fails if it has not exited within [`EXIT_WITHIN`]. Whenever the token was
/// given, checks that neither output shows it.
fn turnstile(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_turnstile"));
    command
        .args(args)
        .current_dir(dir)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let child = command.spawn().expect("start the turnstile binary");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output: Output = match rx.recv_timeout(EXIT_WITHIN) {
        Ok(output) => output.expect("wait for turnstile"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!(
                "turnstile {args:?} did not exit within {EXIT_WITHIN:?}: the config was accepted"
            );
        }
    };
    let run = Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    if env.iter().any(|(_, value)| value.contains(TOKEN)) {
        for leaked in [TOKEN, TOKEN_SECRET] {
            assert!(
                !run.stdout.contains(leaked) && !run.stderr.contains(leaked),
                "the token leaked:\n{run:?}"
            );
        }
    }
    run
}

/// Asserts a configuration error: exit code 2 and every one of `named` in stderr.
fn assert_config_error(run: &Run, named: &[&str]) {
    assert_eq!(run.code, Some(2), "{run:?}");
    for name in named {
        assert!(run.stderr.contains(name), "stderr lacks {name:?}:\n{run:?}");
    }
}

#[test]
fn unknown_key_in_the_file_is_named() {
    let dir = scratch();
    let file = write(
        &dir,
        "turnstile.toml",
        "[turn]\npost_result_grce = \"5s\"\n",
    );
    let run = turnstile(
        dir.path(),
        &["--config", file.to_str().expect("utf-8 path")],
        &[("TELEGRAM_BOT_TOKEN", TOKEN)],
    );
    assert_config_error(&run, &["turn.post_result_grce"]);
}

#[test]
fn a_misspelled_key_or_variable_gets_the_nearest_known_one() {
    let dir = scratch();
    let file = write(&dir, "turnstile.toml", "[telegram]\npoll_timout = \"5s\"\n");
    let run = turnstile(
        dir.path(),
        &["--config", file.to_str().expect("utf-8 path")],
        &[("TELEGRAM_BOT_TOKEN", TOKEN)],
    );
    assert_config_error(
        &run,
        &[
            "telegram.poll_timout",
            "did you mean `telegram.poll_timeout`?",
        ],
    );
    let run = turnstile(
        dir.path(),
        &[],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TURNSTILE_DISPATCHER_QUEUE_LIMT", "3"),
        ],
    );
    assert_config_error(
        &run,
        &[
            "TURNSTILE_DISPATCHER_QUEUE_LIMT",
            "did you mean `TURNSTILE_DISPATCHER_QUEUE_LIMIT`?",
        ],
    );
}

#[test]
fn a_wrong_type_is_told_in_words_not_rust_types() {
    let dir = scratch();
    let file = write(
        &dir,
        "turnstile.toml",
        "[dispatcher]\nqueue_limit = \"x\"\n",
    );
    let run = turnstile(
        dir.path(),
        &["--config", file.to_str().expect("utf-8 path")],
        &[("TELEGRAM_BOT_TOKEN", TOKEN)],
    );
    assert_config_error(
        &run,
        &[
            "dispatcher.queue_limit",
            "expected a whole number (0 or more), got the text \"x\"",
        ],
    );
    assert!(!run.stderr.contains("usize"), "{run:?}");
    let run = turnstile(
        dir.path(),
        &[],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TURNSTILE_AGENT_MAX_TURNS", "-3"),
        ],
    );
    assert_config_error(
        &run,
        &[
            "agent.max_turns",
            "expected a whole number from 0 to 4294967295, got the number -3",
            "TURNSTILE_AGENT_MAX_TURNS",
        ],
    );
    assert!(!run.stderr.contains("u32"), "{run:?}");
}

#[test]
fn bad_duration_from_the_environment_names_the_key_and_the_value() {
    let dir = scratch();
    let run = turnstile(
        dir.path(),
        &[],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TURNSTILE_TURN_POST_RESULT_GRACE", "5 parsecs"),
        ],
    );
    assert_config_error(
        &run,
        &[
            "turn.post_result_grace",
            "5 parsecs",
            "TURNSTILE_TURN_POST_RESULT_GRACE",
        ],
    );
}

#[test]
fn bad_duration_in_the_file_names_the_key_and_the_value() {
    let dir = scratch();
    let file = write(
        &dir,
        "turnstile.toml",
        "[dispatcher]\nmerge_window = \"12 lightyears\"\n",
    );
    let run = turnstile(
        dir.path(),
        &["--config", file.to_str().expect("utf-8 path")],
        &[("TELEGRAM_BOT_TOKEN", TOKEN)],
    );
    assert_config_error(&run, &["dispatcher.merge_window", "12 lightyears"]);
}

#[test]
fn a_bad_value_equal_to_the_token_is_redacted() {
    let dir = scratch();
    let file = write(
        &dir,
        "turnstile.toml",
        &format!("[turn]\nmax_duration = \"{TOKEN}\"\n"),
    );
    let run = turnstile(
        dir.path(),
        &["--config", file.to_str().expect("utf-8 path")],
        &[("TELEGRAM_BOT_TOKEN", TOKEN)],
    );
    assert_config_error(&run, &["turn.max_duration", "<redacted>"]);
}

#[test]
fn missing_token_is_named() {
    let dir = scratch();
    let run = turnstile(dir.path(), &[], &[]);
    assert_config_error(&run, &["TELEGRAM_BOT_TOKEN"]);
    let run = turnstile(dir.path(), &[], &[("TELEGRAM_BOT_TOKEN", "  ")]);
    assert_config_error(&run, &["TELEGRAM_BOT_TOKEN"]);
}

#[test]
fn unknown_turnstile_variable_is_named() {
    let dir = scratch();
    let run = turnstile(
        dir.path(),
        &[],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TURNSTILE_TURN_POST_RESULT_GRCE", "5s"),
        ],
    );
    assert_config_error(&run, &["TURNSTILE_TURN_POST_RESULT_GRCE"]);
}

#[test]
fn check_config_prints_the_effective_config_with_the_token_redacted() {
    let dir = scratch();
    let file = write(
        &dir,
        "turnstile.toml",
        "[turn]\npost_result_grace = \"7s\"\n\n[dispatcher]\nqueue_limit = 3\n",
    );
    let run = turnstile(
        dir.path(),
        &[
            "check-config",
            "--config",
            file.to_str().expect("utf-8 path"),
        ],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TURNSTILE_TURN_POST_RESULT_GRACE", "2s 500ms"),
        ],
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("post_result_grace"), "{run:?}");
    assert!(run.stdout.contains("<redacted>"), "{run:?}");
    let printed: toml::Table = run.stdout.parse().expect("check-config prints TOML");
    let turn = &printed["turn"];
    assert_eq!(
        turn["post_result_grace"].as_str(),
        Some("2s 500ms"),
        "the environment overrides the file:\n{run:?}"
    );
    assert_eq!(printed["dispatcher"]["queue_limit"].as_integer(), Some(3));
    assert_eq!(printed["telegram"]["token"].as_str(), Some("<redacted>"));
}

#[test]
fn unexpected_argument_prints_usage() {
    let dir = scratch();
    let run = turnstile(
        dir.path(),
        &["--frobnicate"],
        &[("TELEGRAM_BOT_TOKEN", TOKEN)],
    );
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains("--frobnicate"), "{run:?}");
    assert!(run.stderr.contains("usage:"), "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
}

/// `TURNSTILE_LOG` is the binary's log filter (src/main.rs), not a config
/// key, but the config loader rejects every unknown `TURNSTILE_*` variable.
#[test]
fn the_log_filter_variable_is_not_a_config_error() {
    let dir = scratch();
    let run = turnstile(
        dir.path(),
        &["check-config"],
        &[("TELEGRAM_BOT_TOKEN", TOKEN), ("TURNSTILE_LOG", "debug")],
    );
    assert_eq!(run.code, Some(0), "{run:?}");
}

#[test]
fn a_start_up_error_names_its_cause_once() {
    let dir = scratch();
    let run = turnstile(
        dir.path(),
        &[],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TURNSTILE_TELEGRAM_API_URL", "http://[bad"),
        ],
    );
    assert_eq!(run.code, Some(1), "{run:?}");
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("turnstile: "))
        .unwrap_or_else(|| panic!("no error line: {run:?}"));
    assert!(line.contains("telegram.api_url"), "{line}");
    assert_eq!(line.matches("invalid IPv6 address").count(), 1, "{line}");
}

#[test]
fn a_workdir_that_contains_the_config_file_is_refused_naming_both() {
    let dir = scratch();
    let conf = dir.path().join("conf");
    std::fs::create_dir(&conf).expect("conf dir");
    let file = conf.join("turnstile.toml");
    std::fs::write(
        &file,
        format!(
            "[agent]\nbackend = \"claude\"\nworkdir = \"{}\"\n[state]\npath = \"{}\"\n",
            conf.display(),
            dir.path().join("state").join("t.db").display()
        ),
    )
    .expect("write config file");
    let run = turnstile(
        dir.path(),
        &[
            "check-config",
            "--config",
            file.to_str().expect("utf-8 path"),
        ],
        &[("TELEGRAM_BOT_TOKEN", TOKEN)],
    );
    assert_config_error(
        &run,
        &[
            "agent.workdir",
            &format!("`{}`", conf.display()),
            &format!("`{}`", file.display()),
        ],
    );
}

#[test]
fn a_workdir_that_contains_the_state_file_is_refused_naming_both() {
    let dir = scratch();
    let run = turnstile(
        dir.path(),
        &["check-config"],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TURNSTILE_AGENT_WORKDIR", "."),
            ("TURNSTILE_STATE_PATH", "sub/t.db"),
        ],
    );
    assert_config_error(
        &run,
        &["agent.workdir", "contains the state file", "sub/t.db`"],
    );
}

#[test]
fn check_config_does_not_print_the_agents_env_values() {
    let dir = scratch();
    let file = write(
        &dir,
        "turnstile.toml",
        "[agent.env]\nANTHROPIC_API_KEY = \"sk-ant-not-for-print\"\n\
         [agent.mcp_servers.fs]\ncommand = \"mcp-fs\"\nenv = { FS_TOKEN = \"fs-not-for-print\" }\n",
    );
    let run = turnstile(
        dir.path(),
        &[
            "check-config",
            "--config",
            file.to_str().expect("utf-8 path"),
        ],
        &[("TELEGRAM_BOT_TOKEN", TOKEN)],
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("ANTHROPIC_API_KEY"), "{run:?}");
    assert!(!run.stdout.contains("not-for-print"), "{run:?}");
}

#[test]
fn check_config_warns_when_every_tool_runs_without_asking() {
    let dir = scratch();
    let file = write(
        &dir,
        "turnstile.toml",
        "[agent]\npermission_mode = \"allow\"\n",
    );
    let run = turnstile(
        dir.path(),
        &[
            "check-config",
            "--config",
            file.to_str().expect("utf-8 path"),
        ],
        &[("TELEGRAM_BOT_TOKEN", TOKEN)],
    );
    assert_eq!(run.code, Some(0), "a warning is not an error:\n{run:?}");
    let warning = "turnstile: warning: agent.permission_mode = \"allow\": every tool the agent asks for runs without asking anyone";
    assert!(run.stderr.contains(warning), "{run:?}");
    let printed: toml::Table = run.stdout.parse().expect("check-config prints TOML");
    assert_eq!(
        printed["agent"]["permission_mode"].as_str(),
        Some("allow"),
        "{run:?}"
    );
    for mode in ["ask", "deny"] {
        let run = turnstile(
            dir.path(),
            &["check-config"],
            &[
                ("TELEGRAM_BOT_TOKEN", TOKEN),
                ("TURNSTILE_AGENT_PERMISSION_MODE", mode),
                ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001"),
            ],
        );
        assert_eq!(run.code, Some(0), "{run:?}");
        assert!(!run.stderr.contains("warning"), "{mode}:\n{run:?}");
    }
}

#[test]
fn check_config_warns_when_the_claude_agent_runs_without_a_sandbox() {
    let dir = scratch();
    let run = turnstile(
        dir.path(),
        &["check-config"],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TURNSTILE_AGENT_BACKEND", "claude"),
            ("TURNSTILE_AGENT_SANDBOX", "none"),
        ],
    );
    assert_eq!(run.code, Some(0), "a warning is not an error:\n{run:?}");
    let warning = "turnstile: warning: agent.sandbox = \"none\": the agent runs unconfined";
    assert!(run.stderr.contains(warning), "{run:?}");
    let run = turnstile(
        dir.path(),
        &["check-config"],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TURNSTILE_AGENT_BACKEND", "claude"),
            ("TURNSTILE_AGENT_COMMAND", "sh"),
            ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001"),
        ],
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        !run.stderr.contains("warning"),
        "the default sandbox:\n{run:?}"
    );
    let printed: toml::Table = run.stdout.parse().expect("check-config prints TOML");
    assert_eq!(
        printed["agent"]["sandbox"].as_str(),
        Some("bubblewrap"),
        "{run:?}"
    );
}

/// `check-config` with `env` (and the token): exit 0, its stderr.
fn check_config_stderr(env: &[(&str, &str)]) -> String {
    let dir = scratch();
    let mut vars = vec![("TELEGRAM_BOT_TOKEN", TOKEN)];
    vars.extend_from_slice(env);
    let run = turnstile(dir.path(), &["check-config"], &vars);
    assert_eq!(run.code, Some(0), "a warning is not an error:\n{run:?}");
    run.stderr
}

#[test]
fn check_config_warns_when_nobody_can_talk_to_the_bot() {
    let warning = "turnstile: warning: access.allowed_users, access.admins and \
                   access.allowed_chats are all empty: nobody can talk to the bot";
    let stderr = check_config_stderr(&[]);
    assert!(stderr.contains(warning), "{stderr}");
    for (var, value) in [
        ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001"),
        ("TURNSTILE_ACCESS_ADMINS", "9"),
        ("TURNSTILE_ACCESS_ALLOWED_CHATS", "-100123"),
    ] {
        let stderr = check_config_stderr(&[(var, value)]);
        assert!(!stderr.contains("warning"), "{var}:\n{stderr}");
    }
}

#[test]
fn check_config_warns_when_the_agent_command_is_missing_or_not_executable() {
    let dir = scratch();
    let claude = [
        ("TURNSTILE_AGENT_BACKEND", "claude"),
        ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001"),
    ];
    let with = |extra: &[(&str, &str)]| {
        let mut env = claude.to_vec();
        env.extend_from_slice(extra);
        check_config_stderr(&env)
    };
    let stderr = with(&[("TURNSTILE_AGENT_COMMAND", "no-such-agent-cli-zq9")]);
    assert!(
        stderr.contains(
            "turnstile: warning: agent.command = \"no-such-agent-cli-zq9\": not found on PATH"
        ),
        "{stderr}"
    );
    // The agent's own PATH (agent.env.PATH) is where it is looked up.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin dir");
    let cli = bin.join("my-agent");
    std::fs::write(&cli, "#!/bin/sh\n").expect("write");
    let path = bin.display().to_string();
    let stderr = with(&[
        ("TURNSTILE_AGENT_COMMAND", "my-agent"),
        ("TURNSTILE_AGENT_ENV_PATH", &path),
    ]);
    let not_executable = format!(
        "turnstile: warning: agent.command = \"my-agent\": {} is not executable",
        cli.display()
    );
    assert!(stderr.contains(&not_executable), "{stderr}");
    let absolute = cli.display().to_string();
    let stderr = with(&[("TURNSTILE_AGENT_COMMAND", &absolute)]);
    assert!(stderr.contains("is not executable"), "{stderr}");
    let gone = dir.path().join("gone").display().to_string();
    let stderr = with(&[("TURNSTILE_AGENT_COMMAND", &gone)]);
    assert!(
        stderr.contains(&format!("agent.command = \"{gone}\": no such file")),
        "{stderr}"
    );
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let stderr = with(&[
        ("TURNSTILE_AGENT_COMMAND", "my-agent"),
        ("TURNSTILE_AGENT_ENV_PATH", &path),
    ]);
    assert!(!stderr.contains("warning"), "{stderr}");
    // With a launcher, the launcher is what must be found.
    let stderr = with(&[
        ("TURNSTILE_AGENT_COMMAND", "no-such-agent-cli-zq9"),
        ("TURNSTILE_AGENT_LAUNCHER", "no-such-launcher-zq9"),
    ]);
    assert!(
        stderr.contains("agent.launcher = \"no-such-launcher-zq9\": not found on PATH"),
        "{stderr}"
    );
    // The scripted backend starts no program.
    let stderr = check_config_stderr(&[
        ("TURNSTILE_AGENT_COMMAND", "no-such-agent-cli-zq9"),
        ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001"),
    ]);
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
fn check_config_warns_that_group_mode_all_needs_privacy_mode_off() {
    let stderr = check_config_stderr(&[
        ("TURNSTILE_ACCESS_GROUP_MODE", "all"),
        ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001"),
    ]);
    assert!(
        stderr.contains("turnstile: warning: access.group_mode = \"all\"")
            && stderr.contains("privacy mode is off")
            && stderr.contains("BotFather"),
        "{stderr}"
    );
    let stderr = check_config_stderr(&[
        ("TURNSTILE_ACCESS_GROUP_MODE", "mention"),
        ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001"),
    ]);
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
fn check_config_warns_when_pass_env_names_an_unset_variable() {
    let claude = [
        ("TURNSTILE_AGENT_BACKEND", "claude"),
        ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001"),
        ("TURNSTILE_AGENT_COMMAND", "sh"),
        ("TURNSTILE_AGENT_PASS_ENV", "ANTHROPIC_API_KEY"),
    ];
    let warning = "turnstile: warning: agent.pass_env names ANTHROPIC_API_KEY, which is not set \
                   in turnstile's environment";
    let stderr = check_config_stderr(&claude);
    assert!(stderr.contains(warning), "{stderr}");
    let mut set = claude.to_vec();
    set.push(("ANTHROPIC_API_KEY", "sk-ant-test"));
    let stderr = check_config_stderr(&set);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert!(!stderr.contains("sk-ant-test"), "{stderr}");
}

#[test]
fn check_config_works_without_the_token_and_says_it_was_not_checked() {
    let dir = scratch();
    let run = turnstile(
        dir.path(),
        &["check-config"],
        &[("TURNSTILE_ACCESS_ALLOWED_USERS", "1001")],
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stderr
            .contains("TELEGRAM_BOT_TOKEN is not set: the token was not checked"),
        "{run:?}"
    );
    let printed: toml::Table = run.stdout.parse().expect("check-config prints TOML");
    assert!(printed.contains_key("agent"), "{printed:?}");
    // A bad key is still an error without the token; a start still needs it.
    let run = turnstile(
        dir.path(),
        &["check-config"],
        &[("TURNSTILE_TELEGRAM_POLL_TIMEOUT", "soon")],
    );
    assert_config_error(&run, &["telegram.poll_timeout", "soon"]);
    let run = turnstile(dir.path(), &[], &[]);
    assert_config_error(&run, &["TELEGRAM_BOT_TOKEN"]);
}

#[test]
fn check_config_refuses_what_the_start_refuses() {
    let dir = scratch();
    let script = write(&dir, "scenario.json", "{ this is not a scenario");
    let script = script.display().to_string();
    let bad_script = [
        ("TELEGRAM_BOT_TOKEN", TOKEN),
        ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001"),
        ("TURNSTILE_AGENT_SCRIPT", script.as_str()),
    ];
    let run = turnstile(dir.path(), &["check-config"], &bad_script);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains("scenario.json"), "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    // A bwrap that cannot make its namespaces: the start's probe fails.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let bwrap = bin.join("bwrap");
    std::fs::write(
        &bwrap,
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&bwrap, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = turnstile(
        dir.path(),
        &["check-config"],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("PATH", path.as_str()),
            ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001"),
            ("TURNSTILE_AGENT_BACKEND", "claude"),
            ("TURNSTILE_AGENT_COMMAND", "sh"),
        ],
    );
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains("agent.sandbox"), "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
}

#[test]
fn a_second_config_is_refused_not_silently_taken() {
    let dir = scratch();
    let first = write(&dir, "a.toml", "");
    let second = write(&dir, "b.toml", "");
    let (first, second) = (first.display().to_string(), second.display().to_string());
    for args in [
        vec!["check-config", "--config", &first, "--config", &second],
        vec!["check-config", "-c", &first, "-c", &second],
    ] {
        let run = turnstile(dir.path(), &args, &[("TELEGRAM_BOT_TOKEN", TOKEN)]);
        assert_eq!(run.code, Some(2), "{run:?}");
        assert!(run.stderr.contains("--config given twice"), "{run:?}");
        assert!(run.stdout.is_empty(), "{run:?}");
    }
}

#[test]
fn check_config_warns_that_allowed_tools_allow_nothing_with_the_acp_backend() {
    let dir = scratch();
    let config = write(
        &dir,
        "turnstile.toml",
        "[agent]\nbackend = \"acp\"\ncommand = \"sh\"\nallowed_tools = [\"Bash(git:*)\"]\n\
         [access]\nallowed_users = [1001]\n\
         [projects.web]\nworkdir = \"web\"\nallowed_tools = [\"run_shell_command\"]\n",
    );
    let config = config.display().to_string();
    let run = turnstile(
        dir.path(),
        &["--config", &config, "check-config"],
        &[("TELEGRAM_BOT_TOKEN", TOKEN)],
    );
    assert_eq!(run.code, Some(0), "a warning is not an error:\n{run:?}");
    for (key, value) in [
        ("agent.allowed_tools", "[\"Bash(git:*)\"]"),
        ("projects.web.allowed_tools", "[\"run_shell_command\"]"),
    ] {
        let warning = format!(
            "turnstile: warning: {key} = {value} does not apply to the acp backend: an ACP \
             request's tool is `acp:<kind>`"
        );
        assert!(run.stderr.contains(&warning), "{key}:\n{run:?}");
    }
    assert!(
        run.stderr.contains("agent.permission_mode"),
        "what to use instead:\n{run:?}"
    );
    // The same keys mean something to the claude backend: no warning.
    let run = turnstile(
        dir.path(),
        &["--config", &config, "check-config"],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TURNSTILE_AGENT_BACKEND", "claude"),
        ],
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(!run.stderr.contains("allowed_tools"), "{run:?}");
}

/// `check-config` shows the acp backend's network: Gemini's API (or the
/// base URL the agent is given) and `agent.network.allow`.
#[test]
fn check_config_shows_the_acp_agents_network_policy() {
    let dir = scratch();
    let run = turnstile(
        dir.path(),
        &["check-config"],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TURNSTILE_AGENT_BACKEND", "acp"),
            ("TURNSTILE_AGENT_COMMAND", "sh"),
            ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001"),
            ("TURNSTILE_AGENT_NETWORK_ALLOW", "github.com"),
        ],
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stderr.contains(
            "network: the agent has a network namespace of its own; out only through \
             turnstile's proxy, to generativelanguage.googleapis.com:443, github.com:443"
        ),
        "{run:?}"
    );
    let run = turnstile(
        dir.path(),
        &["check-config"],
        &[
            ("TELEGRAM_BOT_TOKEN", TOKEN),
            ("TURNSTILE_AGENT_BACKEND", "acp"),
            ("TURNSTILE_AGENT_COMMAND", "sh"),
            ("TURNSTILE_ACCESS_ALLOWED_USERS", "1001"),
            (
                "TURNSTILE_AGENT_ENV_GOOGLE_GEMINI_BASE_URL",
                "http://10.0.0.7:8080",
            ),
        ],
    );
    assert!(
        run.stderr
            .contains("out only through turnstile's proxy, to 10.0.0.7:8080 ("),
        "{run:?}"
    );
}

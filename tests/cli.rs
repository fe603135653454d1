//! The binary as an operator meets it: `--help` and `--version`, and the
//! start-up failures a service manager must not restart in a loop (a taken
//! `ops.listen` port, a state file from a newer turnstile), each one clear
//! line on stderr and a documented exit code, never a panic.

mod support;

use std::time::Duration;

use support::process::BotProcess;
use support::*;

/// Runs the binary with `args` and no environment but PATH; bounded.
fn run(args: &[&str]) -> std::process::Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("turnstile {args:?} did not exit within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Asserts a start that failed as an operator should see it: exit `code`,
/// no panic, and a `turnstile: ` line holding every one of `named`.
fn assert_clean_failure(status: std::process::ExitStatus, log: &str, code: i32, named: &[&str]) {
    assert_eq!(status.code(), Some(code), "{log}");
    assert!(!log.contains("panicked"), "a panic on the way out:\n{log}");
    assert!(!log.contains("reactor"), "a panic on the way out:\n{log}");
    let line = log
        .lines()
        .find(|l| l.starts_with("turnstile: ") && named.iter().all(|n| l.contains(n)))
        .unwrap_or_else(|| panic!("no line naming {named:?}:\n{log}"));
    assert!(!line.contains(bot_api::TOKEN), "{line}");
}

/// The binary on a fresh state file in a directory of its own, against a
/// fresh fake Bot API, with one more variable.
async fn spawn_with(var: (&str, String)) -> (tempfile::TempDir, FakeBotApi, BotProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = FakeBotApi::start().await;
    let log = dir.path().join("stderr.log");
    let state = dir.path().join("state.db").display().to_string();
    let env = [var, ("TURNSTILE_STATE_PATH", state)];
    let bot = BotProcess::spawn(&api, &log, &env);
    (dir, api, bot)
}

#[tokio::test]
async fn a_taken_ops_port_exits_2_with_one_line_naming_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let listen = taken.local_addr().expect("addr").to_string();
    let (_dir, api, mut bot) = spawn_with(("TURNSTILE_OPS_LISTEN", listen.clone())).await;
    let status = bot.exit().await;
    let text = bot.log_text();
    assert_clean_failure(status, &text, 2, &["ops.listen", &listen, "in use"]);
    assert!(
        api.calls_of("getMe").is_empty(),
        "refused before Telegram is asked anything:\n{text}"
    );
    drop(taken);
}

#[test]
fn version_prints_the_name_the_crate_version_and_the_commit() {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(manifest)
        .output()
        .expect("git runs");
    let commit = String::from_utf8_lossy(&commit.stdout).trim().to_string();
    for flag in ["--version", "-V"] {
        let out = run(&[flag]);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let prefix = format!("turnstile {} ({commit}", env!("CARGO_PKG_VERSION"));
        assert!(
            text.starts_with(&prefix) && text.ends_with(")\n") && text.lines().count() == 1,
            "{text:?} is not {prefix}…)"
        );
    }
}

#[test]
fn help_lists_the_commands_options_environment_and_exit_codes() {
    for flag in ["--help", "-h"] {
        let out = run(&[flag]);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for needle in [
            "turnstile [run]",
            "turnstile check-config",
            "turnstile backup [--config FILE] PATH",
            "--config FILE",
            "--version",
            "TELEGRAM_BOT_TOKEN",
            "CREDENTIALS_DIRECTORY",
            "TURNSTILE_<SECTION>_<KEY>",
            "TURNSTILE_AGENT_ENV_<NAME>",
            "TURNSTILE_LOG",
            "Exit codes:",
        ] {
            assert!(text.contains(needle), "--help lacks {needle:?}:\n{text}");
        }
        for code in ["0", "1", "2", "3", "70"] {
            assert!(
                text.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{code} "))),
                "--help does not explain exit code {code}:\n{text}"
            );
        }
    }
}

#[test]
fn a_bad_command_line_is_exit_2_and_points_at_help() {
    for args in [&["frobnicate"][..], &["backup"], &["check-config", "extra"]] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--help"), "{args:?}: {err}");
    }
}

#[tokio::test]
async fn a_state_file_from_a_newer_turnstile_is_refused_with_exit_2_and_left_as_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("state.db");
    let newer = turnstile::state::SCHEMA_VERSION + 1;
    {
        let conn = rusqlite::Connection::open(&db).expect("a database");
        conn.execute_batch("CREATE TABLE future (x INTEGER);")
            .expect("a table");
        conn.pragma_update(None, "user_version", newer)
            .expect("a version");
    }
    let before = std::fs::read(&db).expect("read");
    let api = FakeBotApi::start().await;
    let log = dir.path().join("stderr.log");
    let env = [("TURNSTILE_STATE_PATH", db.display().to_string())];
    let mut bot = BotProcess::spawn(&api, &log, &env);
    let status = bot.exit().await;
    let text = bot.log_text();
    let found = format!("schema version {newer}");
    let supported = format!("this turnstile's {}", turnstile::state::SCHEMA_VERSION);
    assert_clean_failure(
        status,
        &text,
        2,
        &[
            "state.db",
            &found,
            &supported,
            "newer binary",
            "restore a backup",
        ],
    );
    assert_eq!(std::fs::read(&db).expect("read"), before, "left as it was");
    assert!(api.calls_of("getMe").is_empty(), "{text}");
}

/// The second `getMe failed` line of a bot whose Bot API is `url`.
async fn second_get_me_failure(api_url: &str) -> String {
    let (_dir, api, mut bot) =
        spawn_with(("TURNSTILE_TELEGRAM_API_URL", api_url.to_string())).await;
    let line = eventually("the second getMe retry line", SOON * 3, || {
        let text = bot.log_text();
        async move {
            text.lines()
                .filter(|l| l.contains("getMe failed"))
                .nth(1)
                .map(str::to_owned)
                .ok_or(text)
        }
    })
    .await;
    bot.signal(libc::SIGTERM);
    let _ = bot.exit().await;
    assert!(api.calls().is_empty(), "only {api_url} was asked");
    // The second try waits twice the first's 250 ms.
    assert!(line.contains("; retrying in 500ms (at "), "{line}");
    assert!(!line.contains("error sending request"), "{line}");
    assert!(!line.contains(bot_api::TOKEN), "{line}");
    line
}

#[tokio::test]
async fn a_get_me_that_cannot_connect_logs_the_host_the_cause_and_the_next_retry() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let host = closed.local_addr().expect("addr").to_string();
    drop(closed);
    let line = second_get_me_failure(&format!("http://{host}")).await;
    let expected = format!("getMe failed: connect error reaching {host}: ");
    assert!(line.contains(&expected), "{line}");
    assert!(line.contains("refused"), "the OS's cause: {line}");
}

#[tokio::test]
async fn a_get_me_whose_tls_fails_says_tls() {
    // Plain text where a TLS server hello should be.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let host = listener.local_addr().expect("addr").to_string();
    let server = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    let line = second_get_me_failure(&format!("https://{host}")).await;
    server.abort();
    let expected = format!("getMe failed: TLS error reaching {host}: ");
    assert!(line.contains(&expected), "{line}");
}

#[tokio::test]
async fn restart_binds_its_ops_port_again() {
    // The port a taken one would be: the re-executed process must get it
    // back from the old one, or /restart would end the service (exit 2).
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let listen = free.local_addr().expect("addr").to_string();
    drop(free);
    let (_dir, api, mut bot) = spawn_with(("TURNSTILE_OPS_LISTEN", listen.clone())).await;
    wait_until("the first start", SOON * 3, || {
        bot.log_text().contains("turnstile started")
    })
    .await;
    api.push_text(ADMIN, ADMIN, "/restart");
    wait_until("the second start", SOON * 3, || {
        bot.log_text().matches("turnstile started").count() == 2
    })
    .await;
    assert!(
        bot.child.try_wait().expect("wait").is_none(),
        "{}",
        bot.log_text()
    );
    let (status, _) = tokio::time::timeout(SOON, async {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = tokio::net::TcpStream::connect(&listen)
            .await
            .expect("the ops port answers");
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        (answer.lines().next().unwrap_or_default().to_owned(), answer)
    })
    .await
    .expect("the ops port answers in time");
    assert!(status.contains("200"), "{status}");
    bot.signal(libc::SIGTERM);
    assert!(bot.exit().await.success(), "{}", bot.log_text());
}

//! A line typed in `turnstile attach` is in the inbox before the client is
//! told it was taken: a `kill -9` of the bot right after the
//! acknowledgement still answers it, once, at the next start.

mod support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use support::process::BotProcess;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use turnstile::agent::{Scenario, Step};

#[actix_rt::test]
async fn a_typed_line_acknowledged_before_a_kill_9_is_answered_once_after_it() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let socket = dir.path().join("state.db.attach");
    let log = dir.path().join("log");
    // The first process's agent never answers the typed line.
    let script = dir.path().join("scenario.json");
    let stuck = Scenario::default().with_rule("typed", turn(vec![Step::HangForever]));
    std::fs::write(&script, serde_json::to_string(&stuck).unwrap()).unwrap();
    let env = vec![
        ("TURNSTILE_STATE_PATH", db.display().to_string()),
        // A turn the kill cut short runs again.
        ("TURNSTILE_DISPATCHER_ON_INTERRUPTED", "retry".to_string()),
    ];
    let mut first_env = env.clone();
    first_env.push(("TURNSTILE_AGENT_SCRIPT", script.display().to_string()));
    let mut first = BotProcess::spawn(&api, &log, &first_env);
    wait_until("the attach socket", Duration::from_secs(20), || {
        socket.exists()
    })
    .await;

    let mut client = Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .args(["attach", "--json", "1"])
        .env_clear()
        .env("TURNSTILE_STATE_PATH", &db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("client starts");
    let mut stdin = client.stdin.take().unwrap();
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    stdin.write_all(b"a typed line\n").await.unwrap();
    let accepted = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["event"] == "accepted" {
                return v;
            }
        }
        panic!("the client ended before the line was accepted");
    })
    .await
    .expect("the typed line is accepted");
    assert!(accepted["update_id"].as_i64().unwrap() < 0, "{accepted}");
    first.signal(libc::SIGKILL);
    first.exit().await;

    let mut second = BotProcess::spawn(&api, &log, &env);
    api.wait_for(Duration::from_secs(30), "the typed line answered", |_| {
        api.texts_to(1)
            .iter()
            .any(|t| t == "echo: a typed line")
            .then_some(())
    })
    .await;
    second.signal(libc::SIGTERM);
    second.exit().await;
    let texts = api.texts_to(1);
    let answers = texts.iter().filter(|t| *t == "echo: a typed line").count();
    assert_eq!(answers, 1, "answered once: {texts:?}");
}

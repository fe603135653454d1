//! Parked messages outlive the process: a message whose turn was refused
//! for a usage limit is parked in the state file; after a stop and a new
//! start it runs at its time, once, and is not reported as cut short.
//! The real binary, the scripted agent, the fake Bot API.

mod support;

use std::time::Duration;

use support::process::BotProcess;
use support::*;
use turnstile::agent::{Scenario, Step};

fn refusing() -> Scenario {
    Scenario::default().with_rule(
        "ask",
        turn(vec![Step::Result {
            text: "API Error: Request rejected (429) · usage limit".into(),
            subtype: "success".into(),
            is_error: true,
            terminal_reason: Some("api_error".into()),
            num_turns: Some(1),
            limited: true,
            resets_at: None,
        }]),
    )
}

#[tokio::test]
async fn a_parked_message_runs_once_in_the_next_process() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let first_script = dir.path().join("first.json");
    let second_script = dir.path().join("second.json");
    std::fs::write(&first_script, serde_json::to_string(&refusing()).unwrap()).unwrap();
    std::fs::write(
        &second_script,
        serde_json::to_string(&Scenario::default()).unwrap(),
    )
    .unwrap();
    let env = |script: &std::path::Path| {
        vec![
            (
                "TURNSTILE_STATE_PATH",
                dir.path().join("state.db").display().to_string(),
            ),
            ("TURNSTILE_AGENT_SCRIPT", script.display().to_string()),
            ("TURNSTILE_AGENT_LIMIT_RETRY", "3s".to_string()),
        ]
    };
    let log = dir.path().join("bot.log");
    let mut first = BotProcess::spawn(&api, &log, &env(&first_script));
    api.push_text(1, USER, "ask me");
    api.wait_for(Duration::from_secs(20), "the parked notice", |_| {
        api.texts_to(1).into_iter().find(|t| t.starts_with("⏳"))
    })
    .await;
    first.signal(libc::SIGTERM);
    assert!(first.exit().await.success(), "{}", first.log_text());
    let mut second = BotProcess::spawn(&api, &log, &env(&second_script));
    api.wait_for(
        Duration::from_secs(30),
        "the parked message answered",
        |_| {
            api.texts_to(1)
                .iter()
                .any(|t| t == "echo: ask me")
                .then_some(())
        },
    )
    .await;
    second.signal(libc::SIGTERM);
    assert!(second.exit().await.success(), "{}", second.log_text());
    let texts = api.texts_to(1);
    assert_eq!(
        texts.iter().filter(|t| *t == "echo: ask me").count(),
        1,
        "answered once: {texts:?}"
    );
    assert!(
        !texts.iter().any(|t| t.contains("restarted")),
        "a parked message is not cut short: {texts:?}"
    );
    assert_eq!(texts.len(), 2, "the notice and the answer: {texts:?}");
}

//! `[log] format = "json"` (here through `TURNSTILE_LOG_FORMAT`): every
//! stderr line of the binary is one JSON object, and a turn's lines carry
//! its chat id, turn id and outcome as fields.

mod support;

use std::time::Duration;

use support::process::BotProcess;
use support::*;

fn lines_as_json(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Runs the binary with JSON logs for one turn ("hello there" in chat 1),
/// stops it with SIGTERM and returns its log lines, parsed and as text.
async fn one_turn_in_json(api: &FakeBotApi) -> (Vec<serde_json::Value>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("stderr.log");
    let env = [
        ("TURNSTILE_LOG_FORMAT", "json".to_string()),
        (
            "TURNSTILE_STATE_PATH",
            dir.path().join("state.db").display().to_string(),
        ),
    ];
    let mut bot = BotProcess::spawn(api, &log, &env);
    api.push_text(1, USER, "hello there");
    api.wait_for_texts(1, 1, Duration::from_secs(30)).await;
    wait_until("the turn's end in the log", Duration::from_secs(30), || {
        bot.log_text().contains("turn ended")
    })
    .await;
    bot.signal(libc::SIGTERM);
    let status = bot.exit().await;
    let text = bot.log_text();
    assert!(status.success(), "{status:?}\n{text}");
    (lines_as_json(&text), text)
}

#[tokio::test]
async fn json_logs_are_one_object_per_line_with_chat_turn_and_outcome() {
    let api = FakeBotApi::start().await;
    let (lines, _) = one_turn_in_json(&api).await;
    assert!(
        lines.iter().any(|l| l["message"] == "turnstile started"),
        "the start line is there too"
    );
    let ended = lines
        .iter()
        .find(|l| l["message"] == "turn ended")
        .expect("a turn-ended line");
    assert_eq!(ended["chat_id"], 1, "{ended}");
    assert_eq!(ended["turn_id"], 1, "{ended}");
    assert!(
        ended["outcome"].as_str().is_some_and(|o| !o.is_empty()),
        "{ended}"
    );
    assert_eq!(ended["level"], "INFO");
    let started = lines
        .iter()
        .find(|l| l["message"] == "turn started")
        .expect("a turn-started line");
    assert_eq!(started["chat_id"], 1, "{started}");
    assert_eq!(started["turn_id"], ended["turn_id"], "{started}");
}

/// Context comes from spans: a line logged deep inside a turn (here the
/// outbox's retry of the answer, in the chat's lane) has the turn's chat and
/// turn at the top level of its object, as the turn's own lines do.
#[tokio::test]
async fn a_line_logged_deep_inside_a_turn_carries_its_chat_and_turn_at_the_top_level() {
    let api = FakeBotApi::start().await;
    api.inject("sendMessage", Fault::RetryAfter(1));
    let (lines, text) = one_turn_in_json(&api).await;
    let retry = lines
        .iter()
        .find(|l| l["message"] == "retrying a telegram request")
        .unwrap_or_else(|| panic!("no retry in the log:\n{text}"));
    assert_eq!(retry["method"], "sendMessage", "{retry}");
    assert_eq!(retry["chat_id"], 1, "{retry}");
    assert_eq!(retry["turn_id"], 1, "{retry}");
    assert!(retry.get("spans").is_none(), "{retry}");
}

#[tokio::test]
async fn an_unknown_log_format_is_a_config_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = FakeBotApi::start().await;
    let log = dir.path().join("stderr.log");
    let env = [("TURNSTILE_LOG_FORMAT", "yaml".to_string())];
    let mut bot = BotProcess::spawn(&api, &log, &env);
    let status = bot.exit().await;
    assert_eq!(status.code(), Some(2), "{}", bot.log_text());
    let text = bot.log_text();
    assert!(
        text.contains("log.format") || text.contains("TURNSTILE_LOG_FORMAT"),
        "{text}"
    );
}

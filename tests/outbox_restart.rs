//! Answers waiting for Telegram outlive the process: kept in the state
//! file before the turn counts as done, sent by the next process once, in
//! order, after a `kill -9` in the middle of an outage and after a stop.
//! The real binary, the scripted agent, the fake Bot API.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use support::process::BotProcess;
use support::*;

/// What marks a copy sent again that may show twice.
const RESENT: &str =
    "↻ Sent again: Telegram did not confirm the first copy of this message, so it may show twice.";

/// Attempts of `sendMessage` with `text` to chat 1 answered `status`.
fn attempts(api: &FakeBotApi, text: &str, status: u16) -> usize {
    api.calls_of("sendMessage")
        .iter()
        .filter(|c| c.params["chat_id"] == json!(1) && c.params["text"] == json!(text))
        .filter(|c| c.status == status)
        .count()
}

fn env(dir: &Path) -> Vec<(&'static str, String)> {
    vec![(
        "TURNSTILE_STATE_PATH",
        dir.join("state.db").display().to_string(),
    )]
}

/// Telegram answers 502 to every message: an answer is written and
/// waits; the bot is killed (`kill -9`). Telegram comes back; the next
/// process sends the answer, once, unmarked (no unexplained message id lies
/// before it: the message it answers is known from the row), then answers
/// the next message; a third process has nothing left to send. (A message
/// the user sent during the outage would be unexplained: the answer would
/// then come marked as a resend.)
#[tokio::test]
async fn an_answer_waiting_at_a_kill_is_sent_once_in_order_by_the_next_process() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("bot.log");
    let mut first = BotProcess::spawn(&api, &log, &env(dir.path()));
    // A message answered as usual first: the chat's ids are known.
    api.push_text(1, USER, "hi");
    api.wait_for_texts(1, 1, Duration::from_secs(20)).await;
    for _ in 0..100_000 {
        api.inject("sendMessage", Fault::ServerError(502));
    }
    api.push_text(1, USER, "one");
    api.wait_for(Duration::from_secs(20), "the answer tried", |_| {
        (attempts(&api, "echo: one", 502) >= 3).then_some(())
    })
    .await;
    first.signal(libc::SIGKILL);
    first.exit().await;
    api.clear_faults();
    let mut second = BotProcess::spawn(&api, &log, &env(dir.path()));
    api.wait_for(Duration::from_secs(30), "the waiting answer sent", |_| {
        (attempts(&api, "echo: one", 200) > 0).then_some(())
    })
    .await;
    api.push_text(1, USER, "two");
    api.wait_for(
        Duration::from_secs(30),
        "the second message answered",
        |_| {
            api.texts_to(1)
                .iter()
                .any(|t| t == "echo: two")
                .then_some(())
        },
    )
    .await;
    second.signal(libc::SIGTERM);
    assert!(second.exit().await.success(), "{}", second.log_text());
    let mut third = BotProcess::spawn(&api, &log, &env(dir.path()));
    api.push_text(1, USER, "three");
    api.wait_for(
        Duration::from_secs(30),
        "the third message answered",
        |_| {
            api.texts_to(1)
                .iter()
                .any(|t| t == "echo: three")
                .then_some(())
        },
    )
    .await;
    third.signal(libc::SIGTERM);
    assert!(third.exit().await.success(), "{}", third.log_text());
    let texts = api.texts_to(1);
    let answers: Vec<&String> = texts.iter().filter(|t| t.starts_with("echo: ")).collect();
    assert_eq!(
        answers,
        vec!["echo: hi", "echo: one", "echo: two", "echo: three"],
        "each once, in order: {texts:?}"
    );
    assert_eq!(
        texts.iter().position(|t| t == "echo: one"),
        Some(1),
        "the waiting answer went first: {texts:?}"
    );
    assert!(!texts.iter().any(|t| t == RESENT), "{texts:?}");
    assert_eq!(attempts(&api, "echo: one", 200), 1);
}

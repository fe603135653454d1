//! The real Claude Code CLI (installed by `scripts/install-claude.sh`)
//! driven by turnstile against the fake Anthropic Messages API, which
//! streams the answer in three chunks, and the fake Bot API, through the
//! real teloxide client: the chat sees one preview message grow as the
//! model writes, and that message becomes the answer, shown once. Once as
//! plain assistant text, once as the `text` of an `end_turn` call. Part of
//! the real-CLI group: built only with `--features real-cli`.
//!
//! The CLI must never reach the network, so the tests that run it are
//! `#[ignore]`d and run by [`real_preview_in_a_loopback_namespace`], which
//! re-runs this test binary inside `unshare -n` (loopback only) with the
//! CLI's path in `TURNSTILE_REAL_CLAUDE`. Needs root and npm, like CI.
#![cfg(feature = "real-cli")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::anthropic::{FakeAnthropic, Reply};
use support::*;
use turnstile::agent::backends::ClaudeBackend;
use turnstile::chat::TurnOutcome;

const INNER: &[&str] = &[
    "a_plain_text_answer_grows_in_one_preview_that_becomes_the_answer",
    "the_text_of_end_turn_grows_in_one_preview_that_becomes_the_answer",
];

#[test]
fn real_preview_in_a_loopback_namespace() {
    support::real_cli::run_in_loopback_namespace(INNER);
}

/// The three chunks the fake streams, a pause apart: plain words (no
/// Markdown), the first past the preview's 40 characters so the preview
/// shows it alone, then grows.
const CHUNKS: [&str; 3] = [
    "The preview shows this first part of the answer, ",
    "then it grows by a second part while the model writes, ",
    "and ends with the last words of the answer 🦀",
];

/// The pause between two chunks: three times `progress.interval`, so each
/// chunk can be its own state of the preview.
const PAUSE: Duration = Duration::from_millis(600);

/// The live view with the answer's preview only (no status message),
/// edited at most every 200 ms.
const STREAMING: &[(&str, &str)] = &[
    ("TURNSTILE_PROGRESS_AFTER", "1h"),
    ("TURNSTILE_PROGRESS_INTERVAL", "200ms"),
    ("TURNSTILE_PROGRESS_STREAM", "edit"),
    ("TURNSTILE_PROGRESS_PREVIEW_AFTER", "0s"),
];

/// The second turn's answer: short, so it goes out as a plain message.
const NEXT: &str = "pong";

/// How long the chat may take to see something after the turn ended.
const LATE: Duration = Duration::from_secs(30);

/// The bot on the `claude` backend running the real CLI against `api`,
/// streaming the answer's preview.
async fn start(api: &FakeAnthropic, home: &tempfile::TempDir) -> (Harness, Arc<ClaudeBackend>) {
    let home = home.path().display().to_string();
    let mut vars = support::real_cli::agent_env(&api.base_url(), &home, &home);
    vars.extend(
        STREAMING
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    Harness::launch_claude(&vars).await
}

fn text_of(call: &Call) -> &str {
    call.params["text"].as_str().unwrap_or_default()
}

/// One line per call, for a failure message.
fn list(calls: &[Call]) -> String {
    calls
        .iter()
        .map(|c| {
            format!(
                "#{} {} {} id={} {:?}",
                c.seq, c.status, c.method, c.params["message_id"], c.params["text"]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs the first turn (the streamed answer `whole`) and a second one
/// answered [`NEXT`], then checks what chat 1 saw of the first: one
/// `sendMessage` (the preview, a strict prefix of `whole`), edits of that
/// message that grow, at least one of them a longer strict prefix, the last
/// the whole answer, and no other message, edit or delete.
async fn one_preview_becomes_the_answer(api: FakeAnthropic, whole: &str, ends: TurnOutcome) {
    // The second turn: its answer comes after anything the first queued.
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({ "text": NEXT }),
    )]));
    let home = tempfile::tempdir().expect("a temp home");
    let (mut h, _backend) = start(&api, &home).await;
    h.say(1, USER, "answer slowly");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, ends, "{}", api.describe());
    h.say(1, USER, "ping");
    h.turn_ended(1, 2).await;
    let calls = h
        .api
        .wait_for(LATE, "the next turn's answer", |calls| {
            calls
                .iter()
                .any(|c| c.method == "sendmessage" && text_of(c) == NEXT)
                .then(|| calls.to_vec())
        })
        .await;
    let next = calls
        .iter()
        .position(|c| c.method == "sendmessage" && text_of(c) == NEXT)
        .expect("found above");
    let first: Vec<Call> = calls[..next]
        .iter()
        .filter(|c| {
            matches!(
                c.method.as_str(),
                "sendmessage" | "editmessagetext" | "deletemessage"
            ) && c.params["chat_id"] == json!(1)
        })
        .cloned()
        .collect();
    let all = list(&first);
    println!("the first turn's messages:\n{all}");

    assert!(
        first.iter().all(|c| c.method != "deletemessage"),
        "the preview stays (it is the answer):\n{all}"
    );
    let sends: Vec<&Call> = first.iter().filter(|c| c.method == "sendmessage").collect();
    assert_eq!(sends.len(), 1, "one message for the answer:\n{all}");
    let preview = sends[0];
    assert_eq!(preview.status, 200, "{all}");
    let shown = text_of(preview);
    assert!(
        shown.len() < whole.len() && whole.starts_with(shown),
        "the preview is a strict prefix of the answer:\n{all}"
    );
    let edits: Vec<&Call> = first
        .iter()
        .filter(|c| c.method == "editmessagetext")
        .collect();
    // The fake answers 400 to an edit of a message the bot did not send,
    // and the preview is the one message the bot sent in the turn: edits
    // of one message, all accepted, are edits of the preview.
    let mut ids: Vec<&serde_json::Value> = edits.iter().map(|e| &e.params["message_id"]).collect();
    ids.dedup();
    assert_eq!(ids.len(), 1, "every edit is of one message:\n{all}");
    assert!(
        edits.iter().all(|e| e.status == 200),
        "every edit accepted (the preview exists):\n{all}"
    );
    let mut states = vec![shown];
    states.extend(edits.iter().map(|e| text_of(e)));
    for pair in states.windows(2) {
        assert!(
            pair[1].len() > pair[0].len() && pair[1].starts_with(pair[0]),
            "each state of the preview grows on the one before:\n{all}"
        );
    }
    assert!(
        states
            .iter()
            .skip(1)
            .any(|s| s.len() > shown.len() && s.len() < whole.len()),
        "the preview grew while the model wrote, before the whole answer:\n{all}"
    );
    assert_eq!(
        states.last().copied(),
        Some(whole),
        "the preview became the whole answer:\n{all}"
    );
    assert_eq!(api.model_calls(), 2, "{}", api.describe());
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_preview_in_a_loopback_namespace"]
async fn a_plain_text_answer_grows_in_one_preview_that_becomes_the_answer() {
    let api = FakeAnthropic::start().await;
    api.push(Reply::text_in_chunks(&CHUNKS, PAUSE));
    one_preview_becomes_the_answer(
        api,
        &CHUNKS.concat(),
        TurnOutcome::Completed {
            reason: "completed".into(),
        },
    )
    .await;
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_preview_in_a_loopback_namespace"]
async fn the_text_of_end_turn_grows_in_one_preview_that_becomes_the_answer() {
    let api = FakeAnthropic::start().await;
    api.push(Reply::tool_text_in_chunks(
        "mcp__telegram-tools__end_turn",
        &CHUNKS,
        PAUSE,
    ));
    one_preview_becomes_the_answer(
        api,
        &CHUNKS.concat(),
        TurnOutcome::Terminated {
            tool: "end_turn".into(),
        },
    )
    .await;
}

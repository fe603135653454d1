//! What a chat sees while its agent works: the status message (the tool
//! running now, the tool calls, the time), the answer's preview that
//! becomes the answer, the limits of a turn's output, and `/stop` dropping
//! what the turn queued. Real teloxide client, fake Bot API, scripted agent.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::bot_api::files::{supergroup, text_message};
use support::*;
use turnstile::agent::{Scenario, Step};
use turnstile::telegram::RateLimits;

const SEND: &str = "mcp__telegram-tools__send";
const END: &str = "mcp__telegram-tools__end_turn";

fn activity(tool: &str, input: Value) -> Step {
    Step::Activity {
        tool: tool.into(),
        input,
    }
}

fn wait(ms: u64) -> Step {
    Step::Wait { ms }
}

/// Two tools, about two seconds, then the answer.
fn working() -> Scenario {
    Scenario::default().with_rule(
        "work",
        turn(vec![
            activity("Bash", json!({"command": "cargo test"})),
            wait(900),
            activity("Read", json!({"file_path": "src/main.rs"})),
            wait(900),
            Step::Tools {
                calls: vec![
                    tool(SEND, json!({"text": "All tests pass."})),
                    tool(END, json!({})),
                ],
            },
        ]),
    )
}

const LIVE: &[(&str, &str)] = &[
    ("TURNSTILE_PROGRESS_AFTER", "300ms"),
    ("TURNSTILE_PROGRESS_INTERVAL", "300ms"),
    ("TURNSTILE_PROGRESS_STREAM", "edit"),
    ("TURNSTILE_PROGRESS_PREVIEW_AFTER", "0s"),
];

/// The answer's preview without the status message, shown as soon as its
/// text is long enough.
const STREAMING: &[(&str, &str)] = &[
    ("TURNSTILE_PROGRESS_AFTER", "1h"),
    ("TURNSTILE_PROGRESS_INTERVAL", "300ms"),
    ("TURNSTILE_PROGRESS_STREAM", "edit"),
    ("TURNSTILE_PROGRESS_PREVIEW_AFTER", "0s"),
];

/// [`STREAMING`] with the default `progress.preview_after` (1 s).
const STREAMING_DEFAULT: &[(&str, &str)] = &[
    ("TURNSTILE_PROGRESS_AFTER", "1h"),
    ("TURNSTILE_PROGRESS_INTERVAL", "300ms"),
    ("TURNSTILE_PROGRESS_STREAM", "edit"),
];

fn text_of(call: &Call) -> &str {
    call.params["text"].as_str().unwrap_or_default()
}

/// Waits for a call of `method` (lowercase) whose text passes `text`; with
/// `last`, the latest such call.
async fn call_with(
    h: &Harness,
    what: &str,
    method: &str,
    last: bool,
    text: impl Fn(&str) -> bool,
) -> Call {
    h.api
        .wait_for(SOON, what, |calls| {
            let mut found = calls
                .iter()
                .filter(|c| c.method == method && text(text_of(c)));
            if last { found.last() } else { found.next() }.cloned()
        })
        .await
}

/// The texts of every `sendMessage`, once they pass `done`.
async fn sent_texts_until(
    h: &Harness,
    timeout: Duration,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    h.api
        .wait_for(timeout, what, |calls| {
            let texts: Vec<String> = calls
                .iter()
                .filter(|c| c.method == "sendmessage")
                .map(|c| text_of(c).to_string())
                .collect();
            done(&texts).then_some(texts)
        })
        .await
}

/// Every request about message `id` of chat 1 (its send, edits, delete).
fn about(h: &Harness, id: i64) -> Vec<Call> {
    h.api
        .calls()
        .into_iter()
        .filter(|c| {
            matches!(c.method.as_str(), "editmessagetext" | "deletemessage")
                && c.params["message_id"] == json!(id)
        })
        .collect()
}

#[actix_rt::test]
async fn a_long_turn_shows_its_status_then_the_status_goes() {
    let mut h = Harness::start(working(), LIVE).await;
    h.say(1, USER, "work please");
    let status = call_with(&h, "the status message", "sendmessage", false, |t| {
        t.starts_with("🔧")
    })
    .await;
    assert!(
        text_of(&status).starts_with("🔧 Bash: cargo test\n1 tool call · "),
        "{}",
        text_of(&status)
    );
    h.turn_ended(1, 1).await;
    let deleted = h.api.wait_for_call("deleteMessage", SOON).await;
    let id = deleted.params["message_id"].as_i64().expect("an id");
    let edits: Vec<Call> = about(&h, id)
        .into_iter()
        .filter(|c| c.method == "editmessagetext")
        .collect();
    assert!(
        edits
            .iter()
            .any(|e| text_of(e).starts_with("📖 Read src/main.rs\n2 tool calls · ")),
        "the status follows the agent: {:#?}",
        edits.iter().map(text_of).collect::<Vec<_>>()
    );
    let mut times = vec![status.at];
    times.extend(edits.iter().map(|e| e.at));
    for pair in times.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(
            gap >= Duration::from_millis(100),
            "two status updates {gap:?} apart with progress.interval = 300ms"
        );
    }
    assert!(
        about(&h, id)
            .last()
            .is_some_and(|c| c.method == "deletemessage"),
        "nothing after the delete"
    );
    let texts = h.texts(1);
    assert_eq!(
        texts.iter().filter(|t| *t == "All tests pass.").count(),
        1,
        "the answer is its own message: {texts:#?}"
    );
}

#[actix_rt::test]
async fn with_keep_fold_the_status_stays_as_one_line() {
    let mut env = LIVE.to_vec();
    env.push(("TURNSTILE_PROGRESS_KEEP", "fold"));
    let mut h = Harness::start(working(), &env).await;
    h.say(1, USER, "work please");
    h.turn_ended(1, 1).await;
    let folded = call_with(&h, "the folded status", "editmessagetext", false, |t| {
        t.starts_with("✅")
    })
    .await;
    assert!(
        text_of(&folded).starts_with("✅ 2 tool calls · "),
        "{}",
        text_of(&folded)
    );
    assert!(h.api.calls_of("deleteMessage").is_empty());
}

#[actix_rt::test]
async fn a_turn_shorter_than_progress_after_shows_no_status() {
    let scenario = working().with_rule("quick", reply("done quickly"));
    let mut env = LIVE.to_vec();
    env[0] = ("TURNSTILE_PROGRESS_AFTER", "700ms");
    let mut h = Harness::start(scenario, &env).await;
    h.say(1, USER, "quick one");
    h.turn_ended(1, 1).await;
    // The next turn runs past `after`: the first status of the chat is its.
    h.say(1, USER, "work please");
    let status = call_with(&h, "a status message", "sendmessage", false, |t| {
        t.starts_with("🔧")
    })
    .await;
    let sends = h.api.calls_of("sendMessage");
    let before: Vec<&str> = sends
        .iter()
        .filter(|c| c.seq < status.seq)
        .map(text_of)
        .collect();
    assert_eq!(
        before,
        ["done quickly"],
        "the quick turn showed only its answer"
    );
    assert!(
        text_of(&status).contains("1 tool call"),
        "{}",
        text_of(&status)
    );
}

/// `end_turn` whose `text` streams in three pieces, `ms` apart.
fn streamed_end_turn(ms: u64) -> (Scenario, String) {
    let whole = "Here is the answer you asked for, written piece by piece until done.";
    let pieces = vec![
        "{\"text\":\"Here is the answer".to_string(),
        " you asked for, written".to_string(),
        " piece by piece until done.\"}".to_string(),
    ];
    let scenario = Scenario::default().with_rule(
        "stream",
        turn(vec![
            Step::StreamTool {
                tool: END.into(),
                pieces,
                ms,
            },
            Step::Tools {
                calls: vec![tool(END, json!({ "text": whole }))],
            },
        ]),
    );
    (scenario, whole.to_string())
}

#[actix_rt::test]
async fn the_text_of_end_turn_shows_as_it_is_written_and_becomes_the_answer() {
    let (scenario, whole) = streamed_end_turn(400);
    let mut h = Harness::start(scenario, STREAMING).await;
    h.say(1, USER, "stream it");
    h.turn_ended(1, 1).await;
    let final_edit = call_with(
        &h,
        "the answer in the preview",
        "editmessagetext",
        true,
        |t| t == whole,
    )
    .await;
    let sends = h.api.calls_of("sendMessage");
    assert_eq!(
        sends.len(),
        1,
        "one message: {:#?}",
        sends.iter().map(text_of).collect::<Vec<_>>()
    );
    let preview = text_of(&sends[0]);
    assert_eq!(
        preview, "Here is the answer you asked for, written",
        "shown once 40 characters exist"
    );
    assert!(whole.starts_with(preview));
    assert!(final_edit.seq > sends[0].seq);
    assert_eq!(
        final_edit.status, 200,
        "the answer is an edit of the bot's one message, the preview"
    );
}

/// An answer written whole within `progress.preview_after` is one
/// `sendMessage`: no preview, no edit.
#[actix_rt::test]
async fn a_short_answer_is_one_message_and_no_edit() {
    let (scenario, whole) = streamed_end_turn(50);
    let mut h = Harness::start(scenario, STREAMING_DEFAULT).await;
    h.say(1, USER, "stream it");
    h.turn_ended(1, 1).await;
    let texts = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(texts, std::slice::from_ref(&whole));
    let sends = h.api.calls_of("sendMessage");
    assert_eq!(
        sends.len(),
        1,
        "{:#?}",
        sends.iter().map(text_of).collect::<Vec<_>>()
    );
    assert!(h.api.calls_of("editMessageText").is_empty());
}

/// An answer still being written `progress.preview_after` after its first
/// text shows as a preview then (with what was written by that time), and
/// becomes the answer.
#[actix_rt::test]
async fn a_long_answer_shows_its_preview_once_preview_after_passed() {
    let (scenario, whole) = streamed_end_turn(700);
    let mut h = Harness::start(scenario, STREAMING_DEFAULT).await;
    h.say(1, USER, "stream it");
    h.turn_ended(1, 1).await;
    call_with(
        &h,
        "the answer in the preview",
        "editmessagetext",
        true,
        |t| t == whole,
    )
    .await;
    let sends = h.api.calls_of("sendMessage");
    assert_eq!(
        sends.len(),
        1,
        "{:#?}",
        sends.iter().map(text_of).collect::<Vec<_>>()
    );
    // Shown by the clock at 1 s, before the last piece (at 1.4 s) came.
    assert_eq!(
        text_of(&sends[0]),
        "Here is the answer you asked for, written"
    );
}

#[actix_rt::test]
async fn with_streaming_off_the_answer_arrives_whole_and_once() {
    let (scenario, whole) = streamed_end_turn(100);
    let mut env = LIVE.to_vec();
    env[2] = ("TURNSTILE_PROGRESS_STREAM", "off");
    let mut h = Harness::start(scenario, &env).await;
    h.say(1, USER, "stream it");
    h.turn_ended(1, 1).await;
    let texts = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(texts, [whole]);
    assert!(h.api.calls_of("editMessageText").is_empty());
}

#[actix_rt::test]
async fn a_draft_streams_in_a_private_chat_then_the_answer_is_one_message() {
    let (scenario, whole) = streamed_end_turn(400);
    let mut env = STREAMING.to_vec();
    env[2] = ("TURNSTILE_PROGRESS_STREAM", "draft");
    let mut h = Harness::start(scenario, &env).await;
    h.say(1, USER, "stream it");
    h.turn_ended(1, 1).await;
    let texts = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(texts, std::slice::from_ref(&whole));
    let drafts = h.api.calls_of("sendMessageDraft");
    let shown: Vec<&str> = drafts.iter().map(text_of).collect();
    assert!(!drafts.is_empty(), "no draft");
    assert!(
        shown.iter().all(|d| whole.starts_with(d)),
        "drafts grow towards the answer: {shown:#?}"
    );
    assert!(h.api.calls_of("editMessageText").is_empty());
}

#[actix_rt::test]
async fn a_plain_text_answer_streams_into_its_preview_with_no_status_beside_it() {
    let whole = "The plain answer, streamed as assistant text, arrives in one message, \
                 with no status beside it: the text itself shows the agent at work.";
    let scenario = Scenario::default().with_rule(
        "plain",
        turn(vec![
            Step::Stream {
                pieces: vec![
                    "The plain answer, streamed".into(),
                    " as assistant text, arrives".into(),
                    " in one message,".into(),
                    " with no status beside it:".into(),
                    " the text itself shows the agent at work.".into(),
                ],
                ms: 400,
            },
            result(whole),
        ]),
    );
    // The status would be due at 900 ms; the preview shows from about 400.
    let mut env = LIVE.to_vec();
    env[0] = ("TURNSTILE_PROGRESS_AFTER", "900ms");
    let mut h = Harness::start(scenario, &env).await;
    h.say(1, USER, "plain please");
    h.turn_ended(1, 1).await;
    call_with(&h, "the answer", "editmessagetext", false, |t| t == whole).await;
    let sends = h.api.calls_of("sendMessage");
    assert_eq!(
        sends.len(),
        1,
        "{:#?}",
        sends.iter().map(text_of).collect::<Vec<_>>()
    );
    assert!(whole.starts_with(text_of(&sends[0])));
}

#[actix_rt::test]
async fn past_max_messages_send_fails_the_chat_is_told_once_and_the_turn_ends() {
    let mut calls: Vec<_> = (1..=5)
        .map(|i| tool(SEND, json!({ "text": format!("message {i}") })))
        .collect();
    calls.push(tool(END, json!({})));
    let scenario = Scenario::default()
        .with_rule("many", turn(vec![Step::Tools { calls }]))
        .with_rule("ping", reply("pong"));
    let mut h = Harness::start(scenario, &[("TURNSTILE_TURN_MAX_MESSAGES", "3")]).await;
    h.say(1, USER, "many please");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert!(
        matches!(outcome, turnstile::chat::TurnOutcome::Terminated { .. }),
        "{outcome:?}"
    );
    // The next turn's answer comes after anything the first one queued.
    h.say(1, USER, "ping");
    let texts = sent_texts_until(&h, SOON, "the next answer", |texts| {
        texts.last().map(String::as_str) == Some("pong")
    })
    .await;
    let texts = &texts[..texts.len() - 1];
    assert_eq!(&texts[..3], ["message 1", "message 2", "message 3"]);
    assert!(texts[3].contains("limit of 3 messages"), "{}", texts[3]);
    assert_eq!(texts.len(), 4, "one notice: {texts:#?}");
    let results = h.backend.log().tool_results;
    let refused: Vec<&String> = results
        .iter()
        .filter(|(name, _)| name == SEND)
        .map(|(_, r)| r)
        .skip(3)
        .collect();
    assert_eq!(refused.len(), 2);
    assert!(
        refused
            .iter()
            .all(|r| r.starts_with("Error") && r.contains("turn.max_messages")),
        "{refused:#?}"
    );
}

#[actix_rt::test]
async fn a_send_past_max_output_is_cut_with_a_notice_and_the_next_is_refused() {
    let long = "word ".repeat(100); // 500 bytes
    let calls = vec![
        tool(SEND, json!({ "text": long })),
        tool(SEND, json!({ "text": "more" })),
        tool(END, json!({})),
    ];
    let scenario = Scenario::default().with_rule("long", turn(vec![Step::Tools { calls }]));
    let mut h = Harness::start(scenario, &[("TURNSTILE_TURN_MAX_OUTPUT", "200")]).await;
    h.say(1, USER, "long please");
    h.turn_ended(1, 1).await;
    let texts = h.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(texts.len(), 2, "{texts:#?}");
    assert!(
        texts[0].len() <= 200 && texts[0].ends_with("[…]"),
        "{:?}",
        texts[0]
    );
    assert!(texts[1].contains("limit of 200 bytes"), "{}", texts[1]);
    let results = h.backend.log().tool_results;
    let sends: Vec<&String> = results
        .iter()
        .filter(|(name, _)| name == SEND)
        .map(|(_, r)| r)
        .collect();
    assert!(sends[0].contains("cut after"), "{}", sends[0]);
    assert!(sends[1].contains("turn.max_output"), "{}", sends[1]);
}

#[actix_rt::test]
async fn stop_drops_the_pieces_of_a_long_message_still_queued() {
    // Ten pieces of 4,000 characters, one every 2 s.
    let long = format!("{}\n\n", "x".repeat(4000)).repeat(10);
    let scenario = Scenario::default()
        .with_rule("long", reply(&long))
        .with_rule("ping", reply("pong"));
    let limits = RateLimits {
        chat_burst: 1.0,
        chat_per_sec: 0.5,
        ..Harness::fast_limits()
    };
    let env = [("TURNSTILE_TURN_MAX_OUTPUT", "100000")];
    let mut h = Harness::start_with_limits(scenario, &env, limits).await;
    h.say(1, USER, "long please");
    h.api.wait_for_texts(1, 1, SOON).await;
    h.say(1, USER, "/stop");
    h.turn_ended(1, 1).await;
    h.say(1, USER, "ping");
    let texts = sent_texts_until(&h, Duration::from_secs(30), "the next answer", |texts| {
        texts.iter().any(|t| t == "pong")
    })
    .await;
    let pieces = texts.iter().filter(|t| t.starts_with('x')).count();
    assert!(
        pieces <= 2,
        "{pieces} pieces of the stopped message were sent after /stop"
    );
    assert!(
        texts.iter().any(|t| t.starts_with("⏹ Stopped")),
        "{texts:?}"
    );
}

#[actix_rt::test]
async fn in_a_group_the_preview_replies_to_the_message_that_started_the_turn() {
    let (scenario, whole) = streamed_end_turn(300);
    let mut h = Harness::start(scenario, STREAMING).await;
    let id = h.api.next_message_id(-100_777);
    let mut message = text_message(
        supergroup(-100_777, false),
        USER,
        "@turnstile_bot stream it",
    );
    message["message_id"] = id.into();
    h.api.push_message(message);
    h.turn_ended(-100_777, 1).await;
    call_with(
        &h,
        "the answer in the preview",
        "editmessagetext",
        false,
        |t| t == whole,
    )
    .await;
    let sends = h.api.calls_of("sendMessage");
    assert_eq!(sends.len(), 1, "{sends:#?}");
    assert_eq!(sends[0].params["reply_parameters"]["message_id"], json!(id));
}

//! The Outbox against a misbehaving Telegram: 429s, 5xx, refused
//! formatting, a blocked chat, long replies and the per-chat rate limit;
//! questions with buttons are in `outbox_questions.rs`.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use turnstile::agent::{Scenario, Step};
use turnstile::events::BotEvent;
use turnstile::telegram::RateLimits;

/// Upper bound for a reply after a 5xx (generous: a loaded machine).
const AFTER_5XX: Duration = Duration::from_secs(30);

/// `sendMessage` calls to `chat` carrying `text`, in order of arrival.
fn send_attempts(h: &Harness, chat: i64, text: &str) -> Vec<Call> {
    h.api
        .calls_of("sendMessage")
        .into_iter()
        .filter(|c| c.params["chat_id"] == json!(chat) && c.params["text"] == json!(text))
        .collect()
}

/// Statuses of `calls`, for assertions that show what happened.
fn statuses(calls: &[Call]) -> Vec<u16> {
    calls.iter().map(|c| c.status).collect()
}

/// Length as Telegram counts it.
fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// `s` without any whitespace.
fn non_whitespace(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

#[actix_rt::test]
async fn retry_after_is_honoured() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api.inject("sendMessage", Fault::RetryAfter(1));
    h.say(1, USER, "hello");
    let texts = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(texts, vec!["echo: hello"]);
    h.turn_ended(1, 1).await;

    let attempts = send_attempts(&h, 1, "echo: hello");
    assert_eq!(statuses(&attempts), vec![429, 200], "{attempts:#?}");
    let waited = attempts[1].at.duration_since(attempts[0].at);
    assert!(
        waited >= Duration::from_millis(900),
        "the retry came {waited:?} after a 429 with retry_after = 1 s"
    );
    assert_eq!(h.texts(1), vec!["echo: hello"], "delivered exactly once");
}

#[actix_rt::test]
async fn a_429_on_a_formatted_message_is_waited_out_not_taken_for_a_formatting_error() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api.inject("sendMessage", Fault::RetryAfter(1));
    h.say(1, USER, "**loud** news");
    let texts = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(texts, vec!["echo: loud news"]);
    h.turn_ended(1, 1).await;
    let attempts = send_attempts(&h, 1, "echo: loud news");
    assert_eq!(statuses(&attempts), vec![429, 200], "{attempts:#?}");
    for attempt in &attempts {
        assert_eq!(
            attempt.params["entities"],
            json!([{"type": "bold", "offset": 6, "length": 4}]),
            "both attempts formatted: {}",
            attempt.params
        );
    }
}

/// A ~5,000-character reply whose fenced block straddles UTF-16 offset 4096,
/// so a naive cut at the limit would split the block. Returns the text and
/// the block.
fn long_reply() -> (String, String) {
    let mut before = String::new();
    let mut n = 0;
    while utf16_len(&before) < 3850 {
        before.push_str(&format!(
            "Paragraph {n} 🦀: the outbox cuts long replies at a paragraph boundary.\n\n"
        ));
        n += 1;
    }
    let mut block = String::from("```rust\n");
    for i in 0..6 {
        block.push_str(&format!(
            "    let total_{i} = items.iter().map(|x| x * {i}).sum::<u64>();\n"
        ));
    }
    block.push_str("```");
    let mut text = format!("{before}Here is the code:\n\n{block}\n\n");
    let mut n = 0;
    while utf16_len(&text) < 5000 {
        text.push_str(&format!(
            "Afterword {n}: and the rest of the reply follows the code.\n\n"
        ));
        n += 1;
    }
    let text = text.trim_end().to_owned();
    let start = utf16_len(&text[..text.find(&block).expect("block in text")]);
    let end = start + utf16_len(&block);
    assert!(
        start < 4096 && end > 4096,
        "fixture: the block spans {start}..{end} and must straddle 4096"
    );
    assert!((4900..5200).contains(&utf16_len(&text)), "fixture length");
    (text, block)
}

#[actix_rt::test]
async fn a_5000_character_reply_arrives_as_two_messages_with_its_code_block_intact() {
    let (text, block) = long_reply();
    let scenario = Scenario::default().with_rule(
        "long",
        reply(&text), // `send` then `end_turn`
    );
    let mut h = Harness::start(scenario, &[]).await;
    h.say(1, USER, "a long answer please");
    h.api.wait_for_texts(1, 2, SOON).await;
    // Every `send` is answered before `end_turn` is called: nothing follows.
    h.turn_ended(1, 1).await;

    let texts = h.texts(1);
    assert_eq!(texts.len(), 2, "{texts:#?}");
    for (i, piece) in texts.iter().enumerate() {
        assert!(
            utf16_len(piece) <= 4096,
            "piece {i} has {} UTF-16 units",
            utf16_len(piece)
        );
    }
    // Rendered: the fence lines are gone, the code is a `pre` entity.
    let code = block
        .trim_start_matches("```rust\n")
        .trim_end_matches("```")
        .trim_end();
    let sends = h.api.calls_of("sendMessage");
    let holding: Vec<&Call> = sends
        .iter()
        .filter(|c| c.params["text"].as_str().is_some_and(|t| t.contains(code)))
        .collect();
    assert_eq!(
        holding.len(),
        1,
        "the code block must arrive whole in one message: {texts:#?}"
    );
    let piece = holding[0].params["text"].as_str().unwrap_or_default();
    let at = utf16_len(&piece[..piece.find(code).unwrap_or_default()]);
    let pre = holding[0].params["entities"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["type"] == json!("pre"))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(pre["language"], json!("rust"), "{pre}");
    let (offset, length) = (
        pre["offset"].as_u64().unwrap_or(u64::MAX) as usize,
        pre["length"].as_u64().unwrap_or(0) as usize,
    );
    assert!(
        offset <= at && at + utf16_len(code) <= offset + length,
        "the pre entity {offset}..{} covers the code at {at}..{}",
        offset + length,
        at + utf16_len(code)
    );
    assert_eq!(
        non_whitespace(&texts.concat()),
        non_whitespace(&text.replace("```rust", "").replace("```", "")),
        "the pieces must keep all the content and add none"
    );
}

#[actix_rt::test]
async fn cant_parse_entities_falls_back_to_plain_text() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api.inject(
        "sendMessage",
        Fault::BadRequest(
            "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 3"
                .into(),
        ),
    );
    h.say(1, USER, "**a_b** c");
    let texts = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(texts, vec!["echo: a_b c"]);
    h.turn_ended(1, 1).await;

    let attempts = send_attempts(&h, 1, "echo: a_b c");
    assert_eq!(statuses(&attempts), vec![400, 200], "{attempts:#?}");
    assert_eq!(
        attempts[0].params["entities"],
        json!([{"type": "bold", "offset": 6, "length": 3}]),
        "the first attempt is formatted, with entities: {}",
        attempts[0].params
    );
    for attempt in &attempts {
        assert_eq!(
            attempt.params.get("parse_mode").unwrap_or(&Value::Null),
            &Value::Null,
            "never a parse mode: {}",
            attempt.params
        );
    }
    assert_eq!(
        attempts[1].params.get("entities").unwrap_or(&Value::Null),
        &Value::Null,
        "the retry is plain text: {}",
        attempts[1].params
    );
    assert_eq!(h.texts(1), vec!["echo: a_b c"], "delivered exactly once");
}

#[actix_rt::test]
async fn blocked_chat_is_not_retried() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api.inject(
        "sendMessage",
        Fault::Forbidden("Forbidden: bot was blocked by the user".into()),
    );
    h.say(1, USER, "hi");
    h.turn_ended(1, 1).await;

    let attempts = send_attempts(&h, 1, "echo: hi");
    assert_eq!(statuses(&attempts), vec![403], "{attempts:#?}");
    assert!(h.texts(1).is_empty(), "{:#?}", h.texts(1));

    // Another chat is still served, and chat 1's message was not retried
    // meanwhile.
    h.say(2, USER, "anyone there?");
    let texts = h.api.wait_for_texts(2, 1, SOON).await;
    assert_eq!(texts, vec!["echo: anyone there?"]);
    h.turn_ended(2, 1).await;
    assert_eq!(statuses(&send_attempts(&h, 1, "echo: hi")), vec![403]);
}

#[actix_rt::test]
async fn server_error_is_retried_without_sending_twice() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api.inject("sendMessage", Fault::ServerError(500));
    h.say(1, USER, "hello");
    let texts = h.api.wait_for_texts(1, 1, AFTER_5XX).await;
    assert_eq!(texts, vec!["echo: hello"]);
    h.turn_ended(1, 1).await;

    let attempts = send_attempts(&h, 1, "echo: hello");
    assert_eq!(statuses(&attempts), vec![500, 200], "{attempts:#?}");
    assert!(attempts[0].seq < attempts[1].seq);
    assert_eq!(h.texts(1), vec!["echo: hello"], "delivered exactly once");
}

#[actix_rt::test]
async fn a_502_then_success_delivers_the_reply_within_2_s() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    // Also the poll that brings the message: no pause after its 502 either.
    h.api.inject("getUpdates", Fault::ServerError(502));
    h.api.inject("sendMessage", Fault::ServerError(502));
    let sent = std::time::Instant::now();
    h.say(1, USER, "quick");
    let texts = h.api.wait_for_texts(1, 1, AFTER_5XX).await;
    let took = sent.elapsed();
    assert_eq!(texts, vec!["echo: quick"]);
    assert!(
        took < Duration::from_secs(2),
        "the reply took {took:?} after a 502 (teloxide pauses 10 s after a 5xx)"
    );
    h.turn_ended(1, 1).await;
    assert_eq!(
        statuses(&send_attempts(&h, 1, "echo: quick")),
        vec![502, 200]
    );
}

#[actix_rt::test]
async fn replies_within_a_chat_keep_their_order_under_rate_limits() {
    let want: Vec<String> = (1..=6).map(|i| format!("m{i}")).collect();
    let mut calls: Vec<_> = want
        .iter()
        .map(|t| tool("mcp__telegram-tools__send", json!({ "text": t })))
        .collect();
    calls.push(tool("mcp__telegram-tools__end_turn", json!({})));
    let scenario = Scenario::default().with_rule("six", turn(vec![Step::Tools { calls }]));
    let limits = RateLimits {
        chat_burst: 2.0,
        chat_per_sec: 20.0,
        ..Default::default()
    };
    let mut h = Harness::start_with_limits(scenario, &[], limits).await;
    h.say(1, USER, "six please");
    let texts = h.api.wait_for_texts(1, 6, SOON).await;
    assert_eq!(texts, want);
    h.turn_ended(1, 1).await;
    assert_eq!(h.texts(1), want, "nothing more was sent");

    let sent: Vec<Call> = h
        .api
        .calls_of("sendMessage")
        .into_iter()
        .filter(|c| c.params["chat_id"] == json!(1) && c.status == 200)
        .collect();
    let span = sent[5].at.duration_since(sent[0].at);
    // A burst of 2 then 20/s: the last of 6 leaves >= (6 - 2) / 20 s = 200 ms
    // after the first was reserved; the first request's own trip to the
    // fake is allowed 20 ms.
    assert!(
        span >= Duration::from_millis(180),
        "6 messages within {span:?}: the per-chat limit did not hold"
    );
}

#[actix_rt::test]
async fn a_button_press_is_taken_by_the_intake_and_the_next_message_still_answered() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api.push_callback(1, USER, 1, "allow:7");
    h.say(1, USER, "hello");
    let texts = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(texts, vec!["echo: hello"]);
    h.turn_ended(1, 1).await;
    // Both updates (the press is update 1, the text update 2) were acknowledged.
    h.api
        .wait_for(SOON, "a getUpdates past both updates", |calls| {
            calls
                .iter()
                .find(|c| c.method == "getupdates" && c.params["offset"] == json!(3))
                .cloned()
        })
        .await;
}

/// What marks a copy sent again that may show twice.
const RESENT: &str =
    "↻ Sent again: Telegram did not confirm the first copy of this message, so it may show twice.";

/// A message that left but got no answer (the connection failed after it
/// was sent; an answer that is not JSON) may or may not have arrived. It
/// is never lost and the user is never asked to send again: it is sent
/// again, and the chat's message ids tell whether the first copy could be
/// there. When no message was made between the last id known and the
/// copy's, it never arrived: one copy, unmarked. A WARN names its chat,
/// turn and method, a metric counts it, an event says so.
#[actix_rt::test]
async fn a_message_telegram_did_not_answer_is_sent_again_and_shows_once() {
    let logs = LogCapture::start();
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api.inject("sendMessage", Fault::NoAnswer);
    h.say(1, USER, "hello");
    let (turn, _, _) = h.turn_ended(1, 1).await;
    let texts = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(texts, vec!["echo: hello"], "delivered, once, unmarked");
    let attempts = send_attempts(&h, 1, "echo: hello");
    assert_eq!(
        statuses(&attempts),
        vec![0, 200],
        "sent again after no answer"
    );
    let event = h
        .event(
            "DeliveryUnknown in chat 1",
            |e| matches!(e, BotEvent::DeliveryUnknown { chat, .. } if chat.0 == 1),
        )
        .await;
    let BotEvent::DeliveryUnknown {
        turn: Some(of),
        method,
        ..
    } = event
    else {
        panic!("the event names no turn: {event:?}");
    };
    assert_eq!((of.get(), method), (turn, "sendMessage"));
    assert_eq!(
        h.metric_line("turnstile_telegram_unknown_outcome_total{method=\"sendMessage\"}"),
        "turnstile_telegram_unknown_outcome_total{method=\"sendMessage\"} 1"
    );
    assert_eq!(
        h.metric_line("turnstile_outbox_resent_total{method=\"sendMessage\",marked=\"false\"}"),
        "turnstile_outbox_resent_total{method=\"sendMessage\",marked=\"false\"} 1"
    );
    let log = logs.text();
    let warn = log
        .lines()
        .find(|l| l.contains("may or may not have reached the chat"))
        .unwrap_or_else(|| panic!("no WARN about it:\n{log}"));
    for part in [
        "WARN",
        "chat_id=1",
        &format!("turn_id={turn}"),
        "method=\"sendMessage\"",
    ] {
        assert!(warn.contains(part), "{part} missing from: {warn}");
    }

    // An answer that is not JSON (a proxy's error page) is the same.
    h.api.inject("sendMessage", Fault::NotJson(502));
    h.say(1, USER, "again");
    h.turn_ended(1, 2).await;
    let texts = h.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(texts, vec!["echo: hello", "echo: again"]);
    assert_eq!(
        statuses(&send_attempts(&h, 1, "echo: again")),
        vec![502, 200]
    );
    assert!(
        !log.contains("send your message again") && !logs.text().contains("marked as a resend"),
        "{log}"
    );
}

/// What chat `chat` shows of the bot's messages (those whose answer was
/// lost too), in order.
fn shown(h: &Harness, chat: i64) -> Vec<String> {
    (1..=64)
        .filter_map(|id| h.api.sent_message(chat, id))
        .map(|m| m["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A message that did arrive although its answer was lost is sent again
/// too (the bot cannot know), and then the copy is marked as a resend: an
/// unexplained message id lies between the last one known and the copy's.
/// The next message goes as usual, after the mark.
#[actix_rt::test]
async fn a_message_that_arrived_unconfirmed_shows_at_most_once_more_marked() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api.inject("sendMessage", Fault::DoneNoAnswer);
    h.say(1, USER, "hello");
    h.turn_ended(1, 1).await;
    let texts = h.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(texts, vec!["echo: hello", RESENT], "confirmed");
    assert_eq!(shown(&h, 1), vec!["echo: hello", "echo: hello", RESENT]);
    let attempts = send_attempts(&h, 1, "echo: hello");
    assert_eq!(statuses(&attempts), vec![0, 200]);
    let sends = h.api.calls_of("sendMessage");
    let mark = sends.last().expect("the mark");
    let copy = mark.params["reply_parameters"]["message_id"]
        .as_i64()
        .expect("the mark replies to a message");
    let text = |id: i64| h.api.sent_message(1, id).map(|m| m["text"].clone());
    assert_eq!(text(copy), Some(json!("echo: hello")), "it marks the copy");
    assert_eq!(
        text(copy - 1),
        Some(json!("echo: hello")),
        "the first copy is the one before: the mark is on the second"
    );
    assert_eq!(
        h.metric_line("turnstile_outbox_resent_total{method=\"sendMessage\",marked=\"true\"}"),
        "turnstile_outbox_resent_total{method=\"sendMessage\",marked=\"true\"} 1"
    );
    h.say(1, USER, "next");
    h.turn_ended(1, 2).await;
    let texts = h.api.wait_for_texts(1, 3, SOON).await;
    assert_eq!(texts[2], "echo: next");
}

/// Many chats answered at once share a bounded number of requests out (a
/// burst does not open a connection per chat), and every answer arrives.
#[actix_rt::test]
async fn a_burst_of_answers_keeps_a_bounded_number_of_requests_out() {
    use turnstile::telegram::MAX_IN_FLIGHT;
    let chats = 2 * MAX_IN_FLIGHT as i64 + 20;
    let h = Harness::start(
        Scenario::default(),
        &[("TURNSTILE_DISPATCHER_MAX_CONCURRENT_TURNS", "1000")],
    )
    .await;
    // Each answer takes Telegram 300 ms: the burst's requests overlap.
    for _ in 0..chats {
        h.api
            .inject("sendMessage", Fault::Delay(Duration::from_millis(300)));
    }
    h.api
        .push_many((1..=chats).map(|chat| (chat, USER, format!("hello {chat}"))));
    for chat in 1..=chats {
        assert_eq!(
            h.api.wait_for_texts(chat, 1, SOON).await,
            vec![format!("echo: hello {chat}")]
        );
    }
    let counts = h.api.counts();
    assert!(
        counts.peak_in_flight <= MAX_IN_FLIGHT as u64,
        "{} requests were out at once",
        counts.peak_in_flight
    );
    assert!(
        counts.peak_in_flight > 1,
        "the requests did not overlap: the bound was not tried"
    );
    assert_eq!(counts.notices, 0);
}

//! Usage limits: a turn the model API refused for a usage limit parks its
//! messages and runs them again later, once; the chat is told when; new
//! messages join; a further refusal doubles the wait; a reset time the
//! agent names wins; `/stop` cancels; `/status` shows it. Scripted agent,
//! real teloxide client, fake Bot API.

mod support;

use std::time::{Duration, Instant};

use support::*;
use turnstile::agent::{Scenario, ScriptTurn, Step};
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;

const REFUSAL: &str =
    "API Error: Request rejected (429) · This request would exceed your account's rate limit.";

/// The CLI's usage-limit refusal: an error result with the API's 429.
fn refused(resets_at: Option<i64>) -> ScriptTurn {
    turn(vec![Step::Result {
        text: REFUSAL.into(),
        subtype: "success".into(),
        is_error: true,
        terminal_reason: Some("api_error".into()),
        num_turns: Some(1),
        limited: true,
        resets_at,
    }])
}

/// Refuses the first `times` prompts with "ask", then echoes.
fn scenario(times: u32, resets_at: Option<i64>) -> Scenario {
    Scenario::default().with_rule_times("ask", times, refused(resets_at))
}

fn retry(first: &'static str, max: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("TURNSTILE_AGENT_LIMIT_RETRY", first),
        ("TURNSTILE_AGENT_LIMIT_RETRY_MAX", max),
    ]
}

async fn notice(h: &Harness) -> String {
    h.api
        .wait_for(SOON, "the parked notice", |_| {
            h.texts(1).into_iter().find(|t| t.starts_with("⏳"))
        })
        .await
}

async fn ended(h: &mut Harness, n: usize) -> (TurnOutcome, Instant) {
    let (_, outcome, at) = h.turn_ended(1, n).await;
    (outcome, at)
}

#[actix_rt::test]
async fn a_refused_turn_is_parked_and_its_message_answered_once_later() {
    let mut h = Harness::start(scenario(1, None), &retry("1s", "4s")).await;
    h.say(1, USER, "ask me");
    let (outcome, parked_at) = ended(&mut h, 1).await;
    assert_eq!(outcome, TurnOutcome::Limited { resets_at: None });
    let told = notice(&h).await;
    assert!(
        told.contains("usage limit") && told.contains("UTC") && told.contains("in 1 min"),
        "{told}"
    );
    assert!(told.contains("/stop"), "{told}");
    let (outcome, _) = ended(&mut h, 2).await;
    assert!(outcome.finished(), "{outcome:?}");
    let texts = h.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(texts, [told.clone(), "echo: ask me".to_string()]);
    // Not a second before the wait, and no typing while parked.
    let BotEvent::TurnStarted { at: retried, .. } = h
        .event(
            "the retry's start",
            |e| matches!(e, BotEvent::TurnStarted { turn, .. } if turn.get() == 2),
        )
        .await
    else {
        unreachable!()
    };
    assert!(retried.duration_since(parked_at) >= Duration::from_secs(1));
    assert!(
        !h.chat_actions_sent(1)
            .iter()
            .any(|at| *at > parked_at && *at < retried),
        "typing while parked"
    );
}

#[actix_rt::test]
async fn a_message_while_parked_joins_the_retry() {
    let mut h = Harness::start(scenario(1, None), &retry("2s", "4s")).await;
    h.say(1, USER, "ask me");
    ended(&mut h, 1).await;
    notice(&h).await;
    h.say(1, USER, "and this");
    let (outcome, _) = ended(&mut h, 2).await;
    assert!(outcome.finished(), "{outcome:?}");
    let texts = h.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(texts[1], "echo: ask me\n\nand this");
}

#[actix_rt::test]
async fn a_second_refusal_doubles_the_wait() {
    let mut h = Harness::start(scenario(2, None), &retry("1s", "10s")).await;
    h.say(1, USER, "ask me");
    let (_, first) = ended(&mut h, 1).await;
    let (outcome, second) = ended(&mut h, 2).await;
    assert_eq!(outcome, TurnOutcome::Limited { resets_at: None });
    let (outcome, third) = ended(&mut h, 3).await;
    assert!(outcome.finished(), "{outcome:?}");
    assert!(second.duration_since(first) >= Duration::from_secs(1));
    assert!(
        third.duration_since(second) >= Duration::from_secs(2),
        "the second wait is twice the first: {:?}",
        third.duration_since(second)
    );
    assert_eq!(h.texts(1).iter().filter(|t| t.starts_with("⏳")).count(), 2);
    assert_eq!(h.texts(1).last().map(String::as_str), Some("echo: ask me"));
}

#[actix_rt::test]
async fn a_reset_time_the_agent_names_wins_over_limit_retry() {
    let reset = chrono::Utc::now().timestamp() + 2;
    let mut h = Harness::start(scenario(1, Some(reset)), &retry("1h", "2h")).await;
    h.say(1, USER, "ask me");
    ended(&mut h, 1).await;
    let told = notice(&h).await;
    assert!(told.contains("in 1 min"), "{told}");
    let (outcome, _) = ended(&mut h, 2).await;
    assert!(outcome.finished(), "{outcome:?}");
}

#[actix_rt::test]
async fn stop_cancels_a_parked_retry_and_status_shows_it_before() {
    let mut h = Harness::start(scenario(1, None), &retry("1h", "2h")).await;
    h.say(1, USER, "ask me");
    ended(&mut h, 1).await;
    notice(&h).await;
    h.say(9, 9, "/status");
    let status = h
        .api
        .wait_for(SOON, "the status", |_| {
            h.texts(9).into_iter().find(|t| t.contains("parked"))
        })
        .await;
    assert!(
        status.contains("1 message parked for a usage limit until"),
        "{status}"
    );
    h.say(1, USER, "/stop");
    h.api
        .wait_for(SOON, "the stop's answer", |_| {
            h.texts(1).into_iter().find(|t| {
                t.contains("the retry after the usage limit is cancelled (1 message dropped)")
            })
        })
        .await;
    // The next message is not parked: it runs now.
    h.say(1, USER, "something else");
    let (outcome, _) = ended(&mut h, 2).await;
    assert!(outcome.finished(), "{outcome:?}");
    assert_eq!(
        h.texts(1).last().map(String::as_str),
        Some("echo: something else")
    );
    assert!(!h.texts(1).iter().any(|t| t == "echo: ask me"));
}

/// A turn refused after it had replied is not run again (that would
/// answer twice): the chat is told, nothing is parked.
#[actix_rt::test]
async fn a_refusal_after_a_reply_is_reported_not_parked() {
    let mut partly = refused(None);
    partly.steps.insert(
        0,
        Step::Tools {
            calls: vec![tool(
                "mcp__telegram-tools__send",
                serde_json::json!({"text": "partial answer"}),
            )],
        },
    );
    let scenario = Scenario::default().with_rule_times("ask", 1, partly);
    let mut h = Harness::start(scenario, &retry("1s", "2s")).await;
    h.say(1, USER, "ask me");
    let (outcome, _) = ended(&mut h, 1).await;
    assert_eq!(outcome, TurnOutcome::Limited { resets_at: None });
    let texts = h.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(texts[0], "partial answer");
    assert!(
        texts[1].contains("usage limit") && !texts[1].starts_with("⏳"),
        "{texts:?}"
    );
    h.say(1, USER, "next");
    let (outcome, _) = ended(&mut h, 2).await;
    assert!(outcome.finished());
    assert_eq!(h.texts(1).last().map(String::as_str), Some("echo: next"));
    assert!(
        !h.texts(1).iter().any(|t| t == "echo: ask me"),
        "run again: {:?}",
        h.texts(1)
    );
}

#[actix_rt::test]
async fn with_limit_retry_off_the_refusal_is_reported() {
    let mut h = Harness::start(scenario(1, None), &retry("0s", "2h")).await;
    h.say(1, USER, "ask me");
    let (outcome, _) = ended(&mut h, 1).await;
    assert_eq!(outcome, TurnOutcome::Limited { resets_at: None });
    let texts = h.api.wait_for_texts(1, 1, SOON).await;
    assert!(
        texts[0].contains("usage limit") && texts[0].contains("send your message again later"),
        "{texts:?}"
    );
    // Nothing is parked: the next message runs at once.
    h.say(1, USER, "later");
    let (outcome, _) = ended(&mut h, 2).await;
    assert!(outcome.finished());
}

/// A reset the refusal names far ahead (the text is the agent's) parks
/// the messages for at most 8 days, not for good.
#[actix_rt::test]
async fn a_reset_named_years_ahead_is_capped_at_eight_days() {
    let years = chrono::Utc::now().timestamp() + 10 * 365 * 86_400;
    let mut h = Harness::start(scenario(1, Some(years)), &retry("1h", "2h")).await;
    h.say(1, USER, "ask me");
    ended(&mut h, 1).await;
    let told = notice(&h).await;
    assert!(told.contains("(in 192 h)"), "{told}");
}

/// `/status` as the admin sees it: the line of chat 1 once it shows `want`.
async fn chat_status(h: &Harness, want: &str) -> String {
    h.say(9, 9, "/status");
    h.api
        .wait_for(SOON, &format!("/status showing {want}"), |_| {
            h.texts(9)
                .into_iter()
                .find(|t| t.contains("chat 1:") && t.contains(want))
        })
        .await
}

/// A message queued behind the turn that was refused waits for the parked
/// ones and runs with them, at their time (not at once, ahead of them, as
/// the refused turn lets go of the chat). The gate is an event, not a
/// pause: the host runs one turn at a time, and the admin's turn holds the
/// slot on an approval until Allow is pressed, after `/status` showed both
/// of chat 1's messages queued. (A refusal after the approval in chat 1's
/// own turn would not do: the approval's answer is a reply, and a turn that
/// replied is not run again.)
#[actix_rt::test]
async fn a_message_queued_behind_a_refused_turn_waits_for_the_parked_ones() {
    let hold = turn(vec![Step::Ask {
        tool: "Bash".into(),
        input: serde_json::json!({"command": "echo hi"}),
    }]);
    let scenario = scenario(1, None).with_rule("hold the slot", hold);
    let mut env = retry("1s", "2s");
    env.push(("TURNSTILE_DISPATCHER_MAX_CONCURRENT_TURNS", "1"));
    let mut h = Harness::start(scenario, &env).await;
    h.say(9, 9, "hold the slot");
    let (_, buttons) = question(&h, 9, 1).await;
    h.say(1, USER, "ask me");
    chat_status(&h, "1 queued").await;
    h.say(1, USER, "queued behind");
    chat_status(&h, "2 queued").await;
    let id = h.api.push_callback(9, 9, 0, &data(&buttons, "Allow"));
    assert_eq!(h.callback_answer(&id).await, "Allowed");
    let (outcome, _) = ended(&mut h, 1).await;
    assert!(
        matches!(outcome, TurnOutcome::Limited { .. }),
        "{outcome:?}"
    );
    notice(&h).await;
    let (outcome, _) = ended(&mut h, 2).await;
    assert!(outcome.finished(), "{outcome:?}");
    let answers: Vec<String> = (h.texts(1).into_iter())
        .filter(|t| t.starts_with("echo: "))
        .collect();
    assert_eq!(answers, ["echo: ask me\n\nqueued behind"]);
}

/// A chat waiting out a usage limit is not idle: it is not retired after
/// `dispatcher.idle_eviction`, which would drop the retry until the next
/// start; its parked message runs at its time.
#[actix_rt::test]
async fn a_chat_waiting_out_a_limit_is_not_retired_as_idle() {
    let mut env = retry("2s", "4s");
    env.push(("TURNSTILE_DISPATCHER_IDLE_EVICTION", "100ms"));
    // No warm session keeps the chat busy meanwhile.
    env.push(("TURNSTILE_AGENT_KEEP_WARM", "0s"));
    let mut h = Harness::start(scenario(1, None), &env).await;
    h.say(1, USER, "ask me");
    ended(&mut h, 1).await;
    notice(&h).await;
    let (outcome, _) = ended(&mut h, 2).await;
    assert!(outcome.finished(), "{outcome:?}");
    assert_eq!(h.texts(1).last().map(String::as_str), Some("echo: ask me"));
}

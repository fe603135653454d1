//! A turn against an unreachable Telegram: the turn ends when the agent is
//! done. Waiting on Telegram is not the agent's lack of progress: no
//! watchdog fires, no tool result is dropped, the session goes back as
//! usual while delivery goes on, and typing stops with the turn.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;
use turnstile::agent::{Scenario, Step};
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;

/// Far past the no-progress timeout below, on a loaded machine too.
const BACK: Duration = Duration::from_secs(30);

/// The agent takes this long before its first call: the outage is on by
/// then (it starts as soon as the turn does).
const THINK_MS: u64 = 1_500;

fn scenario() -> Scenario {
    Scenario::default()
        .with_rule(
            "answer",
            turn(vec![Step::Tools {
                calls: vec![slow_tool(
                    "mcp__telegram-tools__end_turn",
                    json!({"text": "the answer"}),
                    THINK_MS,
                )],
            }]),
        )
        .with_rule(
            "react",
            turn(vec![Step::Tools {
                calls: vec![
                    slow_tool(
                        "mcp__telegram-tools__react",
                        json!({"emoji": "👍"}),
                        THINK_MS,
                    ),
                    tool("mcp__telegram-tools__send", json!({"text": "reacted"})),
                    tool("mcp__telegram-tools__end_turn", json!({})),
                ],
            }]),
        )
}

const ENV: &[(&str, &str)] = &[("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "2s")];

/// Starts a turn for `text` in chat 1 and makes Telegram unreachable as
/// soon as it started; returns when the outage began.
async fn turn_into_an_outage(h: &mut Harness, text: &str) -> Instant {
    h.say(1, USER, text);
    h.event("the turn's start", |e| {
        matches!(e, BotEvent::TurnStarted { .. })
    })
    .await;
    h.api.outage(Outage::Refused).await;
    Instant::now()
}

#[actix_rt::test]
async fn a_turn_that_answers_during_an_outage_ends_at_once_and_its_answer_follows() {
    let log = LogCapture::start();
    let mut h = Harness::start(scenario(), ENV).await;
    let down = turn_into_an_outage(&mut h, "answer please").await;
    let (_, outcome, ended) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        },
        "the turn ends as the agent ended it"
    );
    assert_eq!(h.api.current_outage(), Some(Outage::Refused), "still down");
    let results = h.backend.log().tool_results;
    assert!(
        results
            .iter()
            .any(|(name, r)| name.ends_with("end_turn")
                && r.starts_with("Ok: accepted for delivery")),
        "the agent heard back before Telegram did: {results:?}"
    );
    // Typing stopped with the turn: nothing more is sent for it once
    // Telegram is back.
    h.api.clear_outage().await;
    let up = Instant::now();
    let texts = h.api.wait_for_texts(1, 1, BACK).await;
    assert_eq!(texts, ["the answer"], "delivered once Telegram is back");
    // The session went back to the chat: the next message is answered.
    h.say(1, USER, "next");
    h.api.wait_for_texts(1, 2, BACK).await;
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1), ["the answer", "echo: next"]);
    let late_typing: Vec<_> = h
        .chat_actions_received(1)
        .into_iter()
        .filter(|c| c.at >= down && c.at < h.api.calls_of("sendMessage")[0].at)
        .collect();
    assert!(
        late_typing.is_empty(),
        "typing sent for the turn that ended during the outage: {late_typing:?}"
    );
    assert!(
        !h.seen
            .iter()
            .any(|e| matches!(e, BotEvent::SessionKilled { .. })),
        "no session was killed: {:#?}",
        h.seen
    );
    let text = log.text();
    for bad in [
        "no progress from the agent",
        "tool result arrived after the turn ended",
    ] {
        assert!(!text.contains(bad), "{bad:?} logged:\n{text}");
    }
    println!(
        "turn ended {:?} into the outage; answer shown {:?} after it ended",
        ended.duration_since(down),
        h.api.calls_of("sendMessage")[0].at.duration_since(up)
    );
}

#[actix_rt::test]
async fn a_reaction_waiting_on_telegram_is_not_the_agents_lack_of_progress() {
    let log = LogCapture::start();
    let mut h = Harness::start(scenario(), ENV).await;
    h.say(1, USER, "react please");
    h.event("the turn's start", |e| {
        matches!(e, BotEvent::TurnStarted { .. })
    })
    .await;
    // Requests held unanswered past the agent's call and twice the
    // no-progress timeout after it (well within the request timeout).
    let held = Duration::from_millis(THINK_MS) + Duration::from_secs(4);
    h.api
        .outage_for(Outage::HalfOpen { carried: true }, held)
        .await;
    let (_, outcome, ended) = h.turn_ended(1, 1).await;
    assert!(
        h.api.outage_over(Duration::ZERO).await,
        "ended once Telegram was back, not {:?} into the outage: {outcome:?}, {:?}",
        ended.elapsed(),
        h.backend.log().tool_results
    );
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    assert_eq!(h.api.wait_for_texts(1, 1, BACK).await, ["reacted"]);
    let results = h.backend.log().tool_results;
    assert!(
        results
            .iter()
            .any(|(name, r)| name.ends_with("react") && r == "Ok: reacted"),
        "{results:?}"
    );
    let text = log.text();
    assert!(
        !text.contains("no progress from the agent"),
        "the watchdog fired:\n{text}"
    );
}

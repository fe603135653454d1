//! Agents that hang before their result: the no-progress watchdog, the
//! wall-clock budget, `/stop`, and the chat's hard-deadline backstop.

mod support;

use std::time::Duration;

use support::*;
use turnstile::agent::{Scenario, Step};
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;

fn hanging() -> Scenario {
    Scenario::default()
        .with_rule("hang", turn(vec![Step::HangForever]))
        // Stays busy (a sign of life every 50 ms) but never finishes.
        .with_rule(
            "busy",
            turn(
                (0..400)
                    .flat_map(|_| [Step::Wait { ms: 50 }, Step::Text { text: "…".into() }])
                    .collect(),
            ),
        )
}

async fn started_at(h: &mut Harness, chat: i64) -> std::time::Instant {
    match h
        .event(
            "turn start",
            |e| matches!(e, BotEvent::TurnStarted { chat: c, .. } if c.0 == chat),
        )
        .await
    {
        BotEvent::TurnStarted { at, .. } => at,
        _ => unreachable!(),
    }
}

#[actix_rt::test]
async fn a_silent_agent_is_ended_by_the_no_progress_watchdog() {
    let mut h = Harness::start(
        hanging(),
        &[("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "300ms")],
    )
    .await;
    h.say(1, USER, "hang");
    let start = started_at(&mut h, 1).await;
    let (_, outcome, ended) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, TurnOutcome::NoProgress);
    assert!(ended.duration_since(start) >= Duration::from_millis(300));
    h.event(
        "hung session killed",
        |e| matches!(e, BotEvent::SessionKilled { chat, .. } if chat.0 == 1),
    )
    .await;
    let told = h.api.wait_for_texts(1, 1, SOON).await;
    assert!(
        told[0].contains("stopped responding"),
        "the chat is told: {told:?}"
    );
    // The chat is free again.
    h.say(1, USER, "hello");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1).last().unwrap(), "echo: hello");
}

#[actix_rt::test]
async fn a_busy_agent_is_ended_by_the_budget() {
    let mut h = Harness::start(
        hanging(),
        &[
            ("TURNSTILE_TURN_MAX_DURATION", "500ms"),
            ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "10s"),
        ],
    )
    .await;
    h.say(1, USER, "busy");
    let start = started_at(&mut h, 1).await;
    let (_, outcome, ended) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, TurnOutcome::BudgetExceeded);
    assert!(ended.duration_since(start) >= Duration::from_millis(500));
    let told = h.api.wait_for_texts(1, 1, SOON).await;
    assert!(told[0].contains("time budget"), "{told:?}");
}

#[actix_rt::test]
async fn stop_interrupts_the_turn_and_is_not_a_failure() {
    let mut h = Harness::start(hanging(), &[]).await;
    h.say(1, USER, "busy");
    started_at(&mut h, 1).await;
    h.say(1, USER, "/stop");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, TurnOutcome::Interrupted);
    assert!(!outcome.finished());
    let told = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(told, vec!["⏹ Stopped."]);
    // The interrupted session settles (idle) and is reused, not retried.
    h.say(1, USER, "next");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1), vec!["⏹ Stopped.", "echo: next"]);
    assert_eq!(h.backend.opened(), 1);
}

#[actix_rt::test]
async fn the_backstop_releases_a_chat_whatever_its_actors_say() {
    // Both turn watchdogs are far beyond the hard deadline: only the
    // dispatcher's backstop can release the chat.
    let mut h = Harness::start(
        hanging(),
        &[
            ("TURNSTILE_TURN_HARD_DEADLINE", "400ms"),
            ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "60s"),
            ("TURNSTILE_TURN_MAX_DURATION", "60s"),
        ],
    )
    .await;
    h.say(1, USER, "hang");
    // Taken on its own (messages that arrive together are one turn).
    let start = started_at(&mut h, 1).await;
    h.say(1, USER, "after the backstop");
    let (first, outcome, ended) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, TurnOutcome::ForceReleased);
    assert!(ended.duration_since(start) >= Duration::from_millis(400));
    h.event("typing of the released turn stopped", |e| {
        matches!(e, BotEvent::TypingStopped { chat, turn, .. } if chat.0 == 1 && *turn == first)
    })
    .await;
    let (_, outcome, _) = h.turn_ended(1, 2).await;
    assert!(outcome.finished());
    assert!(h.texts(1).contains(&"echo: after the backstop".to_string()));
}

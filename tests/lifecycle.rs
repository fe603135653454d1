//! Chat supervisors come and go: eviction leaves no actor behind, a full
//! queue is told so, `/new` starts a fresh agent session.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use support::*;
use turnstile::agent::{Scenario, Step};
use turnstile::events::BotEvent;

#[actix_rt::test]
async fn idle_supervisors_are_evicted_and_leave_no_actor_behind() {
    let mut h = Harness::start(
        Scenario::default(),
        &[
            ("TURNSTILE_DISPATCHER_IDLE_EVICTION", "100ms"),
            ("TURNSTILE_AGENT_KEEP_WARM", "150ms"),
        ],
    )
    .await;
    for chat in [1, 2, 3] {
        h.say(chat, USER, "hi");
    }
    for chat in [1, 2, 3] {
        h.turn_ended(chat, 1).await;
    }
    assert!(h.bot.gauges.supervisors.load(Ordering::SeqCst) >= 1);
    let gauges = std::sync::Arc::clone(&h.bot.gauges);
    tokio::time::timeout(Duration::from_secs(10), gauges.all_stopped())
        .await
        .unwrap_or_else(|_| panic!("actors left behind: {gauges:?}"));
    assert_eq!(gauges.supervisors.load(Ordering::SeqCst), 0);
    assert_eq!(gauges.turns.load(Ordering::SeqCst), 0);
    assert_eq!(gauges.typing.load(Ordering::SeqCst), 0);
    // An evicted chat comes back on its next message.
    h.say(1, USER, "back");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1), vec!["echo: hi", "echo: back"]);
}

#[actix_rt::test]
async fn a_full_queue_is_told_so() {
    let scenario = Scenario::default().with_rule("slow", turn(vec![Step::Wait { ms: 60_000 }]));
    let mut h = Harness::start(
        scenario,
        &[
            ("TURNSTILE_DISPATCHER_QUEUE_LIMIT", "2"),
            // Queued, not steered into the running turn.
            ("TURNSTILE_DISPATCHER_BUSY", "queue"),
        ],
    )
    .await;
    h.say(1, USER, "slow");
    h.event("turn start", |e| matches!(e, BotEvent::TurnStarted { .. }))
        .await;
    h.say(1, USER, "q1");
    h.say(1, USER, "q2");
    h.say(1, USER, "q3 overflows");
    let told = h.api.wait_for_texts(1, 1, SOON).await;
    assert!(
        told[0].contains("2 messages are already waiting"),
        "{told:?}"
    );
    h.say(1, USER, "/stop");
    let texts = h.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(texts[1], "⏹ Stopped. 2 queued messages dropped.");
}

#[actix_rt::test]
async fn new_starts_a_fresh_agent_session() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.say(1, USER, "one");
    h.turn_ended(1, 1).await;
    h.say(1, USER, "/new");
    h.api.wait_for_texts(1, 2, SOON).await;
    h.say(1, USER, "two");
    h.turn_ended(1, 2).await;
    assert_eq!(h.backend.opened(), 2, "the warm session was dropped");
    assert_eq!(
        h.texts(1)[1],
        "🆕 The next message starts a fresh conversation."
    );
}

#[actix_rt::test]
async fn warm_sessions_are_capped_across_chats() {
    let mut h = Harness::start(Scenario::default(), &[("TURNSTILE_AGENT_MAX_WARM", "1")]).await;
    h.say(1, USER, "one");
    h.turn_ended(1, 1).await;
    h.say(2, USER, "two");
    h.turn_ended(2, 1).await;
    // Chat 1 holds the only warm slot; chat 2's session was closed.
    h.say(1, USER, "again");
    h.turn_ended(1, 2).await;
    h.say(2, USER, "again");
    h.turn_ended(2, 2).await;
    assert_eq!(
        h.backend.opened(),
        3,
        "chat 1 reused its session, chat 2 opened a new one"
    );
}

/// A chat's idle report that crossed a new message is ignored: the chat is
/// retired only if it had received everything routed to it.
#[actix_rt::test]
async fn an_idle_report_that_crossed_a_message_does_not_retire_the_chat() {
    let scenario = Scenario::default().with_rule(
        "slow",
        turn(vec![Step::Wait { ms: 300 }, result("slow done")]),
    );
    let mut h = Harness::start(scenario, &[]).await;
    h.say(1, USER, "hi");
    h.turn_ended(1, 1).await;
    h.say(1, USER, "slow one");
    h.event(
        "the second turn started",
        |e| matches!(e, BotEvent::TurnStarted { chat, turn, .. } if chat.0 == 1 && *turn == 2),
    )
    .await;
    // The report the chat would have sent after its first message only.
    h.bot.dispatcher.do_send(turnstile::chat::ChatReport::Idle {
        chat: teloxide::types::ChatId(1).into(),
        received: 1,
    });
    let (_, outcome, _) = h.turn_ended(1, 2).await;
    assert!(outcome.finished(), "{outcome:?}");
    let told = h.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(told, vec!["echo: hi", "slow done"]);
}

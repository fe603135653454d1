//! The typing indicator pulses while a turn runs and stops at TurnEnded.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;
use turnstile::agent::{AfterResult, Scenario, ScriptTurn, Step};
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;

/// Chat B's slow turn is the witness: while it runs (for many typing
/// intervals), chat A's typing must stay silent after A's TurnEnded.
fn scenario() -> Scenario {
    Scenario::default()
        .with_rule(
            "long",
            turn(vec![
                Step::Wait { ms: 400 },
                Step::Tools {
                    calls: vec![
                        tool(
                            "mcp__telegram-tools__send",
                            json!({"text": "done thinking"}),
                        ),
                        tool("mcp__telegram-tools__end_turn", json!({})),
                    ],
                },
            ]),
        )
        .with_rule(
            "wedge",
            ScriptTurn {
                steps: vec![result("here you go")],
                after_result: AfterResult::Hang,
            },
        )
        .with_rule(
            "think",
            turn(vec![
                Step::Wait { ms: 300 },
                Step::Tools {
                    calls: vec![tool(
                        "mcp__telegram-tools__end_turn",
                        json!({"text": "thought"}),
                    )],
                },
            ]),
        )
}

/// Asserts that chat `a` sent no typing after `ended`, witnessed by chat
/// `b`'s later TurnEnded, and that every chat action the server got was one
/// the outbox dispatched before `ended`.
async fn assert_typing_silent_after(h: &mut Harness, a: i64, ended: std::time::Instant, b: i64) {
    let (_, _, witness) = h.turn_ended(b, 1).await;
    assert!(
        witness > ended,
        "the witness turn must end after chat {a}'s turn"
    );
    let sent = h.chat_actions_sent(a);
    assert!(!sent.is_empty(), "typing was shown at least once");
    assert!(
        sent.iter().all(|at| *at < ended),
        "a sendChatAction left after TurnEnded: {:?} after",
        sent.iter()
            .filter(|at| **at >= ended)
            .map(|at| at.duration_since(ended))
            .collect::<Vec<_>>()
    );
    let received = h.chat_actions_received(a);
    assert_eq!(
        received.len(),
        sent.len(),
        "every chat action the server got was dispatched before TurnEnded"
    );
    let stopped = h
        .event(
            "typing stopped in chat A",
            |e| matches!(e, BotEvent::TypingStopped { chat, .. } if chat.0 == a),
        )
        .await;
    let BotEvent::TypingStopped { at, .. } = stopped else {
        unreachable!()
    };
    // Typing stops as the turn ends, just before TurnEnded is stamped.
    assert!(at <= ended && ended.duration_since(at) < Duration::from_millis(50));
}

#[actix_rt::test]
async fn typing_pulses_while_a_turn_runs() {
    let mut h = Harness::start(scenario(), &[]).await;
    h.say(1, USER, "think about it");
    let (_, outcome, ended) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    // 300 ms of thinking at a 40 ms interval: the first pulse plus renewals.
    let sent = h.chat_actions_sent(1);
    assert!(
        sent.len() >= 3,
        "expected renewals during a 300 ms turn, got {}",
        sent.len()
    );
    assert!(sent.iter().all(|at| *at < ended));
    assert_eq!(h.texts(1), vec!["thought"]);
}

#[actix_rt::test]
async fn no_typing_after_a_terminator_batch() {
    let mut h = Harness::start(scenario(), &[]).await;
    h.say(1, USER, "hello");
    let (_, outcome, ended) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    h.say(2, USER, "long one");
    assert_typing_silent_after(&mut h, 1, ended, 2).await;
}

#[actix_rt::test]
async fn no_typing_after_a_post_result_wedge_is_released() {
    let mut h = Harness::start(scenario(), &[("TURNSTILE_TURN_POST_RESULT_GRACE", "200ms")]).await;
    h.say(1, USER, "wedge");
    let (_, outcome, ended) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, TurnOutcome::ForceClosedAfterResult);
    assert_eq!(
        h.texts(1),
        vec!["here you go"],
        "the result text is delivered once"
    );
    h.say(2, USER, "long one");
    assert_typing_silent_after(&mut h, 1, ended, 2).await;
}

#[actix_rt::test]
async fn typing_does_not_pile_up_behind_a_rate_limited_message() {
    let scenario = Scenario::default().with_rule(
        "slow reply",
        turn(vec![
            Step::Tools {
                calls: vec![tool("mcp__telegram-tools__send", json!({"text": "first"}))],
            },
            Step::Wait { ms: 300 },
            Step::Tools {
                calls: vec![tool(
                    "mcp__telegram-tools__end_turn",
                    json!({"text": "second"}),
                )],
            },
        ]),
    );
    let mut h = Harness::start(scenario, &[]).await;
    h.api.inject("sendMessage", Fault::RetryAfter(1));
    h.say(1, USER, "slow reply");
    h.turn_ended(1, 1).await;
    let delivered = h
        .api
        .calls_of("sendMessage")
        .into_iter()
        .find(|c| c.status == 200)
        .expect("the delayed message was delivered");
    // During the 1 s wait the typing actor pulsed ~25 times (every 40 ms);
    // coalesced, at most one request was waiting behind the message.
    let burst = h
        .chat_actions_received(1)
        .iter()
        .filter(|c| {
            c.at >= delivered.at
                && c.at.duration_since(delivered.at) < std::time::Duration::from_millis(30)
        })
        .count();
    assert!(
        burst <= 2,
        "{burst} typing requests burst out after the delayed message"
    );
}

/// The state store runs on its own thread: a write that stalls (a slow
/// disk, a locked file) holds up nothing on the actor thread, so another
/// chat's turn still ends and its typing stops at once.
#[actix_rt::test]
async fn a_stalled_store_write_does_not_hold_up_another_chats_typing_stop() {
    const STALL: Duration = Duration::from_secs(2);
    let quiet_end = || Step::Tools {
        calls: vec![tool("mcp__telegram-tools__end_turn", json!({}))],
    };
    let scenario = Scenario::default()
        .with_rule("warm", turn(vec![quiet_end()]))
        .with_rule("slow", turn(vec![Step::Wait { ms: 500 }, quiet_end()]));
    let mut h = Harness::start(scenario, &[("TURNSTILE_AGENT_KEEP_WARM", "60s")]).await;
    // Chat 2's next turn runs on its warm session: it needs no store read.
    h.say(2, USER, "warm up");
    h.turn_ended(2, 1).await;
    h.say(2, USER, "slow and quiet");
    h.event(
        "chat 2's second turn started",
        |e| matches!(e, BotEvent::TurnStarted { chat, turn, .. } if chat.0 == 2 && *turn == 2),
    )
    .await;
    // Now one store write stalls: the next job on the store thread.
    h.bot.inbox.stall_next_write(STALL);
    let stalled = Instant::now();
    h.bot
        .inbox
        .turn_finished(vec![], turnstile::state::Disposition::Done);
    let (_, outcome, ended) = h.turn_ended(2, 2).await;
    assert!(outcome.finished(), "{outcome:?}");
    let stopped = h
        .event(
            "chat 2's typing stopped",
            |e| matches!(e, BotEvent::TypingStopped { chat, turn, .. } if chat.0 == 2 && *turn == 2),
        )
        .await;
    let BotEvent::TypingStopped { at: stopped, .. } = stopped else {
        unreachable!()
    };
    assert!(
        ended.duration_since(stalled) < STALL,
        "the turn ended {:?} after the stall began",
        ended.duration_since(stalled)
    );
    assert!(
        stopped.duration_since(ended) < Duration::from_millis(500),
        "typing stopped {:?} after TurnEnded",
        stopped.duration_since(ended)
    );
    // The stalled write itself is not lost: the store catches up.
    h.bot.inbox.flushed().await;
    assert!(stalled.elapsed() >= STALL);
}

/// Typing has stopped once the turn's lease ends, which happens as the turn
/// ends, before TurnEnded is stamped: the stop does not wait for the typing
/// actor to take TurnEnded from its mailbox (that wait, behind every other
/// chat's work on the actors' thread, was most of a typing stop's p99 at
/// 100 chats). Nothing the outbox lets go is stamped after it.
#[actix_rt::test]
async fn typing_stops_as_the_turn_ends_not_when_the_typing_actor_gets_to_it() {
    let mut h = Harness::start(scenario(), &[]).await;
    for chat in 1..=20 {
        h.say(chat, USER, "think about it");
    }
    for chat in 1..=20 {
        let (turn, _, ended) = h.turn_ended(chat, 1).await;
        let stopped = h
            .event(&format!("typing stopped in chat {chat}"), |e| {
                matches!(e, BotEvent::TypingStopped { chat: c, turn: t, .. } if c.0 == chat && *t == turn)
            })
            .await;
        let BotEvent::TypingStopped { at: stopped, .. } = stopped else {
            unreachable!()
        };
        assert!(
            stopped <= ended,
            "chat {chat}: typing stopped {:?} after TurnEnded",
            stopped.duration_since(ended)
        );
        let sent = h.chat_actions_sent(chat);
        assert!(
            sent.iter().all(|at| *at < stopped),
            "chat {chat}: a sendChatAction was let go after typing stopped"
        );
    }
}

//! Per chat FIFO, chats in parallel, the concurrency cap, merging.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;
use turnstile::agent::{Scenario, Step};
use turnstile::events::BotEvent;

fn slow_echo() -> Scenario {
    Scenario {
        default: turn(vec![
            Step::Wait { ms: 100 },
            Step::Tools {
                calls: vec![
                    tool("mcp__telegram-tools__send", json!({"text": "echo: {text}"})),
                    tool("mcp__telegram-tools__end_turn", json!({})),
                ],
            },
        ]),
        ..Scenario::default()
    }
}

fn spans(h: &Harness) -> Vec<(i64, Instant, Instant)> {
    let mut starts = HashMap::new();
    let mut out = Vec::new();
    for e in &h.seen {
        match e {
            BotEvent::TurnStarted { chat, turn, at, .. } => {
                starts.insert(*turn, (chat.0, *at));
            }
            BotEvent::TurnEnded { turn, at, .. } => {
                if let Some((chat, start)) = starts.get(turn) {
                    out.push((*chat, *start, *at));
                }
            }
            _ => {}
        }
    }
    out
}

#[actix_rt::test]
async fn ten_messages_from_three_chats_keep_order_within_each_chat_and_run_chats_in_parallel() {
    let mut h = Harness::start(slow_echo(), &[]).await;
    let plan: Vec<(i64, i64)> = vec![
        (1, 1001),
        (2, 1002),
        (3, 1003),
        (1, 1001),
        (2, 1002),
        (1, 1001),
        (3, 1003),
        (2, 1002),
        (1, 1001),
        (3, 1003),
    ];
    for (i, (chat, user)) in plan.iter().enumerate() {
        h.say(*chat, *user, &format!("m{i}"));
    }
    // Messages that arrive together may be one turn (one delivery); either
    // way each chat answers all of its own, in order.
    let numbers = |texts: Vec<String>| -> Vec<String> {
        texts
            .iter()
            .flat_map(|t| t.trim_start_matches("echo: ").split("\n\n"))
            .map(str::to_string)
            .collect()
    };
    for chat in [1, 2, 3] {
        let expected: Vec<String> = plan
            .iter()
            .enumerate()
            .filter(|(_, (c, _))| *c == chat)
            .map(|(i, _)| format!("m{i}"))
            .collect();
        let want = expected.len();
        h.api
            .wait_for(
                Duration::from_secs(20),
                &format!("chat {chat} answered"),
                |_| (numbers(h.texts(chat)).len() >= want).then_some(()),
            )
            .await;
        assert_eq!(numbers(h.texts(chat)), expected, "order in chat {chat}");
    }
    let turns = h.texts(1).len() + h.texts(2).len() + h.texts(3).len();
    for (chat, n) in [
        (1, h.texts(1).len()),
        (2, h.texts(2).len()),
        (3, h.texts(3).len()),
    ] {
        h.turn_ended(chat, n).await;
    }
    let spans = spans(&h);
    assert_eq!(spans.len(), turns);
    // Within a chat, turns never overlap.
    for chat in [1, 2, 3] {
        let mine: Vec<_> = spans.iter().filter(|s| s.0 == chat).collect();
        for pair in mine.windows(2) {
            assert!(
                pair[1].1 >= pair[0].2,
                "chat {chat}: a turn started before the previous ended"
            );
        }
    }
    // Across chats, some turns overlapped.
    let overlapping = spans
        .iter()
        .any(|a| spans.iter().any(|b| a.0 != b.0 && a.1 < b.2 && b.1 < a.2));
    assert!(overlapping, "chats ran in parallel");
}

#[actix_rt::test]
async fn max_concurrent_turns_caps_parallel_chats() {
    let mut h = Harness::start(
        slow_echo(),
        &[("TURNSTILE_DISPATCHER_MAX_CONCURRENT_TURNS", "1")],
    )
    .await;
    for chat in [1, 2, 3] {
        h.say(chat, USER, "hi");
    }
    for chat in [1, 2, 3] {
        h.turn_ended(chat, 1).await;
    }
    let spans = spans(&h);
    for a in &spans {
        for b in &spans {
            if a.0 != b.0 {
                assert!(
                    a.2 <= b.1 || b.2 <= a.1,
                    "turns of chats {} and {} overlapped under a cap of 1",
                    a.0,
                    b.0
                );
            }
        }
    }
}

#[actix_rt::test]
async fn a_burst_inside_the_merge_window_becomes_one_turn() {
    let mut h = Harness::start(
        Scenario::default(),
        &[("TURNSTILE_DISPATCHER_MERGE_WINDOW", "400ms")],
    )
    .await;
    h.say(1, USER, "part one");
    h.say(1, USER, "part two");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert!(outcome.finished());
    assert_eq!(h.texts(1), vec!["echo: part one\n\npart two"]);
    let turns = h
        .seen
        .iter()
        .filter(|e| matches!(e, BotEvent::TurnStarted { .. }))
        .count();
    assert_eq!(turns, 1);
}

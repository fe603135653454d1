//! A terminator acts only after its whole batch resolved; delivery rules.

mod support;

use serde_json::json;
use support::*;
use turnstile::agent::{Scenario, Step};
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;

#[actix_rt::test]
async fn end_turn_beside_a_slower_send_delivers_both_in_order_then_ends() {
    let scenario = Scenario::default().with_rule(
        "go",
        turn(vec![Step::Tools {
            calls: vec![
                tool("mcp__telegram-tools__end_turn", json!({"text": "first"})),
                slow_tool(
                    "mcp__telegram-tools__send",
                    json!({"text": "second, slower"}),
                    300,
                ),
            ],
        }]),
    );
    let mut h = Harness::start(scenario, &[]).await;
    h.say(1, USER, "go");
    let (_, outcome, ended) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    assert_eq!(h.texts(1), vec!["first", "second, slower"]);
    let sends = h.api.calls_of("sendMessage");
    let last = sends
        .iter()
        .rfind(|c| c.params["text"] == json!("second, slower"))
        .unwrap();
    assert!(
        last.at < ended,
        "the slower send was delivered before TurnEnded"
    );
}

#[actix_rt::test]
async fn result_text_is_sent_only_when_nothing_was_delivered() {
    let scenario = Scenario::default()
        .with_rule("plain", turn(vec![result("from the result")]))
        .with_rule(
            "both",
            turn(vec![
                Step::Tools {
                    calls: vec![tool(
                        "mcp__telegram-tools__send",
                        json!({"text": "via send"}),
                    )],
                },
                result("via send"),
            ]),
        );
    let mut h = Harness::start(scenario, &[]).await;
    h.say(1, USER, "plain");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Completed {
            reason: "completed".into()
        }
    );
    h.say(2, USER, "both");
    let (_, outcome, _) = h.turn_ended(2, 1).await;
    assert!(outcome.finished());
    // A third turn in chat 1 proves the outbox has drained chat 1 and 2 in order.
    h.say(1, USER, "hello");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1), vec!["from the result", "echo: hello"]);
    assert_eq!(
        h.texts(2),
        vec!["via send"],
        "delivered text is not sent again from the result"
    );
}

#[actix_rt::test]
async fn an_empty_result_with_nothing_delivered_re_prompts_once() {
    let scenario = Scenario::default()
        .with_rule(
            "silent",
            turn(vec![Step::Text {
                text: "thinking aloud".into(),
            }]),
        )
        .with_rule("[turnstile]", reply("answer after the re-prompt"));
    let mut h = Harness::start(scenario, &[]).await;
    h.say(1, USER, "silent");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    assert_eq!(h.texts(1), vec!["answer after the re-prompt"]);
    let turns = h
        .seen
        .iter()
        .filter(|e| matches!(e, BotEvent::TurnStarted { .. }))
        .count();
    assert_eq!(turns, 1, "the re-prompt runs inside the same turn");
}

#[actix_rt::test]
async fn a_re_prompt_is_sent_at_most_once() {
    let scenario = Scenario::default()
        .with_rule("silent", turn(vec![]))
        .with_rule("[turnstile]", turn(vec![]));
    let mut h = Harness::start(scenario, &[]).await;
    h.say(1, USER, "silent");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Completed {
            reason: "completed".into()
        }
    );
    h.say(1, USER, "hi");
    h.turn_ended(1, 2).await;
    assert_eq!(
        h.texts(1),
        vec!["echo: hi"],
        "no text for the silent turn, and no loop of re-prompts"
    );
}

#[actix_rt::test]
async fn no_re_prompt_when_the_agent_ended_the_turn_itself() {
    // end_turn with no text: nothing delivered, but the agent ended explicitly.
    let scenario = Scenario::default()
        .with_rule(
            "quiet end",
            turn(vec![Step::Tools {
                calls: vec![tool("mcp__telegram-tools__end_turn", json!({}))],
            }]),
        )
        .with_rule("[turnstile]", reply("re-prompted!"));
    let mut h = Harness::start(scenario, &[]).await;
    h.say(1, USER, "quiet end");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    h.say(1, USER, "next");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1), vec!["echo: next"]);
}

#[actix_rt::test]
async fn unknown_tools_and_empty_sends_are_tool_errors_not_crashes() {
    let scenario = Scenario::default().with_rule(
        "odd",
        turn(vec![
            Step::Tools {
                calls: vec![
                    tool("mcp__telegram-tools__teleport", json!({})),
                    tool("mcp__telegram-tools__send", json!({"text": "  "})),
                    tool("mcp__telegram-tools__send", json!({"nottext": 1})),
                ],
            },
            Step::Tools {
                calls: vec![tool(
                    "mcp__telegram-tools__end_turn",
                    json!({"text": "still fine"}),
                )],
            },
        ]),
    );
    let mut h = Harness::start(scenario, &[]).await;
    h.say(1, USER, "odd");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    assert_eq!(h.texts(1), vec!["still fine"]);
}

#[actix_rt::test]
async fn no_re_prompt_after_end_turn_even_without_the_batch_hook() {
    // Without the hook the terminator batch is never reported; the agent's
    // own end_turn call still rules out a re-prompt.
    let scenario = Scenario::default()
        .with_rule(
            "no hook",
            turn(vec![Step::ToolsWithoutHook {
                calls: vec![tool("mcp__telegram-tools__end_turn", json!({}))],
            }]),
        )
        .with_rule("[turnstile]", reply("re-prompted!"));
    let mut h = Harness::start(scenario, &[]).await;
    h.say(1, USER, "no hook");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Completed {
            reason: "completed".into()
        }
    );
    h.say(1, USER, "next");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1), vec!["echo: next"]);
}

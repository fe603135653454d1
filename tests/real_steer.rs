//! Steering with the real Claude Code CLI against the fake Messages API:
//! a message written while a Bash call runs joins the turn (the next model
//! call carries it with the tool result), and one written during the last
//! model call is run by the CLI as its next turn, which the bot adopts
//! (with `agent.keep_warm = "0s"`, the harness's setting: the session that
//! runs it is the next turn's whatever the caps).
//! Part of the real-CLI group (`--features real-cli`, root, the CLI from
//! `scripts/install-claude.sh`), run inside a loopback-only namespace.
#![cfg(feature = "real-cli")]

mod support;

use std::time::Duration;

use serde_json::json;
use support::anthropic::{FakeAnthropic, Reply};
use support::*;
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;

const INNER: &[&str] = &[
    "a_message_during_a_bash_call_reaches_the_next_model_call",
    "a_message_during_the_last_model_call_is_run_next_by_the_cli",
];

#[test]
fn real_steer_in_a_loopback_namespace() {
    support::real_cli::run_in_loopback_namespace(INNER);
}

async fn start(api: &FakeAnthropic, home: &tempfile::TempDir) -> Harness {
    let home = home.path().display().to_string();
    let mut vars = support::real_cli::agent_env(&api.base_url(), &home, &home);
    vars.push(("TURNSTILE_AGENT_ALLOWED_TOOLS".into(), "Bash".into()));
    // The default (the test harness queues otherwise).
    vars.push(("TURNSTILE_DISPATCHER_BUSY".into(), "steer".into()));
    Harness::launch_claude(&vars).await.0
}

async fn model_calls(api: &FakeAnthropic, n: usize) {
    wait_until(
        &format!("{n} model call(s)"),
        Duration::from_secs(30),
        || api.model_requests().len() >= n,
    )
    .await;
}

async fn steered(h: &mut Harness, update_id: i64) {
    h.event(
        "the message steered",
        |e| matches!(e, BotEvent::Steered { update_id: id, .. } if *id == update_id),
    )
    .await;
}

async fn read_mark(h: &Harness) {
    h.api
        .wait_for(SOON, "👀 on the steered message", |calls| {
            calls
                .iter()
                .any(|c| {
                    c.method == "setmessagereaction"
                        && c.params["reaction"].to_string().contains("👀")
                })
                .then_some(())
        })
        .await;
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_steer_in_a_loopback_namespace"]
async fn a_message_during_a_bash_call_reaches_the_next_model_call() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    api.push(Reply::tools(&[(
        "Bash",
        json!({"command": "sleep 4", "description": "wait"}),
    )]));
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({"text": "both answered"}),
    )]));
    let mut h = start(&api, &home).await;
    ask_and_steer(&api, &mut h, "run the slow thing", "also check the date").await;
    assert_eq!(h.texts(1), ["both answered"]);
    let calls = api.model_requests();
    assert_eq!(calls.len(), 2, "{}", api.describe());
    let second_call = calls[1]["messages"].to_string();
    assert!(second_call.contains("also check the date"), "{second_call}");
    assert!(second_call.contains("tool_result"), "{second_call}");
    read_mark(&h).await;
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_steer_in_a_loopback_namespace"]
async fn a_message_during_the_last_model_call_is_run_next_by_the_cli() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    // The first answer streams for about two seconds: the model's last call.
    api.push(Reply::ToolInChunks(
        "mcp__telegram-tools__end_turn".into(),
        vec![
            r#"{"text": "#.into(),
            r#""first "#.into(),
            r#"answer"}"#.into(),
        ],
        Duration::from_secs(1),
    ));
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({"text": "second answer"}),
    )]));
    let mut h = start(&api, &home).await;
    let first = ask_and_steer(&api, &mut h, "first question", "second question").await;
    let (next, outcome, ended) = h.turn_ended(1, 2).await;
    assert_eq!(next, first + 1);
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        },
        "texts {:?}\nlast messages: {:#?}",
        h.texts(1),
        last_messages(&api),
    );
    assert_eq!(h.texts(1), ["first answer", "second answer"]);
    let calls = api.model_requests();
    assert_eq!(calls.len(), 2, "no extra model call: {}", api.describe());
    assert!(calls[1]["messages"].to_string().contains("second question"));
    read_mark(&h).await;
    h.event(
        "typing stopped for the second turn",
        |e| matches!(e, BotEvent::TypingStopped { turn, .. } if turn.get() == next),
    )
    .await;
    assert!(
        h.chat_actions_sent(1).iter().all(|at| *at <= ended),
        "no typing after the last answer"
    );
}

/// The last three messages of each model request, for a failure's message.
fn last_messages(api: &FakeAnthropic) -> Vec<String> {
    api.model_requests()
        .iter()
        .map(|r| {
            let m = r["messages"].as_array().cloned().unwrap_or_default();
            let last: Vec<String> = m.iter().rev().take(3).map(|x| x.to_string()).collect();
            last.join(" || ")
        })
        .collect()
}

/// Asks `first`, steers `second` in once the first model call came, and
/// waits for the first turn's end, by `end_turn`; answers that turn.
async fn ask_and_steer(api: &FakeAnthropic, h: &mut Harness, first: &str, second: &str) -> u64 {
    h.say(1, USER, first);
    model_calls(api, 1).await;
    let id = h.say(1, USER, second);
    steered(h, id).await;
    let (turn, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        },
        "{}",
        api.describe()
    );
    turn
}

//! The real Claude Code CLI (installed by `scripts/install-claude.sh`),
//! driven by turnstile against the fake Anthropic Messages API and the fake
//! Bot API, offline. Part of the real-CLI group: built only with
//! `--features real-cli`.
//!
//! The CLI must never reach the network, so the tests that run it are
//! `#[ignore]`d and run by [`real_cli_in_a_loopback_namespace`], which
//! re-runs this test binary inside `unshare -n` (loopback only) with the
//! CLI's path in `TURNSTILE_REAL_CLAUDE`. Needs root and npm, like CI.
#![cfg(feature = "real-cli")]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::anthropic::{FakeAnthropic, Reply};
use support::*;
use turnstile::agent::claude::ClaudeBackend;
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;

const INNER: &[&str] = &[
    "end_turn_costs_one_api_call_and_stops_typing",
    "without_the_hook_the_same_turn_costs_two_api_calls",
    "send_then_end_turn_in_one_batch_arrive_in_order",
    "a_second_message_reuses_the_warm_process_and_session",
    "a_text_only_answer_reaches_the_chat_from_the_result",
];

#[test]
fn real_cli_in_a_loopback_namespace() {
    support::real_cli::run_in_loopback_namespace(INNER);
}

/// The bot on the `claude` backend running the real CLI against `api`.
async fn start(
    api: &FakeAnthropic,
    home: &tempfile::TempDir,
    env: &[(&str, &str)],
) -> (Harness, Arc<ClaudeBackend>) {
    let claude = support::real_cli::claude_in_namespace();
    let home = home.path().display().to_string();
    let base = api.base_url();
    let mut vars: Vec<(String, String)> = [
        ("TURNSTILE_AGENT_BACKEND", "claude"),
        ("TURNSTILE_AGENT_COMMAND", claude.as_str()),
        ("TURNSTILE_AGENT_WORKDIR", home.as_str()),
        ("TURNSTILE_AGENT_ENV_ANTHROPIC_BASE_URL", base.as_str()),
        ("TURNSTILE_AGENT_ENV_ANTHROPIC_API_KEY", "test-key"),
        ("TURNSTILE_AGENT_ENV_HOME", home.as_str()),
        ("TURNSTILE_AGENT_ENV_CLAUDE_CONFIG_DIR", home.as_str()),
        (
            "TURNSTILE_AGENT_ENV_CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
            "1",
        ),
        ("TURNSTILE_AGENT_KEEP_WARM", "0s"),
        ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "60s"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Harness::launch_claude(&vars).await
}

/// Waits (bounded) until every CLI process has exited and been reaped.
async fn all_exited(backend: &ClaudeBackend) {
    wait_until("the CLI to exit", Duration::from_secs(30), || {
        backend.live() == 0
    })
    .await;
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn end_turn_costs_one_api_call_and_stops_typing() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({"text": "hi there"}),
    )]));
    let (mut h, backend) = start(&api, &home, &[]).await;
    let sent_at = Instant::now();
    h.say(1, USER, "hello");
    let (_, outcome, ended) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    all_exited(&backend).await;
    assert_eq!(h.texts(1), vec!["hi there"], "delivered exactly once");
    assert_eq!(
        api.model_calls(),
        1,
        "one API call per terminator turn: {}",
        api.describe()
    );
    let sent = h.chat_actions_sent(1);
    assert!(
        !sent.is_empty() && sent.iter().all(|at| *at < ended),
        "typing stopped at TurnEnded"
    );
    assert_eq!(
        h.chat_actions_received(1).len(),
        sent.len(),
        "no sendChatAction after TurnEnded"
    );
    let first = api.first_model_call_at().unwrap();
    println!(
        "FIGURE cold: user message -> first API request {:.0} ms; -> TurnEnded {:.0} ms",
        first.duration_since(sent_at).as_secs_f64() * 1e3,
        ended.duration_since(sent_at).as_secs_f64() * 1e3
    );
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn without_the_hook_the_same_turn_costs_two_api_calls() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({"text": "hi there"}),
    )]));
    api.push(Reply::Text("done".into()));
    let (mut h, backend) = start(&api, &home, &[("TURNSTILE_AGENT_BATCH_HOOK", "false")]).await;
    h.say(1, USER, "hello");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Completed {
            reason: "completed".into()
        }
    );
    all_exited(&backend).await;
    assert_eq!(api.model_calls(), 2, "{}", api.describe());
    assert_eq!(
        h.texts(1),
        vec!["hi there"],
        "the result text is not sent again"
    );
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn send_then_end_turn_in_one_batch_arrive_in_order() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    api.push(Reply::tools(&[
        ("mcp__telegram-tools__send", json!({"text": "first"})),
        ("mcp__telegram-tools__end_turn", json!({"text": "second"})),
    ]));
    let (mut h, backend) = start(&api, &home, &[]).await;
    h.say(1, USER, "hello");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    all_exited(&backend).await;
    assert_eq!(h.texts(1), vec!["first", "second"]);
    assert_eq!(api.model_calls(), 1);
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn a_second_message_reuses_the_warm_process_and_session() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    for text in ["one", "two"] {
        api.push(Reply::tools(&[(
            "mcp__telegram-tools__end_turn",
            json!({ "text": text }),
        )]));
    }
    let (mut h, backend) = start(&api, &home, &[("TURNSTILE_AGENT_KEEP_WARM", "10m")]).await;
    let cold_at = Instant::now();
    h.say(1, USER, "first");
    h.turn_ended(1, 1).await;
    // The next turn goes to the process only once it has settled (idle).
    api.wait_for_model_calls(1, Duration::from_secs(30)).await;
    let warm_at = Instant::now();
    h.say(1, USER, "second");
    h.turn_ended(1, 2).await;
    api.wait_for_model_calls(2, Duration::from_secs(30)).await;
    assert_eq!(h.texts(1), vec!["one", "two"]);
    assert_eq!(backend.spawned(), 1, "the warm process served both turns");
    let ids: Vec<Option<String>> = h
        .seen
        .iter()
        .filter_map(|e| match e {
            BotEvent::TurnEnded { session_id, .. } => Some(session_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids[0].is_some());
    assert_eq!(ids[0], ids[1], "the same session id");
    let calls = api.model_call_times();
    println!(
        "FIGURE user message -> first API request: cold {:.0} ms, warm {:.0} ms",
        calls[0].duration_since(cold_at).as_secs_f64() * 1e3,
        calls[1].duration_since(warm_at).as_secs_f64() * 1e3
    );
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn a_text_only_answer_reaches_the_chat_from_the_result() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    api.push(Reply::Text("a plain answer".into()));
    let (mut h, backend) = start(&api, &home, &[]).await;
    h.say(1, USER, "hello");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Completed {
            reason: "completed".into()
        }
    );
    all_exited(&backend).await;
    assert_eq!(h.texts(1), vec!["a plain answer"]);
    assert_eq!(api.model_calls(), 1);
}

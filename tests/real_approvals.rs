//! Tool approvals with the real Claude Code CLI: the model asks for Bash,
//! the chat gets the question with buttons, and the press decides what the
//! model reads in its next call. Part of the real-CLI group (built only with
//! `--features real-cli`); the tests run inside a loopback-only network
//! namespace through [`real_cli_in_a_loopback_namespace`].
#![cfg(feature = "real-cli")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use support::anthropic::{FakeAnthropic, Reply};
use support::*;
use turnstile::agent::backends::ClaudeBackend;
use turnstile::chat::TurnOutcome;

const INNER: &[&str] = &[
    "allow_lets_the_command_run_and_its_output_reach_the_model",
    "deny_makes_the_model_read_the_denial",
];

#[test]
fn real_cli_in_a_loopback_namespace() {
    support::real_cli::run_in_loopback_namespace(INNER);
}

/// The CLI runs read-only commands by itself without asking (2.1.332 ran
/// `echo approved-$((6*7))` so): the write to a file makes it ask.
const COMMAND: &str = "echo approved-$((6*7)) > approved.txt && cat approved.txt";

/// The bot on the real CLI in `ask` mode, the model asking for Bash once and
/// ending the turn in its next call.
async fn start(api: &FakeAnthropic, home: &tempfile::TempDir) -> (Harness, Arc<ClaudeBackend>) {
    api.push(Reply::tools(&[("Bash", json!({ "command": COMMAND }))]));
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({"text": "done"}),
    )]));
    let home = home.path().display().to_string();
    let mut vars = support::real_cli::agent_env(&api.base_url(), &home, &home);
    vars.push(("TURNSTILE_AGENT_PERMISSION_MODE".into(), "ask".into()));
    Harness::launch_claude(&vars).await
}

/// Waits for the question, checks its buttons and presses `label`.
async fn press(h: &Harness, label: &str) {
    let question = h
        .api
        .wait_for(Duration::from_secs(30), "the approval question", |calls| {
            calls.iter().find(|c| !buttons_of(c).is_empty()).cloned()
        })
        .await;
    let text = question.params["text"].as_str().unwrap_or_default();
    assert!(text.contains("Bash") && text.contains(COMMAND), "{text}");
    let buttons: Vec<(String, String)> = buttons_of(&question).into_iter().flatten().collect();
    let labels: Vec<&str> = buttons.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["Allow", "Always in this chat", "Deny"]);
    let data = &buttons
        .iter()
        .find(|(l, _)| l == label)
        .expect("the button")
        .1;
    h.api.push_callback(1, USER, 0, data);
}

/// The `tool_result` text the model got in its second call.
fn tool_result_of_second_call(api: &FakeAnthropic) -> String {
    let requests = api.model_requests();
    let second = requests
        .get(1)
        .unwrap_or_else(|| panic!("two model calls: {}", api.describe()));
    let messages = second["messages"].as_array().cloned().unwrap_or_default();
    let results: Vec<String> = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|block| block["type"] == "tool_result")
        .map(|block| match &block["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .collect();
    results.join("\n")
}

async fn run(label: &str) -> (Harness, FakeAnthropic, Arc<ClaudeBackend>) {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    let (mut h, backend) = start(&api, &home).await;
    h.say(1, USER, "run the command");
    press(&h, label).await;
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        },
        "{}",
        api.describe()
    );
    wait_until("the CLI to exit", Duration::from_secs(30), || {
        backend.running() == 0
    })
    .await;
    (h, api, backend)
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn allow_lets_the_command_run_and_its_output_reach_the_model() {
    let (h, api, _backend) = run("Allow").await;
    let result = tool_result_of_second_call(&api);
    assert!(result.contains("approved-42"), "the model saw: {result}");
    let edits: Vec<String> = h
        .api
        .calls_of("editMessageText")
        .iter()
        .filter_map(|c| c.params["text"].as_str().map(str::to_string))
        .collect();
    assert!(
        edits.iter().any(|t| t.contains("✅ Allowed by")),
        "{edits:?}"
    );
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn deny_makes_the_model_read_the_denial() {
    let (_h, api, _backend) = run("Deny").await;
    let result = tool_result_of_second_call(&api);
    assert!(!result.contains("approved-42"), "the command ran: {result}");
    assert!(
        result.contains("denied this in the chat"),
        "the model saw: {result}"
    );
}

//! Files with the real Claude Code CLI: a text document sent to the chat is
//! fetched into the workdir's `inbox/`, the model reads it (its content
//! comes back to the model as a tool result), writes a file and sends it
//! back with `send_file`. Part of the real-CLI group (built only with
//! `--features real-cli`); the test runs inside a loopback-only network
//! namespace through [`real_cli_in_a_loopback_namespace`].
#![cfg(feature = "real-cli")]

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::anthropic::{FakeAnthropic, Reply};
use support::bot_api::files::{captioned, document, private};
use support::*;
use turnstile::chat::TurnOutcome;

const INNER: &[&str] = &["the_agent_reads_a_received_file_and_sends_one_back"];

#[test]
fn real_cli_in_a_loopback_namespace() {
    support::real_cli::run_in_loopback_namespace(INNER);
}

/// What the document holds; the model must see it.
const CONTENT: &str = "the secret word is periwinkle-7";

/// Every `tool_result` text in the model's `n`-th call (0-based).
fn tool_results_of_call(api: &FakeAnthropic, n: usize) -> String {
    let requests = api.model_requests();
    let call = requests
        .get(n)
        .unwrap_or_else(|| panic!("model call {n}: {}", api.describe()));
    let messages = call["messages"].as_array().cloned().unwrap_or_default();
    messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|block| block["type"] == "tool_result")
        .map(|block| match &block["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn the_agent_reads_a_received_file_and_sends_one_back() {
    let api = FakeAnthropic::start().await;
    // 1: read what arrived and write an answer file; 2: send it and end.
    api.push(Reply::tools(&[(
        "Bash",
        json!({"command": "cat inbox/*-document-notes.txt && tr a-z A-Z < inbox/*-document-notes.txt > shout.txt"}),
    )]));
    api.push(Reply::tools(&[
        (
            "mcp__telegram-tools__send_file",
            json!({"path": "shout.txt", "caption": "shouted"}),
        ),
        ("mcp__telegram-tools__end_turn", json!({})),
    ]));
    let home = tempfile::tempdir().unwrap();
    let workdir = home.path().join("ws");
    std::fs::create_dir_all(&workdir).unwrap();
    let mut vars = support::real_cli::agent_env(
        &api.base_url(),
        &home.path().display().to_string(),
        &workdir.display().to_string(),
    );
    vars.push(("TURNSTILE_AGENT_ALLOWED_TOOLS".into(), "Bash".into()));
    let (mut h, backend) = Harness::launch_claude(&vars).await;
    h.api
        .add_file("doc-1", "documents/file_1.txt", CONTENT.as_bytes());
    h.api.push_message(captioned(
        document(
            private(USER),
            USER,
            "doc-1",
            "notes.txt",
            CONTENT.len() as u64,
        ),
        "shout this back at me",
    ));
    let (_, outcome, _) = h.turn_ended(USER, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        },
        "{}",
        api.describe()
    );
    // The model was told where the file is, and read it.
    let first = api.model_requests()[0].to_string();
    assert!(
        first.contains("[document “notes.txt” saved as inbox/"),
        "the prompt names the file: {first}"
    );
    let read = tool_results_of_call(&api, 1);
    assert!(read.contains(CONTENT), "the model read: {read}");
    let uploads = h.api.wait_for_uploads(1, Duration::from_secs(30)).await;
    assert_eq!(uploads[0].method, "senddocument");
    assert_eq!(uploads[0].file_name, "shout.txt");
    assert_eq!(uploads[0].caption.as_deref(), Some("shouted"));
    assert_eq!(
        String::from_utf8_lossy(&uploads[0].bytes),
        CONTENT.to_uppercase()
    );
    wait_until("the CLI to exit", Duration::from_secs(30), || {
        backend.running() == 0
    })
    .await;
}

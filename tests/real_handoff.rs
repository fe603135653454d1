//! `/handoff` with the real Claude Code CLI against the fake Messages API:
//! the command the answer prints, run by a shell at the "host" (with the
//! operator's own credentials), appends to the conversation's session, and
//! the chat's next message resumes that session, so the model reads what
//! was said at the terminal. Part of the real-CLI group (`--features
//! real-cli`, root, the CLI from `scripts/install-claude.sh`), run inside a
//! loopback-only namespace.
#![cfg(feature = "real-cli")]

mod support;

use std::time::Duration;

use serde_json::json;
use support::anthropic::{FakeAnthropic, Reply};
use support::*;

const INNER: &[&str] = &["the_terminal_appends_to_the_session_the_chat_takes_back"];

#[test]
fn real_handoff_in_a_loopback_namespace() {
    support::real_cli::run_in_loopback_namespace(INNER);
}

/// What the operator types at the terminal.
const TYPED: &str = "words typed at the terminal";
/// What the model answers there.
const ANSWERED: &str = "an answer given at the terminal";

/// Waits for the first text to `chat` starting with `start`.
async fn text_starting(h: &Harness, chat: i64, start: &str) -> String {
    h.api
        .wait_for(SOON, &format!("a text starting {start:?}"), |_| {
            h.texts(chat).into_iter().find(|t| t.starts_with(start))
        })
        .await
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_handoff_in_a_loopback_namespace"]
async fn the_terminal_appends_to_the_session_the_chat_takes_back() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().display().to_string();
    let vars = support::real_cli::agent_env(&api.base_url(), &home_path, &home_path);
    let (mut h, backend) = Harness::launch_claude(&vars).await;
    let end_turn =
        |text: &str| Reply::tools(&[("mcp__telegram-tools__end_turn", json!({ "text": text }))]);
    api.push(end_turn("one"));
    h.say(ADMIN, ADMIN, "first words");
    h.turn_ended(ADMIN, 1).await;
    wait_until("the CLI to exit", Duration::from_secs(30), || {
        backend.running() == 0
    })
    .await;

    h.say(ADMIN, ADMIN, "/handoff");
    let answer = text_starting(&h, ADMIN, "🖥 Handed off to the host").await;
    let line = (answer.lines())
        .find(|l| l.starts_with("cd "))
        .unwrap_or_else(|| panic!("no command line in {answer}"));
    // At the host: the printed command, a prompt, the operator's own
    // credentials (the bot's are in its config, not in the command).
    api.push(Reply::Text(ANSWERED.into()));
    let ran = tokio::process::Command::new("sh")
        .args(["-c", &format!("{line} -p '{TYPED}'")])
        .env("ANTHROPIC_BASE_URL", api.base_url())
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .output();
    let ran = tokio::time::timeout(Duration::from_secs(60), ran)
        .await
        .expect("the terminal's CLI ends")
        .unwrap();
    let printed = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success() && printed.contains(ANSWERED),
        "{line}: {ran:?}\n{}",
        api.describe()
    );

    api.push(end_turn("two"));
    h.say(ADMIN, ADMIN, "back in the chat");
    h.turn_ended(ADMIN, 2).await;
    text_starting(&h, ADMIN, "↩️ Taken back from the host").await;
    let requests = api.model_requests();
    let last = requests.last().expect("model calls").to_string();
    for said in [TYPED, ANSWERED, "back in the chat"] {
        assert!(
            last.contains(said),
            "{said:?} not in the chat's model call: {last}"
        );
    }
}

//! A usage-limit refusal with the real Claude Code CLI against the fake
//! Messages API: the API's 429 with the usage-limit headers, which the CLI
//! does not retry, parks the message; at `agent.limit_retry` it runs again
//! and is answered once. Part of the real-CLI group (`--features real-cli`,
//! root, the CLI from `scripts/install-claude.sh`), run inside a
//! loopback-only namespace.
#![cfg(feature = "real-cli")]

mod support;

use serde_json::json;
use support::anthropic::{FakeAnthropic, Reply};
use support::*;
use turnstile::chat::TurnOutcome;

const INNER: &[&str] = &["a_usage_refusal_is_parked_and_answered_once_after_the_wait"];

#[test]
fn real_limits_in_a_loopback_namespace() {
    support::real_cli::run_in_loopback_namespace(INNER);
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_limits_in_a_loopback_namespace"]
async fn a_usage_refusal_is_parked_and_answered_once_after_the_wait() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    api.push(Reply::UsageLimit(3600));
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({"text": "answered after the wait"}),
    )]));
    let dir = home.path().display().to_string();
    let mut vars = support::real_cli::agent_env(&api.base_url(), &dir, &dir);
    vars.push(("TURNSTILE_AGENT_LIMIT_RETRY".into(), "2s".into()));
    let (mut h, _backend) = Harness::launch_claude(&vars).await;
    h.say(1, USER, "please answer");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert!(
        matches!(outcome, TurnOutcome::Limited { .. }),
        "{outcome:?}: {}",
        api.describe()
    );
    let (_, outcome, _) = h.turn_ended(1, 2).await;
    assert!(outcome.finished(), "{outcome:?}: {}", api.describe());
    let texts = h.texts(1);
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(
        texts[0].starts_with("⏳") && texts[0].contains("usage limit"),
        "{texts:?}"
    );
    assert_eq!(texts[1], "answered after the wait");
    let calls = api.model_requests();
    assert_eq!(
        calls.len(),
        2,
        "refused once, not retried by the CLI: {}",
        api.describe()
    );
    assert!(calls[1]["messages"].to_string().contains("please answer"));
}

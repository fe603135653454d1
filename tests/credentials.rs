//! An agent that cannot authenticate with its model API is told as that:
//! the chat names what to set, within seconds (not at the time budget),
//! and the log's ERROR line carries the agent's own words. The lines are
//! those the Claude Code CLI (2.1.332) writes when it is not logged in and
//! when the API answers 401 `authentication_error`.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::fake_cli::FakeCli;
use support::*;
use turnstile::agent::{Scenario, Step};
use turnstile::chat::TurnOutcome;

/// The CLI's own words when it has no credentials at all.
const NOT_LOGGED_IN: &str = "Not logged in · Please run /login";

/// Clocks far past the test's own wait, so only the failure can end the turn.
const SLOW_CLOCKS: &[(&str, &str)] = &[
    ("TURNSTILE_TURN_MAX_DURATION", "10m"),
    ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "10m"),
    ("TURNSTILE_TURN_POST_RESULT_GRACE", "10m"),
];

#[actix_rt::test]
async fn an_agent_not_logged_in_is_told_as_that_with_its_own_words() {
    let logs = LogCapture::start();
    let scenario = Scenario::default().with_rule(
        "hello",
        turn(vec![
            Step::Raw {
                line: json!({"type": "assistant", "error": "authentication_failed",
                    "is_api_error_message": true, "session_id": "s",
                    "message": {"id": "m", "model": "<synthetic>", "role": "assistant",
                        "content": [{"type": "text", "text": NOT_LOGGED_IN}]}})
                .to_string(),
            },
            Step::Raw {
                line: json!({"type": "result", "subtype": "success", "is_error": true,
                    "api_error_status": null, "terminal_reason": "api_error", "num_turns": 1,
                    "result": NOT_LOGGED_IN, "session_id": "s", "total_cost_usd": 0})
                .to_string(),
            },
            Step::HangForever,
        ]),
    );
    let (mut h, cli) = FakeCli::start(&scenario, SLOW_CLOCKS).await;
    h.say(1, USER, "hello");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Unauthenticated {
            refused: false,
            detail: NOT_LOGGED_IN.into()
        }
    );
    let texts = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(texts.len(), 1, "{texts:?}");
    assert!(
        texts[0].contains("not logged in") && texts[0].contains(NOT_LOGGED_IN),
        "{}",
        texts[0]
    );
    for what in [
        "ANTHROPIC_API_KEY",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "agent.pass_env",
    ] {
        assert!(texts[0].contains(what), "no {what} in {}", texts[0]);
    }
    // The session that cannot authenticate is not kept.
    cli.assert_no_process_left().await;
    let log = logs.text();
    let line = log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains(NOT_LOGGED_IN))
        .unwrap_or_else(|| panic!("no ERROR line with the agent's words in:\n{log}"));
    assert!(line.contains("authenticate"), "{line}");
}

#[actix_rt::test]
async fn credentials_the_api_refuses_end_the_turn_at_the_first_retry() {
    let logs = LogCapture::start();
    // The CLI retries a 401 ten times over minutes, saying so each time.
    let scenario = Scenario::default().with_rule(
        "hello",
        turn(vec![
            Step::Raw {
                line: json!({"type": "system", "subtype": "api_retry", "attempt": 1,
                    "max_retries": 10, "retry_delay_ms": 597, "error_status": 401,
                    "error": "authentication_failed", "session_id": "s"})
                .to_string(),
            },
            Step::HangForever,
        ]),
    );
    let (mut h, cli) = FakeCli::start(&scenario, SLOW_CLOCKS).await;
    let asked = Instant::now();
    h.say(1, USER, "hello");
    let (_, outcome, at) = h.turn_ended(1, 1).await;
    assert!(
        at.duration_since(asked) < Duration::from_secs(15),
        "ended after {:?}",
        at.duration_since(asked)
    );
    let TurnOutcome::Unauthenticated { refused, detail } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(refused);
    assert!(detail.contains("401"), "{detail}");
    let texts = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(texts.len(), 1, "{texts:?}");
    assert!(
        texts[0].contains("refused the agent's credentials") && texts[0].contains("401"),
        "{}",
        texts[0]
    );
    cli.assert_no_process_left().await;
    let log = logs.text();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("401 authentication_failed")),
        "no ERROR line with the status in:\n{log}"
    );
}

#[actix_rt::test]
async fn an_agent_error_logs_the_agents_own_words_at_error() {
    let logs = LogCapture::start();
    let scenario = Scenario::default().with_rule(
        "hello",
        turn(vec![Step::Result {
            text: "API Error: 500 the model API broke".into(),
            subtype: "success".into(),
            is_error: true,
            terminal_reason: Some("api_error".into()),
            num_turns: Some(1),
            limited: false,
            resets_at: None,
        }]),
    );
    let (mut h, _cli) = FakeCli::start(&scenario, &[]).await;
    h.say(1, USER, "hello");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::AgentError {
            reason: "api_error".into()
        }
    );
    let log = logs.text();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("API Error: 500 the model API broke")),
        "no ERROR line with the agent's words in:\n{log}"
    );
}

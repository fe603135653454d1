//! Start-up against Telegram: the token checked with `getMe` (a rejected
//! one is exit code 3 at once), a webhook on the token reported or removed,
//! the command menu set with `setMyCommands`, and `allowed_updates` naming
//! exactly what turnstile handles.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;
use turnstile::agent::{Scenario, ScriptedBackend};
use turnstile::{StartError, Turnstile};

async fn start_on(api: &FakeBotApi, env: &[(&str, &str)]) -> Result<Turnstile, StartError> {
    let config = ConfigVars::new(&api.url())
        .set_all(TEST_DEFAULTS.iter().copied())
        .set_all(env.iter().copied())
        .load();
    let backend = Arc::new(ScriptedBackend::new(Scenario::default()));
    Turnstile::start(&config, backend).await
}

#[actix_rt::test]
async fn a_rejected_token_fails_the_start_at_once_with_exit_code_3() {
    for status in [401, 404] {
        let api = FakeBotApi::start().await;
        api.inject("getMe", Fault::ServerError(status));
        let began = Instant::now();
        let err = start_on(&api, &[]).await.err().expect("the start fails");
        assert!(matches!(err, StartError::TokenRejected), "{status}: {err}");
        assert_eq!(err.exit_code(), 3);
        assert_eq!(
            err.to_string(),
            "Telegram rejected the bot token (check TELEGRAM_BOT_TOKEN)"
        );
        assert!(!err.to_string().contains(support::bot_api::TOKEN));
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{:?}",
            began.elapsed()
        );
        assert_eq!(api.calls_of("getMe").len(), 1, "not retried");
        assert!(api.calls_of("getUpdates").is_empty(), "never polled");
    }
}

#[actix_rt::test]
async fn another_get_me_failure_is_retried() {
    let api = FakeBotApi::start().await;
    api.inject("getMe", Fault::BadRequest("Bad Request: try again".into()));
    let bot = start_on(&api, &[]).await.expect("starts after a retry");
    assert_eq!(api.calls_of("getMe").len(), 2);
    bot.stop().await;
}

#[actix_rt::test]
async fn a_5xx_on_get_me_is_retried_after_the_starts_own_backoff_not_teloxides_pause() {
    let api = FakeBotApi::start().await;
    api.inject("getMe", Fault::ServerError(502));
    let bot = start_on(&api, &[]).await.expect("starts after a retry");
    let calls = api.calls_of("getMe");
    let statuses: Vec<u16> = calls.iter().map(|c| c.status).collect();
    assert_eq!(statuses, vec![502, 200], "{calls:#?}");
    // The start backs off 250 ms; teloxide's own path pauses 10 s after a 5xx.
    let gap = calls[1].at.duration_since(calls[0].at);
    assert!(
        gap < Duration::from_secs(2),
        "getMe retried {gap:?} after a 502"
    );
    bot.stop().await;
}

#[actix_rt::test]
async fn a_webhook_on_the_token_is_an_error_unless_it_may_be_removed() {
    let api = FakeBotApi::start().await;
    api.set_webhook("https://example.invalid/hook");
    let err = start_on(&api, &[]).await.err().expect("the start fails");
    assert!(matches!(err, StartError::WebhookSet { .. }), "{err}");
    assert_eq!(err.exit_code(), 3);
    assert!(err.to_string().contains("telegram.delete_webhook"), "{err}");
    assert!(api.calls_of("deleteWebhook").is_empty());

    let bot = start_on(&api, &[("TURNSTILE_TELEGRAM_DELETE_WEBHOOK", "true")])
        .await
        .expect("starts once the webhook is removed");
    assert_eq!(api.calls_of("deleteWebhook").len(), 1);
    api.push_text(USER, USER, "hi");
    let texts = api.wait_for_texts(USER, 1, SOON).await;
    assert_eq!(texts, vec!["echo: hi"]);
    bot.stop().await;
}

#[actix_rt::test]
async fn the_command_menu_is_set_for_everyone_and_for_each_admin() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.say(USER, USER, "hi");
    h.turn_ended(USER, 1).await;
    let calls = h.api.calls_of("setMyCommands");
    let names = |c: &Call| -> Vec<String> {
        let commands = match &c.params["commands"] {
            serde_json::Value::String(raw) => serde_json::from_str(raw).unwrap(),
            other => other.clone(),
        };
        commands
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["command"].as_str().unwrap().to_string())
            .collect()
    };
    let everyone = calls
        .iter()
        .find(|c| c.params.get("scope").is_none())
        .expect("a default-scope menu");
    let for_everyone = [
        "stop",
        "new",
        "permissions",
        "schedule",
        "schedules",
        "model",
        "sessions",
        "fork",
        "project",
        "usage",
        "help",
    ];
    assert_eq!(names(everyone), for_everyone);
    let admin = calls
        .iter()
        .find(|c| c.params["scope"]["chat_id"] == json!(ADMIN))
        .expect("the admin's menu");
    assert_eq!(admin.params["scope"]["type"], "chat");
    let mut for_admins = for_everyone.to_vec();
    for_admins.extend(["status", "restart", "handoff"]);
    assert_eq!(names(admin), for_admins);
    assert_eq!(calls.len(), 2, "one admin, two menus");
    let polls = h.api.calls_of("getUpdates");
    assert!(!polls.is_empty());
    for poll in polls {
        assert_eq!(
            poll.params["allowed_updates"],
            json!(["message", "callback_query"]),
            "{:?}",
            poll.params
        );
    }
}

#[actix_rt::test]
async fn a_409_from_another_poller_is_reported_plainly_and_polling_goes_on() {
    let logs = LogCapture::start();
    let h = Harness::start(Scenario::default(), &[]).await;
    h.api.inject(
        "getUpdates",
        Fault::Conflict(
            "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
                .into(),
        ),
    );
    // The fault hits the next poll; a message after it is still answered.
    h.api
        .wait_for(SOON, "the refused poll", |calls| {
            calls
                .iter()
                .find(|c| c.method == "getupdates" && c.status == 409)
                .cloned()
        })
        .await;
    h.say(USER, USER, "still there?");
    h.api.wait_for_texts(USER, 1, SOON).await;
    let text = logs.text();
    assert!(
        text.contains("another process is polling this bot token (409 Conflict)"),
        "{text}"
    );
}

#[actix_rt::test]
async fn a_scenario_file_that_cannot_be_read_keeps_the_os_error_as_its_source() {
    let api = FakeBotApi::start().await;
    let config = ConfigVars::new(&api.url())
        .set_all(TEST_DEFAULTS.iter().copied())
        .set("TURNSTILE_AGENT_SCRIPT", "/nonexistent/scenario.toml")
        .load();
    let err = match turnstile::backend_from_config(&config) {
        Err(err) => err,
        Ok(_) => panic!("a missing scenario file set up a backend"),
    };
    assert!(matches!(err, StartError::Backend(_)), "{err}");
    assert!(
        err.to_string().contains("/nonexistent/scenario.toml"),
        "{err}"
    );
    let scenario = std::error::Error::source(&err).expect("the scenario error");
    let io = scenario
        .source()
        .and_then(|e| e.downcast_ref::<std::io::Error>())
        .expect("the OS error under the scenario error");
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
}

//! `/restart` with the real Claude Code CLI against the fake Messages API:
//! the warm CLI process is handed across the re-execution and answers the
//! next message itself (no new process, no `initialize`), through the
//! agent network's proxy the next process took over when sandboxed; an
//! agent started after the restart works too. Part of the real-CLI group
//! (`--features real-cli`, root, the CLI from `scripts/install-claude.sh`),
//! run inside a loopback-only namespace; `.ci/run` runs it again under
//! bubblewrap.
#![cfg(feature = "real-cli")]

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::anthropic::{FakeAnthropic, Reply};
use support::process::BotProcess;
use support::*;

const INNER: &[&str] = &["the_warm_cli_answers_the_first_message_after_a_restart"];

#[test]
fn real_restart_in_a_loopback_namespace() {
    support::real_cli::run_in_loopback_namespace(INNER);
}

const USER: i64 = 1001;
/// The real CLI's turn on a loaded machine, and a restart.
const LONG: Duration = Duration::from_secs(90);

fn end_turn(text: &str) -> Reply {
    Reply::tools(&[("mcp__telegram-tools__end_turn", json!({ "text": text }))])
}

/// Says `text` in `chat` and waits for `answer` there; answers how long
/// the message took to reach the model.
async fn ask(
    api: &FakeBotApi,
    model: &FakeAnthropic,
    bot: &BotProcess,
    chat: i64,
    text: &str,
    answer: &str,
) -> Duration {
    let calls = model.model_call_times().len();
    model.push(end_turn(answer));
    let sent = Instant::now();
    api.push_text(chat, chat, text);
    let what = format!("{answer:?} in chat {chat}");
    let wait = wait_until(&what, LONG * 2, || {
        api.texts_to(chat).iter().any(|t| t == answer)
    });
    if tokio::time::timeout(LONG, wait).await.is_err() {
        panic!(
            "{answer:?} never came:\n{}\n{}",
            model.describe(),
            bot.log_text()
        );
    }
    let first = model.model_call_times()[calls];
    first.saturating_duration_since(sent)
}

/// Waits until the bot kept a settled session warm `n` times.
async fn kept_warm(bot: &BotProcess, n: usize) {
    let kept = wait_until("the session kept warm", LONG * 2, || {
        bot.log_text().matches("session kept warm").count() >= n
    });
    if tokio::time::timeout(LONG, kept).await.is_err() {
        panic!("the session was not kept warm:\n{}", bot.log_text());
    }
}

#[tokio::test]
#[ignore = "runs inside a network namespace through real_restart_in_a_loopback_namespace"]
async fn the_warm_cli_answers_the_first_message_after_a_restart() {
    let model = FakeAnthropic::start().await;
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let home = home.display().to_string();
    let mut env = support::real_cli::agent_env(&model.base_url(), &home, &home);
    env.extend(
        [
            ("TURNSTILE_AGENT_KEEP_WARM", "1h".to_owned()),
            (
                "TURNSTILE_STATE_PATH",
                dir.path().join("state.db").display().to_string(),
            ),
            ("TURNSTILE_LOG", "info,turnstile=debug".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let log = dir.path().join("bot.log");
    let mut bot = BotProcess::spawn(&api, &log, &env);

    let cold = ask(&api, &model, &bot, USER, "first words", "one").await;
    kept_warm(&bot, 1).await;
    let warm = ask(&api, &model, &bot, USER, "more words", "two").await;
    kept_warm(&bot, 2).await;
    api.push_text(ADMIN, ADMIN, "/restart");
    wait_until("✅ Restarted.", LONG, || {
        api.texts_to(ADMIN).iter().any(|t| t == "✅ Restarted.")
    })
    .await;
    let after = ask(&api, &model, &bot, USER, "after the restart", "three").await;
    println!(
        "message to first model request: cold {} ms, warm {} ms, first after the restart {} ms",
        cold.as_millis(),
        warm.as_millis(),
        after.as_millis()
    );
    let text = bot.log_text();
    assert!(
        text.contains("agent process taken over from before the restart"),
        "{text}"
    );
    assert_eq!(
        text.matches("agent process started").count(),
        1,
        "one CLI process across the restart: {text}"
    );
    let requests = model.model_requests();
    let last = requests.last().expect("model calls").to_string();
    for said in ["first words", "more words", "after the restart"] {
        assert!(last.contains(said), "{said:?} not in the session: {last}");
    }
    // A conversation started after the restart gets a process of its own,
    // sealed as before (under bubblewrap, through the same proxy socket).
    ask(&api, &model, &bot, ADMIN, "a new conversation", "four").await;
    assert_eq!(
        bot.log_text().matches("agent process started").count(),
        2,
        "{}",
        bot.log_text()
    );
    bot.signal(libc::SIGTERM);
    assert!(bot.exit().await.success(), "{}", bot.log_text());
}

//! Telegram's servers close a kept-alive connection once it has been idle
//! for their keep-alive time. A request written to such a connection at
//! that moment crosses the close: it is never read, and the client only
//! sees the connection end, which for a message means "it may have
//! arrived", so it is not sent again and the reply is lost (2 of 10,000 in
//! the scale benchmark). The bot must never write to a connection that has
//! been idle that long: `telegram.pool_idle_timeout` is below the server's
//! keep-alive, and such a connection is not used again.

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::bot_api::{FakeBotApi, Options, Record};
use support::*;
use turnstile::Turnstile;
use turnstile::agent::{Scenario, ScriptedBackend};
use turnstile::events::BotEvent;
use turnstile::telegram::Flush;

/// The fake Telegram's keep-alive: a connection idle this long is closed,
/// and a request arriving on it after that is dropped unread.
const SERVER_KEEP_ALIVE: Duration = Duration::from_millis(200);

/// The agent thinks a little longer than that before it answers, so the
/// connection the turn's typing request used is past the server's
/// keep-alive when the answer goes.
const THINK_MS: u64 = 250;

const TURNS: usize = 6;
const CHAT: i64 = 41;

#[actix_rt::test]
async fn a_reply_after_the_servers_keep_alive_is_never_lost() {
    let api = FakeBotApi::start_with(Options {
        record: Record::Calls,
        idle_close: Some(SERVER_KEEP_ALIVE),
        strict_idle: true,
    })
    .await;
    let config = ConfigVars::new(&api.url())
        .set_all(TEST_DEFAULTS.iter().copied())
        // One typing request per turn, at its start.
        .set("TURNSTILE_TURN_TYPING_INTERVAL", "1h")
        .set("TURNSTILE_TELEGRAM_POOL_IDLE_TIMEOUT", "50ms")
        .load();
    let scenario: Scenario = serde_json::from_value(json!({"default": {"steps": [
        {"do": "wait", "ms": THINK_MS},
        {"do": "tools", "calls": [
            {"name": "mcp__telegram-tools__send", "input": {"text": "echo: {text}"}},
            {"name": "mcp__telegram-tools__end_turn", "input": {}},
        ]},
    ]}}))
    .expect("the scenario parses");
    let bot = Turnstile::start_with_limits(
        &config,
        Arc::new(ScriptedBackend::new(scenario)),
        Harness::fast_limits(),
    )
    .await
    .expect("bot starts");
    let mut events = bot.events.subscribe();
    for n in 1..=TURNS {
        api.push_text(CHAT, USER, &format!("m{n}"));
        let ended = tokio::time::timeout(SOON, async {
            loop {
                match events.recv().await {
                    Ok(BotEvent::TurnEnded { chat, .. }) if chat.0 == CHAT => return,
                    Ok(_) => {}
                    Err(e) => panic!("event bus: {e}"),
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "turn {n} did not end");
    }
    // Every request the turns queued has been sent or has failed.
    tokio::time::timeout(SOON, bot.outbox.send(Flush))
        .await
        .expect("the outbox drains")
        .expect("the outbox answers");
    let expected: Vec<String> = (1..=TURNS).map(|n| format!("echo: m{n}")).collect();
    assert_eq!(
        api.texts_to(CHAT),
        expected,
        "every message answered exactly once"
    );
    bot.stop().await;
}

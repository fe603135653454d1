//! Only allowed users reach an agent; commands.

mod support;

use support::*;
use turnstile::agent::{Scenario, Step};
use turnstile::events::BotEvent;

#[actix_rt::test]
async fn a_user_not_on_the_allowlist_never_reaches_the_agent() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.say(50, STRANGER, "let me in");
    h.say(50, STRANGER, "please");
    h.event("second refusal", {
        let mut n = 0;
        move |e| {
            if matches!(
                e,
                BotEvent::AccessDenied {
                    user: teloxide::types::UserId(666),
                    ..
                }
            ) {
                n += 1;
            }
            n == 2
        }
    })
    .await;
    // An allowed user afterwards proves both updates were processed.
    h.say(1, USER, "hi");
    h.turn_ended(1, 1).await;
    assert_eq!(
        h.backend.opened(),
        1,
        "only the allowed user's turn opened a session"
    );
    let refusals = h.api.wait_for_texts(50, 1, SOON).await;
    assert_eq!(refusals.len(), 1, "one refusal per cooldown: {refusals:?}");
    assert!(
        h.seen
            .iter()
            .all(|e| !matches!(e, BotEvent::TurnStarted { chat, .. } if chat.0 == 50))
    );
}

#[actix_rt::test]
async fn refusals_repeat_after_the_cooldown() {
    let h = Harness::start(
        Scenario::default(),
        &[("TURNSTILE_ACCESS_REFUSAL_COOLDOWN", "1ms")],
    )
    .await;
    h.say(50, STRANGER, "one");
    h.api.wait_for_texts(50, 1, SOON).await;
    h.say(50, STRANGER, "two");
    let texts = h.api.wait_for_texts(50, 2, SOON).await;
    assert_eq!(texts.len(), 2);
    assert_eq!(h.backend.opened(), 0);
}

#[actix_rt::test]
async fn status_is_for_admins_only() {
    let scenario = Scenario::default().with_rule("slow", turn(vec![Step::Wait { ms: 60_000 }]));
    let mut h = Harness::start(scenario, &[]).await;
    h.say(1, USER, "slow");
    h.event("turn start", |e| matches!(e, BotEvent::TurnStarted { .. }))
        .await;
    h.say(1, USER, "/status");
    let refused = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(refused, vec!["Only admins can use /status."]);
    h.say(ADMIN, ADMIN, "/status@turnstile_bot");
    let status = h.api.wait_for_texts(ADMIN, 1, SOON).await;
    assert!(status[0].contains("1 turn running"), "{status:?}");
    assert!(status[0].contains("chat 1: turn 1 running"), "{status:?}");
}

#[actix_rt::test]
async fn status_in_a_group_shows_only_that_chat_even_to_an_admin() {
    let scenario = Scenario::default().with_rule("slow", turn(vec![Step::Wait { ms: 60_000 }]));
    let mut h = Harness::start(scenario, &[]).await;
    h.say(1, USER, "slow");
    h.event("turn start", |e| matches!(e, BotEvent::TurnStarted { .. }))
        .await;
    const GROUP: i64 = -100_777;
    h.api.push_update(serde_json::json!({"message": {
        "message_id": 600, "date": 0,
        "chat": {"id": GROUP, "type": "supergroup", "title": "team"},
        "from": {"id": ADMIN, "is_bot": false, "first_name": "a"},
        "text": "/status", "entities": [{"type": "bot_command", "offset": 0, "length": 7}]
    }}));
    let in_group = h.api.wait_for_texts(GROUP, 1, SOON).await;
    assert!(
        in_group[0].contains("This chat only"),
        "the group is told it sees only itself: {in_group:?}"
    );
    assert!(
        !in_group[0].contains("chat 1"),
        "another chat leaked into the group: {in_group:?}"
    );
    // The same admin in the private chat still sees every chat.
    h.say(ADMIN, ADMIN, "/status");
    let private = h.api.wait_for_texts(ADMIN, 1, SOON).await;
    assert!(private[0].contains("chat 1: turn 1 running"), "{private:?}");
}

#[actix_rt::test]
async fn updates_it_cannot_use_are_skipped_without_harm() {
    let h = Harness::start(Scenario::default(), &[]).await;
    // Unknown update kind, a message without text, a malformed message, an empty text.
    h.api
        .push_update(serde_json::json!({"some_future_update": {"x": 1}}));
    h.api.push_update(serde_json::json!({"message": {"message_id": 77, "date": 0, "chat": {"id": 1, "type": "private"}, "from": {"id": 1001, "is_bot": false, "first_name": "u"}, "sticker": {"bogus": true}}}));
    h.api
        .push_update(serde_json::json!({"message": "not an object"}));
    h.say(1, USER, "   ");
    h.say(1, USER, &"x".repeat(100_000));
    h.say(1, USER, "still alive?");
    // Messages that come together are one turn: however Telegram batched
    // them, the last one is answered, by the one agent session.
    h.api
        .wait_for(SOON, "the answer to the last message", |_| {
            h.texts(1)
                .last()
                .is_some_and(|t| t.ends_with("still alive?"))
                .then_some(())
        })
        .await;
    assert_eq!(h.backend.opened(), 1);
}

#[actix_rt::test]
async fn restart_is_for_admins_only_and_a_stale_one_is_ignored() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.say(1, USER, "/restart");
    assert_eq!(
        h.api.wait_for_texts(1, 1, SOON).await,
        vec!["Only admins can use /restart."]
    );
    // An admin's /restart dated before this process started.
    let stale = serde_json::json!({"message": {
        "message_id": 500, "date": 1_000_000_000,
        "chat": {"id": ADMIN, "type": "private", "first_name": "a"},
        "from": {"id": ADMIN, "is_bot": false, "first_name": "a"},
        "text": "/restart", "entities": [{"type": "bot_command", "offset": 0, "length": 8}]
    }});
    h.api.push_update(stale);
    h.say(ADMIN, ADMIN, "after the stale restart");
    h.turn_ended(ADMIN, 1).await;
    assert_eq!(
        h.texts(ADMIN),
        vec!["echo: after the stale restart"],
        "the stale /restart was ignored"
    );
}

/// A message accepted while its sender was allowed, still unanswered at a
/// restart, is checked again: one whose sender is no longer allowed never
/// reaches an agent.
#[actix_rt::test]
async fn a_recovered_message_from_a_user_no_longer_allowed_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    {
        let store = turnstile::state::Store::open(&db).unwrap();
        for (update_id, user, text) in [(1, STRANGER, "from before"), (2, USER, "still allowed")] {
            store
                .accept(&turnstile::incoming::Incoming {
                    update_id,
                    to: teloxide::types::ChatId(user).into(),
                    from: teloxide::types::UserId(u64::try_from(user).unwrap()),
                    message_id: teloxide::types::MessageId(1),
                    text: text.into(),
                    date: 0,
                    ..Default::default()
                })
                .unwrap();
        }
    }
    let db_env = db.display().to_string();
    let mut h = Harness::start(Scenario::default(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    h.turn_ended(USER, 1).await;
    assert_eq!(
        h.api.wait_for_texts(USER, 1, SOON).await,
        vec!["echo: still allowed"]
    );
    h.bot.inbox.flushed().await;
    let rows = h.bot.inbox.recover().await.expect("the store reads");
    assert!(rows.is_empty(), "nothing left to run: {rows:?}");
    let counts = h.bot.inbox.counts().await;
    assert!(counts.contains(&("dropped".to_string(), 1)), "{counts:?}");
    assert_eq!(h.backend.opened(), 1, "only the allowed user's message ran");
    assert!(h.texts(STRANGER).is_empty(), "{:?}", h.texts(STRANGER));
}

/// A stranger's message is refused and leaves nothing of what they wrote or
/// sent in the state file: its row keeps no text and no files.
#[actix_rt::test]
async fn a_strangers_message_leaves_no_text_in_the_state_file() {
    use support::bot_api::files::{captioned, document, private};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let mut h = Harness::start(Scenario::default(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    h.say(50, STRANGER, "let me in: xyzzy-secret-words");
    h.api.push_message(captioned(
        document(private(50), STRANGER, "file-xyzzy", "xyzzy-secret.pdf", 10),
        "xyzzy-secret-caption",
    ));
    h.event("both refused", {
        let mut n = 0;
        move |e| {
            n += usize::from(matches!(e, BotEvent::AccessDenied { .. }));
            n == 2
        }
    })
    .await;
    // An allowed user's words afterwards: the file holds text, just not theirs.
    h.say(1, USER, "plugh-allowed-words");
    h.turn_ended(1, 1).await;
    h.bot.inbox.flushed().await;

    let rows: Vec<(String, String, String)> = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let mut rows = conn
            .prepare("SELECT text, files, state FROM inbox WHERE user_id = ?1")
            .unwrap();
        rows.query_map([STRANGER], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (text, files, state) in &rows {
        assert_eq!((text.as_str(), files.as_str()), ("", ""), "{rows:?}");
        assert_eq!(state, "dropped", "{rows:?}");
    }
    // Nowhere in the database or its write-ahead log either.
    let mut bytes = Vec::new();
    for name in ["state.db", "state.db-wal"] {
        bytes.extend(std::fs::read(dir.path().join(name)).unwrap_or_default());
    }
    let holds = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(holds("plugh-allowed-words"), "the scan reads the file");
    assert!(!holds("xyzzy"), "a stranger's words are in the state file");
}

/// A stranger learns their Telegram user id from the refusal, so they can
/// ask the operator to add it; the refusal still comes once per cooldown.
#[actix_rt::test]
async fn a_strangers_refusal_tells_them_their_user_id_and_the_key_to_add_it_to() {
    let h = Harness::start(Scenario::default(), &[]).await;
    h.say(50, STRANGER, "let me in");
    let told = h.api.wait_for_texts(50, 1, SOON).await;
    assert!(
        told[0].contains("Your Telegram user id is 666;"),
        "{told:?}"
    );
    assert!(told[0].contains("access.allowed_users"), "{told:?}");
    assert_eq!(h.backend.opened(), 0);
}

/// In a group a stranger gets no reply: any message there would spend the
/// pacing the group's members need. In a private chat they are told their
/// user id.
#[actix_rt::test]
async fn in_a_group_a_stranger_gets_no_reply_and_in_private_their_user_id() {
    use support::bot_api::files::{supergroup, text_message};
    const GROUP: i64 = -100_444;
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api.push_message(text_message(
        supergroup(GROUP, false),
        STRANGER,
        "@turnstile_bot hi",
    ));
    h.event(
        "the group's stranger refused",
        |e| matches!(e, BotEvent::AccessDenied { chat, .. } if chat.0 == GROUP),
    )
    .await;
    // The same stranger in private, after the group's refusal was handled.
    h.say(STRANGER, STRANGER, "hi");
    let told = h.api.wait_for_texts(STRANGER, 1, SOON).await;
    assert!(told[0].contains("user id is 666"), "{told:?}");
    let private = h.api.calls_of("sendMessage");
    assert!(
        private[0].params.get("reply_parameters").is_none(),
        "{:?}",
        private[0].params
    );
    // A member's message after it: the group's first text is its answer,
    // so the stranger got no reply (a chat's texts go out in order).
    h.api.push_message(text_message(
        supergroup(GROUP, false),
        USER,
        "@turnstile_bot hi",
    ));
    let texts = h.api.wait_for_texts(GROUP, 1, SOON).await;
    assert!(texts[0].starts_with("echo: "), "{texts:?}");
}

/// Strangers cannot stall a group: with Telegram's real pacing (20
/// messages a minute in a group, a burst of 5), 25 strangers each
/// mentioning the bot get no reply there, and an allowed member's answer
/// comes within a second of what it takes in a group no stranger touched.
#[actix_rt::test]
async fn twenty_five_strangers_in_a_group_do_not_delay_a_members_answer() {
    use std::time::{Duration, Instant};
    use support::bot_api::files::{supergroup, text_message};
    use turnstile::telegram::RateLimits;
    const QUIET: i64 = -100_501;
    const BUSY: i64 = -100_502;
    let mut h = Harness::start_with_limits(Scenario::default(), &[], RateLimits::default()).await;
    let start = Instant::now();
    h.api.push_message(text_message(
        supergroup(QUIET, false),
        USER,
        "@turnstile_bot hi",
    ));
    h.api
        .wait_for_texts(QUIET, 1, Duration::from_secs(20))
        .await;
    let baseline = start.elapsed();
    for stranger in 0..25 {
        h.api.push_message(text_message(
            supergroup(BUSY, false),
            10_000 + stranger,
            "@turnstile_bot let me in",
        ));
    }
    h.event("25 strangers refused", {
        let mut n = 0;
        move |e| {
            if matches!(e, BotEvent::AccessDenied { chat, .. } if chat.0 == BUSY) {
                n += 1;
            }
            n == 25
        }
    })
    .await;
    let start = Instant::now();
    h.api.push_message(text_message(
        supergroup(BUSY, false),
        USER,
        "@turnstile_bot hi",
    ));
    h.api
        .wait_for(Duration::from_secs(90), "the member's answer", |calls| {
            calls
                .iter()
                .any(|c| {
                    // The agent read the message under its author's line.
                    c.params["chat_id"] == serde_json::json!(BUSY)
                        && c.params["text"].as_str().is_some_and(|t| {
                            t.starts_with("echo: [turnstile: message from") && t.ends_with("\nhi")
                        })
                })
                .then_some(())
        })
        .await;
    let took = start.elapsed();
    let told = h.api.texts_to(BUSY);
    assert!(
        took <= baseline + Duration::from_secs(1),
        "the member's answer took {took:?}, {baseline:?} in a quiet group; sent: {told:?}"
    );
    assert_eq!(
        told.iter().filter(|t| t.contains("user id is")).count(),
        0,
        "no refusal in the group: {told:?}"
    );
}

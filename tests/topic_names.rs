//! Conversations in a private chat with topics open and get their names by
//! themselves: a topic the user started without a title, or one the bot
//! opened, is named after its first message once the first answer is out
//! (`editForumTopic`), once; a topic the user named is never renamed; and
//! `/sessions` opens a past session in a topic of its own.

mod support;

use serde_json::{Value, json};
use support::bot_api::files::{in_topic, private, text_message};
use support::*;
use turnstile::agent::Scenario;

/// A private message from `USER`, in `topic` when given.
fn message(topic: Option<i64>, text: &str) -> Value {
    let message = text_message(private(USER), USER, text);
    match topic {
        Some(topic) => in_topic(message, topic),
        None => message,
    }
}

/// The service message of a topic the user started in the bot's chat:
/// without a title (`is_name_implicit`) or named `name`.
fn started(topic: i64, name: &str, implicit: bool) -> Value {
    json!({
        "chat": private(USER), "from": {"id": USER, "is_bot": false, "first_name": "u"},
        "message_thread_id": topic, "is_topic_message": true,
        "forum_topic_created": {"name": name, "icon_color": 7_322_096, "is_name_implicit": implicit},
    })
}

/// The service message of the user renaming `topic`.
fn renamed_by_user(topic: i64, name: &str) -> Value {
    json!({
        "chat": private(USER), "from": {"id": USER, "is_bot": false, "first_name": "u"},
        "message_thread_id": topic, "is_topic_message": true,
        "forum_topic_edited": {"name": name},
    })
}

/// Every successful `editForumTopic` as (topic, name), once there are `n`.
async fn renames(h: &Harness, n: usize) -> Vec<(i64, String)> {
    h.api
        .wait_for(SOON, &format!("{n} topic renames"), |calls| {
            let edits: Vec<(i64, String)> = calls
                .iter()
                .filter(|c| c.method == "editforumtopic" && c.status == 200)
                .map(|c| {
                    let topic = c.params["message_thread_id"].as_i64().unwrap_or_default();
                    let name = c.params["name"].as_str().unwrap_or_default().to_owned();
                    (topic, name)
                })
                .collect();
            (edits.len() >= n).then_some(edits)
        })
        .await
}

/// Waits until a message starting `start` reached the user's chat, and
/// answers its topic.
async fn sent(h: &Harness, start: &str) -> Option<i64> {
    h.api
        .wait_for(SOON, &format!("a message starting {start:?}"), |calls| {
            calls
                .iter()
                .find(|c| {
                    c.method == "sendmessage"
                        && c.status == 200
                        && c.params["text"]
                            .as_str()
                            .is_some_and(|t| t.starts_with(start))
                })
                .map(|c| c.params["message_thread_id"].as_i64())
        })
        .await
}

#[actix_rt::test]
async fn a_titleless_topic_is_named_once_and_a_topic_the_user_named_never() {
    let mut h = Harness::start_with_private_topics(Scenario::default(), &[]).await;
    // Named by the user when started.
    h.api.push_message(started(5, "Holidays", false));
    h.api.push_message(message(Some(5), "where to go"));
    h.turn_ended(USER, 1).await;
    sent(&h, "echo: where to go").await;
    // Started without a title, then named by the user before any answer.
    h.api.push_message(started(9, "New Thread", true));
    h.api.push_message(renamed_by_user(9, "Mine"));
    h.api.push_message(message(Some(9), "my own name"));
    h.turn_ended(USER, 2).await;
    sent(&h, "echo: my own name").await;
    // Started without a title: named after its first message, untrusted
    // text made safe.
    h.api.push_message(started(7, "New Thread", true));
    h.api
        .push_message(message(Some(7), "⚠️ plan a\u{202E}\ntrip   to Rome"));
    h.turn_ended(USER, 3).await;
    assert_eq!(
        renames(&h, 1).await,
        [(7, "plan a trip to Rome".to_owned())]
    );
    // A second answer does not rename it.
    h.api.push_message(message(Some(7), "and then Naples"));
    h.turn_ended(USER, 4).await;
    sent(&h, "echo: and then Naples").await;
    // The next titleless topic is named after everything above was
    // answered: any rename those answers asked would be in Telegram first.
    h.api.push_message(started(11, "New Thread", true));
    h.api.push_message(message(Some(11), "pack the bags"));
    h.turn_ended(USER, 5).await;
    assert_eq!(
        renames(&h, 2).await,
        [
            (7, "plan a trip to Rome".to_owned()),
            (11, "pack the bags".to_owned())
        ]
    );
}

#[actix_rt::test]
async fn a_topic_new_opened_is_named_after_its_first_message() {
    let mut h = Harness::start_with_private_topics(Scenario::default(), &[]).await;
    h.api.push_message(message(None, "/new"));
    let topic = sent(&h, "🆕 A fresh conversation: write here.")
        .await
        .expect("in the new topic");
    h.api.push_message(message(Some(topic), "budget for March"));
    h.turn_ended(USER, 1).await;
    assert_eq!(
        renames(&h, 1).await,
        [(topic, "budget for March".to_owned())]
    );
}

#[actix_rt::test]
async fn sessions_opens_a_past_session_in_a_topic_and_the_conversation_goes_on() {
    let env = [("TURNSTILE_AGENT_KEEP_WARM", "0s")];
    let mut h = Harness::start_with_private_topics(Scenario::default(), &env).await;
    h.api.push_message(message(None, "plan a trip"));
    h.turn_ended(USER, 1).await;
    // A second session where the first was: /new starts afresh in place
    // when Telegram makes no topic.
    h.api.inject(
        "createForumTopic",
        Fault::BadRequest("Bad Request: the chat is not a forum".into()),
    );
    h.api.push_message(message(None, "/new"));
    sent(&h, "🆕 The next message starts").await;
    h.api.push_message(message(None, "write a poem"));
    h.turn_ended(USER, 2).await;
    h.api.push_message(message(None, "/sessions"));
    let (_, buttons) = question(&h, USER, 1).await;
    let past = buttons
        .iter()
        .find(|(label, _)| label.ends_with("plan a trip"))
        .unwrap_or_else(|| panic!("no past session in {buttons:?}"));
    let picker = h.api.last_question(USER).expect("the picker was kept");
    h.api.push_callback(USER, USER, picker, &past.1);
    let topic = sent(&h, "🗂 This topic goes on in the session “plan a trip”")
        .await
        .expect("in the new topic");
    let edited = h
        .api
        .wait_for(SOON, "the picker says where", |calls| {
            calls
                .iter()
                .find(|c| c.method == "editmessagetext" && c.status == 200)
                .cloned()
        })
        .await;
    assert_eq!(
        edited.params["text"],
        json!(
            "🗂 The session “plan a trip” is open in the new topic; this conversation goes on as it was."
        )
    );
    h.api.push_message(message(Some(topic), "go on"));
    h.turn_ended(USER, 3).await;
    h.api.push_message(message(None, "another poem"));
    h.turn_ended(USER, 4).await;
    let opens = h.backend.log().opens;
    assert_eq!(opens.len(), 4, "{opens:?}");
    let (first, second) = (opens[0].clone(), opens[1].clone());
    assert_eq!(
        (first.0.as_str(), first.1),
        (USER.to_string().as_str(), None)
    );
    assert_eq!(second, (USER.to_string(), None), "afresh after /new");
    // The topic resumes the past session; the conversation goes on with
    // its own.
    let (in_topic, resumed) = (&opens[2].0, opens[2].1.clone().unwrap_or_default());
    assert_eq!(in_topic, &format!("{USER}_{topic}"));
    let (main, own) = (&opens[3].0, opens[3].1.clone().unwrap_or_default());
    assert_eq!(main, &USER.to_string());
    assert!(
        resumed.starts_with("scripted-") && own.starts_with("scripted-") && resumed != own,
        "{opens:?}"
    );
    assert_eq!(renames(&h, 1).await, [(topic, "go on".to_owned())]);
}

#[actix_rt::test]
async fn the_fake_refuses_a_topic_of_a_private_chat_it_never_made() {
    let api = FakeBotApi::start().await;
    api.set_private_topics(true);
    let send = |thread: i64| {
        let url = format!("{}bot1:x/sendMessage", api.url());
        async move {
            let body = json!({"chat_id": USER, "message_thread_id": thread, "text": "hi"});
            let answer = reqwest::Client::new()
                .post(url)
                .json(&body)
                .send()
                .await
                .expect("the fake answers");
            answer.json::<Value>().await.expect("JSON")
        }
    };
    let refused = send(4242).await;
    assert_eq!(
        refused["description"],
        json!("Bad Request: message thread not found")
    );
    api.push_message(message(Some(4242), "a topic the user made"));
    assert_eq!(send(4242).await["ok"], json!(true));
}

#[actix_rt::test]
async fn a_message_right_after_new_never_reaches_the_old_session_ahead_of_a_fresh_start() {
    let env = [("TURNSTILE_AGENT_KEEP_WARM", "0s")];
    let mut h = Harness::start_with_private_topics(Scenario::default(), &env).await;
    h.api.push_message(message(None, "first"));
    h.turn_ended(USER, 1).await;
    // Telegram makes no topic: /new starts afresh where it was asked, and
    // the message written meanwhile is the fresh session's first.
    h.api.inject(
        "createForumTopic",
        Fault::BadRequest("Bad Request: the chat is not a forum".into()),
    );
    h.api
        .push_messages([message(None, "/new"), message(None, "right after")]);
    h.turn_ended(USER, 2).await;
    let opens = h.backend.log().opens;
    assert_eq!(opens.len(), 2, "{opens:?}");
    assert_eq!(opens[1], (USER.to_string(), None), "afresh: {opens:?}");
}

#[actix_rt::test]
async fn a_message_right_after_new_stays_in_the_conversation_it_was_written_in() {
    let env = [("TURNSTILE_AGENT_KEEP_WARM", "0s")];
    let mut h = Harness::start_with_private_topics(Scenario::default(), &env).await;
    h.api.push_message(message(None, "first"));
    h.turn_ended(USER, 1).await;
    h.api
        .push_messages([message(None, "/new"), message(None, "right after")]);
    h.turn_ended(USER, 2).await;
    assert_eq!(
        sent(&h, "echo: right after").await,
        None,
        "where it was written"
    );
    let opens = h.backend.log().opens;
    assert_eq!(opens.len(), 2, "{opens:?}");
    assert_eq!(opens[1].0, USER.to_string());
    let resumed = opens[1].1.as_deref().unwrap_or_default();
    assert!(
        resumed.starts_with("scripted-"),
        "the old session: {opens:?}"
    );
}

/// Starts the bot on a state file holding one unanswered message from
/// `USER` in topic 7 of their private chat, written while the bot's topics
/// mode was on; `topics` is the mode now. Answers the harness.
async fn started_with_a_queued_topic_message(dir: &tempfile::TempDir, topics: bool) -> Harness {
    let db = dir.path().join("state.db");
    {
        let store = turnstile::state::Store::open(&db).expect("the state file");
        let thread = teloxide::types::ThreadId(teloxide::types::MessageId(7));
        store
            .accept(&turnstile::incoming::Incoming {
                update_id: 1,
                to: turnstile::ids::Conversation::new(teloxide::types::ChatId(USER), Some(thread)),
                from: teloxide::types::UserId(u64::try_from(USER).expect("a user id")),
                message_id: teloxide::types::MessageId(8),
                text: "left queued".into(),
                date: 0,
                ..Default::default()
            })
            .expect("written");
    }
    let db = db.display().to_string();
    let env = [("TURNSTILE_STATE_PATH", db.as_str())];
    if topics {
        let api = FakeBotApi::start().await;
        api.set_private_topics(true);
        // The topic the user made before the restart.
        api.push_message(started(7, "Trip", false));
        let limits = Harness::fast_limits();
        Harness::start_scripted_on(api, Scenario::default(), &env, limits, |_| {}).await
    } else {
        Harness::start(Scenario::default(), &env).await
    }
}

#[actix_rt::test]
async fn a_queued_message_of_a_private_topic_is_answered_in_its_topic_after_a_restart() {
    let dir = tempfile::tempdir().expect("a dir");
    let mut h = started_with_a_queued_topic_message(&dir, true).await;
    h.turn_ended(USER, 1).await;
    assert_eq!(sent(&h, "echo: left queued").await, Some(7));
    let keys: Vec<String> = h.backend.log().opens.into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, [format!("{USER}_7")]);
}

#[actix_rt::test]
async fn with_the_topics_mode_turned_off_a_queued_topic_message_is_answered_in_the_chat() {
    let dir = tempfile::tempdir().expect("a dir");
    let mut h = started_with_a_queued_topic_message(&dir, false).await;
    h.turn_ended(USER, 1).await;
    assert_eq!(
        sent(&h, "echo: left queued").await,
        None,
        "not lost, not refused"
    );
    let keys: Vec<String> = h.backend.log().opens.into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, [USER.to_string()]);
}

#[actix_rt::test]
async fn a_schedule_made_in_a_private_topic_runs_in_that_topic() {
    let env = [("TURNSTILE_SCHEDULES_MIN_INTERVAL", "1s")];
    let mut h = Harness::start_with_private_topics(Scenario::default(), &env).await;
    h.api
        .push_message(message(Some(7), "/schedule every 1s ping"));
    h.turn_ended(USER, 1).await;
    let runs: Vec<Option<i64>> = h
        .api
        .calls_of("sendMessage")
        .iter()
        .filter(|c| {
            c.status == 200
                && c.params["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("ping"))
        })
        .map(|c| c.params["message_thread_id"].as_i64())
        .collect();
    assert!(
        !runs.is_empty() && runs.iter().all(|t| *t == Some(7)),
        "{runs:?}"
    );
    let keys: Vec<String> = h.backend.log().opens.into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys[0], format!("{USER}_7"), "{keys:?}");
}

#[actix_rt::test]
async fn a_project_set_in_a_private_topic_runs_that_topic_only() {
    let dir = tempfile::tempdir().expect("a dir");
    let workdir = dir.path().join("beta").join("{chat}");
    let beta = workdir.clone();
    let api = FakeBotApi::start().await;
    api.set_private_topics(true);
    let edit = move |config: &mut turnstile::Config| {
        let project = turnstile::config::ProjectConfig {
            workdir,
            model: String::new(),
            allowed_tools: Vec::new(),
            users: Vec::new(),
        };
        config.projects.insert("beta".into(), project);
    };
    let limits = Harness::fast_limits();
    let mut h = Harness::start_scripted_on(api, Scenario::default(), &[], limits, edit).await;
    h.api.push_message(message(Some(7), "/project beta"));
    let moved = sent(&h, "📁 This conversation now works in project beta").await;
    assert_eq!(moved, Some(7));
    h.api.push_message(message(Some(7), "in seven"));
    h.turn_ended(USER, 1).await;
    h.api.push_message(message(Some(9), "in nine"));
    h.turn_ended(USER, 2).await;
    let log = h.backend.log();
    let keys: Vec<&str> = log.opens.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, [format!("{USER}_7"), format!("{USER}_9")]);
    assert_eq!(log.projects[0], Some(("beta".to_owned(), beta)));
    assert_eq!(log.projects[1], None, "topic nine is in no project");
}

#[actix_rt::test]
async fn a_topic_named_before_a_restart_is_not_named_again() {
    let dir = tempfile::tempdir().expect("a dir");
    let db = dir.path().join("state.db").display().to_string();
    let env = [("TURNSTILE_STATE_PATH", db.as_str())];
    let start = |api: FakeBotApi| {
        api.set_private_topics(true);
        let limits = Harness::fast_limits();
        Harness::start_scripted_on(api, Scenario::default(), &env, limits, |_| {})
    };
    let mut h = start(FakeBotApi::start().await).await;
    h.api.push_message(started(7, "New Thread", true));
    h.api.push_message(message(Some(7), "plan a trip"));
    h.turn_ended(USER, 1).await;
    assert_eq!(renames(&h, 1).await, [(7, "plan a trip".to_owned())]);
    h.bot.stop().await;
    drop(h);

    let mut h = start(FakeBotApi::start().await).await;
    h.api
        .push_message_as(Some(100), message(Some(7), "to Rome"));
    h.turn_ended(USER, 1).await;
    sent(&h, "echo: to Rome").await;
    h.api
        .push_message_as(Some(101), started(11, "New Thread", true));
    h.api
        .push_message_as(Some(102), message(Some(11), "pack the bags"));
    h.turn_ended(USER, 2).await;
    assert_eq!(renames(&h, 1).await, [(11, "pack the bags".to_owned())]);
}

#[actix_rt::test]
async fn a_topic_is_named_only_after_telegram_took_an_answer() {
    let mut h = Harness::start_with_private_topics(Scenario::default(), &[]).await;
    h.api.push_message(started(7, "New Thread", true));
    // Telegram refuses the first answer: the topic keeps waiting for a
    // name.
    h.api.inject(
        "sendMessage",
        Fault::BadRequest("Bad Request: not enough rights to send text messages".into()),
    );
    h.api.push_message(message(Some(7), "first try"));
    h.turn_ended(USER, 1).await;
    h.api
        .wait_for(SOON, "the first answer refused", |calls| {
            calls
                .iter()
                .any(|c| c.method == "sendmessage" && c.status == 400)
                .then_some(())
        })
        .await;
    h.api.push_message(message(Some(7), "second try"));
    h.turn_ended(USER, 2).await;
    sent(&h, "echo: second try").await;
    assert_eq!(renames(&h, 1).await, [(7, "second try".to_owned())]);
}

/// What the state file at `db` keeps for Telegram.
async fn left_to_send(db: &std::path::Path) -> Vec<turnstile::state::OutgoingRow> {
    let store = turnstile::state::Store::open(db).expect("the state file");
    let store = turnstile::state::StoreHandle::start(std::sync::Arc::new(store));
    store.outgoing().await.expect("the store reads").rows
}

#[actix_rt::test]
async fn with_the_topics_mode_turned_off_a_text_left_for_a_private_topic_goes_to_the_chat() {
    let dir = tempfile::tempdir().expect("a dir");
    let db = dir.path().join("state.db");
    {
        let thread = teloxide::types::ThreadId(teloxide::types::MessageId(7));
        let to = turnstile::ids::Conversation::new(teloxide::types::ChatId(USER), Some(thread));
        let store = turnstile::state::Store::open(&db).expect("the state file");
        let store = turnstile::state::StoreHandle::start(std::sync::Arc::new(store));
        store.keep_outgoing(to, None, "left for telegram", false);
        store.flushed().await;
    }
    assert_eq!(left_to_send(&db).await.len(), 1);
    let path = db.display().to_string();
    let env = [("TURNSTILE_STATE_PATH", path.as_str())];
    let h = Harness::start(Scenario::default(), &env).await;
    assert_eq!(
        sent(&h, "left for telegram").await,
        None,
        "in the chat, not refused"
    );
    h.bot.stop().await;
    let copies = h
        .api
        .calls_of("sendMessage")
        .iter()
        .filter(|c| c.params["text"] == json!("left for telegram"))
        .count();
    assert_eq!(copies, 1, "sent once");
    assert!(left_to_send(&db).await.is_empty(), "settled");
}

/// The thread of every answer to a run of the schedule prompting `ping`.
fn runs(h: &Harness) -> Vec<Option<i64>> {
    h.api
        .calls_of("sendMessage")
        .iter()
        .filter(|c| {
            c.status == 200
                && c.params["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("echo:") && t.contains("ping"))
        })
        .map(|c| c.params["message_thread_id"].as_i64())
        .collect()
}

#[actix_rt::test]
async fn with_the_topics_mode_turned_off_a_private_topics_schedule_runs_lists_and_goes_in_the_chat()
{
    let dir = tempfile::tempdir().expect("a dir");
    let db = dir.path().join("state.db").display().to_string();
    let env = [
        ("TURNSTILE_STATE_PATH", db.as_str()),
        ("TURNSTILE_SCHEDULES_MIN_INTERVAL", "1s"),
        // Which sessions open is what the runs opened.
        ("TURNSTILE_AGENT_KEEP_WARM", "0s"),
    ];
    let mut h = Harness::start_with_private_topics(Scenario::default(), &env).await;
    h.api
        .push_message(message(Some(7), "/schedule every 1s ping"));
    h.turn_ended(USER, 1).await;
    assert_eq!(runs(&h), [Some(7)], "a run in its topic");
    h.bot.stop().await;
    drop(h);

    // The mode is off now: the schedule runs in the chat, and the chat
    // lists it and removes it.
    let mut h = Harness::start(Scenario::default(), &env).await;
    h.turn_ended(USER, 1).await;
    let after = runs(&h);
    assert!(
        !after.is_empty() && after.iter().all(Option::is_none),
        "{after:?}"
    );
    let keys: Vec<String> = h.backend.log().opens.into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys[0], USER.to_string(), "{keys:?}");
    // Past the update the first run read (ids go on from here).
    h.api
        .push_message_as(Some(100), message(None, "/schedules"));
    let listed = sent(&h, "⏰ Schedules here").await;
    assert_eq!(listed, None);
    let (list, buttons) = h.api.last_buttons(USER).expect("the list");
    assert_eq!(
        buttons,
        vec![vec![("❌ #1".to_string(), "unsched:1".to_string())]]
    );
    let press = h.api.push_callback(USER, USER, list as i32, "unsched:1");
    assert_eq!(h.callback_answer(&press).await, "❌ Removed schedule #1.");
    h.api.push_message(message(None, "/schedules"));
    sent(&h, "No schedules in this conversation.").await;
}

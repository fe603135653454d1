//! Topics in a private chat with the bot (Bot API 9.3): with the bot's
//! topics mode on (`getMe`'s `has_topics_enabled`), each topic is a
//! conversation of its own, as in a forum group; messages outside any
//! topic, and every message with the mode off, are the chat itself. And
//! the approval buttons' colours (`style`, Bot API 9.4).

mod support;

use serde_json::{Value, json};
use support::bot_api::files::{in_topic, private, text_message};
use support::bot_api::styles_of;
use support::*;
use turnstile::agent::{Scenario, Step};

/// The first message in a topic `/new` opened.
const OPENED: &str = "🆕 A fresh conversation: write here.";
/// Where `/new` was asked, once its topic is open.
const ELSEWHERE: &str =
    "🆕 A fresh conversation is open in the new topic; this one goes on as it was.";

/// A turn that asks to run a tool, waits for the answer and then ends: a
/// turn that runs until the user presses a button.
fn asking() -> Scenario {
    Scenario::default().with_rule(
        "ask",
        turn(vec![
            Step::Ask {
                tool: "Bash".into(),
                input: json!({"command": "echo hi"}),
            },
            Step::Tools {
                calls: vec![tool("mcp__telegram-tools__end_turn", json!({}))],
            },
        ]),
    )
}

/// A private message from `USER`, in `topic` when given.
fn message(topic: Option<i64>, text: &str) -> Value {
    let message = text_message(private(USER), USER, text);
    match topic {
        Some(topic) => in_topic(message, topic),
        None => message,
    }
}

/// The successful `sendMessage` calls to the user's chat, in order.
/// What the bot sent to the user's chat, once a message starting with
/// each of `wanted` is among it (a turn can end before its last message
/// reaches Telegram: the send tool is answered once the outbox took it).
async fn sends(h: &Harness, wanted: &[&str]) -> Vec<Value> {
    let what = format!("messages starting {wanted:?}");
    h.api
        .wait_for(SOON, &what, |calls| {
            let sent: Vec<Value> = calls
                .iter()
                .filter(|c| {
                    c.method == "sendmessage"
                        && c.status == 200
                        && c.params["chat_id"] == json!(USER)
                })
                .map(|c| c.params.clone())
                .collect();
            let all = wanted.iter().all(|start| {
                sent.iter()
                    .any(|p| p["text"].as_str().is_some_and(|t| t.starts_with(start)))
            });
            all.then_some(sent)
        })
        .await
}

/// The topic (`message_thread_id`) the message whose text starts with
/// `start` went to; `None` outside any topic.
fn topic_of(sent: &[Value], start: &str) -> Option<Value> {
    sent.iter()
        .find(|p| p["text"].as_str().is_some_and(|t| t.starts_with(start)))
        .unwrap_or_else(|| panic!("nothing starting {start:?} in {sent:?}"))
        .get("message_thread_id")
        .cloned()
}

/// The approval question in `topic`, once it is asked: its message id and
/// its buttons' data by label.
async fn question_in_topic(h: &Harness, topic: i64) -> (i32, Vec<(String, String)>) {
    let call = h
        .api
        .wait_for(SOON, &format!("the question in topic {topic}"), |calls| {
            calls
                .iter()
                .find(|c| {
                    c.status == 200
                        && !buttons_of(c).is_empty()
                        && c.params["message_thread_id"] == json!(topic)
                })
                .cloned()
        })
        .await;
    let id = h.api.last_question_in(USER, Some(topic));
    let buttons = buttons_of(&call).into_iter().flatten().collect();
    (id.expect("the question was kept"), buttons)
}

#[actix_rt::test]
async fn two_private_topics_run_their_turns_at_once_and_answer_in_their_own_topics() {
    let mut h = Harness::start_with_private_topics(asking(), &[]).await;
    h.api.push_message(message(Some(7), "ask in seven"));
    h.api.push_message(message(Some(9), "ask in nine"));
    // Each turn waits for its button: both questions out means both turns
    // are running at once.
    let (seven, seven_buttons) = question_in_topic(&h, 7).await;
    let (nine, nine_buttons) = question_in_topic(&h, 9).await;
    assert_eq!(h.backend.opened(), 2, "a session each");
    h.api
        .push_callback(USER, USER, nine, &data(&nine_buttons, "Allow"));
    h.api
        .push_callback(USER, USER, seven, &data(&seven_buttons, "Deny"));
    h.turn_ended(USER, 2).await;
    let sent = sends(&h, &["allowed:", "denied:"]).await;
    assert_eq!(topic_of(&sent, "allowed:"), Some(json!(9)), "{sent:?}");
    assert_eq!(topic_of(&sent, "denied:"), Some(json!(7)), "{sent:?}");
    let mut keys: Vec<String> = h.backend.log().opens.into_iter().map(|(k, _)| k).collect();
    keys.sort();
    assert_eq!(keys, vec![format!("{USER}_7"), format!("{USER}_9")]);
}

#[actix_rt::test]
async fn outside_any_topic_a_private_chat_with_topics_is_the_chat_itself() {
    let mut h = Harness::start_with_private_topics(Scenario::default(), &[]).await;
    h.api.push_message(message(None, "plain"));
    h.turn_ended(USER, 1).await;
    h.api.push_message(message(Some(7), "topical"));
    h.turn_ended(USER, 2).await;
    let sent = sends(&h, &["echo: plain", "echo: topical"]).await;
    assert_eq!(topic_of(&sent, "echo: plain"), None, "{sent:?}");
    assert_eq!(topic_of(&sent, "echo: topical"), Some(json!(7)), "{sent:?}");
    // Typing shows where the turn runs.
    let typing: Vec<Option<Value>> = h
        .chat_actions_received(USER)
        .iter()
        .map(|c| c.params.get("message_thread_id").cloned())
        .collect();
    assert!(typing.contains(&None), "{typing:?}");
    assert!(typing.contains(&Some(json!(7))), "{typing:?}");
    let keys: Vec<String> = h.backend.log().opens.into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, vec![USER.to_string(), format!("{USER}_7")]);
}

#[actix_rt::test]
async fn with_the_bots_topics_mode_off_a_topic_id_in_a_private_chat_is_not_taken() {
    // The fake refuses a thread id in a private chat without topics, as
    // Telegram does: an answer there must go to the chat itself.
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api.push_message(message(Some(7), "one"));
    h.turn_ended(USER, 1).await;
    h.api.push_message(message(Some(-4), "two"));
    h.turn_ended(USER, 2).await;
    let sent = sends(&h, &["echo: one", "echo: two"]).await;
    assert_eq!(topic_of(&sent, "echo: one"), None, "{sent:?}");
    assert_eq!(topic_of(&sent, "echo: two"), None, "{sent:?}");
    let keys: Vec<String> = h.backend.log().opens.into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        vec![USER.to_string()],
        "one conversation, one session"
    );
}

#[actix_rt::test]
async fn a_topic_number_that_is_not_positive_is_the_chat_itself() {
    let mut h = Harness::start_with_private_topics(Scenario::default(), &[]).await;
    h.api.push_message(message(Some(-4), "negative"));
    h.turn_ended(USER, 1).await;
    let sent = sends(&h, &["echo: negative"]).await;
    assert_eq!(topic_of(&sent, "echo: negative"), None, "{sent:?}");
    let keys: Vec<String> = h.backend.log().opens.into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, vec![USER.to_string()]);
}

#[actix_rt::test]
async fn allow_and_always_look_positive_deny_destructive_and_pickers_plain() {
    let models = [("TURNSTILE_AGENT_MODELS", "opus,haiku")];
    let mut h = Harness::start(asking(), &models).await;
    h.say(USER, USER, "ask");
    let call = h
        .api
        .wait_for(SOON, "the approval question", |calls| {
            calls.iter().find(|c| !buttons_of(c).is_empty()).cloned()
        })
        .await;
    let styles: Vec<(String, Option<String>)> = styles_of(&call).into_iter().flatten().collect();
    let style = |label: &str| {
        styles
            .iter()
            .find(|(l, _)| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} in {styles:?}"))
            .1
            .as_deref()
    };
    assert_eq!(style("Allow"), Some("success"), "{styles:?}");
    assert_eq!(style("Always"), Some("success"), "{styles:?}");
    assert_eq!(style("Deny"), Some("danger"), "{styles:?}");
    let message_id = h.api.last_question(USER).expect("the question was kept");
    let (_, buttons) = question(&h, USER, 1).await;
    h.api
        .push_callback(USER, USER, message_id, &data(&buttons, "Deny"));
    h.turn_ended(USER, 1).await;
    // Pickers keep the app's own look.
    for (command, n) in [("/sessions", 2), ("/model", 3)] {
        h.say(USER, USER, command);
        let picker = h
            .api
            .wait_for(SOON, &format!("the {command} picker"), |calls| {
                calls
                    .iter()
                    .filter(|c| c.status == 200 && !buttons_of(c).is_empty())
                    .nth(n - 1)
                    .cloned()
            })
            .await;
        let styles: Vec<_> = styles_of(&picker).into_iter().flatten().collect();
        assert!(
            styles.iter().all(|(_, s)| s.is_none()),
            "{command}: {styles:?}"
        );
    }
}

/// The thread id of the topic the bot opened with `createForumTopic` in
/// the user's chat, once it is open.
async fn opened_topic(h: &Harness, name: &str) -> i64 {
    let call = h
        .api
        .wait_for(SOON, &format!("the topic {name:?}"), |calls| {
            calls
                .iter()
                .find(|c| c.method == "createforumtopic" && c.params["name"] == json!(name))
                .cloned()
        })
        .await;
    assert_eq!(call.params["chat_id"], json!(USER), "{:?}", call.params);
    assert_eq!(call.status, 200, "{:?}", call.params);
    // The fake numbers topics as messages: the answer is not recorded, so
    // the topic is found where the bot wrote first.
    h.api
        .wait_for(SOON, "the first message in the new topic", |calls| {
            calls
                .iter()
                .filter(|c| c.seq > call.seq && c.method == "sendmessage")
                .find_map(|c| c.params["message_thread_id"].as_i64())
        })
        .await
}

#[actix_rt::test]
async fn new_in_a_private_chat_with_topics_opens_a_topic_and_the_old_conversation_goes_on() {
    let env = [("TURNSTILE_AGENT_KEEP_WARM", "0s")];
    let mut h = Harness::start_with_private_topics(Scenario::default(), &env).await;
    h.api.push_message(message(None, "first"));
    h.turn_ended(USER, 1).await;
    h.api.push_message(message(None, "/new"));
    let topic = opened_topic(&h, "🆕 New conversation").await;
    h.api.push_message(message(Some(topic), "in the new one"));
    h.turn_ended(USER, 2).await;
    h.api.push_message(message(None, "the old one again"));
    h.turn_ended(USER, 3).await;
    let sent = sends(
        &h,
        &[
            OPENED,
            ELSEWHERE,
            "echo: in the new one",
            "echo: the old one again",
        ],
    )
    .await;
    assert_eq!(topic_of(&sent, OPENED), Some(json!(topic)), "{sent:?}");
    assert_eq!(topic_of(&sent, ELSEWHERE), None);
    assert_eq!(topic_of(&sent, "echo: in the new one"), Some(json!(topic)));
    assert_eq!(topic_of(&sent, "echo: the old one again"), None);
    let opens = h.backend.log().opens;
    let new_key = format!("{USER}_{topic}");
    assert_eq!(opens.len(), 3, "{opens:?}");
    assert_eq!(
        (opens[1].0.as_str(), opens[1].1.as_deref()),
        (new_key.as_str(), None)
    );
    // The old conversation kept its session: it is resumed, not started afresh.
    assert_eq!(opens[2].0, USER.to_string());
    let resumed = opens[2].1.as_deref().unwrap_or_default();
    assert!(
        resumed.starts_with(&format!("scripted-{USER}-")),
        "{opens:?}"
    );
}

#[actix_rt::test]
async fn fork_in_a_private_chat_with_topics_opens_a_topic_with_a_copy() {
    let env = [("TURNSTILE_AGENT_KEEP_WARM", "0s")];
    let mut h = Harness::start_with_private_topics(Scenario::default(), &env).await;
    h.api.push_message(message(None, "plan a trip"));
    h.turn_ended(USER, 1).await;
    h.api.push_message(message(None, "/fork"));
    let topic = opened_topic(&h, "🍴 plan a trip").await;
    h.api.push_message(message(Some(topic), "go on"));
    h.turn_ended(USER, 2).await;
    let sent = sends(&h, &["echo: go on"]).await;
    assert_eq!(
        topic_of(&sent, "echo: go on"),
        Some(json!(topic)),
        "{sent:?}"
    );
    let opens = h.backend.log().opens;
    assert_eq!(opens[1].0, format!("{USER}_{topic}"), "{opens:?}");
    assert!(opens[1].1.is_some(), "the topic resumes a copy: {opens:?}");
}

#[actix_rt::test]
async fn fork_refused_in_a_private_chat_says_the_conversation_goes_on() {
    let mut h = Harness::start_with_private_topics(Scenario::default(), &[]).await;
    h.api.push_message(message(None, "plan a trip"));
    h.turn_ended(USER, 1).await;
    h.api.inject(
        "createForumTopic",
        Fault::BadRequest("Bad Request: too many topics".into()),
    );
    h.api.push_message(message(None, "/fork"));
    let sent = sends(&h, &["⚠️ No topic could be made for the fork"]).await;
    let told = sent
        .iter()
        .filter_map(|p| p["text"].as_str())
        .find(|t| t.starts_with("⚠️ No topic could be made"))
        .unwrap_or_default();
    assert!(
        told.ends_with("this conversation goes on as it was."),
        "no right to give in a private chat: {told:?}"
    );
}

#[actix_rt::test]
async fn new_in_a_group_stays_where_it_is_whatever_the_private_topics_mode() {
    let h = Harness::start_with_private_topics(Scenario::default(), &[]).await;
    let forum = support::bot_api::files::supergroup(-100_999, true);
    let asked = in_topic(text_message(forum, USER, "/new@turnstile_bot"), 7);
    h.api.push_message(asked);
    let told = h
        .api
        .wait_for(SOON, "the answer to /new", |calls| {
            calls
                .iter()
                .find(|c| c.method == "sendmessage" && c.params["chat_id"] == json!(-100_999))
                .cloned()
        })
        .await;
    assert!(
        told.params["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("🆕 The next message starts a fresh")),
        "{:?}",
        told.params
    );
    assert!(h.api.calls_of("createForumTopic").is_empty());
}

#[actix_rt::test]
async fn new_keeps_the_conversation_when_telegram_does_not_confirm_the_topic() {
    let env = [("TURNSTILE_AGENT_KEEP_WARM", "0s")];
    let mut h = Harness::start_with_private_topics(Scenario::default(), &env).await;
    h.api.push_message(message(None, "first"));
    h.turn_ended(USER, 1).await;
    // The topic is made, but the answer never comes back.
    h.api.inject("createForumTopic", Fault::DoneNoAnswer);
    h.api.push_message(message(None, "/new"));
    let sent = sends(&h, &["⚠️ Telegram did not confirm a new topic"]).await;
    assert_eq!(
        topic_of(&sent, "⚠️ Telegram did not confirm"),
        None,
        "told where /new was asked: {sent:?}"
    );
    h.api.push_message(message(None, "second"));
    h.turn_ended(USER, 2).await;
    let sent = sends(&h, &["echo: second"]).await;
    assert!(
        !sent.iter().any(|p| p["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("🆕 The next message starts"))),
        "not started afresh: {sent:?}"
    );
    let opens = h.backend.log().opens;
    assert_eq!(opens.len(), 2, "{opens:?}");
    let resumed = opens[1].1.as_deref().unwrap_or_default();
    assert!(
        resumed.starts_with(&format!("scripted-{USER}-")),
        "the old session goes on: {opens:?}"
    );
}

#[actix_rt::test]
async fn new_starts_afresh_where_it_is_when_telegram_makes_no_topic() {
    let env = [("TURNSTILE_AGENT_KEEP_WARM", "0s")];
    let mut h = Harness::start_with_private_topics(Scenario::default(), &env).await;
    h.api.push_message(message(None, "first"));
    h.turn_ended(USER, 1).await;
    h.api.inject(
        "createForumTopic",
        Fault::BadRequest("Bad Request: the chat is not a forum".into()),
    );
    h.api.push_message(message(None, "/new"));
    let told = h
        .api
        .wait_for(SOON, "the fresh start", |calls| {
            calls
                .iter()
                .find(|c| {
                    c.method == "sendmessage"
                        && c.params["text"]
                            .as_str()
                            .is_some_and(|t| t.starts_with("🆕 The next message starts"))
                })
                .cloned()
        })
        .await;
    assert_eq!(told.params.get("message_thread_id"), None);
    h.api.push_message(message(None, "second"));
    h.turn_ended(USER, 2).await;
    let opens = h.backend.log().opens;
    assert_eq!(opens.len(), 2, "{opens:?}");
    assert_eq!(opens[1], (USER.to_string(), None), "started afresh");
}

#[actix_rt::test]
async fn a_model_chosen_in_a_topic_runs_that_topic_only() {
    let env = [("TURNSTILE_AGENT_MODELS", "opus,haiku")];
    let mut h = Harness::start_with_private_topics(Scenario::default(), &env).await;
    h.api.push_message(message(Some(7), "/model opus"));
    let sent = sends(
        &h,
        &["🧠 From the next message on, this conversation runs with opus."],
    )
    .await;
    assert_eq!(
        topic_of(
            &sent,
            "🧠 From the next message on, this conversation runs with opus."
        ),
        Some(json!(7)),
        "{sent:?}"
    );
    h.api.push_message(message(Some(7), "in seven"));
    h.turn_ended(USER, 1).await;
    h.api.push_message(message(Some(9), "in nine"));
    h.turn_ended(USER, 2).await;
    let log = h.backend.log();
    let models: Vec<(String, Option<String>)> = log
        .opens
        .iter()
        .map(|(key, _)| key.clone())
        .zip(log.choices.iter().map(|(model, _)| model.clone()))
        .collect();
    assert_eq!(
        models,
        [
            (format!("{USER}_7"), Some("opus".to_owned())),
            (format!("{USER}_9"), None)
        ]
    );
}

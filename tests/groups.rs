//! Groups and forum topics: what the bot takes in a group (mention, reply,
//! commands addressed to it), `access.group_mode` and `access.allowed_chats`,
//! answers replying to the message that started the turn, and each forum
//! topic as its own conversation (session, workdir, replies, typing) across
//! a restart.

mod support;

use serde_json::{Value, json};
use support::bot_api::files::{in_topic, private, replying_to, supergroup, text_message};
use support::*;
use turnstile::agent::{Scenario, Step};

const GROUP: i64 = -100_555;

fn group() -> Value {
    supergroup(GROUP, false)
}

/// The scripted agent's echo of a group message: it read the text under
/// its author's line.
fn echo(from: i64, text: &str) -> String {
    format!("echo: [turnstile: message from \"u{from}\", user id {from}]\n{text}")
}

/// The `sendMessage` calls to `chat` that succeeded, in order.
fn sends_to(h: &Harness, chat: i64) -> Vec<Value> {
    h.api
        .calls_of("sendMessage")
        .into_iter()
        .filter(|c| c.status == 200 && c.params["chat_id"] == json!(chat))
        .map(|c| c.params)
        .collect()
}

#[actix_rt::test]
async fn a_group_message_not_addressed_to_the_bot_reaches_no_agent() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api
        .push_message(text_message(group(), USER, "hello everyone"));
    h.api
        .push_message(text_message(group(), USER, "ask @someone_else"));
    h.api.push_message(text_message(
        group(),
        USER,
        "@turnstile_bot what time is it",
    ));
    h.turn_ended(GROUP, 1).await;
    let texts = h.api.wait_for_texts(GROUP, 1, SOON).await;
    assert_eq!(texts, vec![echo(USER, "what time is it")]);
    assert_eq!(h.backend.opened(), 1, "only the mention opened a session");
    assert_eq!(
        h.seen
            .iter()
            .filter(|e| matches!(e, turnstile::events::BotEvent::TurnStarted { .. }))
            .count(),
        1
    );
}

#[actix_rt::test]
async fn the_answer_in_a_group_replies_to_the_message_that_started_the_turn() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    let id = h.api.next_message_id(GROUP);
    let mut message = text_message(group(), USER, "@turnstile_bot hi");
    message["message_id"] = id.into();
    h.api.push_message(message);
    h.turn_ended(GROUP, 1).await;
    let sent = sends_to(&h, GROUP);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["reply_parameters"]["message_id"], json!(id));
    // In a private chat answers are plain messages.
    h.say(USER, USER, "hi");
    h.turn_ended(USER, 1).await;
    let private = sends_to(&h, USER);
    assert!(private[0].get("reply_parameters").is_none(), "{private:?}");
}

#[actix_rt::test]
async fn a_mention_entity_inside_a_surrogate_pair_or_past_the_end_is_read_safely() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    // "😀" is two UTF-16 units: offset 1 falls between them.
    let mut inside = text_message(group(), USER, "😀😀 @turnstile_bot look");
    inside["entities"] = json!([{"type": "mention", "offset": 1, "length": 4}]);
    h.api.push_message(inside);
    h.turn_ended(GROUP, 1).await;
    let mut past = text_message(group(), USER, "hi @turnstile_bot");
    past["entities"] = json!([{"type": "mention", "offset": 50, "length": 14}]);
    let past_id = h.api.push_message(past);
    h.turn_ended(GROUP, 2).await;
    // The bot goes on answering, and the offset moved past both.
    h.api
        .push_message(text_message(group(), USER, "@turnstile_bot next"));
    h.turn_ended(GROUP, 3).await;
    assert_eq!(
        h.api.texts_to(GROUP),
        vec![
            echo(USER, "😀😀 @turnstile_bot look"),
            echo(USER, "hi @turnstile_bot"),
            echo(USER, "next")
        ],
        "the mention in the text was seen: both were handled"
    );
    h.api
        .wait_for(SOON, "getUpdates confirming the bad updates", |calls| {
            calls
                .iter()
                .any(|c| c.method == "getupdates" && c.params["offset"].as_i64() > Some(past_id))
                .then_some(())
        })
        .await;
}

#[actix_rt::test]
async fn a_reply_to_the_bot_and_a_command_for_it_are_taken() {
    let mut h = Harness::start(Scenario::default(), &[]).await;
    h.api
        .push_message(text_message(group(), USER, "@turnstile_bot first"));
    h.turn_ended(GROUP, 1).await;
    let bots = h.api.wait_for_call("sendMessage", SOON).await;
    let bot_message = json!({
        "message_id": 999_999, "date": 0, "chat": group(),
        "from": {"id": 1, "is_bot": true, "first_name": "turnstile", "username": "turnstile_bot"},
        "text": bots.params["text"],
    });
    h.api.push_message(replying_to(
        text_message(group(), USER, "and then?"),
        bot_message,
    ));
    h.turn_ended(GROUP, 2).await;
    // A reply to someone else is not for the bot.
    let other = json!({"message_id": 5, "date": 0, "chat": group(), "from": {"id": 1002, "is_bot": false, "first_name": "x"}, "text": "x"});
    h.api
        .push_message(replying_to(text_message(group(), USER, "not you"), other));
    h.api
        .push_message(text_message(group(), USER, "/help@turnstile_bot"));
    h.api.push_message(text_message(group(), USER, "/help"));
    let texts = h.api.wait_for_texts(GROUP, 4, SOON).await;
    assert_eq!(texts[0], echo(USER, "first"));
    assert_eq!(texts[1], echo(USER, "and then?"));
    assert!(texts[2].starts_with("Send a message"), "{texts:?}");
    assert!(texts[3].starts_with("Send a message"), "{texts:?}");
    assert_eq!(
        h.backend.opened(),
        1,
        "the warm session answered both turns"
    );
    assert!(!texts.iter().any(|t| t.contains("not you")), "{texts:?}");
}

#[actix_rt::test]
async fn a_command_for_another_bot_is_ignored_everywhere() {
    let h = Harness::start(Scenario::default(), &[]).await;
    h.api
        .push_message(text_message(private(ADMIN), ADMIN, "/restart@OtherBot"));
    h.api
        .push_message(text_message(group(), ADMIN, "/status@OtherBot"));
    h.api
        .push_message(text_message(group(), USER, "/stop@OtherBot"));
    // Not even the pointer to /help for a command unknown here.
    h.api
        .push_message(text_message(private(ADMIN), ADMIN, "/frobnicate@OtherBot"));
    // Afterwards, proof that all four were seen and passed over.
    h.api
        .push_message(text_message(private(ADMIN), ADMIN, "/help"));
    let texts = h.api.wait_for_texts(ADMIN, 1, SOON).await;
    assert!(texts[0].starts_with("Send a message"), "{texts:?}");
    assert!(
        h.api.texts_to(GROUP).is_empty(),
        "{:?}",
        h.api.texts_to(GROUP)
    );
    assert!(
        !h.api
            .calls_of("sendMessage")
            .iter()
            .any(|c| c.params["text"]
                .as_str()
                .unwrap_or("")
                .contains("Restarting")),
        "/restart@OtherBot was not taken"
    );
    assert_eq!(h.backend.opened(), 0);
}

#[actix_rt::test]
async fn group_mode_all_takes_every_message() {
    let mut h = Harness::start(
        Scenario::default(),
        &[("TURNSTILE_ACCESS_GROUP_MODE", "all")],
    )
    .await;
    h.api
        .push_message(text_message(group(), USER, "hello everyone"));
    h.turn_ended(GROUP, 1).await;
    assert_eq!(h.api.texts_to(GROUP), vec![echo(USER, "hello everyone")]);
}

#[actix_rt::test]
async fn an_allowed_chat_lets_everyone_in_it_talk_to_the_bot() {
    let mut h = Harness::start(
        Scenario::default(),
        &[("TURNSTILE_ACCESS_ALLOWED_CHATS", &GROUP.to_string())],
    )
    .await;
    h.api
        .push_message(text_message(group(), STRANGER, "@turnstile_bot hi"));
    h.turn_ended(GROUP, 1).await;
    assert_eq!(h.api.texts_to(GROUP), vec![echo(STRANGER, "hi")]);
    // Elsewhere the stranger is still a stranger.
    let elsewhere = supergroup(-100_777, false);
    h.api
        .push_message(text_message(elsewhere, STRANGER, "@turnstile_bot hi"));
    // A member's message after it: the chat's first text is its answer, so
    // the stranger got no reply (a chat's texts go out in order).
    h.api.push_message(text_message(
        supergroup(-100_777, false),
        USER,
        "@turnstile_bot hi",
    ));
    let texts = h.api.wait_for_texts(-100_777, 1, SOON).await;
    assert_eq!(texts, vec![echo(USER, "hi")]);
    assert_eq!(h.backend.opened(), 2);
}

const FORUM: i64 = -100_999;

fn forum_message(topic: Option<i64>, text: &str) -> Value {
    let message = text_message(supergroup(FORUM, true), USER, text);
    match topic {
        Some(topic) => in_topic(message, topic),
        None => message,
    }
}

#[actix_rt::test]
async fn each_forum_topic_is_its_own_conversation_and_keeps_its_session_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db").display().to_string();
    let workdir = dir.path().join("ws").join("{chat}").display().to_string();
    let slow = Scenario::default().with_rule(
        "slow",
        turn(vec![
            Step::Wait { ms: 150 },
            Step::Tools {
                calls: vec![
                    tool("mcp__telegram-tools__send", json!({"text": "slow done"})),
                    tool("mcp__telegram-tools__end_turn", json!({})),
                ],
            },
        ]),
    );
    let env = [
        ("TURNSTILE_STATE_PATH", db.as_str()),
        ("TURNSTILE_AGENT_WORKDIR", workdir.as_str()),
        ("TURNSTILE_AGENT_KEEP_WARM", "0s"),
    ];
    let mut h = Harness::start(slow.clone(), &env).await;
    // A slow turn in topic 7 does not hold topic 9 or General.
    h.api
        .push_message(forum_message(Some(7), "@turnstile_bot slow"));
    h.api
        .push_message(forum_message(Some(9), "@turnstile_bot nine"));
    h.api
        .push_message(forum_message(None, "@turnstile_bot general"));
    for n in 1..=3 {
        h.turn_ended(FORUM, n).await;
    }
    let sends = sends_to(&h, FORUM);
    let thread_of = |text: &str| {
        sends
            .iter()
            .find(|p| p["text"] == json!(text))
            .map(|p| p.get("message_thread_id").cloned())
            .unwrap_or_else(|| panic!("no {text:?} in {sends:?}"))
    };
    assert_eq!(thread_of("slow done"), Some(json!(7)));
    assert_eq!(thread_of(&echo(USER, "nine")), Some(json!(9)));
    assert_eq!(
        thread_of(&echo(USER, "general")),
        None,
        "General takes no thread id"
    );
    let typing: Vec<Option<Value>> = h
        .chat_actions_received(FORUM)
        .iter()
        .map(|c| c.params.get("message_thread_id").cloned())
        .collect();
    assert!(typing.contains(&Some(json!(7))), "{typing:?}");
    assert!(typing.contains(&Some(json!(9))), "{typing:?}");
    let mut opens = h.backend.log().opens;
    opens.sort();
    let keys: Vec<&str> = opens.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, vec!["-100999", "-100999_7", "-100999_9"]);
    assert!(opens.iter().all(|(_, resume)| resume.is_none()));
    h.bot.stop().await;
    drop(h);

    let mut h = Harness::start(slow, &env).await;
    h.api
        .push_message_as(Some(100), forum_message(Some(9), "@turnstile_bot again"));
    h.turn_ended(FORUM, 1).await;
    h.api
        .push_message_as(Some(101), forum_message(Some(7), "@turnstile_bot again"));
    h.turn_ended(FORUM, 2).await;
    let opens = h.backend.log().opens;
    assert_eq!(opens.len(), 2, "{opens:?}");
    for ((key, resume), topic) in opens.iter().zip(["9", "7"]) {
        assert_eq!(key, &format!("-100999_{topic}"));
        let resume = resume.as_deref().unwrap_or_default();
        assert!(
            resume.starts_with(&format!("scripted--100999_{topic}-")),
            "topic {topic} resumed {resume:?}: {opens:?}"
        );
    }
}

#[actix_rt::test]
async fn an_approval_in_a_topic_is_asked_and_answered_there() {
    let scenario = Scenario::default().with_rule(
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
    );
    let mut h = Harness::start(scenario, &[]).await;
    h.api
        .push_message(forum_message(Some(7), "@turnstile_bot ask"));
    let question = h
        .api
        .wait_for(SOON, "the approval question", |calls| {
            calls.iter().find(|c| !buttons_of(c).is_empty()).cloned()
        })
        .await;
    assert_eq!(
        question.params["message_thread_id"],
        json!(7),
        "{:?}",
        question.params
    );
    let allow = buttons_of(&question)
        .into_iter()
        .flatten()
        .find(|(label, _)| label == "Allow")
        .expect("an Allow button")
        .1;
    let message_id = h.api.last_question(FORUM).expect("the question was kept");
    h.api.push_callback(FORUM, USER, message_id, &allow);
    h.turn_ended(FORUM, 1).await;
    let told = sends_to(&h, FORUM)
        .into_iter()
        .find(|p| p["text"].as_str().unwrap_or("").starts_with("allowed:"))
        .expect("the agent was told the decision");
    assert_eq!(told["message_thread_id"], json!(7), "{told:?}");
}

//! Smoke tests of the fake Bot API in `tests/support/bot_api.rs`, driven
//! through a real teloxide `Bot` wherever teloxide can express the request.

#[path = "support/bot_api.rs"]
mod bot_api;

use std::time::{Duration, Instant};

use bot_api::{Call, FakeBotApi, Fault, Options, Record, buttons_of};
use serde_json::{Value, json};
use teloxide::prelude::*;
use teloxide::types::{
    BotCommand, CallbackQueryId, ChatAction, InlineKeyboardButton, InlineKeyboardMarkup,
    MaybeInaccessibleMessage, MessageEntityKind, MessageId, UpdateKind,
};
use teloxide::{ApiError, RequestError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(5);

fn methods(calls: &[Call]) -> Vec<&str> {
    calls.iter().map(|c| c.method.as_str()).collect()
}

/// Sends one raw HTTP/1.1 request and returns the status and JSON body.
async fn raw(fake: &FakeBotApi, path: &str, content_type: &str, body: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect(fake.addr()).await.expect("connect");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        fake.addr(),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let status = response[9..12].parse().expect("status code");
    let (_, body) = response.split_once("\r\n\r\n").expect("end of headers");
    (status, serde_json::from_str(body).expect("JSON body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teloxide_round_trips_get_me_send_message_and_simple_methods() {
    let fake = FakeBotApi::start().await;
    assert!(fake.url().starts_with("http://127.0.0.1:") && fake.url().ends_with('/'));
    let bot = Bot::new("123:abc").set_api_url(fake.url().parse().unwrap());

    let me = bot.get_me().await.expect("getMe");
    assert_eq!(me.username.as_deref(), Some("turnstile_bot"));
    assert!(me.is_bot);

    let first = bot
        .send_message(ChatId(5), "hi")
        .await
        .expect("sendMessage");
    let second = bot
        .send_message(ChatId(5), "there")
        .await
        .expect("sendMessage");
    assert_eq!((first.id, second.id), (MessageId(1), MessageId(2)));
    assert_eq!(first.chat.id, ChatId(5));
    assert_eq!(first.text(), Some("hi"));
    assert_eq!(first.from.as_ref().map(|u| u.id), Some(UserId(1)));
    assert!((unix_now() - first.date.timestamp()).abs() <= 5);

    let topic = bot
        .create_forum_topic(ChatId(-100), "🍴 a fork")
        .await
        .expect("createForumTopic");
    // Numbered as the messages of its own chat, as Telegram numbers them.
    assert_eq!(
        (topic.thread_id.0, topic.name.as_str()),
        (MessageId(1), "🍴 a fork")
    );
    bot.send_chat_action(ChatId(5), ChatAction::Typing)
        .await
        .expect("sendChatAction");
    bot.set_message_reaction(ChatId(5), MessageId(1))
        .await
        .expect("setMessageReaction");
    bot.delete_webhook().await.expect("deleteWebhook");
    bot.set_my_commands(Vec::<BotCommand>::new())
        .await
        .expect("setMyCommands");

    let calls = fake.calls();
    assert_eq!(
        methods(&calls),
        [
            "getme",
            "sendmessage",
            "sendmessage",
            "createforumtopic",
            "sendchataction",
            "setmessagereaction",
            "deletewebhook",
            "setmycommands",
        ]
    );
    assert!(
        calls
            .windows(2)
            .all(|w| w[0].seq < w[1].seq && w[0].at <= w[1].at)
    );
    assert!(calls.iter().all(|c| c.status == 200));
    let sent = fake.calls_of("SendMessage");
    assert_eq!(sent[0].params["chat_id"], json!(5));
    assert_eq!(sent[1].params["text"], json!("there"));
    assert_eq!(
        fake.calls_of("sendChatAction")[0].params["action"],
        json!("typing")
    );
    assert_eq!(fake.texts_to(5), ["hi", "there"]);
    assert!(fake.texts_to(6).is_empty());

    fake.clear_calls();
    assert!(fake.calls().is_empty());
    bot.get_me().await.expect("getMe");
    assert_eq!(
        fake.calls()[0].seq,
        9,
        "seq keeps counting after clear_calls"
    );
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
async fn pushed_texts_arrive_as_message_updates_and_offset_acknowledges() {
    let fake = FakeBotApi::start().await;
    let bot = fake.bot();
    let command = fake.push_text(7, 42, "/start@turnstile_bot hello");
    let plain = fake.push_text(7, 42, "plain text 😀");
    assert_eq!((command, plain), (1, 2));

    let updates = bot.get_updates().await.expect("getUpdates");
    assert_eq!(updates.len(), 2);
    let UpdateKind::Message(message) = &updates[0].kind else {
        panic!("not a message: {:?}", updates[0].kind);
    };
    assert_eq!(updates[0].id.0, 1);
    assert_eq!(message.text(), Some("/start@turnstile_bot hello"));
    assert_eq!(message.chat.id, ChatId(7));
    assert!(message.chat.is_private());
    assert_eq!(message.from.as_ref().map(|u| u.id), Some(UserId(42)));
    let entities = message.entities().expect("entities");
    assert_eq!(entities[0].kind, MessageEntityKind::BotCommand);
    assert_eq!((entities[0].offset, entities[0].length), (0, 20));
    let UpdateKind::Message(message) = &updates[1].kind else {
        panic!("not a message: {:?}", updates[1].kind);
    };
    assert_eq!(message.text(), Some("plain text 😀"));
    assert!(message.entities().unwrap_or_default().is_empty());

    // `limit`, then an offset that acknowledges the first update.
    let limited = bot.get_updates().limit(1).await.expect("getUpdates");
    assert_eq!(limited.len(), 1);
    let rest = bot.get_updates().offset(2).await.expect("getUpdates");
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].id.0, 2);
    let all = bot.get_updates().await.expect("getUpdates");
    assert_eq!(all.len(), 1, "update 1 was acknowledged");
    assert!(
        bot.get_updates()
            .offset(3)
            .await
            .expect("getUpdates")
            .is_empty()
    );

    // An explicit update_id is kept, and later ids continue after it.
    assert_eq!(
        fake.push_update(json!({"update_id": 10, "message": {"bogus": true}})),
        10
    );
    assert_eq!(fake.push_text(7, 42, "next"), 11);
    let updates = bot.get_updates().offset(10).await.expect("getUpdates");
    assert!(matches!(updates[0].kind, UpdateKind::Error(_)));
    assert!(matches!(updates[1].kind, UpdateKind::Message(_)));
    assert_eq!(fake.calls_of("GetUpdates").len(), 6);
    assert_eq!(fake.calls_of("getupdates")[2].params["offset"], json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_updates_long_polls_until_an_update_or_the_timeout() {
    let fake = FakeBotApi::start().await;
    let bot = fake.bot();

    let started = Instant::now();
    let empty = bot.get_updates().timeout(1).await.expect("getUpdates");
    assert!(empty.is_empty());
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );

    let poller = tokio::spawn({
        let bot = bot.clone();
        async move { bot.get_updates().offset(1).timeout(10).await }
    });
    fake.wait_for(WAIT, "a second getUpdates", |calls| {
        (calls.len() == 2).then_some(())
    })
    .await;
    let pushed = Instant::now();
    fake.push_text(3, 4, "wake up");
    let updates = poller.await.unwrap().expect("getUpdates");
    assert!(
        pushed.elapsed() < Duration::from_secs(2),
        "{:?}",
        pushed.elapsed()
    );
    assert_eq!(updates.len(), 1);
    assert_eq!(fake.calls_of("getupdates")[1].params["timeout"], json!(10));
}

#[tokio::test]
async fn injected_faults_map_to_teloxide_errors_and_are_recorded() {
    let fake = FakeBotApi::start().await;
    let bot = fake.bot();
    let cant_parse =
        "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 5";
    fake.inject("SendMessage", Fault::RetryAfter(3));
    fake.inject("sendmessage", Fault::BadRequest(cant_parse.into()));
    fake.inject(
        "sendMessage",
        Fault::Forbidden("Forbidden: bot was blocked by the user".into()),
    );
    fake.inject("sendMessage", Fault::Delay(Duration::from_millis(300)));

    match bot.send_message(ChatId(5), "one").await {
        Err(RequestError::RetryAfter(secs)) => assert_eq!(secs.seconds(), 3),
        other => panic!("expected RetryAfter, got {other:?}"),
    }
    match bot.send_message(ChatId(5), "two").await {
        Err(RequestError::Api(ApiError::CantParseEntities(description))) => {
            assert_eq!(description, cant_parse)
        }
        other => panic!("expected CantParseEntities, got {other:?}"),
    }
    match bot.send_message(ChatId(5), "three").await {
        Err(RequestError::Api(ApiError::BotBlocked)) => {}
        other => panic!("expected BotBlocked, got {other:?}"),
    }
    let started = Instant::now();
    let delayed = bot.send_message(ChatId(5), "four").await.expect("delayed");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(delayed.text(), Some("four"));
    bot.send_message(ChatId(5), "five")
        .await
        .expect("no faults left");
    bot.get_me().await.expect("faults are per method");

    let statuses: Vec<u16> = fake
        .calls_of("sendmessage")
        .iter()
        .map(|c| c.status)
        .collect();
    assert_eq!(statuses, [429, 400, 403, 200, 200]);
    assert_eq!(fake.texts_to(5), ["four", "five"]);

    match bot.get_chat(ChatId(5)).await {
        Err(RequestError::Api(ApiError::Unknown(description))) => {
            assert_eq!(description, "Not Found: method not found")
        }
        other => panic!("expected a 404 API error, got {other:?}"),
    }
    assert_eq!(fake.calls_of("getchat")[0].status, 404);
}

#[tokio::test]
async fn raw_requests_cover_form_bodies_bad_bodies_and_server_errors() {
    let fake = FakeBotApi::start().await;
    let form = "application/x-www-form-urlencoded";

    let (status, body) = raw(
        &fake,
        "/bot1:x/sendMessage",
        form,
        "chat_id=9&text=hello+w%C3%B6rld%21",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["text"], json!("hello wörld!"));
    assert_eq!(fake.texts_to(9), ["hello wörld!"]);

    let (status, body) = raw(&fake, "/bot1:x/getMe", "application/json", "").await;
    assert_eq!((status, &body["result"]["id"]), (200, &json!(1)));
    let (status, body) = raw(
        &fake,
        "/bot1:x/sendMessage",
        "application/json",
        "{not json",
    )
    .await;
    assert_eq!((status, &body["ok"]), (400, &json!(false)));
    let (status, _) = raw(&fake, "/nothing/here/at/all", "application/json", "{}").await;
    assert_eq!(status, 404);

    fake.inject("getme", Fault::ServerError(502));
    let (status, body) = raw(&fake, "/bot1:x/GETME", "application/json", "{}").await;
    assert_eq!(status, 502);
    assert_eq!(
        body,
        json!({"ok": false, "error_code": 502, "description": "Bad Gateway"})
    );
    fake.inject("getme", Fault::ServerError(500));
    let (_, body) = raw(&fake, "/bot1:x/getMe", "application/json", "{}").await;
    assert_eq!(body["description"], json!("Internal Server Error"));
    fake.inject("getme", Fault::RetryAfter(7));
    let (status, body) = raw(&fake, "/bot1:x/getMe", "application/json", "{}").await;
    assert_eq!(status, 429);
    assert_eq!(body["parameters"]["retry_after"], json!(7));

    let calls = fake.calls();
    assert_eq!(
        calls[0].params,
        json!({"chat_id": "9", "text": "hello wörld!"})
    );
    assert_eq!(calls[1].params, json!({}));
    assert_eq!(calls[2].params, Value::Null);
    let statuses: Vec<u16> = calls.iter().map(|c| c.status).collect();
    assert_eq!(statuses, [200, 200, 400, 404, 502, 500, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_texts_wakes_up_on_new_calls() {
    let fake = FakeBotApi::start().await;
    let bot = fake.bot();
    let sender = tokio::spawn(async move {
        for text in ["a", "b", "c"] {
            bot.send_message(ChatId(8), text)
                .await
                .expect("sendMessage");
        }
    });
    assert_eq!(fake.wait_for_texts(8, 3, WAIT).await, ["a", "b", "c"]);
    let call = fake.wait_for_call("SENDMESSAGE", WAIT).await;
    assert_eq!(call.params["text"], json!("a"));
    sender.await.unwrap();
}

#[tokio::test]
#[should_panic(
    expected = "waiting for 1 text message(s) to chat 5; 1 recorded calls:\n  #1 getme -> 200 {}"
)]
async fn wait_for_panics_naming_what_and_listing_the_calls() {
    let fake = FakeBotApi::start().await;
    fake.bot().get_me().await.expect("getMe");
    fake.wait_for_texts(5, 1, Duration::from_millis(10)).await;
    unreachable!();
}

#[tokio::test]
#[should_panic(expected = "timed out after 50ms waiting for a reply to chat 77; 1 recorded calls")]
async fn wait_for_reports_a_timeout() {
    let fake = FakeBotApi::start().await;
    fake.bot().get_me().await.expect("getMe");
    fake.wait_for(Duration::from_millis(50), "a reply to chat 77", |calls| {
        calls.iter().find(|c| c.method == "sendmessage").map(|_| ())
    })
    .await;
}

#[actix_rt::test]
async fn works_on_an_actix_current_thread_runtime() {
    let fake = FakeBotApi::start().await;
    let bot = fake.bot();
    let poller = actix_rt::spawn({
        let bot = bot.clone();
        async move { bot.get_updates().timeout(5).await }
    });
    fake.wait_for_call("getUpdates", WAIT).await;
    fake.push_text(11, 12, "/help");
    let updates = poller.await.unwrap().expect("getUpdates");
    let UpdateKind::Message(message) = &updates[0].kind else {
        panic!("not a message");
    };
    bot.send_message(message.chat.id, "help text")
        .await
        .expect("sendMessage");
    assert_eq!(fake.wait_for_texts(11, 1, WAIT).await, ["help text"]);
}

#[tokio::test]
async fn shutdown_and_drop_stop_the_server() {
    let fake = FakeBotApi::start().await;
    let addr = fake.addr();
    fake.bot().get_me().await.expect("getMe");
    fake.shutdown().await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown"
    );
    fake.shutdown().await; // idempotent

    let fake = FakeBotApi::start().await;
    let addr = fake.addr();
    drop(fake);
    // The aborted accept task is dropped the next time the runtime runs it.
    let mut closed = false;
    for _ in 0..100 {
        tokio::task::yield_now().await;
        if TcpStream::connect(addr).await.is_err() {
            closed = true;
            break;
        }
    }
    assert!(closed, "still accepting after drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrivals_keep_chat_actions_and_messages_and_counts_keep_totals() {
    let fake = FakeBotApi::start_with(Options {
        record: Record::Arrivals,
        idle_close: None,
        strict_idle: false,
    })
    .await;
    let bot = fake.bot();
    let pushed = fake.push_many([(7, 42, "one".to_string()), (8, 42, "/two".to_string())]);
    let updates = bot.get_updates().await.expect("getUpdates");
    assert_eq!(updates.len(), 2);
    let UpdateKind::Message(message) = &updates[1].kind else {
        panic!("not a message: {:?}", updates[1].kind);
    };
    assert_eq!(message.text(), Some("/two"));
    assert_eq!(message.entities().expect("entities")[0].length, 4);

    bot.send_chat_action(ChatId(7), ChatAction::Typing)
        .await
        .expect("sendChatAction");
    bot.send_message(ChatId(7), "⚠️ notice")
        .await
        .expect("sendMessage");
    let (at, text) = fake
        .message_after(7, pushed, WAIT)
        .await
        .expect("a message to chat 7");
    assert!(at >= pushed);
    assert_eq!(text, "⚠️ notice");
    let none = fake
        .message_after(8, pushed, Duration::from_millis(20))
        .await;
    assert!(none.is_none(), "nothing was sent to chat 8");
    let log = fake.log();
    assert_eq!(log.chat_actions.len(), 1);
    assert_eq!(log.chat_actions[0].0, 7);
    assert!(fake.calls().is_empty(), "arrivals, not calls");

    assert!(bot.get_chat(ChatId(7)).await.is_err(), "an unknown method");
    let c = fake.counts();
    assert_eq!(
        (c.messages, c.notices, c.chat_actions, c.polls, c.errors),
        (1, 1, 1, 1, 1)
    );
}

#[tokio::test]
async fn counts_keep_no_call_and_idle_connections_are_closed() {
    let fake = FakeBotApi::start_with(Options {
        record: Record::Counts,
        idle_close: Some(Duration::from_millis(50)),
        strict_idle: false,
    })
    .await;
    fake.bot()
        .send_message(ChatId(3), "hi")
        .await
        .expect("sendMessage");
    assert_eq!(fake.counts().messages, 1);
    assert!(fake.calls().is_empty() && fake.log().messages.is_empty());

    // A keep-alive connection: the fake closes it once idle.
    let mut stream = TcpStream::connect(fake.addr()).await.expect("connect");
    let request = "POST /bot1:x/getMe HTTP/1.1\r\nHost: fake\r\nContent-Length: 0\r\n\r\n";
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = String::new();
    let read = tokio::time::timeout(WAIT, stream.read_to_string(&mut response)).await;
    assert!(read.is_ok(), "the idle connection was not closed");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

/// A fake that only counts keeps a window of the bot's last messages (for
/// edits and presses), not every one: otherwise the fake itself grows with
/// every turn of a memory benchmark.
#[tokio::test]
async fn counts_keep_only_the_last_messages_for_edits() {
    let fake = FakeBotApi::start_with(Options {
        record: Record::Counts,
        idle_close: None,
        strict_idle: false,
    })
    .await;
    let bot = fake.bot();
    let mut ids = Vec::new();
    for n in 0..=bot_api::SENT_WINDOW {
        let sent = bot
            .send_message(ChatId(3), format!("reply {n}"))
            .await
            .expect("sendMessage");
        ids.push(sent.id);
    }
    assert_eq!(fake.counts().messages, ids.len() as u64);
    assert_eq!(fake.messages_by_chat().get(&3), Some(&(ids.len() as u64)));
    let oldest = bot.edit_message_text(ChatId(3), ids[0], "edited").await;
    assert!(
        matches!(
            &oldest,
            Err(RequestError::Api(ApiError::MessageToEditNotFound))
        ),
        "the oldest message is no longer kept: {oldest:?}"
    );
    let newest = ids[ids.len() - 1];
    bot.edit_message_text(ChatId(3), newest, "edited")
        .await
        .expect("the newest message is kept");
}

#[tokio::test]
async fn a_pushed_callback_arrives_as_a_callback_query_on_the_bots_message() {
    let fake = FakeBotApi::start().await;
    let bot = fake.bot();
    let keyboard = InlineKeyboardMarkup::new([[
        InlineKeyboardButton::callback("Yes", "allow:1"),
        InlineKeyboardButton::callback("No", "deny:1"),
    ]]);
    let asked = bot
        .send_message(ChatId(7), "Allow?")
        .reply_markup(keyboard.clone())
        .await
        .expect("sendMessage");
    assert_eq!(asked.reply_markup(), Some(&keyboard));
    let call = &fake.calls_of("sendMessage")[0];
    assert_eq!(
        buttons_of(call),
        [[
            ("Yes".to_string(), "allow:1".to_string()),
            ("No".to_string(), "deny:1".to_string()),
        ]]
    );

    let id = fake.push_callback(7, 42, asked.id.0, "allow:1");
    let unknown = fake.push_callback(7, 42, 999, "deny:1");
    assert_ne!(id, unknown);
    let updates = bot.get_updates().await.expect("getUpdates");
    assert_eq!(updates.len(), 2, "{updates:#?}");
    let UpdateKind::CallbackQuery(query) = &updates[0].kind else {
        panic!("not a callback query: {:?}", updates[0].kind);
    };
    assert_eq!(query.id.0, id);
    assert_eq!(query.from.id, UserId(42));
    assert_eq!(query.data.as_deref(), Some("allow:1"));
    assert!(!query.chat_instance.is_empty());
    let Some(MaybeInaccessibleMessage::Regular(message)) = &query.message else {
        panic!("not the bot's message: {:?}", query.message);
    };
    assert_eq!((message.id, message.chat.id), (asked.id, ChatId(7)));
    assert_eq!(message.text(), Some("Allow?"));
    assert_eq!(message.reply_markup(), Some(&keyboard));
    assert_eq!(updates[0].chat().map(|c| c.id), Some(ChatId(7)));

    // A message the fake never sent is one the bot cannot see.
    let UpdateKind::CallbackQuery(query) = &updates[1].kind else {
        panic!("not a callback query: {:?}", updates[1].kind);
    };
    assert!(
        matches!(
            query.message,
            Some(MaybeInaccessibleMessage::Inaccessible(_))
        ),
        "{:?}",
        query.message
    );
}

#[tokio::test]
async fn callback_answers_and_edits_answer_as_telegram_does() {
    let fake = FakeBotApi::start().await;
    let bot = fake.bot();
    let keyboard = InlineKeyboardMarkup::new([[InlineKeyboardButton::callback("Yes", "y")]]);
    let asked = bot
        .send_message(ChatId(7), "Allow?")
        .reply_markup(keyboard.clone())
        .await
        .expect("sendMessage");

    let id = fake.push_callback(7, 42, asked.id.0, "y");
    bot.answer_callback_query(CallbackQueryId(id.clone()))
        .text("Allowed")
        .show_alert(true)
        .await
        .expect("answerCallbackQuery");
    let again = bot.answer_callback_query(CallbackQueryId(id.clone())).await;
    assert!(
        matches!(again, Err(RequestError::Api(ApiError::InvalidQueryId))),
        "{again:?}"
    );
    let answers = fake.calls_of("answerCallbackQuery");
    assert_eq!(
        answers.iter().map(|c| c.status).collect::<Vec<_>>(),
        [200, 400]
    );
    assert_eq!(answers[0].params["callback_query_id"], json!(id));
    assert_eq!(answers[0].params["text"], json!("Allowed"));
    assert_eq!(answers[0].params["show_alert"], json!(true));

    // Only the keyboard, then the text without it.
    let other = InlineKeyboardMarkup::new([[InlineKeyboardButton::callback("Sure?", "s")]]);
    let edited = bot
        .edit_message_reply_markup(ChatId(7), asked.id)
        .reply_markup(other.clone())
        .await
        .expect("editMessageReplyMarkup");
    assert_eq!(
        (edited.text(), edited.reply_markup()),
        (Some("Allow?"), Some(&other))
    );
    let edited = bot
        .edit_message_text(ChatId(7), asked.id, "Allowed")
        .await
        .expect("editMessageText");
    assert_eq!((edited.id, edited.text()), (asked.id, Some("Allowed")));
    assert_eq!(edited.reply_markup(), None);
    assert!(edited.edit_date().is_some());
    let edit = &fake.calls_of("editMessageText")[0];
    assert_eq!(edit.params["chat_id"], json!(7));
    assert_eq!(edit.params["message_id"], json!(asked.id.0));
    assert_eq!(edit.params["text"], json!("Allowed"));
    assert_eq!(
        fake.calls_of("editMessageReplyMarkup")[0].params["reply_markup"],
        serde_json::to_value(&other).unwrap()
    );

    let same = bot.edit_message_text(ChatId(7), asked.id, "Allowed").await;
    assert!(
        matches!(same, Err(RequestError::Api(ApiError::MessageNotModified))),
        "{same:?}"
    );
    let missing = bot.edit_message_text(ChatId(7), MessageId(999), "x").await;
    assert!(
        matches!(
            missing,
            Err(RequestError::Api(ApiError::MessageToEditNotFound))
        ),
        "{missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_that_break_telegrams_rules_are_refused_as_telegram_refuses_them() {
    use teloxide::types::MessageEntity;
    let fake = FakeBotApi::start().await;
    let bot = fake.bot();
    let good = bot
        .send_message(ChatId(1), "bold text")
        .entities(vec![MessageEntity::bold(0, 4)])
        .await
        .expect("valid entities are taken");
    assert_eq!(good.text(), Some("bold text"));
    // Past the end of the text, and a partial overlap.
    for entities in [
        vec![MessageEntity::bold(5, 10)],
        vec![MessageEntity::bold(0, 6), MessageEntity::italic(3, 6)],
    ] {
        let refused = bot
            .send_message(ChatId(1), "bold text")
            .entities(entities.clone())
            .await;
        assert!(
            matches!(
                refused,
                Err(RequestError::Api(ApiError::CantParseEntities(_)))
            ),
            "{entities:?}: {refused:?}"
        );
    }
    let refused = bot
        .edit_message_text(ChatId(1), good.id, "short")
        .entities(vec![MessageEntity::code(0, 9)])
        .await;
    assert!(
        matches!(
            refused,
            Err(RequestError::Api(ApiError::CantParseEntities(_)))
        ),
        "{refused:?}"
    );
    let (status, body) = raw(
        &fake,
        "/bottoken/sendMessageDraft",
        "application/json",
        r#"{"chat_id":-100,"draft_id":1,"text":"in a group"}"#,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = raw(
        &fake,
        "/bottoken/deleteMessage",
        "application/json",
        &format!(r#"{{"chat_id":1,"message_id":{}}}"#, good.id.0),
    )
    .await;
    assert_eq!((status, body["result"].clone()), (200, json!(true)));
    let (status, _) = raw(
        &fake,
        "/bottoken/deleteMessage",
        "application/json",
        &format!(r#"{{"chat_id":1,"message_id":{}}}"#, good.id.0),
    )
    .await;
    assert_eq!(status, 400, "a deleted message is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forum_topic_needs_a_group_and_a_name() {
    let fake = FakeBotApi::start().await;
    let bot = Bot::new("123:abc").set_api_url(fake.url().parse().unwrap());
    assert!(
        bot.create_forum_topic(ChatId(5), "x").await.is_err(),
        "a private chat is no forum"
    );
    assert!(
        bot.create_forum_topic(ChatId(-100), "").await.is_err(),
        "a name is needed"
    );
    let long = "n".repeat(129);
    assert!(bot.create_forum_topic(ChatId(-100), long).await.is_err());
    assert!(
        bot.create_forum_topic(ChatId(-100), "n".repeat(128))
            .await
            .is_ok()
    );
}

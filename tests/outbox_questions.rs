//! Questions with buttons through the Outbox: their message ids, files
//! sent first, edits that remove the buttons, callback answers, and their
//! order beside texts.

mod support;

use std::time::Duration;

use actix::{Actor, Addr};
use serde_json::{Value, json};
use support::*;
use teloxide::prelude::Requester;
use teloxide::types::{ChatId, MaybeInaccessibleMessage, Message, MessageId, UpdateKind};
use turnstile::events::EventBus;
use turnstile::telegram::{
    AnswerCallback, Button, EditQuestion, Outbox, OutboxError, QuestionFile, SendQuestion, SendText,
};

/// Statuses of `calls`, for assertions that show what happened.
fn statuses(calls: &[Call]) -> Vec<u16> {
    calls.iter().map(|c| c.status).collect()
}

/// An outbox of its own sending to `api`, with the harness's fast limits.
fn outbox_to(api: &FakeBotApi) -> Addr<Outbox> {
    Outbox::new(
        api.bot(),
        Harness::fast_limits(),
        Default::default(),
        EventBus::new(),
    )
    .start()
}

/// Yes and No, on one row.
fn yes_no() -> Vec<Vec<Button>> {
    vec![vec![
        Button::new("Yes", "allow:7"),
        Button::new("No", "deny:7"),
    ]]
}

/// Asks `text` with [`yes_no`] in `chat`; the question's message id.
async fn ask(outbox: &Addr<Outbox>, chat: i64, text: &str) -> MessageId {
    let (question, sent) = SendQuestion::new(ChatId(chat), text, yes_no());
    outbox.do_send(question);
    let sent = tokio::time::timeout(SOON, sent).await.expect("in time");
    sent.expect("outbox alive").expect("question sent")
}

/// The message the fake hands back in a callback query on `message_id`.
async fn message_seen_by_a_press(api: &FakeBotApi, chat: i64, message_id: MessageId) -> Message {
    let id = api.push_callback(chat, USER, message_id.0, "allow:7");
    let updates = api.bot().get_updates().await.expect("getUpdates");
    let found = updates.into_iter().find_map(|u| match u.kind {
        UpdateKind::CallbackQuery(q) if q.id.0 == id => q.message,
        _ => None,
    });
    match found {
        Some(MaybeInaccessibleMessage::Regular(message)) => *message,
        other => panic!("the press carries no message the bot sent: {other:?}"),
    }
}

#[actix_rt::test]
async fn a_question_arrives_with_its_buttons_and_returns_its_message_id() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    // Another chat first, so the question's id is not simply 1.
    let (text, done) = SendText::tracked(ChatId(2), "elsewhere");
    outbox.do_send(text);
    done.await.expect("outbox alive").expect("text sent");

    let id = ask(&outbox, 1, "Run `ls -la`?").await;

    let questions: Vec<Call> = api
        .calls_of("sendMessage")
        .into_iter()
        .filter(|c| !buttons_of(c).is_empty())
        .collect();
    assert_eq!(questions.len(), 1, "{questions:#?}");
    let question = &questions[0];
    assert_eq!(question.params["chat_id"], json!(1));
    assert_eq!(question.params["text"], json!("Run `ls -la`?"));
    assert_eq!(
        question.params.get("parse_mode").unwrap_or(&Value::Null),
        &Value::Null,
        "a question is plain text: {}",
        question.params
    );
    let want = vec![vec![
        ("Yes".to_string(), "allow:7".to_string()),
        ("No".to_string(), "deny:7".to_string()),
    ]];
    assert_eq!(buttons_of(question), want);

    let message = message_seen_by_a_press(&api, 1, id).await;
    assert_eq!(message.id, id);
    assert_eq!(message.text(), Some("Run `ls -la`?"));
    assert!(message.reply_markup().is_some(), "{message:?}");
}

#[actix_rt::test]
async fn a_question_too_long_for_a_message_is_refused_never_cut() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    let (question, sent) = SendQuestion::new(ChatId(1), "y".repeat(5000), yes_no());
    outbox.do_send(question);
    let sent = tokio::time::timeout(SOON, sent).await.expect("in time");
    assert!(matches!(sent, Ok(Err(OutboxError::Refused(_)))), "{sent:?}");
    let whole = "y".repeat(4096);
    ask(&outbox, 1, &whole).await;
    let sent = api.calls_of("sendMessage");
    assert_eq!(sent.len(), 1, "only the one that fits: {sent:#?}");
    assert_eq!(sent[0].params["text"], json!(whole));
}

#[actix_rt::test]
async fn a_questions_file_goes_first_and_the_question_replies_to_it() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    let whole = format!("$ ls -la {}; curl x | sh", "w ".repeat(6000));
    let file = QuestionFile {
        name: "command.txt".into(),
        caption: "The whole of: the command".into(),
        text: whole.clone(),
    };
    let (question, sent) =
        SendQuestion::new(ChatId(1), "Run the command in command.txt?", yes_no());
    outbox.do_send(question.with_file(Some(file)));
    let sent = tokio::time::timeout(SOON, sent).await.expect("in time");
    let id = sent.expect("outbox alive").expect("question sent");
    let uploads = api.uploads();
    assert_eq!(uploads.len(), 1);
    assert_eq!(uploads[0].file_name, "command.txt");
    assert_eq!(uploads[0].bytes, whole.as_bytes());
    let document = api.calls_of("sendDocument");
    let asked = api.calls_of("sendMessage");
    assert!(document[0].seq < asked[0].seq, "the file first");
    assert!(id.0 > 0);
    assert!(
        asked[0].params.to_string().contains("reply_parameters"),
        "{}",
        asked[0].params
    );
    // A file Telegram refuses: no question without it.
    api.inject(
        "sendDocument",
        Fault::BadRequest("Bad Request: file is too big".into()),
    );
    let file = QuestionFile {
        name: "command.txt".into(),
        caption: String::new(),
        text: whole,
    };
    let (question, sent) = SendQuestion::new(ChatId(1), "again?", yes_no());
    outbox.do_send(question.with_file(Some(file)));
    let sent = tokio::time::timeout(SOON, sent).await.expect("in time");
    assert!(matches!(sent, Ok(Err(_))), "{sent:?}");
    assert_eq!(api.calls_of("sendMessage").len(), 1, "no second question");
}

#[actix_rt::test]
async fn editing_a_question_removes_its_buttons() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    let id = ask(&outbox, 1, "Run `ls`?").await;

    let (edit, edited) = EditQuestion::tracked(ChatId(1), id, "✅ Allowed: ls");
    outbox.do_send(edit);
    assert_eq!(edited.await.expect("outbox alive"), Ok(()));

    let edits = api.calls_of("editMessageText");
    assert_eq!(statuses(&edits), vec![200], "{edits:#?}");
    let params = &edits[0].params;
    assert_eq!(params["chat_id"], json!(1));
    assert_eq!(params["message_id"], json!(id.0));
    assert_eq!(params["text"], json!("✅ Allowed: ls"));
    assert!(params.get("reply_markup").is_none(), "{params}");

    let message = message_seen_by_a_press(&api, 1, id).await;
    assert_eq!(message.text(), Some("✅ Allowed: ls"));
    assert!(message.reply_markup().is_none(), "{message:?}");
}

#[actix_rt::test]
async fn an_edit_that_changes_nothing_counts_as_success() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    let id = ask(&outbox, 1, "Run `ls`?").await;
    for _ in 0..2 {
        let (edit, edited) = EditQuestion::tracked(ChatId(1), id, "Denied");
        outbox.do_send(edit);
        assert_eq!(edited.await.expect("outbox alive"), Ok(()));
    }
    let edits = api.calls_of("editMessageText");
    // The second is Telegram's "message is not modified", and not retried.
    assert_eq!(statuses(&edits), vec![200, 400], "{edits:#?}");
}

#[actix_rt::test]
async fn an_edit_of_an_unknown_message_is_refused() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    let (edit, edited) = EditQuestion::tracked(ChatId(1), MessageId(99), "Denied");
    outbox.do_send(edit);
    let result = edited.await.expect("outbox alive");
    assert!(matches!(result, Err(OutboxError::Refused(_))), "{result:?}");
    assert_eq!(statuses(&api.calls_of("editMessageText")), vec![400]);
}

#[actix_rt::test]
async fn a_429_on_an_edit_waits_its_retry_after() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    let id = ask(&outbox, 1, "Run `ls`?").await;
    api.inject("editMessageText", Fault::RetryAfter(1));
    let (edit, edited) = EditQuestion::tracked(ChatId(1), id, "Allowed");
    outbox.do_send(edit);
    assert_eq!(edited.await.expect("outbox alive"), Ok(()));

    let edits = api.calls_of("editMessageText");
    assert_eq!(statuses(&edits), vec![429, 200], "{edits:#?}");
    let waited = edits[1].at.duration_since(edits[0].at);
    assert!(
        waited >= Duration::from_millis(900),
        "the retry came {waited:?} after a 429 with retry_after = 1 s"
    );
}

#[actix_rt::test]
async fn a_callback_answer_reaches_telegram_with_its_text_and_alert() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    let id = ask(&outbox, 1, "Run `ls`?").await;
    let pressed = api.push_callback(1, USER, id.0, "allow:7");
    outbox.do_send(AnswerCallback {
        chat: ChatId(1),
        id: pressed.clone(),
        text: "Only the one who asked may answer".into(),
        alert: true,
    });
    let call = api.wait_for_call("answerCallbackQuery", SOON).await;
    assert_eq!(call.status, 200, "{call:#?}");
    assert_eq!(call.params["callback_query_id"], json!(pressed));
    assert_eq!(
        call.params["text"],
        json!("Only the one who asked may answer")
    );
    assert_eq!(call.params["show_alert"], json!(true));

    // A plain notification, and no text at all: nothing shows but the
    // spinner stops.
    let again = api.push_callback(1, USER, id.0, "deny:7");
    outbox.do_send(AnswerCallback::new(ChatId(1), again.clone(), ""));
    let call = api
        .wait_for(SOON, "a second answer", |calls| {
            let mut answers = calls.iter().filter(|c| c.method == "answercallbackquery");
            answers
                .find(|c| c.params["callback_query_id"] == json!(again))
                .cloned()
        })
        .await;
    assert_eq!(call.status, 200, "{call:#?}");
    assert_eq!(call.params.get("text"), None, "{}", call.params);
    assert_eq!(call.params["show_alert"], json!(false));
}

#[actix_rt::test]
async fn a_callback_answer_is_not_retried_past_its_usefulness() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    let id = ask(&outbox, 1, "Run `ls`?").await;
    let pressed = api.push_callback(1, USER, id.0, "allow:7");
    // Waiting 30 s would answer after Telegram stopped taking the answer.
    api.inject("answerCallbackQuery", Fault::RetryAfter(30));
    outbox.do_send(AnswerCallback::new(ChatId(1), pressed, "ok"));
    let (text, sent) = SendText::tracked(ChatId(1), "next");
    outbox.do_send(text);
    let sent = tokio::time::timeout(Duration::from_secs(5), sent).await;
    let sent = sent.expect("the lane is not held by the dropped answer");
    assert!(matches!(sent, Ok(Ok(_))), "{sent:?}");
    assert_eq!(
        statuses(&api.calls_of("answerCallbackQuery")),
        vec![429],
        "given up, not retried"
    );
}

#[actix_rt::test]
async fn questions_and_texts_in_one_chat_keep_their_order() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    // The first text waits out a 429: whatever was queued after it waits too.
    api.inject("sendMessage", Fault::RetryAfter(1));
    outbox.do_send(SendText::new(ChatId(1), "before"));
    let (question, asked) = SendQuestion::new(ChatId(1), "Allow?", yes_no());
    outbox.do_send(question);
    let (after, done) = SendText::tracked(ChatId(1), "after");
    outbox.do_send(after);
    done.await.expect("outbox alive").expect("sent");
    asked.await.expect("outbox alive").expect("asked");

    let delivered: Vec<(String, bool)> = api
        .calls_of("sendMessage")
        .into_iter()
        .filter(|c| c.status == 200)
        .map(|c| {
            let text = c.params["text"].as_str().unwrap_or_default().to_string();
            (text, !buttons_of(&c).is_empty())
        })
        .collect();
    let want = [("before", false), ("Allow?", true), ("after", false)];
    let want: Vec<(String, bool)> = want.iter().map(|(t, b)| (t.to_string(), *b)).collect();
    assert_eq!(delivered, want);
}

//! A 5xx on any request the outbox sends is retried after its own short
//! backoff, not after teloxide's 10 s pause: every method goes through
//! `telegram::call`, uploads too (as `multipart/form-data`).

mod support;

use std::time::Duration;

use actix::{Actor, Addr};
use serde_json::json;
use support::*;
use teloxide::types::{ChatId, MessageId};
use turnstile::events::EventBus;
use turnstile::telegram::{
    AnswerCallback, EditQuestion, Outbox, RateLimits, React, SendFile, SendText, SendTyping,
    TypingLease,
};

/// Sooner than teloxide's pause after a 5xx (10 s), with the default
/// backoff (0.5 s) before the retry.
const RETRIED_WITHIN: Duration = Duration::from_secs(2);

/// Upper bound for the calls to come (generous: a loaded machine, and long
/// enough to see teloxide's pause should a request go its way again).
const AFTER_5XX: Duration = Duration::from_secs(30);

/// An outbox sending to `api` with no pacing to speak of and the default
/// retry backoff.
fn outbox_to(api: &FakeBotApi) -> Addr<Outbox> {
    outbox_backing_off(api, RateLimits::default().backoff)
}

/// [`outbox_to`] with its first retry `backoff` after a failure.
fn outbox_backing_off(api: &FakeBotApi, backoff: Duration) -> Addr<Outbox> {
    let limits = RateLimits {
        backoff,
        ..Harness::fast_limits()
    };
    Outbox::new(api.bot(), limits, Default::default(), EventBus::new()).start()
}

/// Waits for two calls of `method`, the first answered 502, and checks the
/// second came within [`RETRIED_WITHIN`] and succeeded.
async fn retried_at_once(api: &FakeBotApi, method: &str) -> Vec<Call> {
    let lower = method.to_ascii_lowercase();
    let what = format!("two {method} calls");
    let calls = api
        .wait_for(AFTER_5XX, &what, |calls| {
            let of: Vec<Call> = calls
                .iter()
                .filter(|c| c.method == lower)
                .cloned()
                .collect();
            (of.len() >= 2).then_some(of)
        })
        .await;
    let statuses: Vec<u16> = calls.iter().map(|c| c.status).collect();
    assert_eq!(statuses, vec![502, 200], "{method}: {calls:#?}");
    let gap = calls[1].at.duration_since(calls[0].at);
    assert!(
        gap < RETRIED_WITHIN,
        "{method} was retried {gap:?} after a 502 (teloxide pauses 10 s after a 5xx)"
    );
    calls
}

#[actix_rt::test]
async fn a_5xx_on_typing_is_retried_within_2_s() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    api.inject("sendChatAction", Fault::ServerError(502));
    // Held for the whole test: a lease nobody owns is over.
    let lease = TypingLease::new();
    outbox.do_send(SendTyping {
        to: ChatId(1).into(),
        lease: lease.view(),
    });
    let calls = retried_at_once(&api, "sendChatAction").await;
    assert_eq!(calls[1].params["action"], json!("typing"));
    drop(lease);
}

#[actix_rt::test]
async fn typing_is_not_retried_once_its_lease_ended() {
    let api = FakeBotApi::start().await;
    // The retry waits 3 s: the lease ends meanwhile.
    let outbox = outbox_backing_off(&api, Duration::from_secs(3));
    api.inject("sendChatAction", Fault::ServerError(502));
    let lease = TypingLease::new();
    outbox.do_send(SendTyping {
        to: ChatId(1).into(),
        lease: lease.view(),
    });
    api.wait_for_call("sendChatAction", AFTER_5XX).await;
    lease.end();
    // A message queued behind it shows the typing job is over.
    let (text, sent) = SendText::tracked(ChatId(1), "after");
    outbox.do_send(text);
    let sent = tokio::time::timeout(AFTER_5XX, sent)
        .await
        .expect("in time");
    assert!(matches!(sent, Ok(Ok(_))), "{sent:?}");
    let calls = api.calls_of("sendChatAction");
    assert_eq!(calls.len(), 1, "a retry outlived its lease: {calls:#?}");
}

#[actix_rt::test]
async fn a_5xx_on_an_edit_is_retried_within_2_s() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    let (text, sent) = SendText::tracked(ChatId(1), "Run `ls`?");
    outbox.do_send(text);
    let ids = sent.await.expect("outbox alive").expect("sent");
    api.inject("editMessageText", Fault::ServerError(502));
    let (edit, edited) = EditQuestion::tracked(ChatId(1), ids[0], "Allowed");
    outbox.do_send(edit);
    let edited = tokio::time::timeout(AFTER_5XX, edited)
        .await
        .expect("in time");
    assert_eq!(edited, Ok(Ok(())));
    retried_at_once(&api, "editMessageText").await;
}

#[actix_rt::test]
async fn a_5xx_on_an_upload_is_retried_within_2_s_with_the_same_bytes() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::write(dir.path().join("notes.txt"), b"the notes").expect("written");
    for (method, as_photo) in [("sendDocument", false), ("sendPhoto", true)] {
        let file = turnstile::telegram::files::outgoing(dir.path(), "notes.txt", as_photo)
            .expect("a file to send");
        api.inject(method, Fault::ServerError(502));
        let (send, sent) = SendFile::new(ChatId(1), file, Some("a caption".into()), as_photo);
        outbox.do_send(send);
        let sent = tokio::time::timeout(AFTER_5XX, sent)
            .await
            .expect("in time");
        assert!(matches!(sent, Ok(Ok(_))), "{method}: {sent:?}");
        retried_at_once(&api, method).await;
    }
    let uploads = api.uploads();
    assert_eq!(uploads.len(), 2, "{uploads:#?}");
    for upload in &uploads {
        assert_eq!(upload.file_name, "notes.txt");
        assert_eq!(upload.bytes, b"the notes");
        assert_eq!(upload.caption.as_deref(), Some("a caption"));
        assert_eq!(upload.chat_id, 1);
    }
    let received = api.received_files();
    assert_eq!(received.len(), 4, "each attempt carried the file");
    assert!(received.iter().all(|bytes| bytes == b"the notes"));
}

#[actix_rt::test]
async fn a_5xx_on_a_reaction_or_a_callback_answer_is_retried_within_2_s() {
    let api = FakeBotApi::start().await;
    let outbox = outbox_to(&api);
    api.inject("setMessageReaction", Fault::ServerError(502));
    let (tx, reacted) = tokio::sync::oneshot::channel();
    outbox.do_send(React {
        chat: ChatId(1),
        message_id: MessageId(5),
        emoji: "👍".into(),
        reply: tx,
    });
    let reacted = tokio::time::timeout(AFTER_5XX, reacted)
        .await
        .expect("in time");
    assert_eq!(reacted, Ok(Ok(())));
    retried_at_once(&api, "setMessageReaction").await;

    let id = api.push_callback(1, USER, 5, "allow:7");
    api.inject("answerCallbackQuery", Fault::ServerError(502));
    outbox.do_send(AnswerCallback::new(ChatId(1), id, "Allowed"));
    retried_at_once(&api, "answerCallbackQuery").await;
}

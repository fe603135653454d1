//! The Outbox's live slots (a status line, an answer's preview), how live
//! text gives way to real messages and to Telegram's limits, and `/stop`'s
//! purge of what the stopped turn queued.

mod support;

use std::time::{Duration, Instant};

use actix::{Actor, Addr};
use serde_json::json;
use support::*;
use teloxide::types::{ChatId, MessageId, ThreadId};
use turnstile::events::EventBus;
use turnstile::ids::TurnId;
use turnstile::telegram::{
    Button, Clear, Flush, Outbox, OutboxError, Purge, RateLimits, SendQuestion, SendText, Show,
    ShowAs, Slot,
};

fn outbox(api: &FakeBotApi, limits: RateLimits) -> Addr<Outbox> {
    Outbox::new(api.bot(), limits, Default::default(), EventBus::new()).start()
}

fn show(chat: i64, slot: Slot, text: &str) -> Show {
    Show {
        to: ChatId(chat).into(),
        slot,
        reply_to: None,
        text: text.into(),
        markdown: false,
        show_as: ShowAs::Message,
        turn: None,
    }
}

/// [`show`], of `turn`.
fn show_of(chat: i64, slot: Slot, text: &str, turn: TurnId) -> Show {
    Show {
        turn: Some(turn),
        ..show(chat, slot, text)
    }
}

fn texts(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .map(|c| c.params["text"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Sends `text` and waits for its outcome.
async fn send(outbox: &Addr<Outbox>, mut text: SendText) -> Result<Vec<MessageId>, OutboxError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    text.reply = Some(tx);
    outbox.do_send(text);
    tokio::time::timeout(SOON, rx)
        .await
        .expect("an outcome in time")
        .expect("outbox alive")
}

#[actix_rt::test]
async fn a_preview_becomes_the_answer_and_superseded_edits_are_never_sent() {
    let api = FakeBotApi::start().await;
    let outbox = outbox(&api, Harness::fast_limits());
    let slot = Slot::next();
    outbox.do_send(show(1, slot, "Hello"));
    let first = api.wait_for_call("sendMessage", SOON).await;
    let preview = first.params["chat_id"].clone();
    assert_eq!(preview, json!(1));
    // The first edit is slow: the 20 that follow wait, and each replaces
    // the one queued before it.
    api.inject("editMessageText", Fault::Delay(Duration::from_millis(400)));
    outbox.do_send(show(1, slot, "Hello world"));
    api.wait_for_call("editMessageText", SOON).await;
    for i in 2..=20 {
        outbox.do_send(show(1, slot, &format!("Hello{}", " world".repeat(i))));
    }
    let latest = format!("Hello{}", " world".repeat(20));
    let shown = api
        .wait_for(SOON, "two edits", |calls| {
            let edits: Vec<Call> = calls
                .iter()
                .filter(|c| c.method == "editmessagetext")
                .cloned()
                .collect();
            (edits.len() >= 2).then_some(edits)
        })
        .await;
    assert_eq!(
        texts(&shown),
        ["Hello world", latest.as_str()],
        "after the slow edit only the newest text goes"
    );
    let ids = send(
        &outbox,
        SendText::new(ChatId(1), "Hello world, and the whole answer.").into_slot(Some(slot)),
    )
    .await
    .expect("delivered");

    let sent = api.calls_of("sendMessage");
    assert_eq!(sent.len(), 1, "one message only: {:#?}", texts(&sent));
    let edits = api.calls_of("editMessageText");
    assert_eq!(
        texts(&edits).last().map(String::as_str),
        Some("Hello world, and the whole answer."),
        "the last edit is the whole answer"
    );
    assert_eq!(edits.len(), 3, "{:#?}", texts(&edits));
    assert_eq!(ids.len(), 1, "the answer is the preview's message");
    assert!(
        edits
            .iter()
            .all(|e| e.params["message_id"] == json!(ids[0].0)),
        "every edit is of the preview"
    );
}

#[actix_rt::test]
async fn a_long_answer_replaces_its_preview_and_continues_in_new_messages() {
    let api = FakeBotApi::start().await;
    let outbox = outbox(&api, Harness::fast_limits());
    let slot = Slot::next();
    outbox.do_send(show(1, slot, "The start of a long answer"));
    api.wait_for_call("sendMessage", SOON).await;
    let long = "A paragraph of the answer that goes on.\n\n".repeat(200);
    let ids = send(
        &outbox,
        SendText::new(ChatId(1), long).into_slot(Some(slot)),
    )
    .await
    .expect("delivered");
    assert!(ids.len() >= 2, "{} pieces", ids.len());
    let edits = api.calls_of("editMessageText");
    assert_eq!(edits.len(), 1, "the first piece is an edit of the preview");
    assert_eq!(edits[0].params["message_id"], json!(ids[0].0));
    assert_eq!(
        api.calls_of("sendMessage").len(),
        ids.len(),
        "the preview and one new message per later piece"
    );
}

#[actix_rt::test]
async fn a_real_message_is_never_delayed_behind_live_edits() {
    let api = FakeBotApi::start().await;
    // One send every 2 s, two at most in a burst: a live edit that took the
    // chat's last send would hold a real message back for up to 2 s.
    let limits = RateLimits {
        chat_burst: 2.0,
        chat_per_sec: 0.5,
        ..Harness::fast_limits()
    };
    let outbox = outbox(&api, limits);
    let slot = Slot::next();
    let live = |n: usize| {
        move |calls: &[Call]| {
            let live: Vec<Call> = calls
                .iter()
                .filter(|c| c.method == "sendmessage" || c.method == "editmessagetext")
                .cloned()
                .collect();
            (live.len() >= n).then_some(live)
        }
    };
    // The first live text takes one of the two sends...
    outbox.do_send(show(1, slot, "working 1"));
    api.wait_for(SOON, "the first live text", live(1)).await;
    // ...the second must wait until the chat has two again, so that...
    outbox.do_send(show(1, slot, "working 2"));
    let shown = api.wait_for(SOON, "the second live text", live(2)).await;
    let gap = shown[1].at.duration_since(shown[0].at);
    assert!(
        gap >= Duration::from_millis(1000),
        "live text took the chat's last send: the second came {gap:?} after the first at one send per 2 s"
    );
    // ...a real message still goes at once.
    let asked = Instant::now();
    send(&outbox, SendText::new(ChatId(1), "real"))
        .await
        .expect("delivered");
    let waited = asked.elapsed();
    assert!(
        waited < Duration::from_millis(1000),
        "a real message waited {waited:?} behind live text"
    );
}

#[actix_rt::test]
async fn a_429_on_live_text_holds_the_chat_and_only_the_newest_text_follows() {
    let api = FakeBotApi::start().await;
    let outbox = outbox(&api, Harness::fast_limits());
    let slot = Slot::next();
    outbox.do_send(show(1, slot, "step 1"));
    api.wait_for_call("sendMessage", SOON).await;
    api.inject("editMessageText", Fault::RetryAfter(1));
    outbox.do_send(show(1, slot, "step 2"));
    let refused = api.wait_for_call("editMessageText", SOON).await;
    assert_eq!(refused.status, 429);
    outbox.do_send(show(1, slot, "step 3"));
    send(&outbox, SendText::new(ChatId(1), "real"))
        .await
        .expect("delivered");
    api.wait_for(SOON, "the edit after the hold", |calls| {
        calls
            .iter()
            .find(|c| c.method == "editmessagetext" && c.status == 200)
            .cloned()
    })
    .await;

    let calls = api.calls();
    let after: Vec<&Call> = calls.iter().filter(|c| c.seq > refused.seq).collect();
    let waited: Vec<Duration> = after
        .iter()
        .map(|c| c.at.duration_since(refused.at))
        .collect();
    assert!(
        waited.iter().all(|w| *w >= Duration::from_millis(900)),
        "nothing of the chat may go within retry_after = 1 s: {waited:?}"
    );
    let methods: Vec<&str> = after.iter().map(|c| c.method.as_str()).collect();
    assert_eq!(
        methods,
        ["sendmessage", "editmessagetext"],
        "the real message first"
    );
    assert_eq!(
        after[1].params["text"],
        json!("step 3"),
        "step 2 was superseded"
    );
}

/// `/stop` of a turn (`Purge`) drops what that turn queued and Telegram has
/// not taken: the rest of a text being sent, its queued text, question and
/// live text, and a text its relay hands over after the stop. Everything
/// else goes on, in order: an earlier turn's answer, a notice, another
/// topic, another turn's live text, and what is queued after.
#[actix_rt::test]
async fn purge_drops_what_the_stopped_turn_queued_and_nothing_else() {
    // A forum group: a private chat takes no topic while the bot's topics
    // mode is off.
    const GROUP: i64 = -1001;
    let (earlier, stopped) = (TurnId(1), TurnId(2));
    let api = FakeBotApi::start().await;
    let outbox = outbox(&api, Harness::fast_limits());
    api.inject("sendMessage", Fault::Delay(Duration::from_millis(800)));
    // Two pieces: the first is at Telegram when the stop comes.
    let long = format!("{}\n\n{}", "a".repeat(3000), "b".repeat(3000));
    let (one, one_sent) = SendText::tracked(ChatId(GROUP), long);
    outbox.do_send(one.for_turn(stopped));
    api.wait_for_call("sendMessage", SOON).await;
    outbox.do_send(SendText::new(ChatId(GROUP), "the earlier answer").for_turn(earlier));
    let (two, two_sent) = SendText::tracked(ChatId(GROUP), "two");
    outbox.do_send(two.for_turn(stopped));
    outbox.do_send(show_of(GROUP, Slot::next(), "its status", stopped));
    outbox.do_send(show_of(GROUP, Slot::next(), "the earlier status", earlier));
    outbox.do_send(SendText::new(ChatId(GROUP), "a notice"));
    let (question, asked) = SendQuestion::new(
        ChatId(GROUP),
        "Run it?",
        vec![vec![Button::new("Yes", "y")]],
    );
    outbox.do_send(question.for_turn(stopped));
    let mut topic = SendText::new(ChatId(GROUP), "in topic 5").for_turn(TurnId(3));
    topic.to.topic = Some(ThreadId(MessageId(5)));
    outbox.do_send(topic);
    outbox.do_send(Purge {
        to: ChatId(GROUP).into(),
        turn: stopped,
    });
    let (late, late_sent) = SendText::tracked(ChatId(GROUP), "handed over after the stop");
    outbox.do_send(late.for_turn(stopped));
    outbox.do_send(SendText::new(ChatId(GROUP), "stopped"));

    let all = api.wait_for_texts(GROUP, 6, SOON).await;
    // A long piece by its first letter and length.
    let short = |texts: &[String]| -> Vec<String> {
        let cut = |t: &String| format!("{}… ({} chars)", &t[..1], t.len());
        let name = |t: &String| if t.len() > 100 { cut(t) } else { t.clone() };
        texts.iter().map(name).collect()
    };
    assert_eq!(
        short(&all),
        [
            "a… (3000 chars)",
            "the earlier answer",
            "a notice",
            "in topic 5",
            "stopped",
            "the earlier status"
        ]
    );
    assert_eq!(
        one_sent.await.expect("answered"),
        Err(OutboxError::Dropped),
        "the piece at Telegram went, the rest did not"
    );
    assert_eq!(two_sent.await.expect("answered"), Err(OutboxError::Dropped));
    assert_eq!(asked.await.expect("answered"), Err(OutboxError::Dropped));
    assert_eq!(
        late_sent.await.expect("answered"),
        Err(OutboxError::Dropped)
    );
    outbox.send(Flush).await.expect("outbox alive");
    assert_eq!(
        short(&api.texts_to(GROUP)),
        short(&all),
        "nothing of the stopped turn after"
    );
}

/// A stopped turn's answer that was to replace its shown preview is
/// dropped, and the preview is deleted in its place (as an interrupted
/// turn's unfinished preview is), before what is queued after the stop.
#[actix_rt::test]
async fn purge_of_an_answer_into_its_preview_deletes_the_preview() {
    const CHAT: i64 = 3;
    let stopped = TurnId(4);
    let api = FakeBotApi::start().await;
    let outbox = outbox(&api, Harness::fast_limits());
    let slot = Slot::next();
    outbox.do_send(show_of(CHAT, slot, "the preview", stopped));
    api.wait_for_texts(CHAT, 1, SOON).await;
    let preview = api.sent_message(CHAT, 1).expect("the chat's first message");
    assert_eq!(preview["text"], json!("the preview"));
    // Held at Telegram while the answer and the stop are queued behind it.
    api.inject("sendMessage", Fault::Delay(Duration::from_millis(500)));
    outbox.do_send(SendText::new(ChatId(CHAT), "an earlier answer").for_turn(TurnId(3)));
    api.wait_for(SOON, "the earlier answer at Telegram", |calls| {
        (calls.iter().filter(|c| c.method == "sendmessage").count() == 2).then_some(())
    })
    .await;
    let (answer, answered) = SendText::tracked(ChatId(CHAT), "the answer");
    outbox.do_send(answer.for_turn(stopped).into_slot(Some(slot)));
    outbox.do_send(Purge {
        to: ChatId(CHAT).into(),
        turn: stopped,
    });
    outbox.do_send(SendText::new(ChatId(CHAT), "stopped"));

    let all = api.wait_for_texts(CHAT, 3, SOON).await;
    assert_eq!(all, ["the preview", "an earlier answer", "stopped"]);
    assert_eq!(answered.await.expect("answered"), Err(OutboxError::Dropped));
    outbox.send(Flush).await.expect("outbox alive");
    let deleted = api.calls_of("deleteMessage");
    assert_eq!(deleted.len(), 1, "the preview goes: {deleted:#?}");
    assert_eq!(deleted[0].params["message_id"], json!(1));
    let notice = api.calls_of("sendMessage")[2].seq;
    assert!(
        deleted[0].seq < notice,
        "deleted before what follows the stop"
    );
    assert!(api.calls_of("editMessageText").is_empty(), "never shown");
}

/// A stop that finds nothing queued in its chat is remembered all the same:
/// the stopped turn's text its relay hands over afterwards is dropped, the
/// rest of the chat's goes.
#[actix_rt::test]
async fn purge_of_an_idle_chat_drops_the_stopped_turns_later_text() {
    let api = FakeBotApi::start().await;
    let outbox = outbox(&api, Harness::fast_limits());
    outbox.do_send(Purge {
        to: ChatId(2).into(),
        turn: TurnId(7),
    });
    let (late, late_sent) = SendText::tracked(ChatId(2), "handed over after the stop");
    outbox.do_send(late.for_turn(TurnId(7)));
    let notice = SendText::new(ChatId(2), "⏹ Stopped.");
    assert!(send(&outbox, notice).await.is_ok());
    assert_eq!(
        late_sent.await.expect("answered"),
        Err(OutboxError::Dropped)
    );
    assert_eq!(api.texts_to(2), ["⏹ Stopped."]);
}

#[actix_rt::test]
async fn clear_deletes_or_folds_a_live_message_and_a_slot_never_shown_sends_nothing() {
    let api = FakeBotApi::start().await;
    let outbox = outbox(&api, Harness::fast_limits());
    let deleted = Slot::next();
    outbox.do_send(show(1, deleted, "🔧 Bash: cargo test"));
    let status = api.wait_for_call("sendMessage", SOON).await;
    outbox.do_send(Clear {
        to: ChatId(1).into(),
        slot: deleted,
        fold: None,
    });
    let delete = api.wait_for_call("deleteMessage", SOON).await;
    assert_eq!(delete.status, 200);
    let status_id = api.calls_of("sendMessage")[0].seq;
    assert!(delete.seq > status_id && status.status == 200);

    let folded = Slot::next();
    outbox.do_send(show(1, folded, "🔧 Read src/main.rs"));
    api.wait_for_texts(1, 2, SOON).await;
    outbox.do_send(Clear {
        to: ChatId(1).into(),
        slot: folded,
        fold: Some("✅ 3 tool calls · 12s".into()),
    });
    let fold = api.wait_for_call("editMessageText", SOON).await;
    assert_eq!(fold.params["text"], json!("✅ 3 tool calls · 12s"));

    // Queued behind a slow message and cleared before its turn: never sent.
    api.inject("sendMessage", Fault::Delay(Duration::from_millis(300)));
    outbox.do_send(SendText::new(ChatId(1), "slow"));
    let never = Slot::next();
    outbox.do_send(show(1, never, "never shown"));
    outbox.do_send(Clear {
        to: ChatId(1).into(),
        slot: never,
        fold: None,
    });
    send(&outbox, SendText::new(ChatId(1), "last"))
        .await
        .expect("sent");
    outbox.send(Flush).await.expect("outbox alive");
    let sent = texts(&api.calls_of("sendMessage"));
    assert!(!sent.iter().any(|t| t == "never shown"), "{sent:#?}");
    assert_eq!(api.calls_of("deleteMessage").len(), 1);
}

#[actix_rt::test]
async fn a_draft_streams_in_a_private_chat_and_a_group_gets_a_message() {
    let api = FakeBotApi::start().await;
    let outbox = outbox(&api, Harness::fast_limits());
    let slot = Slot::next();
    let mut draft = show(1, slot, "Thinking about it");
    draft.show_as = ShowAs::Draft;
    outbox.do_send(draft);
    let call = api.wait_for_call("sendMessageDraft", SOON).await;
    assert_eq!(call.status, 200, "{:?}", call.params);
    assert_eq!(call.params["draft_id"], json!(slot.0));
    assert_eq!(call.params["text"], json!("Thinking about it"));
    let ids = send(
        &outbox,
        SendText::new(ChatId(1), "Thought about it.").into_slot(Some(slot)),
    )
    .await
    .expect("sent");
    assert_eq!(ids.len(), 1);
    assert!(
        api.calls_of("editMessageText").is_empty(),
        "a draft is not a message: the answer is a new one"
    );

    let group = Slot::next();
    let mut draft = show(-100_200, group, "In a group");
    draft.show_as = ShowAs::Draft;
    outbox.do_send(draft);
    let message = api
        .wait_for(SOON, "the group's live message", |calls| {
            calls
                .iter()
                .find(|c| c.method == "sendmessage" && c.params["chat_id"] == json!(-100_200))
                .cloned()
        })
        .await;
    assert_eq!(message.status, 200);
    assert_eq!(
        api.calls_of("sendMessageDraft").len(),
        1,
        "drafts are for private chats"
    );
}

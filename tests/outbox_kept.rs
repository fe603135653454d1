//! What a previous process left for Telegram, read back by the next
//! outbox: a question keeps its buttons (only an approval's are dropped),
//! a file whose spooled copy is gone is let go (logged) without holding the
//! chat, and everything else goes in order. The outbox alone against the
//! fake Bot API, on a state file in a temp dir; the same through the real
//! binary and a `kill -9` is in `outbox_kept_restart.rs`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use std::io::Write as _;
use support::*;
use teloxide::types::ChatId;
use turnstile::events::EventBus;
use turnstile::ids::{Conversation, TurnId};
use turnstile::ops::Metrics;

use turnstile::state::{Kept, KeptFile, KeptQuestion, LeftToSend, Store, StoreHandle};
use turnstile::telegram::{Button, Flush, Outbox, Purge, SendQuestion, SendText};

/// The chat the kept rows are for.
const CHAT_1: Conversation = Conversation {
    chat: ChatId(1),
    topic: None,
};

/// The durable outbox on `api` and `store`, given what is `left` to send.
fn durable(api: &FakeBotApi, store: &StoreHandle, left: LeftToSend) -> actix::Addr<Outbox> {
    Outbox::durable(
        api.bot(),
        Harness::fast_limits(),
        Arc::new(Metrics::new()),
        EventBus::new(),
        store.clone(),
        left,
    )
    .start()
}

/// What the store keeps to send.
async fn to_send(store: &StoreHandle) -> LeftToSend {
    store.outgoing().await.expect("the store reads")
}

/// A question, a file whose spooled copy is gone, and a text: the question
/// goes with its buttons, the file is let go, the text follows; none is
/// left in the state file.
#[actix_rt::test]
async fn a_left_question_keeps_its_buttons_and_a_file_without_its_copy_is_let_go() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = StoreHandle::start(Arc::new(Store::open(&dir.path().join("state.db")).unwrap()));
    let pick = || vec![vec![("Sonnet".to_string(), "pick:1:0".to_string())]];
    let question = KeptQuestion {
        buttons: pick(),
        file: None,
        ends_with_process: false,
        shown: None,
    };
    store.keep_outgoing_question(CHAT_1, "Which model?", question);
    let file = KeptFile {
        name: "gone.txt".into(),
        caption: None,
        as_photo: false,
    };
    store.keep_outgoing_file(CHAT_1, file, |out| out.write_all(b"the bytes"));
    store.keep_outgoing(CHAT_1, None, "after both", false);
    store.flushed().await;
    let spool = dir.path().join("state.db-outgoing");
    for copy in std::fs::read_dir(&spool).unwrap() {
        std::fs::remove_file(copy.unwrap().path()).unwrap();
    }
    let mut left = to_send(&store).await;
    assert_eq!(left.rows.len(), 3);
    // The chat's messages are known up to 0: no copy can be taken for one
    // sent before (nothing unexplained lies before it).
    left.last_ids = vec![(1, 0)];
    let outbox = durable(&api, &store, left);
    let texts = api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(texts, vec!["Which model?", "after both"]);
    let asked = api.calls_of("sendMessage");
    assert_eq!(buttons_of(&asked[0]), pick(), "its buttons, as they were");
    assert!(api.uploads().is_empty());
    outbox.send(turnstile::telegram::Flush).await.unwrap();
    store.flushed().await;
    assert!(to_send(&store).await.rows.is_empty(), "all settled");
}

/// A question queued during an outage is in the state file, buttons and
/// all, until Telegram takes it; then it is not.
#[actix_rt::test]
async fn a_question_waiting_for_telegram_is_in_the_state_file_until_it_is_sent() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = StoreHandle::start(Arc::new(Store::open(&dir.path().join("state.db")).unwrap()));
    for _ in 0..4 {
        api.inject("sendMessage", Fault::ServerError(502));
    }
    let outbox = durable(&api, &store, LeftToSend::default());
    let buttons = vec![vec![Button::new("❌ daily", "unschedule:7")]];
    let (question, sent) = SendQuestion::new(ChatId(1), "Your schedules", buttons);
    outbox.do_send(question);
    api.wait_for(SOON, "the question tried", |calls| {
        (calls.iter().filter(|c| c.status == 502).count() >= 2).then_some(())
    })
    .await;
    store.flushed().await;
    let kept = to_send(&store).await.rows;
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].text, "Your schedules");
    assert_eq!(
        kept[0].kept,
        Some(Kept::Question(KeptQuestion {
            buttons: vec![vec![("❌ daily".into(), "unschedule:7".into())]],
            file: None,
            ends_with_process: false,
            shown: None,
        }))
    );
    let id = tokio::time::timeout(Duration::from_secs(30), sent)
        .await
        .expect("sent in time");
    assert!(matches!(id, Ok(Ok(_))), "{id:?}");
    outbox.do_send(SendText::new(ChatId(1), "then a text"));
    api.wait_for_texts(1, 2, SOON).await;
    outbox.send(turnstile::telegram::Flush).await.unwrap();
    store.flushed().await;
    assert!(to_send(&store).await.rows.is_empty(), "all settled");
}

/// A stopped turn's text waiting for Telegram is dropped with its row: the
/// next process finds nothing of it to send. An earlier turn's text waiting
/// beside it is sent once and its row settled too.
#[actix_rt::test]
async fn a_stopped_turns_waiting_text_leaves_no_row_for_the_next_process() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = StoreHandle::start(Arc::new(Store::open(&dir.path().join("state.db")).unwrap()));
    for _ in 0..500 {
        api.inject("sendMessage", Fault::ServerError(502));
    }
    let outbox = durable(&api, &store, LeftToSend::default());
    let (earlier, stopped) = (TurnId(1), TurnId(2));
    let queue = |text: &str, turn| outbox.send(SendText::new(CHAT_1, text).for_turn(turn));
    queue("held by Telegram", earlier).await.unwrap();
    api.wait_for(SOON, "the first text refused", |calls| {
        calls.iter().any(|c| c.status == 502).then_some(())
    })
    .await;
    queue("the earlier answer", earlier).await.unwrap();
    queue("the stopped turn's text", stopped).await.unwrap();
    store.flushed().await;
    assert_eq!(to_send(&store).await.rows.len(), 3, "all kept meanwhile");
    outbox
        .send(Purge {
            to: CHAT_1,
            turn: stopped,
        })
        .await
        .unwrap();
    api.clear_faults();
    outbox.send(Flush).await.unwrap();
    assert_eq!(api.texts_to(1), ["held by Telegram", "the earlier answer"]);
    store.flushed().await;
    let left = to_send(&store).await.rows;
    assert!(left.is_empty(), "nothing left to send again: {left:?}");
}

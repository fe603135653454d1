//! Recovery reads each message back as the intake read it: its place (a
//! group, whatever the sign of its id), its album and what it asks are
//! stored, not guessed.

mod support;

use serde_json::{Value, json};
use support::*;
use teloxide::types::{ChatId, MessageId, UserId};
use turnstile::agent::Scenario;
use turnstile::incoming::{Ask, ChatKind, Command, Incoming};

/// A group whose id is positive: only the stored place says it is a group.
const GROUP: i64 = 4242;
/// Another allowed user, in their private chat.
const OTHER: i64 = 1002;

fn row(update_id: i64, chat: i64, from: i64, message_id: i32, text: &str) -> Incoming {
    Incoming {
        update_id,
        to: ChatId(chat).into(),
        from: UserId(u64::try_from(from).unwrap()),
        message_id: MessageId(message_id),
        text: text.into(),
        ..Incoming::default()
    }
}

fn sends_to(h: &Harness, chat: i64) -> Vec<Value> {
    h.api
        .calls_of("sendMessage")
        .into_iter()
        .filter(|c| c.status == 200 && c.params["chat_id"] == json!(chat))
        .map(|c| c.params)
        .collect()
}

#[actix_rt::test]
async fn a_recovered_group_message_album_and_command_are_read_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    {
        let store = turnstile::state::Store::open(&db).unwrap();
        let mut group = row(1, GROUP, USER, 77, "group question");
        group.place = ChatKind::Group;
        let mut first = row(2, USER, USER, 80, "album one");
        let mut second = row(3, USER, USER, 81, "album two");
        first.album = Some("album-1".into());
        second.album = Some("album-1".into());
        let mut new = row(4, OTHER, OTHER, 90, "");
        new.ask = Ask::Command(Command::New);
        for m in [group, first, second, new] {
            store.accept(&m).unwrap();
        }
    }
    let db_env = db.display().to_string();
    let mut h = Harness::start(
        Scenario::default(),
        &[
            ("TURNSTILE_STATE_PATH", &db_env),
            // Only the album merges the two items into one turn.
            ("TURNSTILE_DISPATCHER_MERGE_WINDOW", "0s"),
        ],
    )
    .await;
    h.turn_ended(GROUP, 1).await;
    h.turn_ended(USER, 1).await;
    let sent = sends_to(&h, GROUP);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        sent[0]["reply_parameters"]["message_id"],
        json!(77),
        "a group's answer replies to the message: {sent:?}"
    );
    assert_eq!(
        h.api.wait_for_texts(USER, 1, SOON).await,
        vec!["echo: album one\n\nalbum two"],
        "the album is one turn"
    );
    assert_eq!(
        h.api.wait_for_texts(OTHER, 1, SOON).await,
        vec!["🆕 The next message starts a fresh conversation."],
        "the command is answered as one, not handed to an agent"
    );
    assert!(h.unfinished().await.is_empty());
    assert_eq!(
        h.backend.opened(),
        2,
        "two turns: the group's and the album's"
    );
    assert!(
        !h.seen.iter().any(|e| matches!(
            e,
            turnstile::events::BotEvent::TurnStarted { chat, .. } if chat.0 == OTHER
        )),
        "no turn for the command"
    );
}

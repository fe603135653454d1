//! The intake's tests.

use super::*;

fn update(id: i32) -> Update {
    serde_json::from_value(serde_json::json!({
        "update_id": id,
        "message": {
            "message_id": id, "date": 0, "text": "hi",
            "chat": {"id": 5, "type": "private", "first_name": "a"},
            "from": {"id": 5, "is_bot": false, "first_name": "a"},
        }
    }))
    .expect("an update")
}

#[test]
fn an_update_whose_reading_panics_is_dropped_with_an_error_and_the_rest_go_on() {
    let log = crate::ops::logging::Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let kept = tracing::subscriber::with_default(subscriber, || {
        take_each(vec![update(1), update(2), update(3)], |u| {
            assert_ne!(u.id.0, 2, "injected: update 2 cannot be read");
            Some(u.id.0)
        })
    });
    assert_eq!(kept, vec![1, 3]);
    let log = log.text();
    let line = log
        .lines()
        .find(|l| l.contains("ERROR"))
        .unwrap_or_else(|| panic!("no ERROR line in {log}"));
    assert!(
        line.contains("update_id=2") && line.contains("injected: update 2"),
        "{line}"
    );
}

/// A message from user 5 in `chat`, with these fields.
fn message(chat: serde_json::Value, fields: serde_json::Value) -> TgMessage {
    let mut message = serde_json::json!({
        "message_id": 31, "date": 7, "chat": chat,
        "from": {"id": 5, "is_bot": false, "first_name": "a"},
    });
    for (key, value) in fields.as_object().expect("fields").clone() {
        message[key] = value;
    }
    serde_json::from_value(message).expect("a message")
}

fn group() -> serde_json::Value {
    serde_json::json!({"id": -100, "type": "supergroup", "title": "g"})
}

fn private() -> serde_json::Value {
    serde_json::json!({"id": 5, "type": "private", "first_name": "a"})
}

fn text(text: &str) -> serde_json::Value {
    serde_json::json!({ "text": text })
}

/// User 5 let in.
fn admitted() -> AccessConfig {
    AccessConfig {
        allowed_users: vec![5],
        ..AccessConfig::default()
    }
}

#[test]
fn a_command_is_parsed_once_at_the_intake_with_its_place() {
    use crate::incoming::Command;
    let read = |chat, fields| read(9, &message(chat, fields), "TurnBot", &admitted());
    let stop = read(group(), text("/stop@turnbot  now ")).expect("taken");
    assert_eq!(stop.ask, Ask::Command(Command::Stop));
    assert_eq!(stop.text, "now", "its arguments");
    assert_eq!(stop.place, ChatKind::Group);
    assert_eq!(stop.answer_to(), Some(teloxide::types::MessageId(31)));
    assert_eq!((stop.update_id, stop.date, stop.from.0), (9, 7, 5));
    let stop = read(private(), text("/STOP")).expect("taken");
    assert_eq!(stop.ask, Ask::Command(Command::Stop));
    assert_eq!((stop.place, stop.answer_to()), (ChatKind::Private, None));
    // After a mention, a command; the mention alone is text.
    let mentioned = read(group(), text("@TurnBot /new")).expect("taken");
    assert_eq!(mentioned.ask, Ask::Command(Command::New));
    let hello = read(group(), text("@TurnBot:  hello ")).expect("taken");
    assert_eq!((hello.ask, hello.text.as_str()), (Ask::Agent, "hello"));
    let unknown = read(private(), text("/Frob x")).expect("taken");
    assert_eq!(unknown.ask, Ask::Unknown("frob".into()));
    assert!(read(group(), text("/stop@OtherBot")).is_none());
    assert!(
        read(private(), serde_json::json!({})).is_none(),
        "nothing to answer"
    );
}

#[test]
fn a_strangers_message_keeps_nothing_they_wrote() {
    let stranger = read(
        9,
        &message(private(), text("/permissions clear")),
        "TurnBot",
        &AccessConfig::default(),
    )
    .expect("taken, to be refused");
    assert_eq!(stranger.ask, Ask::Agent, "not even the command");
    assert!(stranger.text.is_empty() && stranger.files.is_empty());
    assert_eq!(stranger.author, Author::default(), "nor their name");
}

#[test]
fn an_admitted_sender_is_read_with_their_name_and_username() {
    let from = serde_json::json!({"from": {"id": 5, "is_bot": false, "first_name": "Ann",
        "last_name": "Lee", "username": "ann"}, "text": "hi"});
    let m = read(9, &message(group(), from), "TurnBot", &admitted()).expect("taken");
    assert_eq!(
        m.author,
        Author {
            name: "Ann Lee".into(),
            username: Some("ann".into())
        }
    );
}

#[test]
fn a_forum_topic_and_an_album_are_read() {
    let m = read(
        9,
        &message(
            group(),
            serde_json::json!({
                "message_thread_id": 42, "is_topic_message": true,
                "media_group_id": "alb", "caption": "look",
                "photo": [{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1, "file_size": 1}],
            }),
        ),
        "TurnBot",
        &admitted(),
    )
    .expect("taken");
    assert_eq!(m.to.key(), "-100_42");
    assert_eq!(m.album.as_deref(), Some("alb"));
    assert_eq!((m.text.as_str(), m.files.len()), ("look", 1));
}

#[test]
fn an_id_far_below_the_offset_is_a_reset_and_a_near_one_is_not() {
    assert_eq!(reset_start(5_000_000, &[12, 13]), Some(12));
    assert_eq!(reset_start(5_000_000, &[4_999_990]), None);
    assert_eq!(reset_start(0, &[12]), None, "no offset yet");
    assert_eq!(reset_start(5_000_000, &[]), None);
}

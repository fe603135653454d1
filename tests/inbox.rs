//! The durable inbox: an update already accepted is never handled again.

mod support;

use support::*;
use turnstile::agent::Scenario;

#[actix_rt::test]
async fn a_redelivered_update_is_not_handled_twice() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let first_id;
    {
        let mut h = Harness::start(Scenario::default(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
        first_id = h.say(1, USER, "hello");
        h.turn_ended(1, 1).await;
        h.bot.stop().await;
        assert_eq!(h.texts(1), vec!["echo: hello"]);
    }
    // Telegram lost our confirmation: the offset is back to the start and
    // the same update comes again.
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute("UPDATE meta SET value = '0' WHERE key = 'offset'", [])
        .unwrap();
    let mut h = Harness::start(Scenario::default(), &[("TURNSTILE_STATE_PATH", &db_env)]).await;
    h.api
        .push_update(serde_json::json!({"update_id": first_id, "message": {
            "message_id": 1, "date": 0,
            "chat": {"id": 1, "type": "private", "first_name": "c"},
            "from": {"id": USER, "is_bot": false, "first_name": "u"},
            "text": "hello"
        }}));
    h.say(1, USER, "next");
    h.turn_ended(1, 1).await;
    assert_eq!(
        h.texts(1),
        vec!["echo: next"],
        "the redelivered update was skipped"
    );
    let counts = h.bot.inbox.counts().await;
    assert!(
        counts.iter().all(|(state, _)| state == "done"),
        "{counts:?}"
    );
}

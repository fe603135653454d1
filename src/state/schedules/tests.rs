use teloxide::types::{ChatId, UserId};

use super::*;
use crate::state::InboxState;

/// Slots after the schedules' creation.
fn slot(n: i64) -> i64 {
    now_ms() + n * 60_000
}

fn new(chat: i64) -> NewSchedule {
    NewSchedule {
        to: ChatId(chat).into(),
        timing: "every 1m".into(),
        tz: "UTC".into(),
        prompt: "check".into(),
        made_by: 7,
        origin: Origin::Chat,
    }
}

fn run(chat: i64) -> Incoming {
    Incoming {
        to: ChatId(chat).into(),
        from: UserId(7),
        text: "⏰ #1: check".into(),
        source: crate::incoming::Source::Schedule,
        ..Incoming::default()
    }
}

#[test]
fn a_slot_is_claimed_once_with_its_inbox_row_in_the_same_transaction() {
    let (s1, s2) = (slot(1), slot(2));
    let store = Store::in_memory().unwrap();
    let Added::Id(id) = store.add_schedule(&new(5), 10).unwrap() else {
        panic!("not added");
    };
    let first = store.claim_run(id, s1, 0, false, run(5)).unwrap();
    let first = first.expect("claimed");
    assert!(
        first.update_id < 0,
        "a run's update id is negative: {}",
        first.update_id
    );
    assert_eq!(
        store.claim_run(id, s1, 0, false, run(5)).unwrap(),
        None,
        "the same slot is never claimed twice"
    );
    let unfinished = store.unfinished().unwrap();
    assert_eq!(unfinished.len(), 1);
    assert_eq!(unfinished[0].message, first);
    assert_eq!(unfinished[0].state, InboxState::Queued);
    assert_eq!(store.runs_of(id).unwrap(), vec![(s1, 0)]);
    assert_eq!(store.schedules().unwrap()[0].last_slot, s1);
    let second = store.claim_run(id, s2, 3, false, run(5)).unwrap().unwrap();
    assert_ne!(second.update_id, first.update_id);
}

#[test]
fn a_failed_claim_writes_nothing() {
    let s1 = slot(1);
    let store = Store::in_memory().unwrap();
    let Added::Id(id) = store.add_schedule(&new(5), 10).unwrap() else {
        panic!("not added");
    };
    store.break_for_tests();
    assert!(store.claim_run(id, s1, 0, false, run(5)).is_err());
    assert_eq!(
        store.runs_of(id).unwrap(),
        vec![],
        "the claim was rolled back with the inbox write"
    );
    assert_eq!(
        store.schedules().unwrap()[0].last_slot,
        store.schedules().unwrap()[0].created_at
    );
}

#[test]
fn a_once_schedule_is_gone_after_its_run_and_a_removed_one_never_runs() {
    let s1 = slot(1);
    let store = Store::in_memory().unwrap();
    let mut once = new(5);
    once.timing = "once 99".into();
    let Added::Id(id) = store.add_schedule(&once, 10).unwrap() else {
        panic!("not added");
    };
    assert!(store.claim_run(id, 99, 0, true, run(5)).unwrap().is_some());
    assert!(store.schedules().unwrap().is_empty());
    let Added::Id(id) = store.add_schedule(&new(5), 10).unwrap() else {
        panic!("not added");
    };
    assert_eq!(
        store.remove_schedule(id, ChatId(6).into()).unwrap(),
        Removed::NotFound,
        "another chat's"
    );
    assert_eq!(
        store.remove_schedule(id, ChatId(5).into()).unwrap(),
        Removed::Removed
    );
    assert_eq!(store.claim_run(id, s1, 0, false, run(5)).unwrap(), None);
}

#[test]
fn a_conversation_has_a_bounded_number_of_its_own_schedules() {
    let store = Store::in_memory().unwrap();
    for _ in 0..3 {
        assert!(matches!(
            store.add_schedule(&new(5), 3).unwrap(),
            Added::Id(_)
        ));
    }
    assert_eq!(store.add_schedule(&new(5), 3).unwrap(), Added::TooMany(3));
    assert!(
        matches!(store.add_schedule(&new(6), 3).unwrap(), Added::Id(_)),
        "per conversation"
    );
}

#[test]
fn the_operators_schedules_follow_the_config_and_the_chat_cannot_remove_them() {
    let s1 = slot(1);
    let store = Store::in_memory().unwrap();
    let mut a = new(5);
    a.origin = Origin::Operator;
    store
        .sync_operator_schedules(&[("standup".into(), a.clone()), ("b".into(), a.clone())])
        .unwrap();
    let rows = store.schedules().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].name(), "standup");
    assert_eq!(rows[0].origin, Origin::Operator);
    assert_eq!(
        store.remove_schedule(rows[0].id, ChatId(5).into()).unwrap(),
        Removed::Operator
    );
    store.claim_run(rows[0].id, s1, 0, false, run(5)).unwrap();
    a.prompt = "changed".into();
    store
        .sync_operator_schedules(&[("standup".into(), a)])
        .unwrap();
    let rows = store.schedules().unwrap();
    assert_eq!(rows.len(), 1, "one no longer in the config is gone");
    assert_eq!(
        (rows[0].prompt.as_str(), rows[0].last_slot),
        ("changed", s1),
        "its last slot kept"
    );
}

#[test]
fn a_version_8_file_gains_the_schedules_with_its_inbox_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    {
        let old = Store::create_at_version(&path, 8).unwrap();
        // A row as version 8 wrote it (it had no author's columns).
        old.lock()
            .execute_batch(
                "INSERT INTO inbox (update_id, chat_id, topic, user_id, message_id, date,
                        place, ask, text, files, album, state, updated_at)
                 VALUES (0, 5, 0, 7, 0, 0, 'private', '', '⏰ #1: check', '', NULL, 'queued', 0);",
            )
            .unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.schema_version().unwrap(),
        crate::state::SCHEMA_VERSION
    );
    assert_eq!(store.unfinished().unwrap().len(), 1);
    assert!(store.schedules().unwrap().is_empty());
    assert!(matches!(
        store.add_schedule(&new(5), 1).unwrap(),
        Added::Id(_)
    ));
}

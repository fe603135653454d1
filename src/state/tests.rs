//! The store's tests.

use teloxide::types::{ChatId, MessageId, ThreadId, UserId};

use super::*;
use crate::attachment::Attachment;
use crate::incoming::{Ask, Author, ChatKind, Command, Incoming};

fn msg(update_id: i64, chat_id: i64) -> Incoming {
    Incoming {
        update_id,
        to: ChatId(chat_id).into(),
        from: UserId(7),
        message_id: MessageId(i32::try_from(update_id * 10).unwrap()),
        text: format!("m{update_id}"),
        date: 1,
        ..Incoming::default()
    }
}

#[test]
fn an_update_is_accepted_once() {
    let store = Store::in_memory().unwrap();
    assert!(store.accept(&msg(1, 5)).unwrap());
    assert!(
        !store.accept(&msg(1, 5)).unwrap(),
        "a redelivery is not new"
    );
    assert_eq!(store.unfinished().unwrap().len(), 1);
}

#[test]
fn states_move_and_finished_rows_leave_the_open_set() {
    let store = Store::in_memory().unwrap();
    for id in 1..=4 {
        store.accept(&msg(id, 5)).unwrap();
    }
    store.start_turn(&[1, 2], 1).unwrap();
    store.mark(&[2], InboxState::Replied).unwrap();
    store.mark(&[3], InboxState::Done).unwrap();
    let open: Vec<(i64, InboxState)> = store
        .unfinished()
        .unwrap()
        .into_iter()
        .map(|r| (r.message.update_id, r.state))
        .collect();
    assert_eq!(
        open,
        vec![
            (1, InboxState::Running),
            (2, InboxState::Replied),
            (4, InboxState::Queued)
        ]
    );
}

#[test]
fn the_offset_never_moves_backwards() {
    let store = Store::in_memory().unwrap();
    assert_eq!(store.offset().unwrap(), 0);
    store.set_offset(10).unwrap();
    store.set_offset(4).unwrap();
    assert_eq!(store.offset().unwrap(), 10);
    store.set_offset(11).unwrap();
    assert_eq!(store.offset().unwrap(), 11);
}

#[test]
fn sessions_are_kept_and_forgotten() {
    let store = Store::in_memory().unwrap();
    store.set_session(ChatId(5).into(), Some("s1")).unwrap();
    store.set_session(ChatId(5).into(), Some("s2")).unwrap();
    assert_eq!(
        store.session(ChatId(5).into()).unwrap().as_deref(),
        Some("s2")
    );
    let topic = Conversation::new(ChatId(5), Some(ThreadId(MessageId(42))));
    store.set_session(topic, Some("t1")).unwrap();
    assert_eq!(store.session(topic).unwrap().as_deref(), Some("t1"));
    assert_eq!(
        store.session(ChatId(5).into()).unwrap().as_deref(),
        Some("s2")
    );
    store.set_session(ChatId(5).into(), None).unwrap();
    assert_eq!(store.session(ChatId(5).into()).unwrap(), None);
    assert_eq!(store.session(topic).unwrap().as_deref(), Some("t1"));
}

#[test]
fn recent_sessions_are_the_ones_used_since_most_recent_first() {
    let store = Store::in_memory().unwrap();
    let topic = Conversation::new(ChatId(5), Some(ThreadId(MessageId(42))));
    let used = [
        (ChatId(5).into(), 1_000),
        (topic, 3_000),
        (ChatId(6).into(), 2_000),
    ];
    for (to, at) in used {
        store.set_session(to, Some("s")).unwrap();
        store
            .lock()
            .execute(
                "UPDATE sessions SET updated_at = ?1 WHERE chat_id = ?2 AND topic = ?3",
                rusqlite::params![at, to.chat.0, to.topic_number()],
            )
            .unwrap();
    }
    assert_eq!(
        store.recent_sessions(1_500).unwrap(),
        vec![topic, ChatId(6).into()],
        "used since 1500, most recent first"
    );
    store.set_session(ChatId(6).into(), None).unwrap();
    assert_eq!(
        store.recent_sessions(0).unwrap(),
        vec![topic, ChatId(5).into()]
    );
}

#[test]
fn a_message_is_read_back_whole_as_the_intake_read_it() {
    let store = Store::in_memory().unwrap();
    // A group message in a forum topic, one item of an album, with a file;
    // the chat id is positive, so only the stored place says it is a group.
    let mut m = msg(1, 100);
    m.to = Conversation::new(ChatId(100), Some(ThreadId(MessageId(42))));
    m.place = ChatKind::Group;
    m.album = Some("album-1".into());
    m.author = Author {
        name: "Ann \"Lee\"\nsecond line".into(),
        username: Some("ann".into()),
    };
    m.files = vec![Attachment {
        kind: crate::attachment::FileKind::Voice,
        file_id: "f1".into(),
        name: None,
        size: 9,
    }];
    // A private command, its arguments as the text.
    let mut command = msg(2, -5);
    command.ask = Ask::Command(Command::Permissions);
    command.text = "clear".into();
    let mut unknown = msg(3, 5);
    unknown.ask = Ask::Unknown("frob".into());
    for m in [&m, &command, &unknown] {
        store.accept(m).unwrap();
    }
    let rows: Vec<Incoming> = store
        .unfinished()
        .unwrap()
        .into_iter()
        .map(|r| r.message)
        .collect();
    assert_eq!(rows, vec![m.clone(), command, unknown]);
    assert_eq!(rows[0].to.key(), "100_42");
    assert_eq!(rows[0].answer_to(), Some(MessageId(10)));
    assert_eq!(rows[1].answer_to(), None, "a private chat, whatever its id");
}

#[test]
fn rows_written_before_the_place_was_stored_get_it_from_the_chat_id_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v7.db");
    {
        let old = Store::create_at_version(&path, 7).unwrap();
        old.lock()
            .execute_batch(
                "INSERT INTO inbox (update_id, chat_id, user_id, message_id, text, date, state, updated_at, topic, files)
                 VALUES (1, -100, 7, 10, '/stop', 1, 'queued', 0, 0, ''),
                        (2, 5, 7, 20, 'hi', 1, 'running', 0, 0, '');",
            )
            .unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let rows = store.unfinished().unwrap();
    let read: Vec<(ChatKind, Ask, &str, Option<String>)> = rows
        .iter()
        .map(|r| {
            let m = &r.message;
            (m.place, m.ask.clone(), m.text.as_str(), m.album.clone())
        })
        .collect();
    // What an old row's text was, it stays: the agent's text.
    assert_eq!(
        read,
        vec![
            (ChatKind::Group, Ask::Agent, "/stop", None),
            (ChatKind::Private, Ask::Agent, "hi", None),
        ]
    );
    assert!(rows.iter().all(|r| r.message.author == Author::default()));
}

fn chat(id: i64) -> Conversation {
    ChatId(id).into()
}

#[test]
fn always_rules_are_kept_per_conversation_and_project_and_cleared() {
    let store = Store::in_memory().unwrap();
    let git = AlwaysRule::BashCommand("git status".into());
    store.allow_always(chat(1), "", &git, 7).unwrap();
    store.allow_always(chat(1), "", &git, 8).unwrap();
    store
        .allow_always(chat(1), "", &AlwaysRule::Tool("WebFetch".into()), 7)
        .unwrap();
    store
        .allow_always(chat(2), "", &AlwaysRule::Tool("Read".into()), 8)
        .unwrap();
    let request = AlwaysRule::Request(r#"{"title":"x"}"#.into());
    store.allow_always(chat(1), "staging", &request, 7).unwrap();
    let rules = store.always_rules(chat(1), "").unwrap();
    assert_eq!(rules.len(), 2);
    assert_eq!(
        rules[0],
        AlwaysGrant {
            rule: git,
            granted_by: 7
        },
        "the first grant is kept"
    );
    assert_eq!(
        store.always_rules(chat(2), "").unwrap()[0].rule,
        AlwaysRule::Tool("Read".into())
    );
    // A rule granted in a project is that project's, and a topic's its own.
    assert_eq!(
        store.always_rules(chat(1), "staging").unwrap()[0].rule,
        request
    );
    assert!(store.always_rules(chat(1), "prod").unwrap().is_empty());
    let topic = Conversation::new(ChatId(1), Some(ThreadId(MessageId(42))));
    assert!(store.always_rules(topic, "").unwrap().is_empty());
    assert_eq!(store.clear_always(chat(1), "").unwrap(), 2);
    assert!(store.always_rules(chat(1), "").unwrap().is_empty());
    assert_eq!(store.always_rules(chat(1), "staging").unwrap().len(), 1);
    assert_eq!(store.always_rules(chat(2), "").unwrap().len(), 1);
}

#[test]
fn rules_of_a_chat_that_chose_a_project_are_dropped_at_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v12.db");
    {
        let old = Store::create_at_version(&path, 12).unwrap();
        old.lock()
            .execute_batch(
                "INSERT INTO always_allowed (chat_id, kind, value, granted_by, created_at) VALUES
                    (1, 'tool', 'WebFetch', 7, 1), (1, 'bash_command', 'ls', 7, 2),
                    (2, 'tool', 'WebFetch', 8, 3);
                 INSERT INTO choices (chat_id, topic, project) VALUES (2, 0, 'prod'), (1, 0, '');",
            )
            .unwrap();
    }
    let mut store = None;
    let log = logged(|| store = Some(Store::open(&path).unwrap()));
    let store = store.unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(store.always_rules(chat(1), "").unwrap().len(), 2);
    assert!(store.always_rules(chat(2), "").unwrap().is_empty());
    assert!(store.always_rules(chat(2), "prod").unwrap().is_empty());
    assert!(
        log.contains("dropped 1 \"always in this chat\" rule(s) of chats that chose a project"),
        "{log}"
    );
}

/// What a closure logged, as text.
fn logged(run: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Sink(std::sync::Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, run);
    let bytes = sink.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn old_bash_rules_are_dropped_at_the_upgrade_with_one_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        let old = Store::create_at_version(&path, 5).unwrap();
        // Rules as version 5 stored them: a Bash rule was the command's
        // first word; any other tool, its name.
        old.lock()
            .execute_batch(
                "INSERT INTO permissions (chat_id, rule, granted_by, created_at) VALUES
                    (1, 'Bash(git)', 7, 1), (1, 'WebFetch', 7, 2),
                    (2, 'Bash(rm)', 8, 3), (2, 'mcp__files__read', 8, 4);",
            )
            .unwrap();
    }
    let mut store = None;
    let log = logged(|| store = Some(Store::open(&path).unwrap()));
    let store = store.unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    let rules = |id| -> Vec<AlwaysRule> {
        store
            .always_rules(chat(id), "")
            .unwrap()
            .into_iter()
            .map(|g| g.rule)
            .collect()
    };
    assert_eq!(rules(1), vec![AlwaysRule::Tool("WebFetch".into())]);
    assert_eq!(rules(2), vec![AlwaysRule::Tool("mcp__files__read".into())]);
    assert_eq!(store.always_rules(chat(1), "").unwrap()[0].granted_by, 7);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("old shape")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains("dropped 2 "), "{log}");
    // A file with no old rules says nothing of them.
    let fresh = dir.path().join("fresh.db");
    let log = logged(|| drop(Store::open(&fresh).unwrap()));
    assert!(!log.contains("old shape"), "{log}");
}

#[test]
fn a_file_written_by_the_previous_schema_is_migrated_with_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        let old = Store::create_at_version(&path, 1).unwrap();
        assert_eq!(old.schema_version().unwrap(), 1);
        // Written with version 1's own columns.
        old.lock()
            .execute_batch(
                "INSERT INTO inbox (update_id, chat_id, user_id, message_id, text, date, state, updated_at)
                 VALUES (3, 9, 7, 30, 'm3', 1, 'queued', 0);
                 INSERT INTO sessions (chat_id, session_id, updated_at) VALUES (9, 'kept', 0);",
            )
            .unwrap();
        old.set_offset(4).unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    assert_eq!(store.unfinished().unwrap()[0].message.text, "m3");
    assert_eq!(
        store.session(ChatId(9).into()).unwrap().as_deref(),
        Some("kept")
    );
    assert_eq!(store.offset().unwrap(), 4);
    store.start_turn(&[3], 1).unwrap();
    store
        .record_turn(&TurnRecord {
            chat_id: 9,
            turn: 1,
            started_at: 1,
            ended_at: 2,
            outcome: "completed".into(),
            finished: true,
            api_calls: 1,
            cost_usd: 0.0,
        })
        .unwrap();
    assert_eq!(
        store.turns_of(9).unwrap(),
        vec![("completed".to_string(), true)]
    );
}

#[test]
fn the_state_file_and_its_wal_and_shm_are_mode_0600() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("private.db");
    // An existing file another build left readable by all.
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let store = Store::open(&path).unwrap();
    store.accept(&msg(1, 5)).unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let file = dir.path().join(format!("private.db{suffix}"));
        let mode = std::fs::metadata(&file)
            .unwrap_or_else(|e| panic!("{} exists: {e}", file.display()))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{}: {mode:o}", file.display());
    }
    // A new file too.
    let fresh = dir.path().join("fresh.db");
    Store::open(&fresh).unwrap().accept(&msg(1, 5)).unwrap();
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
}

/// Backdates an inbox row and the chat's turn records by `age`.
fn backdate(store: &Store, update_id: i64, chat_id: i64, age: std::time::Duration) {
    let then = now_ms() - i64::try_from(age.as_millis()).unwrap();
    let conn = store.lock();
    conn.execute(
        "UPDATE inbox SET updated_at = ?1 WHERE update_id = ?2",
        params![then, update_id],
    )
    .unwrap();
    conn.execute(
        "UPDATE turns SET ended_at = ?1 WHERE chat_id = ?2",
        params![then, chat_id],
    )
    .unwrap();
}

fn record(store: &Store, chat_id: i64) {
    store
        .record_turn(&TurnRecord {
            chat_id,
            turn: 1,
            started_at: now_ms(),
            ended_at: now_ms(),
            outcome: "completed".into(),
            finished: true,
            api_calls: 1,
            cost_usd: 0.0,
        })
        .unwrap();
}

#[test]
fn prune_removes_finished_rows_and_turns_older_than_the_retention() {
    let day = std::time::Duration::from_secs(86_400);
    let store = Store::in_memory().unwrap();
    for (id, chat) in [(1, 10), (2, 20), (3, 30), (4, 40)] {
        store.accept(&msg(id, chat)).unwrap();
    }
    store.mark(&[1, 2], InboxState::Done).unwrap();
    store.mark(&[4], InboxState::Reported).unwrap();
    record(&store, 10);
    record(&store, 20);
    // Old: 1 (done), 3 (still queued), 4 (reported) and chat 10's turn.
    backdate(&store, 1, 10, 31 * day);
    backdate(&store, 3, 30, 31 * day);
    backdate(&store, 4, 40, 31 * day);
    let pruned = store.prune(30 * day).unwrap();
    assert_eq!(pruned, Pruned { inbox: 2, turns: 1 });
    let left: Vec<(String, i64)> = store.counts().unwrap();
    assert_eq!(
        left,
        vec![("done".into(), 1), ("queued".into(), 1)],
        "the fresh finished row and the old unfinished one stay"
    );
    assert!(
        store.turns_of(10).unwrap().is_empty(),
        "the old turn is gone"
    );
    assert_eq!(store.turns_of(20).unwrap().len(), 1, "the fresh turn stays");
}

#[test]
fn a_reset_of_update_ids_moves_the_offset_back_and_accepts_reused_ids() {
    let store = Store::in_memory().unwrap();
    // The old sequence: id 500 handled, 900 still queued.
    store.accept(&msg(500, 1)).unwrap();
    store.mark(&[500], InboxState::Done).unwrap();
    store.accept(&msg(900, 1)).unwrap();
    store.set_offset(5_000_000).unwrap();
    // Telegram restarts at 400: 500 comes again as a new update.
    assert_eq!(store.reset_update_ids(400).unwrap(), 1);
    assert_eq!(store.offset().unwrap(), 400, "the offset moved back");
    assert!(store.accept(&msg(500, 2)).unwrap(), "a reused id is new");
    store.set_offset(501).unwrap();
    assert_eq!(store.offset().unwrap(), 501);
    let open: Vec<i64> = store
        .unfinished()
        .unwrap()
        .iter()
        .map(|r| r.message.update_id)
        .collect();
    assert_eq!(open, vec![500, 900], "the unfinished old row is kept");
}

#[test]
fn agent_groups_are_recorded_and_forgotten() {
    let store = Store::in_memory().unwrap();
    let group = |pgid, start_time, boot: &str| AgentGroup {
        pgid,
        start_time,
        boot_id: boot.into(),
    };
    store.record_group(&group(4242, 777, "boot-a"), 1).unwrap();
    store.record_group(&group(4343, 888, "boot-b"), 2).unwrap();
    store.forget_group(4242).unwrap();
    assert_eq!(store.groups().unwrap(), vec![group(4343, 888, "boot-b")]);
}

#[test]
fn a_corrupt_file_is_an_error_not_a_new_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.db");
    std::fs::write(
        &path,
        b"this is not a database, it is a shopping list\n".repeat(200),
    )
    .unwrap();
    let err = Store::open(&path).unwrap_err();
    assert!(matches!(err, StateError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("junk.db"), "{err}");
    assert!(
        std::fs::read(&path)
            .unwrap()
            .starts_with(b"this is not a database"),
        "the file is left as it was"
    );
}

#[test]
fn an_unreadable_path_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(
        matches!(err, StateError::Open { .. } | StateError::Corrupt { .. }),
        "{err}"
    );
}

#[test]
fn a_negative_schema_version_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("odd.db");
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", -3)
        .unwrap();
    assert!(matches!(
        Store::open(&path).unwrap_err(),
        StateError::Corrupt { .. }
    ));
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    assert!(matches!(
        Store::open(&path).unwrap_err(),
        StateError::Newer { .. }
    ));
}

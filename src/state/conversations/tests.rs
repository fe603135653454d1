use teloxide::types::{ChatId, MessageId, ThreadId};

use super::*;

fn to() -> Conversation {
    ChatId(5).into()
}

fn topic(n: i32) -> Conversation {
    Conversation::new(ChatId(-100), Some(ThreadId(MessageId(n))))
}

#[test]
fn a_model_is_kept_per_conversation() {
    let store = Store::in_memory().unwrap();
    assert_eq!(store.model(to()).unwrap(), None);
    store.set_model(to(), Some("opus")).unwrap();
    assert_eq!(store.model(to()).unwrap().as_deref(), Some("opus"));
    assert_eq!(store.model(topic(3)).unwrap(), None);
    assert_eq!(store.opening(to()).unwrap().model.as_deref(), Some("opus"));
    store.set_model(to(), None).unwrap();
    assert_eq!(store.model(to()).unwrap(), None);
}

#[test]
fn every_session_used_is_listed_newest_first_with_its_first_words() {
    let store = Store::in_memory().unwrap();
    store
        .note_opening(to(), "  fix   the build please, it fails on main")
        .unwrap();
    store.set_session(to(), Some("s1")).unwrap();
    store.note_opening(to(), "and now?").unwrap();
    store.set_session(to(), Some("s1")).unwrap();
    store.set_session(to(), None).unwrap();
    store.note_opening(to(), "a new thing").unwrap();
    store.set_session(to(), Some("s2")).unwrap();
    let list = store.sessions(to()).unwrap();
    let seen: Vec<_> = list
        .iter()
        .map(|s| (s.id.as_str(), s.turns, s.first_words.as_str(), s.current))
        .collect();
    assert_eq!(
        seen,
        [
            ("s2", 1, "a new thing", true),
            ("s1", 2, "fix the build please, it fails on main", false),
        ]
    );
}

#[test]
fn only_a_conversations_own_session_can_be_resumed() {
    let store = Store::in_memory().unwrap();
    store.set_session(to(), Some("s1")).unwrap();
    store.set_session(to(), Some("s2")).unwrap();
    store.set_session(topic(7), Some("other")).unwrap();
    assert!(!store.resume(to(), "other").unwrap());
    assert_eq!(store.session(to()).unwrap().as_deref(), Some("s2"));
    assert!(store.resume(to(), "s1").unwrap());
    assert_eq!(store.opening(to()).unwrap().resume.as_deref(), Some("s1"));
    assert_eq!(store.sessions(to()).unwrap().len(), 2, "s2 stays listed");
}

#[test]
fn at_most_ten_sessions_are_listed() {
    let store = Store::in_memory().unwrap();
    for n in 0..(SESSIONS_LISTED + 3) {
        store.set_session(to(), Some(&format!("s{n}"))).unwrap();
    }
    assert_eq!(store.sessions(to()).unwrap().len(), SESSIONS_LISTED);
}

#[test]
fn a_fork_resumes_a_copy_once_and_keeps_the_original() {
    let store = Store::in_memory().unwrap();
    assert_eq!(store.fork(to(), to()).unwrap(), None, "nothing to fork");
    store.note_opening(to(), "plan the trip").unwrap();
    store.set_session(to(), Some("orig")).unwrap();
    assert_eq!(
        store.fork(to(), to()).unwrap().as_deref(),
        Some("plan the trip")
    );
    let opening = store.opening(to()).unwrap();
    assert_eq!(
        (opening.resume.as_deref(), opening.fork),
        (Some("orig"), true)
    );
    store.note_opening(to(), "second line").unwrap();
    store.set_session(to(), Some("copy")).unwrap();
    assert!(!store.opening(to()).unwrap().fork, "the fork is done");
    let list = store.sessions(to()).unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(
        (list[0].id.as_str(), list[0].first_words.as_str()),
        ("copy", "plan the trip")
    );
    assert_eq!(list[1].id, "orig");
    store.fork(to(), to()).unwrap();
    store.set_session(to(), None).unwrap();
    assert!(!store.opening(to()).unwrap().fork, "/new drops a fork");
}

#[test]
fn a_fork_into_a_topic_starts_it_from_the_copy_with_the_model() {
    let store = Store::in_memory().unwrap();
    let (from, into) = (topic(1), topic(2));
    store.set_model(from, Some("haiku")).unwrap();
    store.note_opening(from, "write a poem").unwrap();
    store.set_session(from, Some("orig")).unwrap();
    assert!(store.fork(from, into).unwrap().is_some());
    let opening = store.opening(into).unwrap();
    assert_eq!(
        opening,
        Opening {
            resume: Some("orig".into()),
            model: Some("haiku".into()),
            fork: true,
            project: String::new(),
        }
    );
    assert!(!store.opening(from).unwrap().fork, "the original goes on");
}

#[test]
fn usage_is_summed_per_conversation_and_period() {
    let store = Store::in_memory().unwrap();
    let used = TurnUsage {
        api_calls: 2,
        input_tokens: 100,
        output_tokens: 7,
        cost_usd: 0.5,
    };
    store.record_usage(to(), &used).unwrap();
    store.record_usage(to(), &used).unwrap();
    store
        .record_usage(
            topic(1),
            &TurnUsage {
                cost_usd: 2.0,
                ..used
            },
        )
        .unwrap();
    let now = now_ms();
    let mine = store.usage(Some(to()), now).unwrap();
    for period in mine {
        assert_eq!(
            (
                period.turns,
                period.api_calls,
                period.input_tokens,
                period.output_tokens
            ),
            (2, 4, 200, 14)
        );
        assert!((period.cost_usd - 1.0).abs() < 1e-9);
    }
    let all = store.usage(None, now).unwrap();
    assert_eq!(all[2].turns, 3);
    let top = store.usage_top(0, 5).unwrap();
    assert_eq!(
        top.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        [topic(1), to()]
    );
    // Rows older than a period are not in it.
    let later = now + 31 * 86_400_000;
    assert_eq!(store.usage(Some(to()), later).unwrap()[2].turns, 0);
}

#[test]
fn first_words_are_bounded_and_collapsed() {
    assert_eq!(first_words(" a\n\tb  c "), "a b c");
    let long = "é".repeat(FIRST_WORDS + 5);
    let cut = first_words(&long);
    assert_eq!(cut.chars().count(), FIRST_WORDS + 1);
    assert!(cut.ends_with('…'));
}

#[test]
fn choices_outlive_a_restart_and_old_sessions_are_kept_by_the_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v9.db");
    {
        let old = Store::create_at_version(&path, 9).unwrap();
        old.lock()
            .execute(
                "INSERT INTO sessions (chat_id, topic, session_id, updated_at) VALUES (5, 0, 'before', 1)",
                [],
            )
            .unwrap();
    }
    {
        let store = Store::open(&path).unwrap();
        let listed = store.sessions(to()).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].current && listed[0].id == "before");
        store.set_model(to(), Some("opus")).unwrap();
    }
    let store = Store::open(&path).unwrap();
    let opening = store.opening(to()).unwrap();
    assert_eq!(
        (opening.resume.as_deref(), opening.model.as_deref()),
        (Some("before"), Some("opus"))
    );
}

#[test]
fn each_project_keeps_its_own_sessions() {
    let store = Store::in_memory().unwrap();
    store.note_opening(to(), "home things").unwrap();
    store.set_session(to(), Some("home")).unwrap();
    store.set_project(to(), "beta").unwrap();
    assert_eq!(
        store.opening(to()).unwrap().resume,
        None,
        "beta starts fresh"
    );
    assert_eq!(store.opening(to()).unwrap().project, "beta");
    assert!(store.sessions(to()).unwrap().is_empty(), "beta's list");
    assert!(!store.resume(to(), "home").unwrap(), "not beta's session");
    store.note_opening(to(), "beta things").unwrap();
    store.set_session(to(), Some("b1")).unwrap();
    store.set_project(to(), "").unwrap();
    assert_eq!(store.opening(to()).unwrap().resume.as_deref(), Some("home"));
    store.set_project(to(), "beta").unwrap();
    let opening = store.opening(to()).unwrap();
    assert_eq!(opening.resume.as_deref(), Some("b1"), "back where it was");
    let listed = store.sessions(to()).unwrap();
    assert_eq!(
        (listed.len(), listed[0].first_words.as_str()),
        (1, "beta things")
    );
}

#[test]
fn usage_rows_are_pruned_but_kept_for_the_longest_period() {
    let store = Store::in_memory().unwrap();
    let day = 86_400_000_i64;
    let now = now_ms();
    for age in [2, 20, 40] {
        store
            .lock()
            .execute(
                "INSERT INTO usage (chat_id, topic, ended_at, api_calls, input_tokens, output_tokens, cost_usd)
                 VALUES (5, 0, ?1, 1, 1, 1, 0.0)",
                params![now - age * day],
            )
            .unwrap();
    }
    // A retention of one day still keeps 31 days of usage.
    store.prune(std::time::Duration::from_secs(86_400)).unwrap();
    assert_eq!(store.usage(Some(to()), now).unwrap()[2].turns, 2);
    let left: i64 = store
        .lock()
        .query_row("SELECT COUNT(*) FROM usage", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 2, "the 40-day-old row went");
}

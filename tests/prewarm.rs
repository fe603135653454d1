//! Warm after a start: the conversations active within `agent.keep_warm`
//! have their sessions resumed in the background, most recent first,
//! within `agent.max_warm`, after the recovered messages' turns started,
//! skipping a session that cannot resume; the first message then takes
//! the prewarmed session (no second agent start).

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use support::*;
use teloxide::types::{ChatId, MessageId, ThreadId, UserId};
use tokio::sync::Semaphore;
use turnstile::agent::{
    AgentBackend, AgentError, AgentSession, BoxFuture, OpenSession, Scenario, ScriptedBackend,
    Step, ToolRegistry,
};
use turnstile::events::BotEvent;
use turnstile::ids::Conversation;
use turnstile::incoming::{ChatKind, Incoming};
use turnstile::state::{Store, now_ms};

/// How long ago each conversation's session was last used, in minutes.
struct Used {
    chat: i64,
    session: String,
    minutes_ago: i64,
}

fn used(chat: i64, session: &str, minutes_ago: i64) -> Used {
    Used {
        chat,
        session: session.into(),
        minutes_ago,
    }
}

/// A state file whose conversations last used their sessions as `sessions`
/// say, with `queued` left unanswered by the previous process.
fn state_file(dir: &Path, sessions: &[Used], queued: &[Incoming]) -> String {
    let db = dir.join("state.db");
    let store = Store::open(&db).unwrap();
    for m in queued {
        store.accept(m).unwrap();
    }
    for u in sessions {
        store
            .set_session(ChatId(u.chat).into(), Some(&u.session))
            .unwrap();
    }
    drop(store);
    let conn = rusqlite::Connection::open(&db).unwrap();
    for u in sessions {
        conn.execute(
            "UPDATE sessions SET updated_at = ?1 WHERE chat_id = ?2",
            rusqlite::params![now_ms() - u.minutes_ago * 60_000, u.chat],
        )
        .unwrap();
    }
    db.display().to_string()
}

/// Waits for the prewarm's last log line.
async fn prewarm_done(logs: &LogCapture) {
    wait_until("the prewarm's last log line", SOON, || {
        logs.text().contains("prewarm done")
    })
    .await;
}

fn prewarmed(h: &Harness) -> Vec<i64> {
    h.seen
        .iter()
        .filter_map(|e| match e {
            BotEvent::Prewarmed { chat, .. } => Some(chat.0),
            _ => None,
        })
        .collect()
}

#[actix_rt::test]
async fn prewarm_starts_max_warm_sessions_the_most_recent_first() {
    let logs = LogCapture::start();
    let dir = tempfile::tempdir().unwrap();
    let sessions = [
        used(1001, "s-a", 4),
        used(1002, "s-b", 1),
        used(1003, "s-c", 3),
        used(-5001, "s-d", 2),
        // Past agent.keep_warm: never warmed.
        used(-5002, "s-e", 120),
    ];
    let db = state_file(dir.path(), &sessions, &[]);
    let mut h = Harness::start(
        Scenario::default(),
        &[
            ("TURNSTILE_STATE_PATH", &db),
            ("TURNSTILE_AGENT_KEEP_WARM", "1h"),
            ("TURNSTILE_AGENT_MAX_WARM", "2"),
        ],
    )
    .await;
    prewarm_done(&logs).await;
    let mut n = 0;
    h.event("the second Prewarmed", |e| {
        n += usize::from(matches!(e, BotEvent::Prewarmed { .. }));
        n == 2
    })
    .await;
    assert_eq!(
        h.backend.log().opens,
        vec![
            ("1002".to_string(), Some("s-b".to_string())),
            ("-5001".to_string(), Some("s-d".to_string())),
        ],
        "exactly agent.max_warm sessions start, the most recent ones"
    );
    assert_eq!(prewarmed(&h), [1002, -5001]);
    assert!(
        logs.text().contains("agent.max_warm slots are all taken"),
        "{}",
        logs.text()
    );
    h.bot.stop().await;
}

#[actix_rt::test]
async fn a_recovered_message_starts_its_turn_before_any_prewarm() {
    let logs = LogCapture::start();
    let dir = tempfile::tempdir().unwrap();
    // The most recent conversation has a message the previous process
    // left queued: its turn starts the session, ahead of the others.
    let waiting = Incoming {
        update_id: 7,
        to: ChatId(1001).into(),
        from: UserId(1001),
        message_id: MessageId(70),
        text: "still there?".into(),
        ..Incoming::default()
    };
    let sessions = [
        used(1001, "s-a", 1),
        used(1002, "s-b", 2),
        used(1003, "s-c", 3),
    ];
    let db = state_file(dir.path(), &sessions, &[waiting]);
    let mut h = Harness::start(
        Scenario::default(),
        &[
            ("TURNSTILE_STATE_PATH", &db),
            ("TURNSTILE_AGENT_KEEP_WARM", "1h"),
            ("TURNSTILE_AGENT_MAX_WARM", "3"),
            // The recovered message's turn waits out a merge window.
            ("TURNSTILE_DISPATCHER_MERGE_WINDOW", "300ms"),
        ],
    )
    .await;
    h.turn_ended(1001, 1).await;
    prewarm_done(&logs).await;
    let mut n = 0;
    h.event("the second Prewarmed", |e| {
        n += usize::from(matches!(e, BotEvent::Prewarmed { .. }));
        n == 2
    })
    .await;
    let started = h
        .seen
        .iter()
        .position(|e| matches!(e, BotEvent::TurnStarted { chat, .. } if chat.0 == 1001))
        .expect("the recovered message's turn started");
    let first_prewarm = h
        .seen
        .iter()
        .position(|e| matches!(e, BotEvent::Prewarmed { .. }))
        .expect("a prewarm");
    assert!(
        started < first_prewarm,
        "the recovered message's turn starts before any prewarm: {:#?}",
        h.seen
    );
    assert_eq!(
        prewarmed(&h),
        [1002, 1003],
        "the waiting chat is not prewarmed"
    );
    let opens_of_1001: Vec<_> = (h.backend.log().opens.into_iter())
        .filter(|(key, _)| key == "1001")
        .collect();
    assert_eq!(
        opens_of_1001,
        [("1001".to_string(), Some("s-a".to_string()))],
        "one session for the waiting chat: its turn's"
    );
    h.bot.stop().await;
}

#[actix_rt::test]
async fn the_first_message_after_a_start_takes_the_prewarmed_session() {
    let logs = LogCapture::start();
    let dir = tempfile::tempdir().unwrap();
    let db = state_file(dir.path(), &[used(1001, "s-a", 5)], &[]);
    let mut h = Harness::start(
        Scenario::default(),
        &[
            ("TURNSTILE_STATE_PATH", &db),
            ("TURNSTILE_AGENT_KEEP_WARM", "1h"),
        ],
    )
    .await;
    prewarm_done(&logs).await;
    h.event("Prewarmed", |e| matches!(e, BotEvent::Prewarmed { .. }))
        .await;
    assert_eq!(h.backend.opened(), 1, "the prewarm's session");
    h.say(1001, 1001, "hello again");
    let (_, outcome, _) = h.turn_ended(1001, 1).await;
    assert!(outcome.finished(), "{outcome:?}");
    assert_eq!(
        h.backend.opened(),
        1,
        "the turn ran on the prewarmed session: no second agent start"
    );
    assert!(
        h.texts(1001).iter().any(|t| t.contains("hello again")),
        "answered: {:?}",
        h.texts(1001)
    );
    h.bot.stop().await;
}

#[actix_rt::test]
async fn a_session_that_cannot_resume_is_not_prewarmed() {
    let logs = LogCapture::start();
    let dir = tempfile::tempdir().unwrap();
    let uuid = "0b3c5d1e-2f4a-4b6c-8d9e-0f1a2b3c4d5e";
    // The scripted agent's id: the CLI would start a fresh session.
    let sessions = [used(1001, uuid, 1), used(1002, "scripted-1002-1", 2)];
    let db = state_file(dir.path(), &sessions, &[]);
    let (mut h, cli) = support::fake_cli::FakeCli::start(
        &Scenario::default(),
        &[
            ("TURNSTILE_STATE_PATH", &db),
            ("TURNSTILE_AGENT_KEEP_WARM", "1h"),
        ],
    )
    .await;
    prewarm_done(&logs).await;
    h.event("Prewarmed", |e| matches!(e, BotEvent::Prewarmed { .. }))
        .await;
    assert_eq!(
        cli.backend.spawned(),
        1,
        "only the resumable session starts"
    );
    cli.wait_for_entries(1, |e| e.get("args").is_some()).await;
    let processes = cli.processes();
    assert!(
        processes[0].1.contains(&format!("--resume={uuid}")),
        "{processes:?}"
    );
    assert_eq!(prewarmed(&h), [1001]);
    assert!(
        logs.text()
            .contains("the stored session is the scripted agent's"),
        "the log says why: {}",
        logs.text()
    );
    h.bot.stop().await;
}

/// A prewarm is kept (and `Prewarmed` published) only once the CLI has
/// started and answered `initialize`: a first message then does not wait
/// for its start-up.
#[actix_rt::test]
async fn a_prewarm_is_kept_once_the_cli_has_answered_initialize() {
    let dir = tempfile::tempdir().unwrap();
    let uuid = "0b3c5d1e-2f4a-4b6c-8d9e-0f1a2b3c4d5e";
    let db = state_file(dir.path(), &[used(1001, uuid, 1)], &[]);
    let (mut h, cli) = support::fake_cli::FakeCli::start(
        &Scenario::default(),
        &[
            ("TURNSTILE_STATE_PATH", &db),
            ("TURNSTILE_AGENT_KEEP_WARM", "1h"),
            ("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_START_MS", "1500"),
        ],
    )
    .await;
    h.event("Prewarmed", |e| matches!(e, BotEvent::Prewarmed { .. }))
        .await;
    let initialize = |e: &serde_json::Value| {
        e.pointer("/from_host/request/subtype") == Some(&"initialize".into())
    };
    assert!(
        cli.entries().iter().any(initialize),
        "the CLI read initialize before the prewarm was kept: {:?}",
        cli.entries()
    );
    h.bot.stop().await;
}

/// The scripted agent, its first session (the prewarm's) held back until
/// the test opens `gate`.
struct Gated {
    inner: ScriptedBackend,
    gate: Arc<Semaphore>,
    asked: AtomicUsize,
}

impl AgentBackend for Gated {
    fn open(&self, request: OpenSession) -> BoxFuture<Result<AgentSession, AgentError>> {
        let first = self.asked.fetch_add(1, Ordering::SeqCst) == 0;
        let opened = self.inner.open(request);
        let gate = Arc::clone(&self.gate);
        Box::pin(async move {
            if first {
                let _open = gate.acquire().await;
            }
            opened.await
        })
    }
}

/// The bot on the [`Gated`] scripted agent, with `env`.
async fn launch_gated(env: &[(&str, &str)]) -> (Harness, Arc<Gated>) {
    let mut slot = None;
    let h = Harness::launch(env, Harness::fast_limits(), |config| {
        let gated = Arc::new(Gated {
            inner: ScriptedBackend::new(Scenario::default())
                .with_tools(Arc::new(ToolRegistry::new(&config.turn.terminator_tools))),
            gate: Arc::new(Semaphore::new(0)),
            asked: AtomicUsize::new(0),
        });
        slot = Some(Arc::clone(&gated));
        gated
    })
    .await;
    (h, slot.expect("backend built"))
}

#[actix_rt::test]
async fn a_message_arriving_while_its_session_is_prewarmed_waits_and_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = state_file(dir.path(), &[used(1001, "s-a", 5)], &[]);
    let (mut h, gated) = launch_gated(&[
        ("TURNSTILE_STATE_PATH", &db),
        ("TURNSTILE_AGENT_KEEP_WARM", "1h"),
        // Nothing holds the message but the prewarm.
        ("TURNSTILE_DISPATCHER_MERGE_WINDOW", "0s"),
    ])
    .await;
    wait_until("the prewarm opening the session", SOON, || {
        gated.asked.load(Ordering::SeqCst) == 1
    })
    .await;
    h.say(1001, 1001, "are you there");
    wait_until("the message waiting for the prewarm", SOON, || {
        h.metric_value("turnstile_queue_depth") == 1.0
    })
    .await;
    gated.gate.add_permits(1);
    let (_, outcome, _) = h.turn_ended(1001, 1).await;
    assert!(outcome.finished(), "{outcome:?}");
    assert_eq!(
        gated.asked.load(Ordering::SeqCst),
        1,
        "the turn took the prewarmed session: one session, one process"
    );
    assert!(
        h.texts(1001).iter().any(|t| t.contains("are you there")),
        "answered: {:?}",
        h.texts(1001)
    );
    h.bot.stop().await;
}

#[actix_rt::test]
async fn a_conversation_no_longer_admitted_is_not_prewarmed() {
    let logs = LogCapture::start();
    let dir = tempfile::tempdir().unwrap();
    // 2002 talked to the bot once; the allowlist (1001..1003) no longer
    // names it.
    let sessions = [used(2002, "s-gone", 1), used(1001, "s-a", 2)];
    let db = state_file(dir.path(), &sessions, &[]);
    let mut h = Harness::start(
        Scenario::default(),
        &[
            ("TURNSTILE_STATE_PATH", &db),
            ("TURNSTILE_AGENT_KEEP_WARM", "1h"),
            ("TURNSTILE_AGENT_MAX_WARM", "4"),
        ],
    )
    .await;
    prewarm_done(&logs).await;
    h.event("Prewarmed", |e| matches!(e, BotEvent::Prewarmed { .. }))
        .await;
    assert_eq!(
        h.backend.log().opens,
        [("1001".to_string(), Some("s-a".to_string()))],
        "only the admitted conversation's session starts"
    );
    assert_eq!(prewarmed(&h), [1001]);
    assert!(
        logs.text().contains("no one the current [access] admits"),
        "the log says why: {}",
        logs.text()
    );
    h.bot.stop().await;
}

/// A recovered message in topic `topic` of the forum group -5001.
fn in_topic(update_id: i64, topic: i32) -> Incoming {
    Incoming {
        update_id,
        to: Conversation::new(ChatId(-5001), Some(ThreadId(MessageId(topic)))),
        from: UserId(1001),
        place: ChatKind::Group,
        message_id: MessageId(topic * 10),
        text: format!("still there, topic {topic}?"),
        ..Incoming::default()
    }
}

#[actix_rt::test]
async fn the_prewarm_waits_for_the_recovered_turn_of_each_topic() {
    let logs = LogCapture::start();
    let dir = tempfile::tempdir().unwrap();
    // Two topics of one forum each left a message; one turn runs at a
    // time, so the second topic's turn starts once the first's ended.
    let waiting = [in_topic(7, 10), in_topic(8, 20)];
    let db = state_file(dir.path(), &[used(1002, "s-b", 1)], &waiting);
    let slow_echo = Scenario {
        default: turn(vec![
            Step::Wait { ms: 2000 },
            Step::Tools {
                calls: vec![
                    tool("mcp__telegram-tools__send", json!({"text": "echo: {text}"})),
                    tool("mcp__telegram-tools__end_turn", json!({})),
                ],
            },
        ]),
        ..Scenario::default()
    };
    let mut h = Harness::start(
        slow_echo,
        &[
            ("TURNSTILE_STATE_PATH", &db),
            ("TURNSTILE_AGENT_KEEP_WARM", "1h"),
            ("TURNSTILE_DISPATCHER_MAX_CONCURRENT_TURNS", "1"),
        ],
    )
    .await;
    prewarm_done(&logs).await;
    h.event("Prewarmed", |e| matches!(e, BotEvent::Prewarmed { .. }))
        .await;
    let started: Vec<_> = (h.seen.iter())
        .filter_map(|e| match e {
            BotEvent::TurnStarted { chat, topic, .. } if chat.0 == -5001 => Some(*topic),
            _ => None,
        })
        .collect();
    let topic = |n| Some(ThreadId(MessageId(n)));
    assert_eq!(
        started,
        [topic(10), topic(20)],
        "both topics' turns started before the prewarm: {:#?}",
        h.seen
    );
    assert_eq!(prewarmed(&h), [1002]);
    h.bot.stop().await;
}

#[actix_rt::test]
async fn a_conversation_whose_message_waits_out_its_merge_window_is_not_prewarmed() {
    let logs = LogCapture::start();
    let dir = tempfile::tempdir().unwrap();
    let db = state_file(
        dir.path(),
        &[used(1002, "s-b", 1), used(1001, "s-a", 2)],
        &[],
    );
    let (mut h, gated) = launch_gated(&[
        ("TURNSTILE_STATE_PATH", &db),
        ("TURNSTILE_AGENT_KEEP_WARM", "1h"),
        ("TURNSTILE_AGENT_MAX_WARM", "4"),
        // The message waits here while the prewarm reaches its chat.
        ("TURNSTILE_DISPATCHER_MERGE_WINDOW", "3s"),
    ])
    .await;
    // The prewarm holds at 1002, the most recent.
    wait_until("the prewarm opening 1002's session", SOON, || {
        gated.asked.load(Ordering::SeqCst) == 1
    })
    .await;
    h.say(1001, 1001, "one more thing");
    wait_until("the message waiting in 1001's queue", SOON, || {
        h.metric_value("turnstile_queue_depth") == 1.0
    })
    .await;
    gated.gate.add_permits(1);
    prewarm_done(&logs).await;
    h.event("Prewarmed", |e| matches!(e, BotEvent::Prewarmed { .. }))
        .await;
    assert_eq!(prewarmed(&h), [1002], "1001 is left to its message's turn");
    let (_, outcome, _) = h.turn_ended(1001, 1).await;
    assert!(outcome.finished(), "{outcome:?}");
    assert_eq!(
        gated.inner.log().opens.len(),
        2,
        "1002's prewarm and 1001's turn: {:?}",
        gated.inner.log().opens
    );
    h.bot.stop().await;
}

//! Crash safety and `/restart` with the real binary: kill -9 at different
//! moments of a turn loses no accepted message and answers none twice;
//! `/restart` drains, re-executes, and is not repeated.

mod support;

use std::path::Path;
use std::time::Duration;

use rusqlite::OpenFlags;
use serde_json::json;
use support::process::BotProcess;
use support::*;
use turnstile::agent::{Scenario, Step};

const MESSAGES: [&str; 3] = ["slow A", "slow B", "slow C"];

fn scenario() -> Scenario {
    Scenario::default().with_rule(
        "slow",
        turn(vec![
            Step::Wait { ms: 300 },
            Step::Tools {
                calls: vec![tool(
                    "mcp__telegram-tools__send",
                    json!({"text": "part 1: {text}"}),
                )],
            },
            Step::Wait { ms: 300 },
            Step::Tools {
                calls: vec![tool(
                    "mcp__telegram-tools__end_turn",
                    json!({"text": "part 2: {text}"}),
                )],
            },
        ]),
    )
}

/// The first process's agent for a crash at a set moment of the first turn:
/// `before` plays, then the turn goes silent until the kill (only a kill
/// ends it), so the kill lands at that moment however slow the machine is.
fn stuck_after(before: Vec<Step>) -> Scenario {
    let mut steps = before;
    steps.push(Step::HangForever);
    Scenario::default().with_rule("slow", turn(steps))
}

struct Setup {
    api: FakeBotApi,
    dir: tempfile::TempDir,
    env: Vec<(&'static str, String)>,
}

async fn setup(on_interrupted: &str) -> Setup {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("scenario.json");
    std::fs::write(&script, serde_json::to_string(&scenario()).unwrap()).unwrap();
    let env = vec![
        (
            "TURNSTILE_STATE_PATH",
            dir.path().join("state.db").display().to_string(),
        ),
        ("TURNSTILE_AGENT_SCRIPT", script.display().to_string()),
        (
            "TURNSTILE_DISPATCHER_ON_INTERRUPTED",
            on_interrupted.to_string(),
        ),
        ("TURNSTILE_DISPATCHER_DRAIN_TIMEOUT", "10s".to_string()),
        // The messages sent while a turn runs queue up (what these tests
        // recover); steered ones are recovered as the turn's own.
        ("TURNSTILE_DISPATCHER_BUSY", "queue".to_string()),
    ];
    Setup { api, dir, env }
}

/// What happened to the accepted messages.
#[derive(Debug, Default, PartialEq)]
struct Tally {
    accepted: usize,
    answered: usize,
    reported: usize,
    duplicated: usize,
}

/// How many of `texts` answer `m` with `part N: `: alone, or merged with
/// others (messages that arrive together are one turn, their texts joined;
/// a steered one joins the running turn's text).
fn answers(texts: &[String], part: u8, m: &str) -> usize {
    let (unmarked, marked) = copies(texts, part, m);
    unmarked + marked
}

/// What marks a copy sent again that may show twice (a reply sent right
/// behind it).
const RESENT: &str =
    "↻ Sent again: Telegram did not confirm the first copy of this message, so it may show twice.";

/// The texts answering `m` with `part N: `, unmarked and marked as a
/// resend (a message left in the state file by the killed process is sent
/// again; when its first copy may have arrived, the copy is marked).
fn copies(texts: &[String], part: u8, m: &str) -> (usize, usize) {
    let prefix = format!("part {part}: ");
    let mut counts = (0, 0);
    for (i, t) in texts.iter().enumerate() {
        let Some(t) = t.strip_prefix(&prefix) else {
            continue;
        };
        if !t.split('\n').any(|x| x == m) {
            continue;
        }
        if texts.get(i + 1).is_some_and(|next| next == RESENT) {
            counts.1 += 1;
        } else {
            counts.0 += 1;
        }
    }
    counts
}

/// Whether `part` of `m` shows more than once, a copy marked as a resend
/// aside (at most one such copy).
fn twice(texts: &[String], part: u8, m: &str) -> bool {
    let (unmarked, marked) = copies(texts, part, m);
    unmarked > 1 || marked > 1 || (marked == 1 && unmarked == 0)
}

fn tally(texts: &[String]) -> Tally {
    let mut t = Tally {
        accepted: MESSAGES.len(),
        ..Tally::default()
    };
    for m in MESSAGES {
        // Answered: part 2 shows once (a copy marked as a resend aside).
        let part2 = copies(texts, 2, m).0;
        let reports = texts
            .iter()
            .filter(|x| x.contains("restarted") && x.contains(m))
            .count();
        if part2 == 1 && reports == 0 {
            t.answered += 1;
        } else if reports == 1 {
            t.reported += 1;
        }
        if twice(texts, 1, m) || twice(texts, 2, m) || reports > 1 {
            t.duplicated += 1;
        }
    }
    t
}

fn resolved(texts: &[String]) -> bool {
    MESSAGES.iter().all(|m| {
        answers(texts, 2, m) > 0
            || texts
                .iter()
                .any(|t| t.contains("restarted") && t.contains(m))
    })
}

/// The state of the inbox row of the message `text`, as the state file
/// says now (`None`: no row yet, or the file is busy).
fn row_state(db: &Path, text: &str) -> Option<String> {
    let conn = rusqlite::Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    conn.query_row("SELECT state FROM inbox WHERE text = ?1", [text], |r| {
        r.get(0)
    })
    .ok()
}

/// Runs the bot with `first` as its agent, kills it with SIGKILL once
/// `moment` holds (given the fake and the state file, which sends no
/// notification: checked every 20 ms, up to 20 s), restarts it on the same
/// state file with [`scenario`], and tallies what the chat got.
async fn crash_at(
    on_interrupted: &str,
    first: Scenario,
    moment: impl Fn(&FakeBotApi, &Path) -> bool,
) -> Tally {
    let s = setup(on_interrupted).await;
    let log = s.dir.path().join("bot.log");
    let script = s.dir.path().join("first.json");
    std::fs::write(&script, serde_json::to_string(&first).unwrap()).unwrap();
    let mut env = s.env.clone();
    for (key, value) in &mut env {
        if *key == "TURNSTILE_AGENT_SCRIPT" {
            *value = script.display().to_string();
        }
    }
    let mut first = BotProcess::spawn(&s.api, &log, &env);
    let db = s.dir.path().join("state.db");
    // The first is taken on its own (messages that arrive together are one
    // turn); the rest queue behind its turn.
    s.api.push_text(1, USER, MESSAGES[0]);
    wait_until("the first turn running", Duration::from_secs(20), || {
        !s.api.calls_of("sendChatAction").is_empty()
    })
    .await;
    for m in &MESSAGES[1..] {
        s.api.push_text(1, USER, m);
    }
    eventually("the crash moment", Duration::from_secs(20), || {
        let now = moment(&s.api, &db);
        async move { now.then_some(()).ok_or_else(|| "not yet".to_string()) }
    })
    .await;
    first.signal(libc::SIGKILL);
    first.exit().await;
    let mut second = BotProcess::spawn(&s.api, &log, &s.env);
    let texts = s
        .api
        .wait_for(
            Duration::from_secs(30),
            "every message answered or reported",
            |_| {
                let texts = s.api.texts_to(1);
                resolved(&texts).then_some(texts)
            },
        )
        .await;
    second.signal(libc::SIGTERM);
    assert!(second.exit().await.success(), "{}", second.log_text());
    let t = tally(&texts);
    println!("TALLY on_interrupted={on_interrupted}: {t:?}\n  texts: {texts:?}");
    assert_eq!(t.duplicated, 0, "nothing answered twice: {texts:?}");
    assert_eq!(
        t.answered + t.reported,
        t.accepted,
        "nothing lost: {texts:?}"
    );
    t
}

/// The first turn is running (typing is shown) and the state file says so.
/// Typing alone is not enough: the row is marked running by the store
/// thread while the typing request goes out, so on a loaded machine the
/// kill could come before the mark, and the message then ran again as
/// queued rather than being reported.
fn while_thinking(api: &FakeBotApi, db: &Path) -> bool {
    !api.calls_of("sendChatAction").is_empty()
        && row_state(db, "slow A").as_deref() == Some("running")
}

#[tokio::test]
async fn kill_9_while_the_first_turn_thinks_reports_it_and_answers_the_queue() {
    let t = crash_at("report", stuck_after(vec![]), while_thinking).await;
    assert_eq!((t.reported, t.answered), (1, 2), "{t:?}");
}

#[tokio::test]
async fn kill_9_after_a_partial_reply_reports_it_and_answers_the_queue() {
    let partial = stuck_after(vec![Step::Tools {
        calls: vec![tool(
            "mcp__telegram-tools__send",
            json!({"text": "part 1: {text}"}),
        )],
    }]);
    // The row is marked replied before the text leaves; both are checked.
    let t = crash_at("report", partial, |api, db| {
        api.texts_to(1).iter().any(|t| t == "part 1: slow A")
            && row_state(db, "slow A").as_deref() == Some("replied")
    })
    .await;
    assert_eq!(
        (t.reported, t.answered),
        (1, 2),
        "the partly answered message is reported, not re-run: {t:?}"
    );
}

#[tokio::test]
async fn kill_9_after_the_final_reply_answers_nothing_twice() {
    // Any moment after the reply will do: every outcome is checked the same.
    crash_at("report", scenario(), |api, _| {
        api.texts_to(1).iter().any(|t| t == "part 2: slow A")
    })
    .await;
}

#[tokio::test]
async fn kill_9_with_retry_runs_the_interrupted_message_again() {
    // Killed before the first turn replied: with "retry" it runs again and
    // every message is answered.
    let t = crash_at("retry", stuck_after(vec![]), while_thinking).await;
    assert_eq!(t.answered, MESSAGES.len(), "{t:?}");
}

#[tokio::test]
async fn restart_drains_re_executes_and_is_not_repeated() {
    let s = setup("report").await;
    let log = s.dir.path().join("bot.log");
    let mut bot = BotProcess::spawn(&s.api, &log, &s.env);
    s.api.push_text(1, USER, "slow A");
    s.api.wait_for_call("sendChatAction", SOON).await;
    s.api.push_text(ADMIN, ADMIN, "/restart");
    let told = s
        .api
        .wait_for_texts(ADMIN, 2, Duration::from_secs(30))
        .await;
    assert_eq!(
        told,
        vec![
            "🔄 Restarting; waiting for 1 running turn first.",
            "✅ Restarted."
        ]
    );
    // The turn in flight finished during the drain.
    assert_eq!(
        s.api.texts_to(1),
        vec!["part 1: slow A", "part 2: slow A"],
        "{}",
        bot.log_text()
    );
    // The new process answers.
    s.api.push_text(1, USER, "hello");
    let texts = s.api.wait_for_texts(1, 3, SOON).await;
    assert_eq!(texts[2], "echo: hello");
    let text = bot.log_text();
    assert_eq!(
        text.matches("turnstile started").count(),
        2,
        "exactly one re-exec:\n{text}"
    );
    assert!(text.contains("waiting for 1 in-flight turns"), "{text}");
    assert_eq!(
        s.api.texts_to(ADMIN).len(),
        2,
        "no second restart from a redelivered command"
    );
    bot.signal(libc::SIGTERM);
    assert!(bot.exit().await.success());
}

#[tokio::test]
async fn restart_works_after_the_binary_was_replaced_on_disk() {
    let s = setup("report").await;
    let log = s.dir.path().join("bot.log");
    // A copy of the binary, so the test can replace it as an upgrade would.
    let bin_dir = tempfile::tempdir().unwrap();
    let binary = bin_dir.path().join("turnstile");
    support::process::copy_executable(
        std::path::Path::new(env!("CARGO_BIN_EXE_turnstile")),
        &binary,
    );
    let mut bot = BotProcess::spawn_binary(&binary, &s.api, &log, &s.env);
    s.api.push_text(1, USER, "hello");
    assert_eq!(s.api.wait_for_texts(1, 1, SOON).await, vec!["echo: hello"]);
    // The upgrade: a new file renamed over the old path, which the running
    // process now sees as "turnstile (deleted)".
    let staged = bin_dir.path().join("turnstile.new");
    std::fs::write(
        &staged,
        b"#!/bin/sh\necho not the running binary >&2\nexit 97\n",
    )
    .unwrap();
    std::fs::rename(&staged, &binary).unwrap();
    s.api.push_text(ADMIN, ADMIN, "/restart");
    let told = s
        .api
        .wait_for_texts(ADMIN, 2, Duration::from_secs(30))
        .await;
    assert!(told[0].starts_with("🔄 Restarting"), "{told:?}");
    assert_eq!(told[1], "✅ Restarted.", "{}", bot.log_text());
    s.api.push_text(1, USER, "again");
    let texts = s.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(texts[1], "echo: again", "{}", bot.log_text());
    bot.signal(libc::SIGTERM);
    assert!(bot.exit().await.success());
}

/// A message steered into a turn that a crash cuts short is recovered as a
/// message of that turn: reported with it (or with "retry" run again),
/// never lost and never answered twice.
#[tokio::test]
async fn kill_9_with_a_steered_message_recovers_it_with_its_turn() {
    for (on_interrupted, reported, answered) in [("report", 2, 0), ("retry", 0, 2)] {
        let s = setup(on_interrupted).await;
        let steer = |env: &[(&'static str, String)], script: &Path| {
            let mut env = env.to_vec();
            for (key, value) in &mut env {
                match *key {
                    "TURNSTILE_DISPATCHER_BUSY" => *value = "steer".into(),
                    "TURNSTILE_AGENT_SCRIPT" => *value = script.display().to_string(),
                    _ => {}
                }
            }
            env
        };
        let first_script = s.dir.path().join("first.json");
        let hanging = stuck_after(vec![]);
        std::fs::write(&first_script, serde_json::to_string(&hanging).unwrap()).unwrap();
        let second_script = s.dir.path().join("second.json");
        std::fs::write(&second_script, serde_json::to_string(&scenario()).unwrap()).unwrap();
        let log = s.dir.path().join("bot.log");
        let db = s.dir.path().join("state.db");
        let mut first = BotProcess::spawn(&s.api, &log, &steer(&s.env, &first_script));
        s.api.push_text(1, USER, "slow A");
        wait_until("the first turn running", Duration::from_secs(20), || {
            row_state(&db, "slow A").as_deref() == Some("running")
        })
        .await;
        s.api.push_text(1, USER, "slow B");
        // Steered: its row belongs to the running turn.
        wait_until(
            "the steered message running",
            Duration::from_secs(20),
            || row_state(&db, "slow B").as_deref() == Some("running"),
        )
        .await;
        first.signal(libc::SIGKILL);
        first.exit().await;
        let mut second = BotProcess::spawn(&s.api, &log, &steer(&s.env, &second_script));
        let both = ["slow A", "slow B"];
        let texts = s
            .api
            .wait_for(Duration::from_secs(30), "both answered or reported", |_| {
                let texts = s.api.texts_to(1);
                both.iter()
                    .all(|m| {
                        answers(&texts, 2, m) > 0
                            || texts
                                .iter()
                                .any(|t| t.contains("restarted") && t.contains(m))
                    })
                    .then_some(texts)
            })
            .await;
        second.signal(libc::SIGTERM);
        assert!(second.exit().await.success(), "{}", second.log_text());
        let reports = |m: &str| {
            texts
                .iter()
                .filter(|t| t.contains("restarted") && t.contains(m))
                .count()
        };
        let got_reported = both.iter().filter(|m| reports(m) == 1).count();
        let got_answered = both.iter().filter(|m| answers(&texts, 2, m) == 1).count();
        assert_eq!(
            (got_reported, got_answered),
            (reported, answered),
            "{on_interrupted}: {texts:?}"
        );
        for m in both {
            assert!(
                reports(m) + answers(&texts, 2, m) == 1,
                "{m} once: {texts:?}"
            );
        }
    }
}

#[tokio::test]
async fn restart_from_a_topic_is_answered_in_that_topic_once_back() {
    use support::bot_api::files::{in_topic, private, text_message};
    let s = setup("report").await;
    s.api.set_private_topics(true);
    let log = s.dir.path().join("bot.log");
    let mut bot = BotProcess::spawn(&s.api, &log, &s.env);
    s.api
        .push_message(in_topic(text_message(private(ADMIN), ADMIN, "/restart"), 7));
    let back = s
        .api
        .wait_for(Duration::from_secs(30), "✅ Restarted.", |calls| {
            calls
                .iter()
                .find(|c| c.method == "sendmessage" && c.params["text"] == json!("✅ Restarted."))
                .cloned()
        })
        .await;
    assert_eq!(
        (
            back.params["chat_id"].clone(),
            back.params["message_thread_id"].clone()
        ),
        (json!(ADMIN), json!(7)),
        "told in the topic it was asked in: {}",
        bot.log_text()
    );
    bot.signal(libc::SIGTERM);
    assert!(bot.exit().await.success());
}

//! Schedules across a stop and a crash, with the real binary: slots missed
//! while it was down give one catch-up run, not one each; a `kill -9`
//! during a run leaves it reported or retried (per
//! `dispatcher.on_interrupted`), never both, and its slot never runs again.

mod support;

use std::path::Path;
use std::time::Duration;

use rusqlite::OpenFlags;
use support::process::BotProcess;
use support::*;
use turnstile::agent::{Scenario, Step};

/// The claimed runs in the state file: (slot, missed), by slot.
fn runs(db: &Path) -> Vec<(i64, i64)> {
    let read = || -> rusqlite::Result<Vec<(i64, i64)>> {
        let conn = rusqlite::Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let mut stmt = conn.prepare("SELECT slot, missed FROM schedule_runs ORDER BY slot")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect()
    };
    read().unwrap_or_default()
}

/// The state of the inbox rows of scheduled runs, by update id.
fn run_rows(db: &Path) -> Vec<String> {
    let read = || -> rusqlite::Result<Vec<String>> {
        let conn = rusqlite::Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let mut stmt =
            conn.prepare("SELECT state FROM inbox WHERE update_id < 0 ORDER BY update_id DESC")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect()
    };
    read().unwrap_or_default()
}

/// A config file with one operator schedule in `USER`'s chat.
fn config_file(dir: &Path, name: &str, every: &str, catch_up: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "[schedules]\ncatch_up = \"{catch_up}\"\n\n[[schedules.list]]\nname = \"tick\"\nchat = {USER}\nevery = \"{every}\"\nprompt = \"ping\"\n"
        ),
    )
    .unwrap();
    path
}

#[tokio::test]
async fn a_stop_across_three_slots_gives_one_catch_up_run() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let log = dir.path().join("bot.log");
    let config = config_file(dir.path(), "turnstile.toml", "1s", "once");
    let env = vec![("TURNSTILE_STATE_PATH", db.display().to_string())];
    let mut first = BotProcess::spawn_with_config(&api, &log, &env, &config);
    api.wait_for(SOON, "a scheduled run answered", |_| {
        api.texts_to(USER)
            .iter()
            .any(|t| t == "echo: ⏰ tick: ping")
            .then_some(())
    })
    .await;
    first.signal(libc::SIGTERM);
    assert!(first.exit().await.success(), "{}", first.log_text());
    let before = runs(&db);
    let last = before.last().expect("a run was claimed").0;
    // The bot is down while three more slots pass: waiting on the wall
    // clock is the event here.
    until_unix_ms(last + 3_000 + 200).await;
    let answered_before = api.texts_to(USER).len();
    let mut second = BotProcess::spawn_with_config(&api, &log, &env, &config);
    let caught_up = api
        .wait_for(SOON, "the catch-up run answered", |_| {
            api.texts_to(USER)
                .into_iter()
                .find(|t| t.contains("missed while turnstile was down"))
        })
        .await;
    // And the schedule goes on: a run on its slot after the catch-up.
    api.wait_for(SOON, "a run after the catch-up", |_| {
        let texts = api.texts_to(USER);
        let after = texts.iter().position(|t| t == &caught_up)?;
        texts[after + 1..]
            .iter()
            .any(|t| t == "echo: ⏰ tick: ping")
            .then_some(())
    })
    .await;
    second.signal(libc::SIGTERM);
    assert!(second.exit().await.success(), "{}", second.log_text());
    let texts = api.texts_to(USER);
    let catch_ups: Vec<_> = texts.iter().filter(|t| t.contains("missed")).collect();
    assert_eq!(
        catch_ups.len(),
        1,
        "one catch-up run, not one per slot: {texts:?}"
    );
    let after = runs(&db);
    let caught: Vec<_> = after.iter().filter(|(_, missed)| *missed > 0).collect();
    assert_eq!(caught.len(), 1, "{after:?}");
    let missed = caught[0].1;
    assert!(
        missed >= 3,
        "at least the three slots it was down for: {after:?}"
    );
    assert!(
        caught_up.contains(&format!("({missed} runs were missed while turnstile was down; this one run stands for all of them.)")),
        "{caught_up}"
    );
    assert_eq!(
        caught[0].0,
        last + missed * 1_000,
        "claimed as the latest missed slot: {after:?}"
    );
    assert!(texts.len() > answered_before, "{texts:?}");
    let answers = texts
        .iter()
        .filter(|t| t.starts_with("echo: ⏰ tick: ping"))
        .count();
    assert_eq!(
        answers,
        after.len(),
        "each claimed run answered once: {after:?} {texts:?}"
    );
}

/// Kills the bot with SIGKILL while the first scheduled run is running
/// (its agent hangs), then starts it again on the same state file without
/// the schedule; returns what the chat was told and the runs claimed.
async fn kill_during_a_run(on_interrupted: &str) -> (Vec<String>, Vec<(i64, i64)>, Vec<String>) {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let log = dir.path().join("bot.log");
    let script = dir.path().join("hang.json");
    let hang = Scenario::default().with_rule("tick", turn(vec![Step::HangForever]));
    std::fs::write(&script, serde_json::to_string(&hang).unwrap()).unwrap();
    let config = config_file(dir.path(), "turnstile.toml", "5s", "once");
    let mut env = vec![
        ("TURNSTILE_STATE_PATH", db.display().to_string()),
        (
            "TURNSTILE_DISPATCHER_ON_INTERRUPTED",
            on_interrupted.to_string(),
        ),
    ];
    let mut first_env = env.clone();
    first_env.push(("TURNSTILE_AGENT_SCRIPT", script.display().to_string()));
    let mut first = BotProcess::spawn_with_config(&api, &log, &first_env, &config);
    eventually("the run running", Duration::from_secs(20), || {
        let running = !api.calls_of("sendChatAction").is_empty()
            && run_rows(&db).first().map(String::as_str) == Some("running");
        async move { running.then_some(()).ok_or_else(|| "not yet".to_string()) }
    })
    .await;
    first.signal(libc::SIGKILL);
    first.exit().await;
    let claimed = runs(&db);
    // Started again without the schedule: only recovery can run it again.
    let bare = dir.path().join("bare.toml");
    std::fs::write(&bare, "").unwrap();
    env.push(("TURNSTILE_LOG", "info".to_string()));
    let mut second = BotProcess::spawn_with_config(&api, &log, &env, &bare);
    let texts = api
        .wait_for(
            Duration::from_secs(30),
            "the run reported or answered",
            |_| {
                let texts = api.texts_to(USER);
                texts
                    .iter()
                    .any(|t| t.contains("⏰ tick: ping"))
                    .then_some(texts)
            },
        )
        .await;
    // Whatever else is still to come has come once the inbox is settled.
    api.wait_for(SOON, "the run's row finished", |_| {
        let rows = run_rows(&db);
        rows.iter()
            .all(|s| s == "done" || s == "reported")
            .then_some(())
    })
    .await;
    second.signal(libc::SIGTERM);
    assert!(second.exit().await.success(), "{}", second.log_text());
    let after = runs(&db);
    assert_eq!(after, claimed, "no slot claimed again");
    let _ = texts;
    (api.texts_to(USER), after, run_rows(&db))
}

#[tokio::test]
async fn kill_9_during_a_run_reports_it_once_and_never_runs_its_slot_again() {
    let (texts, runs, rows) = kill_during_a_run("report").await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(rows, vec!["reported"], "{texts:?}");
    let reports = texts
        .iter()
        .filter(|t| t.contains("restarted") && t.contains("⏰ tick: ping"))
        .count();
    let answers = texts
        .iter()
        .filter(|t| t.starts_with("echo: ⏰ tick"))
        .count();
    assert_eq!(
        (reports, answers),
        (1, 0),
        "reported, not retried: {texts:?}"
    );
}

#[tokio::test]
async fn kill_9_during_a_run_with_retry_answers_it_once_and_never_runs_its_slot_again() {
    let (texts, runs, rows) = kill_during_a_run("retry").await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(rows, vec!["done"], "{texts:?}");
    let reports = texts.iter().filter(|t| t.contains("restarted")).count();
    let answers = texts.iter().filter(|t| *t == "echo: ⏰ tick: ping").count();
    assert_eq!(
        (reports, answers),
        (0, 1),
        "retried, not reported: {texts:?}"
    );
}

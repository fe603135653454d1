//! Schedules against the fake Bot API: runs come on their slots and are
//! answered once; the chat's `/schedule`, `/schedules` and ❌; the agent's
//! tools; a stop across slots gives one catch-up run; `kill -9` during a
//! run never runs its slot twice.

mod support;

use std::path::Path;
use std::time::Duration;

use rusqlite::OpenFlags;
use support::*;
use turnstile::Config;
use turnstile::agent::Scenario;
use turnstile::config::OperatorSchedule;

/// An operator schedule in the private chat of `USER`.
fn every(name: &str, period: &str, prompt: &str) -> OperatorSchedule {
    OperatorSchedule {
        name: name.into(),
        chat: USER,
        every: Some(period.into()),
        prompt: prompt.into(),
        ..OperatorSchedule::default()
    }
}

/// The claimed runs in the state file: (slot, missed, claimed_at), by slot.
fn runs(db: &Path) -> Vec<(i64, i64, i64)> {
    let Ok(conn) = rusqlite::Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return Vec::new();
    };
    let Ok(mut stmt) =
        conn.prepare("SELECT slot, missed, claimed_at FROM schedule_runs ORDER BY slot")
    else {
        return Vec::new();
    };
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
}

fn texts_with(h: &Harness, chat: i64, part: &str) -> Vec<String> {
    h.texts(chat)
        .into_iter()
        .filter(|t| t.contains(part))
        .collect()
}

#[actix_rt::test]
async fn runs_come_on_their_slots_marked_and_each_answered_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let db_env = db.display().to_string();
    let h = Harness::start_edited(
        Scenario::default(),
        &[("TURNSTILE_STATE_PATH", &db_env)],
        |config: &mut Config| config.schedules.list.push(every("tick", "1s", "ping")),
    )
    .await;
    let answered = h
        .api
        .wait_for(
            Duration::from_secs(20),
            "three scheduled runs answered",
            |_| {
                let texts = texts_with(&h, USER, "⏰ tick: ping");
                (texts.len() >= 3).then_some(texts)
            },
        )
        .await;
    assert!(
        answered.iter().all(|t| t == "echo: ⏰ tick: ping"),
        "{answered:?}"
    );
    h.bot.stop().await;
    let runs = runs(&db);
    let texts = texts_with(&h, USER, "⏰ tick: ping");
    assert_eq!(
        texts.len(),
        runs.len(),
        "each run answered once: {runs:?} {texts:?}"
    );
    for (slot, missed, claimed_at) in &runs {
        assert_eq!(slot % 1000, 0, "slots aligned to the epoch: {runs:?}");
        assert_eq!(*missed, 0, "{runs:?}");
        assert!(
            (0..900).contains(&(claimed_at - slot)),
            "claimed on its slot: {runs:?}"
        );
    }
    for pair in runs.windows(2) {
        assert_eq!(
            pair[1].0 - pair[0].0,
            1000,
            "one run per slot, none skipped: {runs:?}"
        );
    }
}

//! `turnstile backup PATH` against a running bot: the copy, taken while
//! turns run and messages keep arriving, opens, passes SQLite's integrity
//! check and holds every message accepted before it began; an existing
//! file is never overwritten.

mod support;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use serde_json::json;
use support::process::BotProcess;
use support::*;
use turnstile::agent::{Scenario, Step};

/// Each turn takes a while, so turns are running when the backup is taken.
fn scenario() -> Scenario {
    Scenario::default().with_rule(
        "slow",
        turn(vec![
            Step::Wait { ms: 400 },
            Step::Tools {
                calls: vec![tool(
                    "mcp__telegram-tools__end_turn",
                    json!({"text": "done: {text}"}),
                )],
            },
        ]),
    )
}

/// The inbox texts of the state file `db` (read-only; empty while busy).
fn texts_in(db: &Path) -> Vec<String> {
    let Ok(conn) = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return Vec::new();
    };
    let Ok(mut statement) = conn.prepare("SELECT text FROM inbox ORDER BY update_id") else {
        return Vec::new();
    };
    statement
        .query_map([], |r| r.get::<_, String>(0))
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
}

fn running_rows(db: &Path) -> i64 {
    Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM inbox WHERE state = 'running'",
                [],
                |r| r.get(0),
            )
        })
        .unwrap_or(0)
}

/// `turnstile backup dest` with the state path and nothing else: no token.
async fn backup(db: &Path, dest: &Path) -> Output {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_turnstile"))
        .arg("backup")
        .arg(dest)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TURNSTILE_STATE_PATH", db)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the backup ends within 60 s")
        .expect("the binary runs")
}

#[tokio::test]
async fn a_backup_while_turns_run_holds_every_accepted_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = FakeBotApi::start().await;
    let script = dir.path().join("scenario.json");
    std::fs::write(&script, serde_json::to_string(&scenario()).unwrap()).unwrap();
    let db = dir.path().join("state.db");
    let env = [
        ("TURNSTILE_STATE_PATH", db.display().to_string()),
        ("TURNSTILE_AGENT_SCRIPT", script.display().to_string()),
        ("TURNSTILE_DISPATCHER_DRAIN_TIMEOUT", "2s".to_string()),
    ];
    let mut bot = BotProcess::spawn(&api, &dir.path().join("bot.log"), &env);
    let mut sent = Vec::new();
    for n in 0..12 {
        let text = format!("slow {n}");
        api.push_text(1 + n % 3, USER, &text);
        sent.push(text);
    }
    // Every message accepted (written to the state file), turns running.
    eventually("12 accepted messages and running turns", SOON * 3, || {
        let texts = texts_in(&db);
        let running = running_rows(&db);
        async move {
            if texts.len() == 12 && running > 0 {
                Ok(())
            } else {
                Err(format!("{} rows, {running} running", texts.len()))
            }
        }
    })
    .await;
    // More arrive while the copy is made: the bot goes on writing.
    for n in 12..18 {
        api.push_text(1 + n % 3, USER, &format!("slow {n}"));
    }
    let dest = dir.path().join("backup.db");
    let out = backup(&db, &dest).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(stderr.contains("backed up"), "{stderr}");

    let copy = Connection::open_with_flags(&dest, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("the copy opens");
    let check: String = copy
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check runs");
    assert_eq!(check, "ok");
    let version: i64 = copy
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, turnstile::state::SCHEMA_VERSION);
    let copied = texts_in(&dest);
    for text in &sent {
        assert!(copied.contains(text), "{text:?} missing from {copied:?}");
    }
    assert!(
        !dir.path().join("backup.db-wal").exists(),
        "the copy is one file"
    );

    // A second backup to the same name is refused and leaves the first.
    let before = std::fs::read(&dest).unwrap();
    let again = backup(&db, &dest).await;
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains("already exists") && stderr.contains("backup.db"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&dest).unwrap(), before);

    bot.signal(libc::SIGTERM);
    assert!(bot.exit().await.success(), "{}", bot.log_text());
}

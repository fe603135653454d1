//! The process keeps its name across `/restart` (which re-executes
//! `/proc/self/exe`): `comm` and `argv[0]` stay `turnstile`'s, so
//! `pgrep`, `pidof` and `ps` find the same process before and after. Its
//! log does not bury the start under a line per schema migration.

mod support;

use std::time::Duration;

use support::process::BotProcess;
use support::*;

/// The process's `comm` and its `argv[0]`.
fn name_of(pid: u32) -> (String, String) {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("comm");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    let arg0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    (
        comm.trim_end().to_string(),
        String::from_utf8_lossy(arg0).into_owned(),
    )
}

#[tokio::test]
async fn the_process_keeps_its_name_across_restart() {
    let api = FakeBotApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("bot.log");
    let env = vec![(
        "TURNSTILE_STATE_PATH",
        dir.path().join("state.db").display().to_string(),
    )];
    let mut bot = BotProcess::spawn(&api, &log, &env);
    let pid = bot.child.id().expect("running");
    api.push_text(1, USER, "hello");
    assert_eq!(api.wait_for_texts(1, 1, SOON).await, vec!["echo: hello"]);
    let binary = env!("CARGO_BIN_EXE_turnstile");
    let before = name_of(pid);
    assert_eq!(before, ("turnstile".to_string(), binary.to_string()));
    api.push_text(ADMIN, ADMIN, "/restart");
    let told = api.wait_for_texts(ADMIN, 2, Duration::from_secs(30)).await;
    assert_eq!(told[1], "✅ Restarted.", "{}", bot.log_text());
    assert_eq!(name_of(pid), before, "{}", bot.log_text());
    bot.signal(libc::SIGTERM);
    assert!(bot.exit().await.success());
    // The new state file was migrated in one step of the log, not eleven;
    // the restarted process found it current.
    let log = bot.log_text();
    let migrated: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("state store migrated"))
        .collect();
    assert_eq!(migrated.len(), 1, "{log}");
    assert!(migrated[0].contains("from=0"), "{}", migrated[0]);
}

//! After a `kill -9` of turnstile the agent process dies with it
//! (PDEATHSIG), but what the agent started lives on; turnstile records each
//! agent process group in the state file and kills the survivors at its
//! next start. Real binary, `fake-claude` leaving a grandchild.

mod support;

use std::time::Duration;

use support::fake_cli::FakeLog;
use support::process::BotProcess;
use support::*;
use turnstile::agent::{Scenario, Step};

fn alive(pid: u32) -> bool {
    // A zombie has exited; only its entry is left.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn an_agent_group_left_by_a_kill_9_is_killed_at_the_next_start() {
    let api = FakeBotApi::start().await;
    let scenario = Scenario::default().with_rule("hang", turn(vec![Step::Wait { ms: 120_000 }]));
    let fake = FakeLog::new(&scenario);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let mut env: Vec<(&str, String)> = fake
        .env()
        .into_iter()
        .map(|(k, v)| (&*Box::leak(k.into_boxed_str()), v))
        .collect();
    env.push(("TURNSTILE_STATE_PATH", db.display().to_string()));
    let log = dir.path().join("bot.log");

    let mut first = BotProcess::spawn(&api, &log, &env);
    api.push_text(USER, USER, "hang");
    fake.wait_for_entries(1, |e| e.get("grandchild").is_some())
        .await;
    let grandchild = fake
        .entries()
        .iter()
        .find_map(|e| e.get("grandchild").and_then(serde_json::Value::as_u64))
        .unwrap() as u32;
    let cli = fake.processes()[0].0;
    // The group is in the state file before the crash.
    wait_until("the agent group recorded", Duration::from_secs(15), || {
        turnstile::state::Store::open(&db)
            .and_then(|s| s.groups())
            .is_ok_and(|g| g.iter().any(|g| g.pgid == i64::from(cli)))
    })
    .await;
    first.signal(libc::SIGKILL);
    first.exit().await;
    wait_until(
        "the CLI gone with turnstile",
        Duration::from_secs(15),
        || !alive(cli),
    )
    .await;
    assert!(alive(grandchild), "the grandchild outlived the kill -9");

    let mut second = BotProcess::spawn(&api, &log, &env);
    wait_until(
        "the grandchild killed at start",
        Duration::from_secs(15),
        || !alive(grandchild),
    )
    .await;
    // Up and serving (its signal handlers set): the cut turn is reported.
    let told = api.wait_for_texts(USER, 1, Duration::from_secs(15)).await;
    assert!(told[0].contains("restarted"), "{told:?}");
    second.signal(libc::SIGTERM);
    assert!(second.exit().await.success(), "{}", second.log_text());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("killing an agent process group left by a previous run"),
        "{text}"
    );
}

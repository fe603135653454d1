//! The real binary stopped with work in flight: SIGTERM drains, ends the
//! running turn, and leaves no agent process (nor its children) behind.

mod support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use support::fake_cli::FakeLog;
use support::*;
use turnstile::agent::{Scenario, Step};

/// Runs the binary with a turn in flight on `step`, sends SIGTERM, and
/// returns its stderr once it exited 0 with no agent process left.
async fn stop_with_a_turn_in_flight(step: Step) -> (FakeLog, String) {
    stop_with_signal(step, libc::SIGTERM).await
}

/// As [`stop_with_a_turn_in_flight`], stopping with `signal`.
async fn stop_with_signal(step: Step, signal: libc::c_int) -> (FakeLog, String) {
    let api = FakeBotApi::start().await;
    let scenario = Scenario::default().with_rule("slow", turn(vec![step]));
    let fake = FakeLog::new(&scenario);
    let state = fake.dir.path().join("state.db").display().to_string();
    let vars = ConfigVars::new(&api.url())
        .set("TURNSTILE_TELEGRAM_POLL_TIMEOUT", "1s")
        .set("TURNSTILE_ACCESS_ALLOWED_USERS", USER.to_string())
        .set("TURNSTILE_DISPATCHER_DRAIN_TIMEOUT", "500ms")
        .set("TURNSTILE_TURN_POST_RESULT_GRACE", "500ms")
        .set("TURNSTILE_STATE_PATH", state);
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_turnstile"));
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(vars.iter())
        .envs(fake.env())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut bot = command.spawn().expect("turnstile starts");
    api.push_text(1, USER, "slow please");
    // The agent is running the turn: its process and grandchild are up.
    fake.wait_for_entries(1, |e| e.pointer("/from_host/type") == Some(&json!("user")))
        .await;
    assert_eq!(fake.processes().len(), 1);
    let pid = bot.id().expect("running") as i32;
    // SAFETY: a plain kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(30), bot.wait())
        .await
        .expect("turnstile exits after the signal")
        .expect("waited");
    let mut stderr = String::new();
    if let Some(mut err) = bot.stderr.take() {
        use tokio::io::AsyncReadExt;
        let _ = err.read_to_string(&mut stderr).await;
    }
    assert!(status.success(), "exit status {status}; stderr:\n{stderr}");
    assert!(stderr.contains("waiting for 1 in-flight turns"), "{stderr}");
    fake.assert_no_process_left().await;
    (fake, stderr)
}

#[tokio::test]
async fn sigterm_with_a_turn_in_flight_exits_0_and_leaves_no_agent_process() {
    let (fake, stderr) = stop_with_a_turn_in_flight(Step::Wait { ms: 60_000 }).await;
    assert!(stderr.contains("agent process ended"), "{stderr}");
    assert!(
        fake.entries()
            .iter()
            .any(|e| e.pointer("/from_host/request/subtype") == Some(&json!("end_session"))),
        "the session was closed with end_session"
    );
}

#[tokio::test]
async fn sighup_drains_like_sigterm() {
    let (_fake, stderr) = stop_with_signal(Step::Wait { ms: 60_000 }, libc::SIGHUP).await;
    assert!(
        stderr.contains("SIGHUP: stopping as for SIGTERM"),
        "{stderr}"
    );
    assert!(stderr.contains("agent process ended"), "{stderr}");
}

#[tokio::test]
async fn sigterm_with_a_wedged_agent_kills_its_whole_group_before_exiting() {
    // The agent ignores end_session and stdin: only signals end it.
    let (_fake, stderr) = stop_with_a_turn_in_flight(Step::HangForever).await;
    assert!(
        stderr.contains("did not exit after end_session"),
        "{stderr}"
    );
    assert!(
        stderr.contains("agent process ended"),
        "the host waited for the agent: {stderr}"
    );
}

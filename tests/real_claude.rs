//! The real Claude Code CLI (installed by `scripts/install-claude.sh`),
//! driven by turnstile against the fake Anthropic Messages API and the fake
//! Bot API, offline. Part of the real-CLI group: built only with
//! `--features real-cli`.
//!
//! The CLI must never reach the network, so the tests that run it are
//! `#[ignore]`d and run by [`real_cli_in_a_loopback_namespace`], which
//! re-runs this test binary inside `unshare -n` (loopback only) with the
//! CLI's path in `TURNSTILE_REAL_CLAUDE`. Needs root and npm, like CI.
#![cfg(feature = "real-cli")]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::anthropic::{FakeAnthropic, Reply};
use support::*;
use turnstile::agent::backends::ClaudeBackend;
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;

const INNER: &[&str] = &[
    "end_turn_costs_one_api_call_and_stops_typing",
    "without_the_hook_the_same_turn_costs_two_api_calls",
    "send_then_end_turn_in_one_batch_arrive_in_order",
    "a_second_message_reuses_the_warm_process_and_session",
    "a_text_only_answer_reaches_the_chat_from_the_result",
    "with_the_sandbox_the_agent_reads_nothing_of_turnstiles",
    "a_cold_process_resumes_the_session_from_the_agent_home",
    "a_bash_background_job_and_the_session",
];

#[test]
fn real_cli_in_a_loopback_namespace() {
    support::real_cli::run_in_loopback_namespace(INNER);
}

/// The bot on the `claude` backend running the real CLI against `api`;
/// an entry of `env` with an empty value removes that variable.
async fn start(
    api: &FakeAnthropic,
    home: &tempfile::TempDir,
    env: &[(&str, &str)],
) -> (Harness, Arc<ClaudeBackend>) {
    let home = home.path().display().to_string();
    let mut vars = support::real_cli::agent_env(&api.base_url(), &home, &home);
    vars.retain(|(k, _)| !env.iter().any(|(e, v)| e == k && v.is_empty()));
    vars.extend(
        env.iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    Harness::launch_claude(&vars).await
}

/// Waits (bounded) until every CLI process has exited and been reaped.
async fn all_exited(backend: &ClaudeBackend) {
    wait_until("the CLI to exit", Duration::from_secs(30), || {
        backend.running() == 0
    })
    .await;
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn end_turn_costs_one_api_call_and_stops_typing() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({"text": "hi there"}),
    )]));
    let (mut h, backend) = start(&api, &home, &[]).await;
    let sent_at = Instant::now();
    h.say(1, USER, "hello");
    let (_, outcome, ended) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    all_exited(&backend).await;
    assert_eq!(h.texts(1), vec!["hi there"], "delivered exactly once");
    assert_eq!(
        api.model_calls(),
        1,
        "one API call per terminator turn: {}",
        api.describe()
    );
    let sent = h.chat_actions_sent(1);
    assert!(
        !sent.is_empty() && sent.iter().all(|at| *at < ended),
        "typing stopped at TurnEnded"
    );
    assert_eq!(
        h.chat_actions_received(1).len(),
        sent.len(),
        "no sendChatAction after TurnEnded"
    );
    let first = api.first_model_call_at().unwrap();
    println!(
        "FIGURE cold: user message -> first API request {:.0} ms; -> TurnEnded {:.0} ms",
        first.duration_since(sent_at).as_secs_f64() * 1e3,
        ended.duration_since(sent_at).as_secs_f64() * 1e3
    );
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn without_the_hook_the_same_turn_costs_two_api_calls() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({"text": "hi there"}),
    )]));
    api.push(Reply::Text("done".into()));
    let (mut h, backend) = start(&api, &home, &[("TURNSTILE_AGENT_BATCH_HOOK", "false")]).await;
    h.say(1, USER, "hello");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Completed {
            reason: "completed".into()
        }
    );
    all_exited(&backend).await;
    assert_eq!(api.model_calls(), 2, "{}", api.describe());
    assert_eq!(
        h.texts(1),
        vec!["hi there"],
        "the result text is not sent again"
    );
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn send_then_end_turn_in_one_batch_arrive_in_order() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    api.push(Reply::tools(&[
        ("mcp__telegram-tools__send", json!({"text": "first"})),
        ("mcp__telegram-tools__end_turn", json!({"text": "second"})),
    ]));
    let (mut h, backend) = start(&api, &home, &[]).await;
    h.say(1, USER, "hello");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    all_exited(&backend).await;
    assert_eq!(h.texts(1), vec!["first", "second"]);
    assert_eq!(api.model_calls(), 1);
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn a_second_message_reuses_the_warm_process_and_session() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    for text in ["one", "two"] {
        api.push(Reply::tools(&[(
            "mcp__telegram-tools__end_turn",
            json!({ "text": text }),
        )]));
    }
    let (mut h, backend) = start(&api, &home, &[("TURNSTILE_AGENT_KEEP_WARM", "10m")]).await;
    let cold_at = Instant::now();
    h.say(1, USER, "first");
    h.turn_ended(1, 1).await;
    // The next turn goes to the process only once it has settled (idle).
    api.wait_for_model_calls(1, Duration::from_secs(30)).await;
    let warm_at = Instant::now();
    h.say(1, USER, "second");
    h.turn_ended(1, 2).await;
    api.wait_for_model_calls(2, Duration::from_secs(30)).await;
    assert_eq!(h.texts(1), vec!["one", "two"]);
    assert_eq!(backend.spawned(), 1, "the warm process served both turns");
    let ids: Vec<Option<String>> = h
        .seen
        .iter()
        .filter_map(|e| match e {
            BotEvent::TurnEnded { session_id, .. } => Some(session_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids[0].is_some());
    assert_eq!(ids[0], ids[1], "the same session id");
    let calls = api.model_call_times();
    println!(
        "FIGURE user message -> first API request: cold {:.0} ms, warm {:.0} ms",
        calls[0].duration_since(cold_at).as_secs_f64() * 1e3,
        calls[1].duration_since(warm_at).as_secs_f64() * 1e3
    );
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn a_text_only_answer_reaches_the_chat_from_the_result() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    api.push(Reply::Text("a plain answer".into()));
    let (mut h, backend) = start(&api, &home, &[]).await;
    h.say(1, USER, "hello");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Completed {
            reason: "completed".into()
        }
    );
    all_exited(&backend).await;
    assert_eq!(h.texts(1), vec!["a plain answer"]);
    assert_eq!(api.model_calls(), 1);
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn with_the_sandbox_the_agent_reads_nothing_of_turnstiles() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    // Outside /tmp, which the sandbox replaces anyway.
    let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = state.path().join("turnstile.db");
    let me = std::process::id();
    api.push(Reply::tools(&[
        ("Read", json!({"file_path": db.display().to_string()})),
        (
            "Bash",
            json!({
                "command": format!(
                    "cat /proc/1/environ; echo; cat /proc/{me}/environ; echo; head -c 15 {}; ls /proc",
                    db.display()
                ),
                "description": "look around"
            }),
        ),
    ]));
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({"text": "looked"}),
    )]));
    let db_path = db.display().to_string();
    let (mut h, backend) = start(
        &api,
        &home,
        &[
            ("TURNSTILE_AGENT_SANDBOX", "bubblewrap"),
            ("TURNSTILE_AGENT_PERMISSION_MODE", "allow"),
            ("TURNSTILE_AGENT_ALLOWED_TOOLS", "Read,Bash"),
            ("TURNSTILE_STATE_PATH", db_path.as_str()),
        ],
    )
    .await;
    assert!(db.exists(), "the state file is there, outside the sandbox");
    h.say(1, USER, "look");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        },
        "{}",
        api.describe()
    );
    all_exited(&backend).await;
    let requests = api.model_requests();
    assert_eq!(requests.len(), 2, "{}", api.describe());
    let seen = requests[1]["messages"].to_string();
    let results = seen.matches("\"tool_result\"").count();
    assert!(results >= 2, "both tools ran: {seen}");
    for leak in [
        "SQLite format",
        support::real_cli::CLAUDE_ENV,
        support::real_cli::PARENT_TOKEN,
    ] {
        assert!(!seen.contains(leak), "the agent saw {leak:?}: {seen}");
    }
    println!("the agent saw: {seen}");
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn a_cold_process_resumes_the_session_from_the_agent_home() {
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = state.path().join("turnstile.db").display().to_string();
    for text in ["one", "two"] {
        api.push(Reply::tools(&[(
            "mcp__telegram-tools__end_turn",
            json!({ "text": text }),
        )]));
    }
    // No HOME from agent.env: the sandbox gives each chat its own home
    // beside the state file, and the session must survive in it.
    let (mut h, backend) = start(
        &api,
        &home,
        &[
            ("TURNSTILE_AGENT_SANDBOX", "bubblewrap"),
            ("TURNSTILE_AGENT_ENV_HOME", ""),
            ("TURNSTILE_AGENT_ENV_CLAUDE_CONFIG_DIR", ""),
            ("TURNSTILE_AGENT_WORKDIR", ""),
            ("TURNSTILE_STATE_PATH", db.as_str()),
        ],
    )
    .await;
    h.say(1, USER, "first");
    h.turn_ended(1, 1).await;
    all_exited(&backend).await;
    h.say(1, USER, "second");
    h.turn_ended(1, 2).await;
    all_exited(&backend).await;
    assert_eq!(h.texts(1), vec!["one", "two"]);
    assert_eq!(backend.spawned(), 2, "two cold processes");
    let ids: Vec<Option<String>> = h
        .seen
        .iter()
        .filter_map(|e| match e {
            BotEvent::TurnEnded { session_id, .. } => Some(session_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 2);
    let first = ids[0].clone().expect("a session id");
    assert!(turnstile::agent::host::is_session_id(&first), "{first}");
    assert_eq!(
        ids[1].as_deref(),
        Some(first.as_str()),
        "the session resumed"
    );
    assert!(
        state.path().join("homes/1").is_dir() && state.path().join("workspaces/1").is_dir(),
        "the chat's home and workdir beside the state file"
    );
    // The second process got the whole conversation back.
    let requests = api.model_requests();
    let last = requests.last().expect("requests")["messages"].to_string();
    assert!(last.contains("first") && last.contains("second"), "{last}");
}

/// The model runs Bash starting two background jobs, `nohup sleep &` and
/// `setsid sleep &`, and ends the turn; the session closes after it
/// (`keep_warm` 0). Under the sandbox no job outlives it. Without, the
/// CLI starts every Bash command in a session of its own (Node's
/// `detached`), out of the agent's process group: both jobs outlive it, as
/// the README says; the test ends them.
#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_cli_in_a_loopback_namespace"]
async fn a_bash_background_job_and_the_session() {
    let sandboxed = std::env::var(support::real_cli::SANDBOX_SWITCH).as_deref() == Ok("bubblewrap");
    let api = FakeAnthropic::start().await;
    let home = tempfile::tempdir().unwrap();
    let jobs = [("nohup", marker()), ("setsid", marker())];
    let command: Vec<String> = jobs
        .iter()
        .map(|(how, m)| format!("{how} sleep {m} >/dev/null 2>&1 &"))
        .collect();
    api.push(Reply::tools(&[(
        "Bash",
        json!({"command": format!("{} echo started", command.join(" ")), "description": "jobs"}),
    )]));
    api.push(Reply::tools(&[(
        "mcp__telegram-tools__end_turn",
        json!({"text": "started"}),
    )]));
    let (mut h, backend) = start(
        &api,
        &home,
        &[
            ("TURNSTILE_AGENT_PERMISSION_MODE", "allow"),
            ("TURNSTILE_AGENT_ALLOWED_TOOLS", "Bash"),
        ],
    )
    .await;
    h.say(1, USER, "start jobs");
    h.turn_ended(1, 1).await;
    assert_eq!(h.texts(1), vec!["started"], "{}", api.describe());
    let seen = api.model_requests()[1]["messages"].to_string();
    assert!(seen.contains("started"), "the Bash command ran: {seen}");
    all_exited(&backend).await;
    // Every job was seen running, or is gone now.
    let left = |jobs: &[(&str, String)]| -> Vec<(String, Vec<u32>)> {
        jobs.iter()
            .map(|(how, m)| (how.to_string(), sleeping(m)))
            .filter(|(_, pids)| !pids.is_empty())
            .collect()
    };
    if sandboxed {
        eventually(
            "no job left after the session",
            Duration::from_secs(30),
            || {
                let left = left(&jobs);
                async move {
                    if left.is_empty() {
                        Ok(())
                    } else {
                        Err(format!("{left:?}"))
                    }
                }
            },
        )
        .await;
    } else {
        let outlived = left(&jobs);
        for (_, pids) in &outlived {
            for pid in pids {
                // SAFETY: a plain kill(2) of the job this test started.
                unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
            }
        }
        println!("without the sandbox, outlived the session: {outlived:?}");
        assert_eq!(
            outlived.len(),
            2,
            "both jobs outlive the session: {outlived:?}"
        );
    }
}

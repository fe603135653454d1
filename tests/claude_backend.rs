//! The `claude` backend against `fake-claude`: the control protocol, every
//! fault, and no process left behind.

mod support;

use serde_json::json;
use support::fake_cli::{self, FakeCli};
use support::*;
use turnstile::agent::{AfterResult, Scenario, ScriptTurn, Step};
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;

#[actix_rt::test]
async fn a_clean_terminator_turn_delivers_once_and_closes_the_process() {
    let (mut h, cli) = FakeCli::start(&Scenario::default(), &[]).await;
    h.say(1, USER, "hello");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    assert_eq!(h.texts(1), vec!["echo: hello"]);
    cli.assert_no_process_left().await;
    let hook = cli
        .answers()
        .into_iter()
        .find(|(asked, _)| asked["subtype"] == "hook_callback")
        .expect("the hook was asked");
    assert_eq!(
        hook.1["response"],
        json!({"continue": false, "stopReason": turnstile::chat::STOP_REASON})
    );
    let init = cli
        .entries()
        .into_iter()
        .find(|e| e.pointer("/from_host/request/subtype") == Some(&json!("initialize")))
        .expect("initialize was sent");
    assert_eq!(
        init["from_host"]["request"]["sdkMcpServers"],
        json!(["telegram-tools"])
    );
}

#[actix_rt::test]
async fn a_warm_process_serves_the_next_turn_and_a_new_one_resumes_the_session() {
    let (mut h, cli) = FakeCli::start(
        &Scenario::default(),
        &[("TURNSTILE_AGENT_KEEP_WARM", "10m")],
    )
    .await;
    h.say(1, USER, "one");
    h.turn_ended(1, 1).await;
    h.say(1, USER, "two");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1), vec!["echo: one", "echo: two"]);
    assert_eq!(
        cli.backend.spawned(),
        1,
        "the warm process served both turns"
    );
    // /new drops the warm process; the next turn starts fresh, without --resume.
    h.say(1, USER, "/new");
    h.api.wait_for_texts(1, 3, SOON).await;
    h.say(1, USER, "three");
    h.turn_ended(1, 3).await;
    let procs = cli.processes();
    assert_eq!(procs.len(), 2);
    assert!(
        !procs[1].1.iter().any(|a| a.starts_with("--resume")),
        "{:?}",
        procs[1].1
    );
}

#[actix_rt::test]
async fn hang_after_result_is_released_at_the_grace_and_the_group_killed() {
    let scenario = Scenario::default().with_rule(
        "wedge",
        ScriptTurn {
            steps: vec![result("the answer")],
            after_result: AfterResult::Hang,
        },
    );
    let (mut h, cli) =
        FakeCli::start(&scenario, &[("TURNSTILE_TURN_POST_RESULT_GRACE", "300ms")]).await;
    h.say(1, USER, "wedge");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, TurnOutcome::ForceClosedAfterResult);
    assert_eq!(h.texts(1), vec!["the answer"]);
    cli.assert_no_process_left().await;
}

#[actix_rt::test]
async fn hang_before_result_is_ended_by_the_no_progress_watchdog() {
    let scenario = Scenario::default().with_rule("hang", turn(vec![Step::HangForever]));
    let (mut h, cli) = FakeCli::start(
        &scenario,
        &[
            ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "300ms"),
            ("TURNSTILE_TURN_POST_RESULT_GRACE", "300ms"),
        ],
    )
    .await;
    h.say(1, USER, "hang");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, TurnOutcome::NoProgress);
    cli.assert_no_process_left().await;
}

#[actix_rt::test]
async fn a_crash_mid_turn_is_told_and_the_session_resumed_next_turn() {
    let scenario = Scenario::default().with_rule(
        "crash",
        turn(vec![Step::Fail {
            detail: "segfault in the agent".into(),
        }]),
    );
    let (mut h, cli) = FakeCli::start(&scenario, &[]).await;
    h.say(1, USER, "crash");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert!(
        matches!(outcome, TurnOutcome::AgentFailed { .. }),
        "{outcome:?}"
    );
    let told = h.api.wait_for_texts(1, 1, SOON).await;
    assert!(
        told[0].contains("The agent failed") && told[0].contains("segfault"),
        "{told:?}"
    );
    h.say(1, USER, "again");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1).last().unwrap(), "echo: again");
    let procs = cli.processes();
    assert_eq!(procs.len(), 2);
    let first_session = fake_cli::session_id(procs[0].0);
    assert!(
        procs[1].1.contains(&format!("--resume={first_session}")),
        "{:?}",
        procs[1].1
    );
    cli.assert_no_process_left().await;
}

#[actix_rt::test]
async fn malformed_and_oversized_lines_are_skipped_and_the_turn_goes_on() {
    let scenario = Scenario::default().with_rule(
        "noise",
        turn(vec![
            Step::Raw {
                line: "this is not json {".into(),
            },
            Step::Big { bytes: 1 << 20 },
            Step::Raw {
                line: "{\"type\":\"from_the_future\"}".into(),
            },
            Step::Tools {
                calls: vec![tool(
                    "mcp__telegram-tools__end_turn",
                    json!({"text": "survived"}),
                )],
            },
        ]),
    );
    let (mut h, cli) = FakeCli::start(&scenario, &[]).await;
    h.say(1, USER, "noise");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    assert_eq!(h.texts(1), vec!["survived"]);
    cli.assert_no_process_left().await;
}

#[actix_rt::test]
async fn unknown_tools_and_unknown_requests_get_error_answers() {
    let scenario = Scenario::default().with_rule(
        "odd",
        turn(vec![
            Step::Control {
                request: json!({"subtype": "mcp_message", "server_name": "telegram-tools", "message": {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "teleport", "arguments": {}}}}),
            },
            Step::Control {
                request: json!({"subtype": "frobnicate"}),
            },
            Step::Control {
                request: json!({"subtype": "mcp_message", "server_name": "telegram-tools", "message": {"jsonrpc": "2.0", "id": 10, "method": "prompts/list"}}),
            },
            Step::Tools {
                calls: vec![
                    tool("Bash", json!({"command": "rm -rf /"})),
                    tool("mcp__telegram-tools__end_turn", json!({"text": "ok"})),
                ],
            },
        ]),
    );
    let (mut h, cli) = FakeCli::start(&scenario, &[]).await;
    h.say(1, USER, "odd");
    h.turn_ended(1, 1).await;
    cli.assert_no_process_left().await;
    let answers = cli.answers();
    let find = |pred: &dyn Fn(&serde_json::Value) -> bool| {
        answers
            .iter()
            .find(|(asked, _)| pred(asked))
            .map(|(_, a)| a.clone())
            .expect("asked")
    };
    let teleport = find(&|a| a.pointer("/message/params/name") == Some(&json!("teleport")));
    assert_eq!(
        teleport["response"]["mcp_response"]["error"]["code"],
        -32602
    );
    let frob = find(&|a| a["subtype"] == "frobnicate");
    assert_eq!(frob["subtype"], "error");
    let prompts = find(&|a| a.pointer("/message/method") == Some(&json!("prompts/list")));
    assert_eq!(prompts["response"]["mcp_response"]["error"]["code"], -32601);
    let bash = find(&|a| a["subtype"] == "can_use_tool");
    assert_eq!(bash["response"]["behavior"], "deny");
    assert_eq!(h.texts(1), vec!["ok"]);
}

#[actix_rt::test]
async fn a_tool_call_after_turn_ended_is_refused_and_never_delivered() {
    let scenario = Scenario::default().with_rule(
        "late",
        turn(vec![
            Step::Tools {
                calls: vec![tool("mcp__telegram-tools__end_turn", json!({"text": "final"}))],
            },
            Step::Control {
                request: json!({"subtype": "mcp_message", "server_name": "telegram-tools", "message": {"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "send", "arguments": {"text": "too late"}, "_meta": {"claudecode/toolUseId": "toolu_late"}}}}),
            },
        ]),
    );
    let (mut h, cli) = FakeCli::start(&scenario, &[]).await;
    h.say(1, USER, "late");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    cli.assert_no_process_left().await;
    let (_, late) = cli
        .answers()
        .into_iter()
        .find(|(asked, _)| {
            asked.pointer("/message/params/_meta/claudecode~1toolUseId")
                == Some(&json!("toolu_late"))
        })
        .expect("the late call was answered");
    assert_eq!(late["response"]["mcp_response"]["result"]["isError"], true);
    // A second turn proves the chat's outbox drained: "too late" never came.
    h.say(1, USER, "next");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1), vec!["final", "echo: next"]);
}

#[actix_rt::test]
async fn stop_sends_interrupt_and_the_session_settles() {
    let scenario = Scenario::default().with_rule("slow", turn(vec![Step::Wait { ms: 60_000 }]));
    let (mut h, cli) = FakeCli::start(&scenario, &[("TURNSTILE_AGENT_KEEP_WARM", "10m")]).await;
    h.say(1, USER, "slow");
    h.event("turn start", |e| matches!(e, BotEvent::TurnStarted { .. }))
        .await;
    // Wait until the fake is running the turn, then stop.
    cli.wait_for_entries(1, |e| e["state"] == "running").await;
    h.say(1, USER, "/stop");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, TurnOutcome::Interrupted);
    h.say(1, USER, "after");
    h.turn_ended(1, 2).await;
    assert_eq!(h.texts(1), vec!["⏹ Stopped.", "echo: after"]);
    assert_eq!(
        cli.backend.spawned(),
        1,
        "the interrupted process settled and was reused"
    );
    assert!(
        cli.entries()
            .iter()
            .any(|e| e.pointer("/from_host/request/subtype") == Some(&json!("interrupt")))
    );
}

/// Sends `signal` to the fake process that served the first turn.
fn signal_first_process(cli: &FakeCli, signal: i32) -> u32 {
    let pid = cli.processes()[0].0;
    // SAFETY: a plain kill(2) on a child of this test.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
    pid
}

#[actix_rt::test]
async fn a_warm_process_that_died_is_replaced_without_the_user_noticing() {
    let (mut h, cli) = FakeCli::start(
        &Scenario::default(),
        &[("TURNSTILE_AGENT_KEEP_WARM", "10m")],
    )
    .await;
    h.say(1, USER, "one");
    h.turn_ended(1, 1).await;
    cli.wait_for_entries(1, |e| e["state"] == "idle").await;
    signal_first_process(&cli, libc::SIGKILL);
    h.say(1, USER, "two");
    let (_, outcome, _) = h.turn_ended(1, 2).await;
    assert!(outcome.finished(), "{outcome:?}");
    assert_eq!(
        h.texts(1),
        vec!["echo: one", "echo: two"],
        "nothing about the dead process reached the chat"
    );
    let procs = cli.processes();
    assert_eq!(procs.len(), 2);
    let resume = format!("--resume={}", fake_cli::session_id(procs[0].0));
    assert!(procs[1].1.contains(&resume), "{:?}", procs[1].1);
}

#[actix_rt::test]
async fn a_warm_process_that_does_not_answer_is_replaced() {
    let (mut h, cli) = FakeCli::start(
        &Scenario::default(),
        &[
            ("TURNSTILE_AGENT_KEEP_WARM", "10m"),
            ("TURNSTILE_TURN_NO_PROGRESS_TIMEOUT", "1s"),
            ("TURNSTILE_TURN_POST_RESULT_GRACE", "300ms"),
        ],
    )
    .await;
    h.say(1, USER, "one");
    h.turn_ended(1, 1).await;
    // Freeze it only once it has reported idle: it is then a warm session.
    cli.wait_for_entries(1, |e| e["state"] == "idle").await;
    let frozen = signal_first_process(&cli, libc::SIGSTOP);
    h.say(1, USER, "two");
    let (_, outcome, _) = h.turn_ended(1, 2).await;
    assert!(outcome.finished(), "{outcome:?}");
    assert_eq!(h.texts(1), vec!["echo: one", "echo: two"]);
    assert_eq!(cli.processes().len(), 2, "{:#?}", cli.entries());
    // The frozen process was force-closed (SIGKILL works on a stopped process).
    h.say(1, USER, "/new");
    h.api.wait_for_texts(1, 3, SOON).await;
    cli.assert_no_process_left().await;
    assert!(!std::path::Path::new(&format!("/proc/{frozen}")).exists());
}

//! The `claude` backend against `fake-claude`: the control protocol, every
//! fault, and no process left behind.

mod support;

use std::sync::Arc;

use serde_json::{Value, json};
use support::fake_cli::{self, FakeCli, FakeLog};
use support::*;
use teloxide::types::ChatId;
use turnstile::agent::claude::{ClaudeBackend, ClaudeSettings};
use turnstile::agent::{
    Activity, AfterResult, AgentBackend, AgentEvent, AgentSession, ChatTool, HookReply,
    OpenSession, Permission, PermissionAsk, Scenario, ScriptTurn, SessionCommand, Step,
    ToolRegistry, ToolReply,
};
use turnstile::chat::TurnOutcome;
use turnstile::events::BotEvent;
use turnstile::shutdown::Shutdown;

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
    // Bash is denied by config here, not asked in the chat.
    let (mut h, cli) =
        FakeCli::start(&scenario, &[("TURNSTILE_AGENT_PERMISSION_MODE", "deny")]).await;
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

// Tool permissions (`can_use_tool`): decided by the driver from config, or
// asked of the turn. The fake reports each answer it got to the chat
// (`FAKE_CLAUDE_REPORT_PERMISSIONS`).

/// The agent runs `Bash {"command": "echo hi"}`, then ends the turn.
fn bash_scenario() -> Scenario {
    Scenario::default().with_rule(
        "bash",
        turn(vec![Step::Tools {
            calls: vec![
                tool("Bash", json!({"command": "echo hi"})),
                tool("mcp__telegram-tools__end_turn", json!({})),
            ],
        }]),
    )
}

/// The fake reports the answers to its `can_use_tool` requests to the chat.
const REPORT: (&str, &str) = ("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_REPORT_PERMISSIONS", "1");

/// The one answer the host wrote to the fake's `can_use_tool` request:
/// asserts there was exactly one such request, answered exactly once.
fn the_one_permission_answer(log: &FakeLog) -> Value {
    let asked: Vec<(Value, Value)> = log
        .answers()
        .into_iter()
        .filter(|(asked, _)| asked["subtype"] == "can_use_tool")
        .collect();
    assert_eq!(asked.len(), 1, "one ask: {asked:#?}");
    let (_, answer) = &asked[0];
    let id = answer["request_id"].clone();
    let entries = log.entries();
    let written: Vec<&Value> = entries
        .iter()
        .filter(|e| {
            e.pointer("/from_host/type") == Some(&json!("control_response"))
                && e.pointer("/from_host/response/request_id") == Some(&id)
        })
        .collect();
    assert_eq!(written.len(), 1, "answered exactly once: {written:#?}");
    assert!(
        entries.iter().all(|e| e.get("unexpected_answer").is_none()),
        "{entries:#?}"
    );
    answer.clone()
}

/// Runs the bash turn with `env`; hands back the chat's texts and the answer.
async fn bash_turn(env: &[(&str, &str)]) -> (Vec<String>, Value) {
    let mut vars = vec![REPORT];
    vars.extend_from_slice(env);
    let (mut h, cli) = FakeCli::start(&bash_scenario(), &vars).await;
    h.say(1, USER, "bash");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    let texts = h.api.wait_for_texts(1, 1, SOON).await;
    cli.assert_no_process_left().await;
    (texts, the_one_permission_answer(&cli))
}

/// What the model reads when config denies Bash, as the chat shows it (the
/// backticks rendered as a code entity).
const BASH_DENIED: &str =
    "denied: The tool Bash is not allowed in this chat. Answer with the send and end_turn tools.";

#[actix_rt::test]
async fn permission_mode_deny_denies_a_tool_no_list_names() {
    let (texts, answer) = bash_turn(&[("TURNSTILE_AGENT_PERMISSION_MODE", "deny")]).await;
    assert_eq!(texts, vec![BASH_DENIED]);
    assert_eq!(answer["response"]["behavior"], "deny");
}

#[actix_rt::test]
async fn permission_mode_allow_allows_a_tool_with_its_input() {
    let (texts, answer) = bash_turn(&[("TURNSTILE_AGENT_PERMISSION_MODE", "allow")]).await;
    assert_eq!(texts, vec![r#"allowed: {"command":"echo hi"}"#]);
    assert_eq!(answer["response"]["toolUseID"], "toolu_1_0");
}

#[actix_rt::test]
async fn denied_tools_beat_permission_mode_allow() {
    let (texts, _) = bash_turn(&[
        ("TURNSTILE_AGENT_PERMISSION_MODE", "allow"),
        ("TURNSTILE_AGENT_DENIED_TOOLS", "Read,Bash"),
    ])
    .await;
    assert_eq!(texts, vec![BASH_DENIED]);
}

#[actix_rt::test]
async fn allowed_tools_beat_permission_mode_deny() {
    let (texts, _) = bash_turn(&[
        ("TURNSTILE_AGENT_PERMISSION_MODE", "deny"),
        ("TURNSTILE_AGENT_ALLOWED_TOOLS", "Bash"),
    ])
    .await;
    assert_eq!(texts, vec![r#"allowed: {"command":"echo hi"}"#]);
}

#[actix_rt::test]
async fn permission_mode_ask_asks_the_chat_and_answers_once() {
    let (mut h, cli) = FakeCli::start(
        &bash_scenario(),
        &[REPORT, ("TURNSTILE_AGENT_PERMISSION_MODE", "ask")],
    )
    .await;
    h.say(1, USER, "bash");
    let question = h
        .api
        .wait_for(SOON, "the approval question", |calls| {
            calls.iter().find(|c| !buttons_of(c).is_empty()).cloned()
        })
        .await;
    assert!(
        question.params["text"]
            .as_str()
            .unwrap_or_default()
            .contains("$ echo hi")
    );
    let allow = buttons_of(&question)
        .into_iter()
        .flatten()
        .find(|(label, _)| label == "Allow")
        .expect("an Allow button")
        .1;
    h.api.push_callback(1, USER, 0, &allow);
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(
        outcome,
        TurnOutcome::Terminated {
            tool: "end_turn".into()
        }
    );
    let texts = h.api.wait_for_texts(1, 2, SOON).await;
    assert_eq!(texts[1], r#"allowed: {"command":"echo hi"}"#, "{texts:?}");
    cli.assert_no_process_left().await;
    let answer = the_one_permission_answer(&cli);
    assert_eq!(answer["response"]["behavior"], "allow");
}

/// A `claude` backend on the fake playing `scenario`, outside the actors,
/// with `env` on top of the fake's own variables.
fn bare_backend(files: &FakeLog, env: &[(&str, &str)]) -> ClaudeBackend {
    let config = ConfigVars::new("http://127.0.0.1:9")
        .set_all(TEST_DEFAULTS.iter().copied())
        .set_all(files.env())
        .set_all(env.iter().copied())
        .load();
    ClaudeBackend::new(
        ClaudeSettings::from_config(&config),
        Arc::new(ToolRegistry::new(&config.turn.terminator_tools)),
    )
}

/// The session's next event, bounded by [`SOON`].
async fn next_event(session: &mut AgentSession) -> AgentEvent {
    match tokio::time::timeout(SOON, session.events.recv()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("the session's events ended"),
        Err(_) => panic!("no event from the session within {SOON:?}"),
    }
}

/// Opens a session on the bash scenario in ask mode and waits for its ask.
async fn session_with_an_ask(
    backend: &ClaudeBackend,
    shutdown: &Shutdown,
) -> (AgentSession, PermissionAsk) {
    let mut session = backend
        .open(OpenSession {
            shutdown: shutdown.clone(),
            ..OpenSession::fresh(ChatId(1))
        })
        .await
        .expect("the fake starts");
    session
        .commands
        .send(SessionCommand::UserTurn("bash".into()))
        .expect("the driver runs");
    loop {
        if let AgentEvent::PermissionAsk(ask) = next_event(&mut session).await {
            return (session, ask);
        }
    }
}

#[actix_rt::test]
async fn the_driver_goes_on_serving_while_an_ask_waits() {
    let files = FakeLog::new(&bash_scenario());
    let backend = bare_backend(&files, &[REPORT]);
    let shutdown = Shutdown::new();
    let (mut session, ask) = session_with_an_ask(&backend, &shutdown).await;
    assert_eq!(
        (ask.id.as_str(), ask.tool.full(), &ask.input),
        ("toolu_1_0", "Bash", &json!({"command": "echo hi"}))
    );
    // While the ask waits, a host command goes out and the agent's answer
    // to it comes back through the driver.
    session
        .commands
        .send(SessionCommand::Interrupt)
        .expect("the driver runs");
    assert!(
        matches!(next_event(&mut session).await, AgentEvent::Progress),
        "the interrupt's answer"
    );
    files
        .wait_for_entries(1, |e| {
            e.pointer("/from_host/request/subtype") == Some(&json!("interrupt"))
        })
        .await;
    assert!(
        files
            .answers()
            .iter()
            .all(|(asked, _)| asked["subtype"] != "can_use_tool"),
        "the ask is still waiting"
    );
    ask.reply.answer(Permission::Allow {
        input: json!({"command": "echo changed"}),
    });
    let report = loop {
        match next_event(&mut session).await {
            AgentEvent::ToolCall(call) => break call,
            AgentEvent::Progress => {}
            other => panic!("expected the fake's report through send, got {other:?}"),
        }
    };
    assert_eq!(
        report.call.tool,
        Ok(ChatTool::Send {
            text: r#"allowed: {"command":"echo changed"}"#.into()
        })
    );
    drop(report);
    let answer = the_one_permission_answer(&files);
    assert_eq!(answer["response"]["toolUseID"], "toolu_1_0");
    session.commands.send(SessionCommand::Kill).ok();
    while !matches!(next_event(&mut session).await, AgentEvent::Exited { .. }) {}
}

#[actix_rt::test]
async fn a_host_stop_while_an_ask_waits_denies_it_once() {
    let scenario = Scenario::default().with_rule(
        "bash",
        turn(vec![
            Step::Tools {
                calls: vec![tool("Bash", json!({"command": "echo hi"}))],
            },
            // Time for a second answer to arrive, were one written.
            Step::Wait { ms: 1000 },
        ]),
    );
    let files = FakeLog::new(&scenario);
    let backend = bare_backend(
        &files,
        &[
            REPORT,
            ("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_FINISH_TURN_FIRST", "1"),
            ("TURNSTILE_TURN_POST_RESULT_GRACE", "10s"),
        ],
    );
    let shutdown = Shutdown::new();
    let (mut session, ask) = session_with_an_ask(&backend, &shutdown).await;
    shutdown.begin_closing();
    session
        .commands
        .send(SessionCommand::Close)
        .expect("the driver runs");
    files
        .wait_for_entries(1, |e| e["asked"]["subtype"] == "can_use_tool")
        .await;
    // The person answers only now: too late, the ask was already refused.
    ask.reply.answer(Permission::Allow {
        input: json!({"command": "echo hi"}),
    });
    // The fake finishes its turn (a second answer would reach it meanwhile) and exits.
    while !matches!(next_event(&mut session).await, AgentEvent::Exited { .. }) {}
    let answer = the_one_permission_answer(&files);
    assert_eq!(
        answer["response"],
        json!({"behavior": "deny", "message": "the host is stopping"})
    );
    files.assert_no_process_left().await;
}

#[actix_rt::test]
async fn the_driver_reports_streamed_text_and_tool_calls_as_activity() {
    let scenario = Scenario::default().with_rule(
        "live",
        turn(vec![
            // A subagent's text: never shown as the agent's.
            Step::Raw {
                line: json!({"type": "stream_event", "parent_tool_use_id": "toolu_task",
                    "event": {"type": "content_block_delta", "index": 0,
                        "delta": {"type": "text_delta", "text": "subagent"}}})
                .to_string(),
            },
            Step::Stream {
                pieces: vec!["Hel".into(), "lo".into()],
                ms: 0,
            },
            Step::StreamTool {
                tool: "mcp__telegram-tools__end_turn".into(),
                pieces: vec![
                    r#"{"te"#.into(),
                    r#"xt": "Bye \ud83e"#.into(),
                    r#"\udd80"}"#.into(),
                ],
                ms: 0,
            },
            Step::Tools {
                calls: vec![tool("mcp__telegram-tools__send", json!({"text": "sent"}))],
            },
        ]),
    );
    let files = FakeLog::new(&scenario);
    let backend = bare_backend(&files, &[]);
    let mut session = backend
        .open(OpenSession::fresh(ChatId(1)))
        .await
        .expect("the fake starts");
    session
        .commands
        .send(SessionCommand::UserTurn("live".into()))
        .expect("the driver runs");
    let mut seen = Vec::new();
    loop {
        match next_event(&mut session).await {
            AgentEvent::Result(_) => break,
            AgentEvent::ToolCall(call) => {
                seen.push(format!("call {} {:?}", call.id, call.call));
                call.reply.answer(ToolReply::Ok("sent".into()));
            }
            AgentEvent::BatchResolved(batch) => {
                batch.reply.answer(HookReply::Continue);
            }
            AgentEvent::Text(text) => seen.push(format!("text {text}")),
            AgentEvent::Activity(Activity::Writing {
                stream,
                source,
                appended,
            }) => seen.push(format!("writing {stream} {source:?} {appended}")),
            AgentEvent::Activity(Activity::ToolStarted { id, name, input }) => {
                seen.push(format!("started {id} {name} {input}"));
            }
            _ => {}
        }
    }
    assert_eq!(
        seen,
        vec![
            "writing msg_stream_1:0 Text Hel",
            "writing msg_stream_1:0 Text lo",
            "text Hello",
            r#"writing msg_stream_2:0 ToolText("end_turn") Bye "#,
            r#"writing msg_stream_2:0 ToolText("end_turn") 🦀"#,
            r#"started toolu_1_0 mcp__telegram-tools__send {"text":"sent"}"#,
            r#"call toolu_1_0 ChatCall { name: "send", tool: Ok(Send { text: "sent" }), ends_turn: false }"#,
        ]
    );
    let args = &files.processes()[0].1;
    assert!(
        args.iter().any(|a| a == "--include-partial-messages"),
        "{args:?}"
    );
    session.commands.send(SessionCommand::Kill).ok();
    while !matches!(next_event(&mut session).await, AgentEvent::Exited { .. }) {}
}

/// Runs `command` as the `claude` backend's CLI (with `sandbox`) and asserts
/// the operator's log names it and the OS error `error` at ERROR, while the
/// chat gets one plain sentence without either.
async fn a_cli_that_cannot_start(command: &str, sandbox: &str, error: &str) {
    let logs = LogCapture::start();
    let files = FakeLog::new(&Scenario::default());
    let mut env = files.env();
    env.extend([
        ("TURNSTILE_AGENT_COMMAND".to_string(), command.to_string()),
        ("TURNSTILE_AGENT_SANDBOX".to_string(), sandbox.to_string()),
    ]);
    let (mut h, backend) = Harness::launch_claude(&env).await;
    h.say(1, USER, "hello");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert!(
        matches!(outcome, TurnOutcome::AgentFailed { .. }),
        "{outcome:?}"
    );
    let told = h.api.wait_for_texts(1, 1, SOON).await;
    assert_eq!(
        told,
        ["⚠️ The agent could not start; the operator has been told in the log."]
    );
    let log = logs.text();
    let line = log
        .lines()
        .find(|l| l.contains("the agent could not start"))
        .unwrap_or_else(|| panic!("no start failure in the log:\n{log}"));
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains(&format!("command={command}")), "{line}");
    assert!(line.contains(error), "{line}");
    assert!(line.contains("chat_id=1"), "{line}");
    assert_eq!(backend.spawned(), 0, "nothing was started");
    h.bot.stop().await;
}

#[actix_rt::test]
async fn a_missing_cli_is_logged_with_its_path_and_error_and_the_chat_told_plainly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("no-claude-here");
    a_cli_that_cannot_start(
        &missing.display().to_string(),
        "none",
        "No such file or directory",
    )
    .await;
}

#[actix_rt::test]
async fn under_the_sandbox_a_cli_that_is_not_executable_is_logged_and_told_the_same_way() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let plain = dir.path().join("claude");
    std::fs::write(&plain, "#!/bin/sh\n").expect("written");
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    a_cli_that_cannot_start(
        &plain.display().to_string(),
        "bubblewrap",
        "Permission denied",
    )
    .await;
}

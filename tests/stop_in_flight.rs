//! Stopping with work in flight: late tool results are logged and dropped,
//! agent requests during the stop are refused through the protocol, and a
//! stopped component refuses fresh input visibly.

mod support;

use serde_json::json;
use support::fake_cli::FakeCli;
use support::*;
use turnstile::agent::{Scenario, Step};
use turnstile::chat::TurnOutcome;
use turnstile::telegram::{OutboxError, SendText};

/// An agent that answers "slow send" with one `send` of `text`.
fn slow_send(text: &str) -> Scenario {
    Scenario::default().with_rule(
        "slow send",
        turn(vec![Step::Tools {
            calls: vec![tool("mcp__telegram-tools__send", json!({ "text": text }))],
        }]),
    )
}

#[actix_rt::test]
async fn a_tool_still_running_at_stop_has_its_result_dropped_with_a_log_line() {
    let logs = LogCapture::start();
    let scenario = slow_send("slow to deliver");
    let (mut h, cli) = FakeCli::start(
        &scenario,
        &[("TURNSTILE_DISPATCHER_DRAIN_TIMEOUT", "200ms")],
    )
    .await;
    h.api.inject(
        "sendMessage",
        Fault::Delay(std::time::Duration::from_millis(1500)),
    );
    h.say(1, USER, "slow send");
    // The send is in flight at Telegram: stop now.
    h.api.wait_for_call("sendMessage", SOON).await;
    let cut = h.bot.stop().await;
    assert_eq!(cut, 1, "the drain timed out on the running turn");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, TurnOutcome::HostStopping);
    cli.assert_no_process_left().await;
    let log = logs.text();
    let line = log
        .lines()
        .find(|l| l.contains("tool result arrived after the turn ended"))
        .unwrap_or_else(|| panic!("no late-result line in:\n{log}"));
    assert!(line.contains("call_id=toolu_1_0"), "{line}");
    assert!(line.contains("tool=send"), "{line}");
    assert!(line.contains("ok=true"), "{line}");
}

/// A tool's result that comes after its turn ended (here by `/stop`, the
/// host running on) is dropped with a log line, not handed to the agent.
#[actix_rt::test]
async fn a_tool_result_after_its_turn_ended_is_dropped_while_the_host_runs() {
    let logs = LogCapture::start();
    let scenario = slow_send("slow to deliver");
    let (mut h, _cli) = FakeCli::start(&scenario, &[]).await;
    h.api.inject(
        "sendMessage",
        Fault::Delay(std::time::Duration::from_millis(1500)),
    );
    h.say(1, USER, "slow send");
    // The send is in flight at Telegram: the turn is stopped meanwhile.
    h.api.wait_for_call("sendMessage", SOON).await;
    h.say(1, USER, "/stop");
    let (_, outcome, _) = h.turn_ended(1, 1).await;
    assert_eq!(outcome, TurnOutcome::Interrupted);
    let late = "tool result arrived after the turn ended";
    wait_until("the late-result line", SOON, || logs.text().contains(late)).await;
    let log = logs.text();
    let line = log.lines().find(|l| l.contains(late)).unwrap_or_default();
    assert!(line.contains("call_id=toolu_1_0"), "{line}");
    assert!(line.contains("tool=send"), "{line}");
}

#[actix_rt::test]
async fn agent_requests_after_stop_began_are_refused_and_never_run() {
    let scenario = Scenario::default().with_rule(
        "late requests",
        turn(vec![
            Step::Wait { ms: 800 },
            Step::Control {
                request: json!({"subtype": "mcp_message", "server_name": "telegram-tools", "message": {"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "send", "arguments": {"text": "after stop"}, "_meta": {"claudecode/toolUseId": "toolu_after"}}}}),
            },
            Step::Control {
                request: json!({"subtype": "hook_callback", "callback_id": "hook_0", "input": {"hook_event_name": "PostToolBatch", "tool_calls": []}}),
            },
            Step::Control {
                request: json!({"subtype": "can_use_tool", "tool_name": "Read", "input": {}, "tool_use_id": "toolu_read"}),
            },
        ]),
    );
    let (mut h, cli) = FakeCli::start(
        &scenario,
        &[
            // The drain ends while the agent still thinks; it asks afterwards.
            ("TURNSTILE_DISPATCHER_DRAIN_TIMEOUT", "200ms"),
            ("TURNSTILE_TURN_POST_RESULT_GRACE", "5s"),
            ("TURNSTILE_AGENT_ALLOWED_TOOLS", "Read"),
            ("TURNSTILE_AGENT_ENV_FAKE_CLAUDE_FINISH_TURN_FIRST", "1"),
        ],
    )
    .await;
    h.say(1, USER, "late requests");
    cli.wait_for_entries(1, |e| e["state"] == "running").await;
    // Stop while the agent thinks; it asks after the stop began.
    h.bot.stop().await;
    h.turn_ended(1, 1).await;
    cli.assert_no_process_left().await;
    let answers = cli.answers();
    let find = |subtype: &str| {
        answers
            .iter()
            .find(|(asked, _)| asked["subtype"] == subtype)
            .map(|(_, a)| a.clone())
            .unwrap_or_else(|| panic!("no answer to {subtype}: {answers:#?}"))
    };
    let call = find("mcp_message");
    assert_eq!(call["response"]["mcp_response"]["error"]["code"], -32000);
    assert_eq!(
        call["response"]["mcp_response"]["error"]["message"],
        "the host is stopping"
    );
    assert_eq!(find("hook_callback")["subtype"], "error");
    // A permission ask is denied, so the model reads why (even for a tool
    // `agent.allowed_tools` names).
    assert_eq!(
        find("can_use_tool")["response"],
        json!({"behavior": "deny", "message": "the host is stopping"})
    );
    assert!(
        h.texts(1).iter().all(|t| t != "after stop"),
        "the refused tool never ran"
    );
}

#[actix_rt::test]
async fn a_stopped_outbox_refuses_fresh_input_visibly() {
    let h = Harness::start(Scenario::default(), &[]).await;
    h.bot.stop().await;
    let (send, rx) = SendText::tracked(teloxide::types::ChatId(1), "too late");
    h.bot.outbox.do_send(send);
    assert_eq!(rx.await.expect("answered"), Err(OutboxError::Stopped));
}

#[actix_rt::test]
async fn with_retry_a_turn_whose_reply_was_on_its_way_is_not_queued_again() {
    let scenario = slow_send("on its way");
    let h = Harness::start(
        scenario,
        &[
            ("TURNSTILE_DISPATCHER_DRAIN_TIMEOUT", "200ms"),
            ("TURNSTILE_DISPATCHER_ON_INTERRUPTED", "retry"),
        ],
    )
    .await;
    h.api.inject(
        "sendMessage",
        Fault::Delay(std::time::Duration::from_millis(800)),
    );
    h.say(1, USER, "slow send");
    h.api.wait_for_call("sendMessage", SOON).await;
    h.bot.stop().await;
    assert!(
        h.texts(1).contains(&"on its way".to_string()),
        "the flush delivered it"
    );
    let open = h.bot.inbox.recover().await.expect("the store reads");
    assert!(open.is_empty(), "nothing left to run again: {open:?}");
    let told = h.texts(1);
    assert!(told.iter().any(|t| t.contains("cut short")), "{told:?}");
}

/// A turn the drain cuts short at a plain stop (a signal) is told the bot is
/// stopping; at a `/restart`, that it is restarting.
async fn cut_short_by(restart: bool) -> Vec<String> {
    let scenario = Scenario::default().with_rule("slow", turn(vec![Step::Wait { ms: 60_000 }]));
    let mut h = Harness::start(scenario, &[("TURNSTILE_DISPATCHER_DRAIN_TIMEOUT", "200ms")]).await;
    h.say(ADMIN, ADMIN, "slow");
    h.event("turn start", |e| {
        matches!(e, turnstile::events::BotEvent::TurnStarted { .. })
    })
    .await;
    if restart {
        h.say(ADMIN, ADMIN, "/restart");
        let asked = tokio::time::timeout(SOON, h.bot.host_request()).await;
        assert!(
            matches!(
                asked,
                Ok(Some(turnstile::chat::HostRequest::Restart { .. }))
            ),
            "{asked:?}"
        );
    }
    assert_eq!(h.bot.stop().await, 1, "the drain cut the turn short");
    h.texts(ADMIN)
}

#[actix_rt::test]
async fn a_plain_stop_says_the_bot_is_stopping_not_restarting() {
    let told = cut_short_by(false).await;
    assert_eq!(
        told,
        [
            "⚠️ The bot is stopping and this turn was cut short. Send your message again once it is back if you still need an answer."
        ]
    );
}

#[actix_rt::test]
async fn a_restart_says_the_bot_is_restarting() {
    let told = cut_short_by(true).await;
    assert_eq!(
        told,
        [
            "🔄 Restarting; waiting for 1 running turn first.",
            "⚠️ The bot is restarting and this turn was cut short. Send your message again if you still need an answer."
        ]
    );
}

/// What the outbox settled while the stop drained it (here the "cut short"
/// notice, sent after the turns' own writes were flushed) is committed
/// before `stop` returns: the process ends or re-executes right after, and
/// a row left unsettled would be sent again by the next process.
#[actix_rt::test]
async fn what_the_outbox_settled_while_draining_is_committed_when_stop_returns() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let state = dir.path().join("state.sqlite");
    let path = state.display().to_string();
    let scenario = Scenario::default().with_rule("slow", turn(vec![Step::Wait { ms: 60_000 }]));
    let mut h = Harness::start(
        scenario,
        &[
            ("TURNSTILE_DISPATCHER_DRAIN_TIMEOUT", "200ms"),
            ("TURNSTILE_STATE_PATH", path.as_str()),
        ],
    )
    .await;
    h.say(ADMIN, ADMIN, "slow");
    h.event("turn start", |e| {
        matches!(e, turnstile::events::BotEvent::TurnStarted { .. })
    })
    .await;
    // The notice's settle write is slow to land.
    h.bot
        .inbox
        .stall_next_settle(std::time::Duration::from_millis(1_500));
    assert_eq!(h.bot.stop().await, 1, "the drain cut the turn short");
    assert_eq!(h.texts(ADMIN).len(), 1, "the notice was sent");
    // Read beside the store thread, not behind it: what is committed now.
    let conn = rusqlite::Connection::open(&state).expect("the state file opens");
    let waiting: i64 = conn
        .query_row("SELECT count(*) FROM outgoing", [], |r| r.get(0))
        .expect("the outgoing table");
    assert_eq!(waiting, 0, "a sent message's row was left to be sent again");
}

/// The text of a `FeedItem::Said` event, if `e` is one.
fn said(e: &turnstile::events::BotEvent) -> Option<&str> {
    match e {
        turnstile::events::BotEvent::Feed {
            item: turnstile::events::FeedItem::Said { text },
            ..
        } => Some(text),
        _ => None,
    }
}

/// `/stop` drops only what the stopped turn queued. An earlier turn's
/// answer still waiting for Telegram (behind a message Telegram refuses
/// with 502 until the stop is queued) reaches the chat once, before what
/// the stop says; the stopped turn's own preview and text, queued behind
/// it, never do.
#[actix_rt::test]
async fn a_stop_drops_the_stopped_turns_queued_text_and_not_an_earlier_answer() {
    let send = |text: &str| tool("mcp__telegram-tools__send", json!({ "text": text }));
    let scenario = Scenario::default()
        .with_rule(
            "first",
            turn(vec![Step::Tools {
                calls: vec![
                    send("first, part one"),
                    send("the first answer"),
                    tool("mcp__telegram-tools__end_turn", json!({})),
                ],
            }]),
        )
        .with_rule(
            "second",
            turn(vec![
                Step::Stream {
                    pieces: vec!["A preview of the second answer, long enough to show".into()],
                    ms: 0,
                },
                Step::Tools {
                    calls: vec![send("second, never sent")],
                },
                Step::Wait { ms: 60_000 },
            ]),
        );
    let preview = [
        ("TURNSTILE_PROGRESS_STREAM", "edit"),
        ("TURNSTILE_PROGRESS_PREVIEW_AFTER", "0s"),
    ];
    let mut h = Harness::start(scenario, &preview).await;
    for _ in 0..500 {
        h.api.inject("sendMessage", Fault::ServerError(502));
    }
    h.say(1, USER, "first");
    h.turn_ended(1, 1).await;
    h.say(1, USER, "second");
    // The outbox has the second turn's preview (shown as the text began)
    // and text queued behind the first turn's.
    h.event("the second turn's text queued", |e| {
        said(e) == Some("second, never sent")
    })
    .await;
    h.say(1, USER, "/stop");
    h.event("the stop's notice queued", |e| {
        said(e) == Some("⏹ Stopped.")
    })
    .await;
    h.api.clear_faults();
    let texts = h.api.wait_for_texts(1, 3, SOON).await;
    assert_eq!(texts, ["first, part one", "the first answer", "⏹ Stopped."]);
    let (_, outcome, _) = h.turn_ended(1, 2).await;
    assert_eq!(outcome, TurnOutcome::Interrupted);
    h.bot
        .outbox
        .send(turnstile::telegram::Flush)
        .await
        .expect("outbox alive");
    assert_eq!(
        h.texts(1),
        texts,
        "the stopped turn's preview and text never left"
    );
}

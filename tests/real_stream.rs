//! The real Claude Code CLI (installed by `scripts/install-claude.sh`)
//! driven by the `claude` backend against the fake Anthropic Messages API,
//! which streams an answer in three chunks: the backend's session reports
//! what the agent writes as it writes it (`Activity::Writing`), in order,
//! before the tool call or the result. Part of the real-CLI group: built
//! only with `--features real-cli`.
//!
//! The CLI must never reach the network, so the tests that run it are
//! `#[ignore]`d and run by [`real_stream_in_a_loopback_namespace`], which
//! re-runs this test binary inside `unshare -n` (loopback only) with the
//! CLI's path in `TURNSTILE_REAL_CLAUDE`. Needs root and npm, like CI.
#![cfg(feature = "real-cli")]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::anthropic::{FakeAnthropic, Reply};
use support::*;
use teloxide::types::ChatId;
use turnstile::agent::backends::ClaudeBackend;
use turnstile::agent::{
    Activity, AgentBackend, AgentEvent, AgentResult, AgentSession, ChatCall, ChatTool, HookReply,
    OpenSession, Permission, SessionCommand, ToolRegistry, ToolReply, WritingSource,
};

const INNER: &[&str] = &[
    "plain_text_streams_in_three_pieces",
    "the_text_of_end_turn_streams_in_three_pieces",
];

#[test]
fn real_stream_in_a_loopback_namespace() {
    support::real_cli::run_in_loopback_namespace(INNER);
}

/// The three chunks the fake streams, a pause apart.
const CHUNKS: [&str; 3] = ["Hello, ", "streaming \"world\" 🦀", "!\nBye."];

/// The pause between two chunks: long enough that each is its own event.
const PAUSE: Duration = Duration::from_millis(400);

/// How long a turn may take.
const TURN: Duration = Duration::from_secs(60);

/// A `claude` backend on the real CLI, pointed at `api`.
fn backend(api: &FakeAnthropic, home: &tempfile::TempDir) -> ClaudeBackend {
    let home = home.path().display().to_string();
    let config = ConfigVars::new("http://127.0.0.1:9")
        .set_all(TEST_DEFAULTS.iter().copied())
        .set_all(support::real_cli::agent_env(&api.base_url(), &home, &home))
        .load();
    ClaudeBackend::new(
        support::claude_settings(&config),
        Arc::new(ToolRegistry::new(&config.turn.terminator_tools)),
    )
}

/// What a session reported in one turn, in order.
#[derive(Debug)]
enum Seen {
    Writing {
        at: Instant,
        stream: String,
        source: WritingSource,
        appended: String,
    },
    ToolStarted(String),
    ToolCall(ChatCall),
    Result(AgentResult),
}

/// Runs one turn, answering tool calls `ok` and stopping the loop after
/// `end_turn` (as turnstile does); returns what the session reported.
async fn one_turn(api: &FakeAnthropic) -> Vec<Seen> {
    let home = tempfile::tempdir().expect("a temp home");
    let backend = backend(api, &home);
    let mut session = backend
        .open(OpenSession::fresh(ChatId(1)))
        .await
        .expect("the CLI starts");
    session
        .commands
        .send(SessionCommand::UserTurn("hello".into()))
        .expect("the driver runs");
    let deadline = tokio::time::Instant::now() + TURN;
    let mut seen = Vec::new();
    loop {
        let event = next(&mut session, deadline, api).await;
        println!("event: {event:?}");
        match event {
            AgentEvent::Activity(Activity::Writing {
                stream,
                source,
                appended,
            }) => seen.push(Seen::Writing {
                at: Instant::now(),
                stream,
                source,
                appended,
            }),
            AgentEvent::Activity(Activity::ToolStarted { name, .. }) => {
                seen.push(Seen::ToolStarted(name.full().to_string()));
            }
            AgentEvent::ToolCall(call) => {
                seen.push(Seen::ToolCall(call.call.clone()));
                call.reply.answer(ToolReply::Ok("delivered".into()));
            }
            AgentEvent::BatchResolved(batch) => {
                let ends = batch.terminator().is_some();
                batch.reply.answer(if ends {
                    HookReply::Stop {
                        reason: "the turn has ended".into(),
                    }
                } else {
                    HookReply::Continue
                });
            }
            AgentEvent::PermissionAsk(ask) => {
                let input = ask.input.clone();
                ask.reply.answer(Permission::Allow { input });
            }
            AgentEvent::Result(result) => {
                seen.push(Seen::Result(result));
                break;
            }
            AgentEvent::Exited { code, detail } => {
                panic!(
                    "the CLI exited mid-turn ({code:?}): {detail}; {}",
                    api.describe()
                )
            }
            _ => {}
        }
    }
    session.commands.send(SessionCommand::Close).ok();
    while !matches!(
        next(&mut session, deadline, api).await,
        AgentEvent::Exited { .. }
    ) {}
    seen
}

async fn next(
    session: &mut AgentSession,
    deadline: tokio::time::Instant,
    api: &FakeAnthropic,
) -> AgentEvent {
    match tokio::time::timeout_at(deadline, session.events.recv()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("the session's events ended; {}", api.describe()),
        Err(_) => panic!("no event before the deadline; {}", api.describe()),
    }
}

/// The Writing events of `seen` (asserting they form one stream of
/// `source`, each a pause after the one before) and the index of the first
/// event that is not one.
fn writings(seen: &[Seen], source: &WritingSource) -> (Vec<String>, usize) {
    let mut pieces = Vec::new();
    let mut streams = Vec::new();
    let mut times = Vec::new();
    for event in seen {
        if let Seen::Writing {
            at,
            stream,
            source: got,
            appended,
        } = event
        {
            assert_eq!(got, source, "{seen:?}");
            pieces.push(appended.clone());
            streams.push(stream.clone());
            times.push(*at);
        }
    }
    streams.dedup();
    assert_eq!(streams.len(), 1, "one stream: {streams:?}");
    for pair in times.windows(2) {
        assert!(
            pair[1] - pair[0] >= PAUSE / 2,
            "the pieces came apart, as the API sent them: {:?}",
            pair[1] - pair[0]
        );
    }
    let last = seen
        .iter()
        .rposition(|e| matches!(e, Seen::Writing { .. }))
        .unwrap_or(0);
    (pieces, last)
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_stream_in_a_loopback_namespace"]
async fn plain_text_streams_in_three_pieces() {
    let api = FakeAnthropic::start().await;
    api.push(Reply::text_in_chunks(&CHUNKS, PAUSE));
    let seen = one_turn(&api).await;
    let (pieces, last) = writings(&seen, &WritingSource::Text);
    assert_eq!(pieces, CHUNKS, "three pieces, in order: {seen:?}");
    let Some(Seen::Result(result)) = seen.last() else {
        panic!("the turn ends with its result: {seen:?}")
    };
    assert!(last < seen.len() - 1, "every piece before the result");
    assert_eq!(
        result.text,
        CHUNKS.concat(),
        "the result holds the whole text"
    );
    assert_eq!(api.model_calls(), 1, "{}", api.describe());
}

#[actix_rt::test]
#[ignore = "runs inside a network namespace through real_stream_in_a_loopback_namespace"]
async fn the_text_of_end_turn_streams_in_three_pieces() {
    let api = FakeAnthropic::start().await;
    api.push(Reply::tool_text_in_chunks(
        "mcp__telegram-tools__end_turn",
        &CHUNKS,
        PAUSE,
    ));
    let seen = one_turn(&api).await;
    let (pieces, last) = writings(&seen, &WritingSource::ToolText("end_turn".into()));
    assert_eq!(pieces, CHUNKS, "three pieces, in order: {seen:?}");
    let call = seen
        .iter()
        .position(|e| matches!(e, Seen::ToolCall(..)))
        .unwrap_or_else(|| panic!("end_turn was called: {seen:?}"));
    assert!(last < call, "every piece before the tool call: {seen:?}");
    let Seen::ToolCall(parsed) = &seen[call] else {
        unreachable!()
    };
    assert_eq!(
        parsed.tool,
        Ok(ChatTool::EndTurn {
            text: Some(CHUNKS.concat())
        }),
        "the call carries the whole text"
    );
    assert!(parsed.ends_turn, "end_turn ends the turn");
    let started = seen
        .iter()
        .position(|e| matches!(e, Seen::ToolStarted(n) if n == "mcp__telegram-tools__end_turn"))
        .unwrap_or_else(|| panic!("the call was reported as started: {seen:?}"));
    assert!(
        last < started && started < call,
        "started after it was written, before it ran: {seen:?}"
    );
    assert!(matches!(seen.last(), Some(Seen::Result(_))), "{seen:?}");
    assert_eq!(api.model_calls(), 1, "{}", api.describe());
}

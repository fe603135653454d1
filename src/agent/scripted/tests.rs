use super::*;
use crate::agent::{Activity, AgentEvent, SessionCommand, TerminalReason, WritingSource};
use serde_json::{Value, json};
use std::time::Duration;
use teloxide::types::ChatId;

/// A session playing `steps` (read from JSON, as a scenario file
/// holds them) for the message `hi`.
async fn play(steps: Value) -> AgentSession {
    let steps: Vec<Step> = serde_json::from_value(steps).expect("the steps parse");
    let scenario = Scenario::default().with_rule(
        "hi",
        ScriptTurn {
            steps,
            after_result: AfterResult::Idle,
        },
    );
    let backend = ScriptedBackend::new(scenario);
    let session = backend
        .open(OpenSession::fresh(ChatId(1)))
        .await
        .expect("a scripted session opens");
    session
        .commands
        .send(SessionCommand::UserTurn("hi".into()))
        .expect("the agent runs");
    session
}

/// A scripted bot that runs for long keeps only the newest log entries,
/// so it does not grow with every session and tool call.
#[tokio::test]
async fn the_log_keeps_only_the_newest_entries() {
    let backend = ScriptedBackend::new(Scenario::default());
    let extra = 5;
    for chat in 0..(LOG_LIMIT + extra) as i64 {
        let session = backend
            .open(OpenSession::fresh(ChatId(chat)))
            .await
            .expect("a scripted session opens");
        drop(session);
    }
    let opens = backend.log().opens;
    assert_eq!(opens.len(), LOG_LIMIT, "the log is bounded");
    assert_eq!(opens[0].0, extra.to_string());
    assert_eq!(opens[LOG_LIMIT - 1].0, (LOG_LIMIT + extra - 1).to_string());
}

/// The activities (and texts) until the result, each with when it came.
async fn activities(session: &mut AgentSession) -> Vec<(std::time::Instant, AgentEvent)> {
    let mut seen = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), session.events.recv())
            .await
            .expect("an event within 10 s")
            .expect("the session goes on");
        match event {
            AgentEvent::Result(_) => return seen,
            AgentEvent::Activity(_) | AgentEvent::Text(_) => {
                seen.push((std::time::Instant::now(), event));
            }
            _ => {}
        }
    }
}

fn writing(event: &AgentEvent) -> (String, WritingSource, String) {
    match event {
        AgentEvent::Activity(Activity::Writing {
            stream,
            source,
            appended,
        }) => (stream.clone(), source.clone(), appended.clone()),
        other => panic!("not a Writing activity: {other:?}"),
    }
}

#[tokio::test]
async fn an_activity_step_starts_a_tool_for_the_live_view() {
    let mut session = play(json!([
        {"do": "activity", "tool": "Bash", "input": {"command": "echo {text}"}},
        {"do": "activity", "tool": "Read"}
    ]))
    .await;
    let seen = activities(&mut session).await;
    let started: Vec<&AgentEvent> = seen.iter().map(|(_, e)| e).collect();
    assert!(
        matches!(
            started.as_slice(),
            [
                AgentEvent::Activity(Activity::ToolStarted { name: bash, input, .. }),
                AgentEvent::Activity(Activity::ToolStarted { name: read, input: empty, .. }),
            ] if bash.full() == "Bash" && *input == json!({"command": "echo hi"})
                && read.full() == "Read" && *empty == json!({})
        ),
        "{started:?}"
    );
}

#[tokio::test]
async fn a_stream_step_writes_its_pieces_apart_then_the_whole_text() {
    let mut session = play(json!([
        {"do": "stream", "pieces": ["Hel", "", "lo wor", "ld"], "ms": 50}
    ]))
    .await;
    let seen = activities(&mut session).await;
    assert_eq!(seen.len(), 4, "three pieces and the text: {seen:?}");
    let pieces: Vec<_> = seen[..3].iter().map(|(_, e)| writing(e)).collect();
    let stream = &pieces[0].0;
    assert!(
        pieces
            .iter()
            .all(|(s, source, _)| s == stream && *source == WritingSource::Text)
    );
    let text: Vec<&str> = pieces.iter().map(|(_, _, a)| a.as_str()).collect();
    assert_eq!(text, ["Hel", "lo wor", "ld"]);
    assert!(
        seen[1].0 - seen[0].0 >= Duration::from_millis(90),
        "the empty piece still paused"
    );
    assert!(seen[2].0 - seen[1].0 >= Duration::from_millis(45));
    assert!(matches!(&seen[3].1, AgentEvent::Text(t) if t == "Hello world"));
}

#[tokio::test]
async fn a_stream_tool_step_writes_the_text_argument_as_the_driver_decodes_it() {
    let mut session = play(json!([
        {"do": "stream_tool", "tool": "end_turn",
         "pieces": ["{\"te", "xt\":\"Hi \\ud83e", "\\udd80 \\\"x\\\"\"}"]},
        {"do": "stream_tool", "tool": "mcp__telegram-tools__send", "pieces": ["{\"text\":\"s\"}"]},
        {"do": "stream_tool", "tool": "mcp__telegram-tools__react", "pieces": ["{\"text\":\"no\"}"]}
    ]))
    .await;
    let seen = activities(&mut session).await;
    let pieces: Vec<_> = seen.iter().map(|(_, e)| writing(e)).collect();
    let end_turn = WritingSource::ToolText("end_turn".into());
    let got: Vec<(&WritingSource, &str)> = pieces.iter().map(|(_, s, a)| (s, a.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (&end_turn, "Hi "),
            (&end_turn, "🦀 \"x\""),
            (&WritingSource::ToolText("send".into()), "s"),
        ],
        "react streams nothing"
    );
    assert_ne!(pieces[0].0, pieces[2].0, "each step is its own stream");
}

#[tokio::test]
async fn an_interrupt_stops_a_stream_between_pieces() {
    let mut session = play(json!([
        {"do": "stream", "pieces": ["a", "b"], "ms": 60000}
    ]))
    .await;
    loop {
        let event = session.events.recv().await.expect("the session goes on");
        if matches!(event, AgentEvent::Activity(_)) {
            break;
        }
    }
    session
        .commands
        .send(SessionCommand::Interrupt)
        .expect("the agent runs");
    let result = loop {
        match tokio::time::timeout(Duration::from_secs(10), session.events.recv()).await {
            Ok(Some(AgentEvent::Result(result))) => break result,
            Ok(Some(AgentEvent::Activity(a))) => panic!("a piece after the interrupt: {a:?}"),
            Ok(Some(_)) => {}
            other => panic!("no result after the interrupt: {other:?}"),
        }
    };
    assert_eq!(
        result.terminal_reason,
        Some(TerminalReason::AbortedStreaming)
    );
}

#[test]
fn the_new_steps_refuse_unknown_fields() {
    for bad in [
        json!({"do": "stream", "pieces": ["a"], "speed": 1}),
        json!({"do": "stream_tool", "pieces": ["a"]}),
        json!({"do": "activity"}),
    ] {
        assert!(
            serde_json::from_value::<Step>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

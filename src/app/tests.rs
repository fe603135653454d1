use std::time::Duration;

use teloxide::types::ChatId;

use super::*;
use crate::agent::{AgentEvent, OpenSession, SessionCommand, ToolReply};
use crate::config::Backend;

/// The backend made from the config parses the agent's calls with its
/// `turn.terminator_tools`: a batch calling a configured terminator
/// (of any server) ends the turn.
#[tokio::test]
async fn the_configured_terminators_reach_the_backend() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let script = dir.path().join("finish.json");
    std::fs::write(
        &script,
        serde_json::json!({"default": {"steps": [{"do": "tools", "calls": [
            {"name": "mcp__telegram-tools__send", "input": {"text": "hi"}},
            {"name": "mcp__other__finish"}
        ]}]}})
        .to_string(),
    )
    .expect("the script is written");
    let mut config = Config::default();
    config.agent.backend = Backend::Scripted;
    config.agent.script = script;
    config.turn.terminator_tools = vec!["end_turn".into(), "finish".into()];
    let backend = backend_from_config(&config).expect("the scripted backend");
    let mut session = backend
        .open(OpenSession::fresh(ChatId(1)))
        .await
        .expect("a session opens");
    session
        .commands
        .send(SessionCommand::UserTurn("go".into()))
        .expect("the agent runs");
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), session.events.recv())
            .await
            .expect("an event within 10 s")
            .expect("the session goes on");
        match event {
            AgentEvent::ToolCall(call) => {
                call.reply.answer(ToolReply::Ok("ok".into()));
            }
            AgentEvent::BatchResolved(batch) => {
                assert_eq!(batch.terminator(), Some("finish"), "{:?}", batch.calls);
                return;
            }
            AgentEvent::Result(result) => panic!("no batch before the result: {result:?}"),
            _ => {}
        }
    }
}

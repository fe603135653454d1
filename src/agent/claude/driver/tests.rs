use super::*;

#[test]
fn the_close_steps_split_the_grace_in_order() {
    let grace = std::time::Duration::from_nanos(3);
    assert_eq!(
        <Driver as Protocol>::CLOSE_STEPS,
        [CloseStep::EndSession, CloseStep::CloseStdin]
    );
    let waits: Vec<u128> = <Driver as Protocol>::CLOSE_STEPS
        .iter()
        .map(|s| s.wait(grace).as_nanos())
        .collect();
    assert_eq!(waits, vec![1, 2], "end_session gets half, stdin the rest");
}

/// A driver of a fresh process resuming `resume`, and the host's side.
fn driver(resume: Option<&str>) -> (Driver, mpsc::UnboundedReceiver<AgentEvent>) {
    let vars = std::collections::BTreeMap::from([("TELEGRAM_BOT_TOKEN".into(), "1:x".into())]);
    let config = crate::config::Config::load(None, &vars).expect("loads");
    let (out, _lines) = mpsc::unbounded_channel();
    let (events, seen) = mpsc::unbounded_channel();
    let (ready, _started) = oneshot::channel();
    let start = Start {
        settings: Arc::new(ClaudeSettings::from_config(&config)),
        tools: Arc::new(ToolRegistry::new(&config.turn.terminator_tools)),
        shutdown: Shutdown::new(),
        ready,
        session_id: resume.map(String::from),
    };
    let link = SessionIo {
        out,
        events,
        pid: 1,
    };
    (Driver::new(start, link), seen)
}

fn line(value: serde_json::Value) -> Line {
    Line::parse(value.to_string().as_bytes())
}

#[tokio::test]
async fn a_session_is_handed_over_only_when_started_idle_and_owing_nothing() {
    let (mut driver, _events) = driver(Some("s-1"));
    assert_eq!(driver.hand_over(), None, "initialize not answered yet");
    let started = serde_json::json!({"type": "control_response", "response": {
        "subtype": "success", "request_id": INITIALIZE_ID, "response": {}}});
    driver.read(line(started));
    assert_eq!(
        driver.hand_over().as_deref(),
        Some("s-1"),
        "started and idle"
    );
    driver.on_command(SessionCommand::UserTurn("hello".into()));
    assert_eq!(driver.hand_over(), None, "a turn runs");
    driver.read(line(
        serde_json::json!({"type": "system", "subtype": "init", "session_id": "s-2"}),
    ));
    driver.read(line(
        serde_json::json!({"type": "result", "subtype": "success"}),
    ));
    assert_eq!(
        driver.hand_over().as_deref(),
        Some("s-2"),
        "the session the turn reported"
    );
    driver.read(line(
        serde_json::json!({"type": "control_request", "request_id": "ask-1",
        "request": {"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "ls"},
            "tool_use_id": "toolu_1"}}),
    ));
    assert_eq!(driver.hand_over(), None, "the agent waits for an answer");
}

#[test]
fn a_fresh_or_forked_session_with_no_turn_yet_is_not_handed_over() {
    let (mut driver, _events) = driver(None);
    let started = serde_json::json!({"type": "control_response", "response": {
        "subtype": "success", "request_id": INITIALIZE_ID, "response": {}}});
    driver.read(line(started));
    assert_eq!(driver.hand_over(), None, "no session id yet");
}

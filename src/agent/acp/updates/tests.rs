use super::*;

fn update(update: Value) -> Value {
    json!({"sessionId": "s", "update": update})
}

#[test]
fn each_kind_is_read_once() {
    let rows = [
        (
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}),
            Update::Chunk {
                text: "hi".into(),
                message: None,
            },
        ),
        (
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "", "mimeType": "image/png"}}),
            Update::Other,
        ),
        (
            json!({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Read a", "rawInput": {"path": "a"}}),
            Update::ToolStarted {
                id: "t".into(),
                title: "Read a".into(),
                input: json!({"path": "a"}),
            },
        ),
        (
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed"}),
            Update::Other,
        ),
        (
            json!({"sessionUpdate": "plan", "entries": [
                {"content": "one", "priority": "high", "status": "completed"},
                {"content": "two", "priority": "high", "status": "in_progress"}]}),
            Update::Plan(Some("two".into())),
        ),
        (
            json!({"sessionUpdate": "plan", "entries": []}),
            Update::Plan(None),
        ),
        (
            json!({"sessionUpdate": "usage_update", "used": 1, "size": 2, "cost": {"amount": 0.5, "currency": "USD"}}),
            Update::Cost(0.5),
        ),
        (
            json!({"sessionUpdate": "usage_update", "used": 1, "size": 2, "cost": {"amount": 3, "currency": "credits"}}),
            Update::Other,
        ),
        (
            json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}}),
            Update::Other,
        ),
        (
            json!({"sessionUpdate": "from_the_future"}),
            Update::Unknown("from_the_future".into()),
        ),
        (
            json!({"sessionUpdate": "agent_message_chunk", "content": 42}),
            Update::Unknown("agent_message_chunk".into()),
        ),
        (json!(null), Update::Unknown("(none)".into())),
    ];
    for (given, expected) in rows {
        assert_eq!(read(&update(given.clone()), "s"), expected, "{given}");
    }
}

#[test]
fn an_update_of_another_session_is_skipped() {
    let chunk =
        json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}});
    assert!(matches!(read(&update(chunk), "other"), Update::Unknown(_)));
}

#[test]
fn the_answer_is_its_chunks_pieces_split_by_tool_calls() {
    let mut answer = PromptAnswer::new(Some(1.0));
    assert_eq!(answer.chunk("Let me look.", None), "acp:0");
    answer.next_piece();
    assert_eq!(answer.chunk("Found ", None), "acp:1");
    answer.chunk("it.\n", None);
    answer.cost(1.25);
    let (text, cost) = answer.finish();
    assert_eq!(text, "Let me look.\n\nFound it.");
    assert!((cost - 0.25).abs() < 1e-9, "{cost}");
}

#[test]
fn a_new_message_id_starts_a_new_piece() {
    let mut answer = PromptAnswer::new(None);
    assert_eq!(answer.chunk("a", Some("m1".into())), "acp:0");
    assert_eq!(answer.chunk("b", Some("m1".into())), "acp:0");
    assert_eq!(answer.chunk("c", Some("m2".into())), "acp:1");
    assert_eq!(answer.finish().0, "ab\n\nc");
}

#[test]
fn stop_reasons_map_to_results() {
    let end = result_for("end_turn", "hi".into(), 0.0);
    assert!(end.succeeded());
    assert_eq!(end.terminal_reason, Some(TerminalReason::Completed));
    assert_eq!(end.num_turns, 1, "a turn ran: not an idle resume");
    let cancelled = result_for("cancelled", String::new(), 0.0);
    assert!(
        cancelled
            .terminal_reason
            .as_ref()
            .is_some_and(TerminalReason::interrupted)
    );
    for (stop, words) in [
        (
            "max_tokens",
            "max_tokens: the model reached its output limit",
        ),
        (
            "max_turn_requests",
            "max_turn_requests: the agent reached its limit of model requests for one message",
        ),
        ("refusal", "refusal: the model refused to go on"),
    ] {
        let result = result_for(stop, "partial".into(), 0.0);
        assert!(!result.succeeded(), "{stop}");
        assert_eq!(
            result.terminal_reason,
            Some(TerminalReason::Other(words.into()))
        );
    }
    let odd = result_for("something_new", "t".into(), 0.0);
    assert_eq!(
        odd.terminal_reason,
        Some(TerminalReason::Other("something_new".into()))
    );
}

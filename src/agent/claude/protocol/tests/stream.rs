//! The API's stream events, relayed by the CLI with
//! `--include-partial-messages`.

use super::*;

fn stream(event: Value) -> StreamEvent {
    match parse(
        json!({"type": "stream_event", "event": event, "session_id": "s",
            "parent_tool_use_id": null, "uuid": "u"}),
    ) {
        Line::Cli(CliLine::StreamEvent {
            event,
            parent_tool_use_id: None,
        }) => event,
        other => panic!("not a stream event: {other:?}"),
    }
}

#[test]
fn stream_events_are_read_by_type() {
    assert_eq!(
        stream(
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "content": [], "usage": {}}})
        ),
        StreamEvent::MessageStart {
            message: StreamMessage { id: "msg_1".into() }
        }
    );
    assert_eq!(
        stream(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}})),
        StreamEvent::ContentBlockStart {
            index: 0,
            content_block: StreamBlock::Text
        }
    );
    assert_eq!(
        stream(
            json!({"type": "content_block_start", "index": 2, "content_block":
                {"type": "tool_use", "id": "toolu_1", "name": "mcp__telegram-tools__end_turn", "input": {}}})
        ),
        StreamEvent::ContentBlockStart {
            index: 2,
            content_block: StreamBlock::ToolUse {
                id: "toolu_1".into(),
                name: "mcp__telegram-tools__end_turn".into()
            }
        }
    );
    assert_eq!(
        stream(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "Hel"}})),
        StreamEvent::ContentBlockDelta {
            index: 0,
            delta: Delta::TextDelta { text: "Hel".into() }
        }
    );
    assert_eq!(
        stream(json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "{\"te"}})),
        StreamEvent::ContentBlockDelta {
            index: 1,
            delta: Delta::InputJsonDelta {
                partial_json: "{\"te".into()
            }
        }
    );
    assert_eq!(
        stream(json!({"type": "content_block_stop", "index": 1})),
        StreamEvent::ContentBlockStop { index: 1 }
    );
    assert_eq!(
        stream(json!({"type": "message_stop"})),
        StreamEvent::MessageStop
    );
}

#[test]
fn unknown_or_mistyped_stream_events_are_other_never_an_error() {
    for event in [
        json!({"type": "ping"}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
        json!({"type": "future_event", "x": 1}),
        json!({}),
        json!("not an object"),
        json!(null),
    ] {
        assert_eq!(stream(event.clone()), StreamEvent::Other, "{event}");
    }
    assert_eq!(
        stream(json!({"type": "content_block_delta", "index": "one",
                "delta": {"type": "thinking_delta", "thinking": "hm"}})),
        StreamEvent::ContentBlockDelta {
            index: 0,
            delta: Delta::Other
        }
    );
    assert_eq!(
        stream(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": 5}})),
        StreamEvent::ContentBlockDelta {
            index: 0,
            delta: Delta::TextDelta {
                text: String::new()
            }
        }
    );
    assert_eq!(
        stream(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "thinking", "thinking": ""}})),
        StreamEvent::ContentBlockStart {
            index: 0,
            content_block: StreamBlock::Other
        }
    );
    assert_eq!(
        stream(json!({"type": "message_start", "message": 7})),
        StreamEvent::MessageStart {
            message: StreamMessage::default()
        }
    );
    assert_eq!(
        parse(json!({"type": "stream_event"})),
        Line::Cli(CliLine::StreamEvent {
            event: StreamEvent::Other,
            parent_tool_use_id: None,
        })
    );
    assert_eq!(
        parse(
            json!({"type": "stream_event", "parent_tool_use_id": "toolu_task",
                "event": {"type": "message_stop"}})
        ),
        Line::Cli(CliLine::StreamEvent {
            event: StreamEvent::MessageStop,
            parent_tool_use_id: Some("toolu_task".into()),
        }),
        "a subagent's stream is told apart"
    );
}

use super::*;

fn registry() -> ToolRegistry {
    ToolRegistry::new(&["end_turn".to_string()])
}

fn name(full: &str) -> ToolName {
    ToolName::parse(full)
}

fn ends_turn(reg: &ToolRegistry, full: &str, input: &Value) -> bool {
    reg.batch_call(&name(full), input).ends_turn
}

#[test]
fn calls_parse_into_chat_tools() {
    let cases = [
        (
            "send",
            json!({"text": "hi"}),
            Ok(ChatTool::Send { text: "hi".into() }),
        ),
        (
            "mcp__telegram-tools__send",
            json!({"text": " "}),
            Err(ToolInputError::EmptyText),
        ),
        ("send", json!({"text": 5}), Err(ToolInputError::EmptyText)),
        ("end_turn", json!({}), Ok(ChatTool::EndTurn { text: None })),
        (
            "mcp__telegram-tools__end_turn",
            json!({"text": "bye"}),
            Ok(ChatTool::EndTurn {
                text: Some("bye".into()),
            }),
        ),
        ("react", json!({"emoji": ""}), Err(ToolInputError::NoEmoji)),
        (
            "react",
            json!({"emoji": "👍", "end_turn": true}),
            Ok(ChatTool::React {
                emoji: "👍".into()
            }),
        ),
        (
            "finish",
            json!({}),
            Err(ToolInputError::Unknown("finish".into())),
        ),
        (
            "mcp__telegram-tools__teleport",
            json!({}),
            Err(ToolInputError::Unknown(
                "mcp__telegram-tools__teleport".into(),
            )),
        ),
    ];
    for (full, input, expect) in cases {
        assert_eq!(
            ChatTool::parse(&name(full), &input),
            expect,
            "{full} {input}"
        );
    }
}

#[test]
fn every_registered_tool_parses() {
    for spec in registry().tools() {
        let input = json!({"text": "t", "emoji": "👍", "path": "out.txt", "when": "in 1h", "prompt": "p", "id": 3});
        let tool = ChatTool::parse(&name(spec.name), &input).expect("served");
        assert_eq!(tool.name(), spec.name);
    }
}

#[test]
fn a_name_without_a_whole_prefix_is_its_own_bare_name() {
    for full in [
        "end_turn",
        "Read",
        "mcp__incomplete",
        "not_mcp__server__tool",
        "mcp____tool",
        "mcp__server__",
    ] {
        let parsed = name(full);
        assert_eq!(parsed.bare(), full, "{full}");
        assert_eq!(parsed.server(), None, "{full}");
        assert_eq!(parsed.full(), full);
    }
}

#[test]
fn the_server_runs_up_to_the_first_double_underscore() {
    let parsed = name("mcp__telegram-tools__end_turn");
    assert_eq!(
        (parsed.server(), parsed.bare()),
        (Some("telegram-tools"), "end_turn")
    );
    assert!(parsed.is_served_here());
    assert_eq!(ToolName::served_here("end_turn"), parsed);
    let parsed = name("mcp__a__b__c");
    assert_eq!((parsed.server(), parsed.bare()), (Some("a"), "b__c"));
    assert!(!parsed.is_served_here());
    assert_eq!(parsed.to_string(), "mcp__a__b__c");
}

#[test]
fn terminators_are_found_under_any_server_prefix() {
    let reg = registry();
    let names = reg.terminator_names();
    assert!(!names.is_empty());
    for bare in names {
        for full in [
            format!("mcp__telegram-tools__{bare}"),
            format!("mcp__teams-tools__{bare}"),
            format!("mcp__some-server-name__{bare}"),
            bare.to_string(),
        ] {
            assert!(
                ends_turn(&reg, &full, &json!({})),
                "{full} must end the turn"
            );
            assert!(reg.call(&name(&full), &json!({})).ends_turn, "{full}");
        }
    }
}

#[test]
fn non_terminators_do_not_end_the_turn() {
    let reg = registry();
    for full in [
        "mcp__telegram-tools__send",
        "mcp__telegram-tools__react",
        "Read",
        "mcp__telegram-tools__end_turn_later",
    ] {
        assert!(!ends_turn(&reg, full, &json!({})), "{full}");
    }
}

#[test]
fn react_ends_the_turn_only_with_its_flag() {
    let reg = registry();
    let react = name("mcp__telegram-tools__react");
    assert!(
        reg.call(&react, &json!({"emoji": "👍", "end_turn": true}))
            .ends_turn
    );
    assert!(
        !reg.call(&react, &json!({"emoji": "👍", "end_turn": false}))
            .ends_turn
    );
    // Said of the call even when its input is bad.
    let bad = reg.call(&react, &json!({"emoji": "", "end_turn": true}));
    assert_eq!(
        (bad.tool, bad.ends_turn),
        (Err(ToolInputError::NoEmoji), true)
    );
}

#[test]
fn configured_terminators_are_compared_bare() {
    let reg = ToolRegistry::new(&["mcp__x__finish".to_string()]);
    assert!(ends_turn(&reg, "mcp__telegram-tools__finish", &json!({})));
    assert!(ends_turn(&reg, "finish", &json!({})));
    // A terminator that is no chat tool ends a batch, never a chat call.
    let call = reg.call(&name("finish"), &json!({}));
    assert_eq!(
        (call.tool, call.ends_turn),
        (Err(ToolInputError::Unknown("finish".into())), false)
    );
}

#[test]
fn the_batch_terminator_is_found_beside_other_tools() {
    let reg = registry();
    let calls = vec![
        reg.batch_call(&name("mcp__telegram-tools__send"), &json!({"text": "a"})),
        reg.batch_call(&name("mcp__telegram-tools__end_turn"), &json!({})),
    ];
    assert_eq!(terminator(&calls), Some("end_turn"));
    assert_eq!(terminator(&calls[..1]), None);
}

#[test]
fn only_the_hosts_send_and_end_turn_stream_their_text() {
    let streamed = |full: &str| streamed_tool(&name(full));
    assert_eq!(streamed("mcp__telegram-tools__send"), Some("send"));
    assert_eq!(streamed("mcp__telegram-tools__end_turn"), Some("end_turn"));
    assert_eq!(streamed("end_turn"), Some("end_turn"));
    assert_eq!(streamed("mcp__telegram-tools__react"), None);
    assert_eq!(streamed("mcp__other-server__send"), None);
    assert_eq!(streamed("mcp__telegram-tools_send"), None);
    assert_eq!(streamed("Bash"), None);
}

#[test]
fn the_schedule_tools_parse_and_say_what_is_missing() {
    let parse = |bare: &str, input: Value| ChatTool::parse(&name(bare), &input);
    assert_eq!(
        parse("schedule", json!({"when": "every 2h", "prompt": "check"})),
        Ok(ChatTool::Schedule {
            when: "every 2h".into(),
            prompt: "check".into()
        })
    );
    assert_eq!(
        parse("schedule", json!({"when": "every 2h", "prompt": " "})),
        Err(ToolInputError::Missing("prompt"))
    );
    assert_eq!(
        parse("schedule", json!({"prompt": "x", "chat": 5})),
        Err(ToolInputError::Missing("when"))
    );
    assert_eq!(
        parse("unschedule", json!({"id": 4})),
        Ok(ChatTool::Unschedule { id: 4 })
    );
    assert_eq!(
        parse("unschedule", json!({"id": "#4"})),
        Ok(ChatTool::Unschedule { id: 4 })
    );
    assert_eq!(
        parse("unschedule", json!({"id": "x"})),
        Err(ToolInputError::Missing("id"))
    );
    assert_eq!(parse("schedules", json!({})), Ok(ChatTool::Schedules));
}

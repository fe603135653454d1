//! The `telegram-tools` MCP server: the JSON-RPC messages relayed in
//! `mcp_message` and the host's answers.

use super::*;
use crate::agent::tools::ChatTool;

fn registry() -> ToolRegistry {
    ToolRegistry::new(&["end_turn".to_string()])
}

#[test]
fn mcp_initialize_echoes_the_protocol_version() {
    let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}});
    let McpRequest::Answer(answer) = mcp(&msg, &registry()) else {
        panic!()
    };
    assert_eq!(answer["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(answer["result"]["capabilities"], json!({"tools": {}}));
    assert_eq!(answer["id"], 1);
}

#[test]
fn tools_are_listed_always_loaded() {
    let McpRequest::Answer(answer) = mcp(&json!({"id": 2, "method": "tools/list"}), &registry())
    else {
        panic!()
    };
    let tools = answer["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        vec![
            "send",
            "end_turn",
            "react",
            "send_file",
            "schedule",
            "unschedule",
            "schedules"
        ]
    );
    assert!(
        tools
            .iter()
            .all(|t| t["_meta"]["anthropic/alwaysLoad"] == true)
    );
}

fn send(text: &str) -> ChatCall {
    ChatCall {
        name: "send".into(),
        tool: Ok(ChatTool::Send { text: text.into() }),
        ends_turn: false,
    }
}

#[test]
fn tool_calls_are_served_and_unknown_ones_refused() {
    let call = json!({"id": 3, "method": "tools/call", "params": {"name": "send", "arguments": {"text": "hi"}, "_meta": {"claudecode/toolUseId": "toolu_1"}}});
    assert_eq!(
        mcp(&call, &registry()),
        McpRequest::Call {
            rpc_id: json!(3),
            tool_use_id: "toolu_1".into(),
            call: send("hi"),
        }
    );
    let end =
        json!({"id": 6, "method": "tools/call", "params": {"name": "end_turn", "arguments": {}}});
    let McpRequest::Call { call, .. } = mcp(&end, &registry()) else {
        panic!("end_turn is served")
    };
    assert_eq!(
        (call.tool, call.ends_turn),
        (Ok(ChatTool::EndTurn { text: None }), true),
        "the call says it ends the turn"
    );
    let unknown = json!({"id": 4, "method": "tools/call", "params": {"name": "teleport"}});
    let McpRequest::Answer(answer) = mcp(&unknown, &registry()) else {
        panic!()
    };
    assert_eq!(answer["error"]["code"], INVALID_PARAMS);
    let McpRequest::Answer(answer) =
        mcp(&json!({"id": 5, "method": "resources/list"}), &registry())
    else {
        panic!()
    };
    assert_eq!(answer["error"]["code"], METHOD_NOT_FOUND);
}

#[test]
fn tool_replies_map_to_results_errors_and_refusals() {
    let id = json!(7);
    assert_eq!(
        tool_reply(&id, &ToolReply::Ok("ok".into()))["result"]["content"][0]["text"],
        "ok"
    );
    assert_eq!(
        tool_reply(&id, &ToolReply::Error("bad".into()))["result"]["isError"],
        true
    );
    assert_eq!(
        tool_reply(&id, &ToolReply::Refused("stopping".into()))["error"]["code"],
        HOST_STOPPING
    );
}

#[test]
fn mcp_methods_are_read_by_name() {
    let read = |message: Value| RpcRequest::deserialize(&message).unwrap();
    assert_eq!(
            read(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2099-01-01"}})).method,
            McpMethod::Initialize {
                protocol_version: json!("2099-01-01")
            }
        );
    assert_eq!(
        read(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize"})).method,
        McpMethod::Initialize {
            protocol_version: json!("2025-11-25")
        }
    );
    let initialized = read(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert_eq!(initialized.id, Value::Null);
    assert_eq!(initialized.method, McpMethod::Notification);
    assert_eq!(
        read(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).method,
        McpMethod::ToolsList
    );
    assert_eq!(
        read(json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/list"})).method,
        McpMethod::Unknown {
            method: "prompts/list".into()
        }
    );
    assert_eq!(
        read(json!("not a message")),
        RpcRequest::default(),
        "anything but an object is an unknown method"
    );
}

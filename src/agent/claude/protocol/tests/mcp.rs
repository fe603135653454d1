//! `mcp_message`: the chat tools' MCP messages as the CLI relays them.

use super::*;
use crate::agent::host::jsonrpc;
use crate::agent::host::mcp::{CallMeta, McpMethod, ToolsCall};

fn send(text: &str) -> ChatCall {
    ChatCall {
        name: "send".into(),
        tool: Ok(ChatTool::Send { text: text.into() }),
        ends_turn: false,
    }
}

#[test]
fn a_tools_call_carries_its_tool_use_id_from_meta() {
    let (_, call) = request(
        json!({"type": "control_request", "request_id": "r6", "request": {
            "subtype": "mcp_message", "server_name": "telegram-tools", "message": {
                "jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": {"name": "send", "arguments": {"text": "hi"}, "_meta": {"claudecode/toolUseId": "toolu_42"}}
            }
        }}),
    );
    let ControlRequest::McpMessage(McpMessage {
        server_name,
        message,
    }) = call
    else {
        panic!("not an mcp_message: {call:?}")
    };
    assert_eq!(server_name, TOOL_SERVER);
    assert_eq!(
        message,
        RpcRequest {
            id: json!(9),
            method: McpMethod::ToolsCall(ToolsCall {
                name: "send".into(),
                arguments: json!({"text": "hi"}),
                meta: CallMeta {
                    tool_use_id: "toolu_42".into()
                },
            }),
        }
    );
    assert_eq!(
        message.serve(&registry()),
        McpRequest::Call {
            rpc_id: json!(9),
            tool_use_id: "toolu_42".into(),
            call: send("hi"),
        }
    );
}

#[test]
fn an_error_message_that_is_not_plain_text_still_makes_valid_json() {
    let nasty = "line\nbreak \u{0}nul \"quote\" \u{202e}rtl 🚀";
    let line = control_error("r", nasty);
    let text = line.to_string();
    let back: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back["response"]["error"], nasty);
    let rpc = jsonrpc::error(&Value::Null, jsonrpc::INTERNAL_ERROR, nasty);
    assert_eq!(rpc["error"]["message"], nasty);
}

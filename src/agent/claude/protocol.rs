//! The Claude Code stream-json wire format: lines the host writes, lines
//! the CLI writes, and the in-process MCP server `telegram-tools`.
//!
//! Pure functions over `serde_json::Value`, so every shape is unit-tested
//! without a process.

use serde_json::{Value, json};

use crate::agent::{AgentResult, BatchCall, HookReply, ToolReply};
use crate::chat::tools::{TOOL_SERVER, ToolRegistry};

/// The PostToolBatch hook's callback id.
pub const HOOK_ID: &str = "hook_0";

/// JSON-RPC error: the host is stopping.
pub const RPC_HOST_STOPPING: i64 = -32000;
/// JSON-RPC error: method not found.
pub const RPC_METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC error: invalid params (an unknown tool).
pub const RPC_INVALID_PARAMS: i64 = -32602;
/// JSON-RPC error: the handler failed.
pub const RPC_INTERNAL: i64 = -32603;

/// The `initialize` control request.
pub fn initialize(request_id: &str, batch_hook: bool, system_prompt: &str) -> Value {
    let mut request = json!({
        "subtype": "initialize",
        "sdkMcpServers": [TOOL_SERVER],
        "systemPrompt": system_prompt,
    });
    if batch_hook {
        request["hooks"] =
            json!({"PostToolBatch": [{"hookCallbackIds": [HOOK_ID], "timeout": 60}]});
    }
    control_request(request_id, request)
}

/// A control request from the host.
pub fn control_request(request_id: &str, request: Value) -> Value {
    json!({"type": "control_request", "request_id": request_id, "request": request})
}

/// A user turn.
pub fn user_message(text: &str) -> Value {
    json!({
        "type": "user",
        "session_id": "",
        "parent_tool_use_id": null,
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
    })
}

/// A successful answer to a CLI request.
pub fn control_success(request_id: &str, response: Value) -> Value {
    json!({
        "type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response},
    })
}

/// An error answer to a CLI request.
pub fn control_error(request_id: &str, error: &str) -> Value {
    json!({
        "type": "control_response",
        "response": {"subtype": "error", "request_id": request_id, "error": error},
    })
}

/// The hook's answer.
pub fn hook_output(reply: &HookReply) -> Result<Value, String> {
    match reply {
        HookReply::Continue => Ok(json!({})),
        HookReply::Stop { reason } => Ok(json!({"continue": false, "stopReason": reason})),
        HookReply::Refused(why) => Err(why.clone()),
    }
}

/// A JSON-RPC success.
pub fn rpc_result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A JSON-RPC error.
pub fn rpc_error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The `tools/call` answer for a tool's reply.
pub fn tool_reply(id: &Value, reply: &ToolReply) -> Value {
    match reply {
        ToolReply::Ok(text) => rpc_result(id, json!({"content": [{"type": "text", "text": text}]})),
        ToolReply::Error(text) => rpc_result(
            id,
            json!({"content": [{"type": "text", "text": text}], "isError": true}),
        ),
        ToolReply::Refused(text) => rpc_error(id, RPC_HOST_STOPPING, text),
        ToolReply::Failed(text) => rpc_error(id, RPC_INTERNAL, text),
    }
}

/// What an `mcp_message` asks of the host.
#[derive(Debug, PartialEq)]
pub enum McpRequest {
    /// Answer at once with this JSON-RPC message.
    Answer(Value),
    /// A chat tool call to serve.
    Call {
        /// The JSON-RPC id to answer.
        rpc_id: Value,
        /// The bare tool name.
        tool: String,
        /// The agent's tool-use id.
        tool_use_id: String,
        /// The tool input.
        input: Value,
    },
}

/// Serves an MCP JSON-RPC message for `telegram-tools`.
pub fn mcp(message: &Value, tools: &ToolRegistry) -> McpRequest {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let params = message.get("params").cloned().unwrap_or_else(|| json!({}));
    match method {
        "initialize" => {
            let version = params
                .get("protocolVersion")
                .cloned()
                .unwrap_or_else(|| json!("2025-11-25"));
            McpRequest::Answer(rpc_result(
                &id,
                json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": TOOL_SERVER, "version": env!("CARGO_PKG_VERSION")},
                }),
            ))
        }
        m if m.starts_with("notifications/") => {
            McpRequest::Answer(json!({"jsonrpc": "2.0", "result": {}, "id": 0}))
        }
        "tools/list" => {
            let list: Vec<Value> = tools
                .tools()
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "description": t.description,
                        "inputSchema": t.input_schema,
                        "_meta": {"anthropic/alwaysLoad": true},
                    })
                })
                .collect();
            McpRequest::Answer(rpc_result(&id, json!({"tools": list})))
        }
        "tools/call" => {
            let name = params.get("name").and_then(Value::as_str).unwrap_or("");
            if tools.get(name).is_none() {
                return McpRequest::Answer(rpc_error(
                    &id,
                    RPC_INVALID_PARAMS,
                    &format!("unknown tool `{name}`"),
                ));
            }
            let tool_use_id = params
                .pointer("/_meta/claudecode~1toolUseId")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            McpRequest::Call {
                rpc_id: id,
                tool: crate::chat::tools::bare_tool_name(name).to_string(),
                tool_use_id,
                input: params
                    .get("arguments")
                    .cloned()
                    .unwrap_or_else(|| json!({})),
            }
        }
        other => McpRequest::Answer(rpc_error(
            &id,
            RPC_METHOD_NOT_FOUND,
            &format!("method `{other}` not found"),
        )),
    }
}

/// The answer to `can_use_tool`: chat tools always, others when allowed.
pub fn permission(request: &Value, tools: &ToolRegistry, allowed: &[String]) -> Value {
    let name = request
        .get("tool_name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let input = request.get("input").cloned().unwrap_or_else(|| json!({}));
    let tool_use_id = request.get("tool_use_id").cloned().unwrap_or(Value::Null);
    let ours = name
        .strip_prefix("mcp__")
        .and_then(|rest| rest.strip_prefix(TOOL_SERVER))
        .and_then(|rest| rest.strip_prefix("__"))
        .is_some_and(|bare| tools.get(bare).is_some());
    let listed = allowed.iter().any(|a| a == name);
    if ours || listed {
        json!({"behavior": "allow", "updatedInput": input, "toolUseID": tool_use_id})
    } else {
        json!({
            "behavior": "deny",
            "message": format!("The tool `{name}` is not allowed in this chat. Answer with the send and end_turn tools."),
        })
    }
}

/// The calls of a PostToolBatch hook input.
pub fn batch_calls(input: &Value) -> Vec<BatchCall> {
    input
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .map(|c| BatchCall {
                    name: c
                        .get("tool_name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    input: c.get("tool_input").cloned().unwrap_or_else(|| json!({})),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The `result` line as the turn needs it.
pub fn result(line: &Value) -> AgentResult {
    let text = |k: &str| line.get(k).and_then(Value::as_str).map(str::to_string);
    AgentResult {
        subtype: text("subtype").unwrap_or_default(),
        is_error: line
            .get("is_error")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        stop_reason: text("stop_reason"),
        terminal_reason: text("terminal_reason"),
        text: text("result").unwrap_or_default(),
        num_turns: line
            .get("num_turns")
            .and_then(Value::as_u64)
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
            .unwrap_or(0),
        total_cost_usd: line
            .get("total_cost_usd")
            .and_then(Value::as_f64)
            .unwrap_or(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> ToolRegistry {
        ToolRegistry::new(&["end_turn".to_string()])
    }

    #[test]
    fn initialize_registers_the_hook_only_when_enabled() {
        let on = initialize("init", true, "be brief");
        assert_eq!(
            on["request"]["hooks"]["PostToolBatch"][0]["hookCallbackIds"][0],
            HOOK_ID
        );
        assert_eq!(on["request"]["sdkMcpServers"][0], "telegram-tools");
        assert_eq!(on["request"]["systemPrompt"], "be brief");
        assert!(
            initialize("init", false, "")
                .get("request")
                .unwrap()
                .get("hooks")
                .is_none()
        );
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
        let McpRequest::Answer(answer) =
            mcp(&json!({"id": 2, "method": "tools/list"}), &registry())
        else {
            panic!()
        };
        let tools = answer["result"]["tools"].as_array().unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, vec!["send", "end_turn", "react"]);
        assert!(
            tools
                .iter()
                .all(|t| t["_meta"]["anthropic/alwaysLoad"] == true)
        );
    }

    #[test]
    fn tool_calls_are_served_and_unknown_ones_refused() {
        let call = json!({"id": 3, "method": "tools/call", "params": {"name": "send", "arguments": {"text": "hi"}, "_meta": {"claudecode/toolUseId": "toolu_1"}}});
        assert_eq!(
            mcp(&call, &registry()),
            McpRequest::Call {
                rpc_id: json!(3),
                tool: "send".into(),
                tool_use_id: "toolu_1".into(),
                input: json!({"text": "hi"}),
            }
        );
        let unknown = json!({"id": 4, "method": "tools/call", "params": {"name": "teleport"}});
        let McpRequest::Answer(answer) = mcp(&unknown, &registry()) else {
            panic!()
        };
        assert_eq!(answer["error"]["code"], RPC_INVALID_PARAMS);
        let McpRequest::Answer(answer) =
            mcp(&json!({"id": 5, "method": "resources/list"}), &registry())
        else {
            panic!()
        };
        assert_eq!(answer["error"]["code"], RPC_METHOD_NOT_FOUND);
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
            RPC_HOST_STOPPING
        );
    }

    #[test]
    fn permissions_allow_chat_tools_and_listed_tools_only() {
        let ask = |name: &str| json!({"tool_name": name, "input": {"a": 1}, "tool_use_id": "t"});
        let allowed = vec!["Read".to_string()];
        assert_eq!(
            permission(&ask("mcp__telegram-tools__send"), &registry(), &allowed)["behavior"],
            "allow"
        );
        assert_eq!(
            permission(&ask("Read"), &registry(), &allowed)["updatedInput"],
            json!({"a": 1})
        );
        let denied = permission(&ask("Bash"), &registry(), &allowed);
        assert_eq!(denied["behavior"], "deny");
        assert!(denied["message"].as_str().unwrap().contains("Bash"));
        assert_eq!(
            permission(&ask("mcp__other-server__send"), &registry(), &allowed)["behavior"],
            "deny"
        );
    }

    #[test]
    fn the_hook_stops_the_loop_with_continue_false() {
        assert_eq!(hook_output(&HookReply::Continue).unwrap(), json!({}));
        let stop = hook_output(&HookReply::Stop {
            reason: "done".into(),
        })
        .unwrap();
        assert_eq!(stop, json!({"continue": false, "stopReason": "done"}));
        assert!(hook_output(&HookReply::Refused("stopping".into())).is_err());
    }

    #[test]
    fn batch_calls_and_results_are_read_tolerantly() {
        let input = json!({"hook_event_name": "PostToolBatch", "tool_calls": [
            {"tool_name": "mcp__telegram-tools__send", "tool_input": {"text": "a"}},
            {"tool_name": "mcp__telegram-tools__end_turn"}
        ]});
        let calls = batch_calls(&input);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].input, json!({}));
        assert!(batch_calls(&json!({})).is_empty());
        let r = result(
            &json!({"type": "result", "subtype": "success", "is_error": false, "num_turns": 1,
            "stop_reason": "tool_use", "terminal_reason": "hook_stopped", "result": "", "total_cost_usd": 0.01}),
        );
        assert_eq!(r.terminal_reason.as_deref(), Some("hook_stopped"));
        assert_eq!(result(&json!({"type": "result"})).subtype, "");
    }
}

use super::*;
use crate::agent::host::jsonrpc::{METHOD_NOT_FOUND, error, notification, request, result};

#[test]
fn initialize_offers_no_file_system_and_no_terminal() {
    let params = serde_json::to_value(initialize()).unwrap();
    assert_eq!(params["protocolVersion"], 1);
    assert_eq!(
        params["clientCapabilities"]["fs"],
        json!({"readTextFile": false, "writeTextFile": false})
    );
    assert_eq!(params["clientCapabilities"]["terminal"], false);
    assert_eq!(params["clientInfo"]["name"], "turnstile");
}

#[test]
fn sessions_are_opened_with_an_absolute_cwd_and_no_mcp_server() {
    let new = serde_json::to_value(new_session(Path::new("/w/1"), Vec::new())).unwrap();
    assert_eq!(new, json!({"cwd": "/w/1", "mcpServers": []}));
    let load = serde_json::to_value(load_session("s-1", Path::new("/w/1"), Vec::new())).unwrap();
    assert_eq!(
        load,
        json!({"sessionId": "s-1", "cwd": "/w/1", "mcpServers": []})
    );
}

#[test]
fn prompts_cancels_and_permission_answers_have_the_spec_shapes() {
    assert_eq!(
        request(5, "session/prompt", prompt("s", "hi")),
        json!({"jsonrpc": "2.0", "id": 5, "method": "session/prompt",
            "params": {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]}})
    );
    assert_eq!(
        notification("session/cancel", cancel("s")),
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}})
    );
    let chosen = PermissionOptionId::new("yes");
    assert_eq!(
        result(&json!("r1"), permission_outcome(Some(&chosen))),
        json!({"jsonrpc": "2.0", "id": "r1",
            "result": {"outcome": {"outcome": "selected", "optionId": "yes"}}})
    );
    assert_eq!(
        result(&json!(9), permission_outcome(None)),
        json!({"jsonrpc": "2.0", "id": 9, "result": {"outcome": {"outcome": "cancelled"}}})
    );
    assert_eq!(
        error(&json!(2), METHOD_NOT_FOUND, "no"),
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "no"}})
    );
    assert_eq!(
        serde_json::to_value(authenticate("gemini-api-key")).unwrap(),
        json!({"methodId": "gemini-api-key"})
    );
}

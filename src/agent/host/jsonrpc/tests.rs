use super::*;

#[test]
fn lines_are_read_once_into_what_they_are() {
    assert_eq!(
        Message::parse(r#"{"jsonrpc":"2.0","id":3,"result":{"sessionId":"s"}}"#),
        Message::Response {
            id: 3,
            outcome: Ok(json!({"sessionId": "s"}))
        }
    );
    assert_eq!(
        Message::parse(r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32000,"message":"no"}}"#),
        Message::Response {
            id: 4,
            outcome: Err(RpcError {
                code: -32000,
                message: "no".into()
            })
        }
    );
    assert_eq!(
        Message::parse(
            r#"{"jsonrpc":"2.0","id":"a","method":"session/request_permission","params":{}}"#
        ),
        Message::Request {
            id: json!("a"),
            method: "session/request_permission".into(),
            params: json!({})
        }
    );
    assert_eq!(
        Message::parse(r#"{"jsonrpc":"2.0","method":"session/update"}"#),
        Message::Notification {
            method: "session/update".into(),
            params: Value::Null
        }
    );
}

#[test]
fn what_cannot_be_read_is_malformed_never_a_panic() {
    for line in [
        "",
        "not json",
        "[1,2]",
        "42",
        r#"{"jsonrpc":"2.0"}"#,
        r#"{"id":"text-id","result":{}}"#,
        r#"{"id":-1,"result":{}}"#,
        r#"{"id":1}"#,
        r#"{"method":7}"#,
        "{\"id\":1,\"result\":",
    ] {
        assert!(
            matches!(Message::parse(line), Message::Malformed(_)),
            "{line}"
        );
    }
    let long = "x".repeat(10_000);
    let Message::Malformed(shown) = Message::parse(&long) else {
        panic!("not malformed");
    };
    assert_eq!(shown.chars().count(), SHOWN_CHARS);
}

#[test]
fn the_error_codes_are_json_rpcs() {
    let line = error(&json!(7), METHOD_NOT_FOUND, "no");
    assert_eq!(line["error"]["code"], -32601);
    assert_eq!(line["id"], 7);
    assert_eq!(
        [PARSE_ERROR, INVALID_PARAMS, INTERNAL_ERROR, HOST_STOPPING],
        [-32700, -32602, -32603, -32000]
    );
}

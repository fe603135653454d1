use serde_json::json;

use super::*;

fn ask(options: Value) -> Ask {
    Ask::read(&json!({
        "sessionId": "s",
        "toolCall": {"toolCallId": "c1", "title": "Shell: rm x", "kind": "execute",
            "rawInput": {"command": "rm x"}},
        "options": options,
    }))
    .expect("a permission request")
}

fn all() -> Value {
    json!([
        {"optionId": "a1", "name": "Allow", "kind": "allow_once"},
        {"optionId": "aa", "name": "Always", "kind": "allow_always"},
        {"optionId": "r1", "name": "Reject", "kind": "reject_once"},
        {"optionId": "ra", "name": "Never", "kind": "reject_always"}
    ])
}

fn chosen(ask: &Ask, permission: &Permission) -> Option<String> {
    ask.answer(permission).map(|o| o.0.to_string())
}

#[test]
fn a_request_is_read_with_its_title_as_the_tool_and_its_raw_input() {
    let ask = ask(all());
    assert_eq!(ask.session, "s");
    assert_eq!(ask.call_id, "c1");
    assert_eq!(ask.tool.full(), "Shell: rm x");
    assert_eq!(ask.input, json!({"command": "rm x"}));
    let untitled = Ask::read(&json!({"sessionId": "s",
        "toolCall": {"toolCallId": "c2", "kind": "edit"}, "options": []}))
    .expect("read");
    assert_eq!(untitled.tool.full(), "edit");
    assert_eq!(untitled.input, json!({"title": "edit"}));
    assert!(Ask::read(&json!({"sessionId": "s"})).is_none());
    assert!(Ask::read(&json!(null)).is_none());
}

#[test]
fn allow_is_allow_once_and_deny_reject_once() {
    let ask = ask(all());
    let allow = Permission::Allow { input: json!({}) };
    let deny = Permission::Deny {
        message: "no".into(),
    };
    assert_eq!(chosen(&ask, &allow).as_deref(), Some("a1"));
    assert_eq!(chosen(&ask, &deny).as_deref(), Some("r1"));
}

#[test]
fn allow_never_becomes_allow_always_and_deny_falls_back_to_reject_always() {
    let only_always = ask(json!([
        {"optionId": "aa", "name": "Always", "kind": "allow_always"},
        {"optionId": "ra", "name": "Never", "kind": "reject_always"}
    ]));
    let allow = Permission::Allow { input: json!({}) };
    assert_eq!(chosen(&only_always, &allow), None, "cancelled, not always");
    let deny = Permission::Deny {
        message: "no".into(),
    };
    assert_eq!(chosen(&only_always, &deny).as_deref(), Some("ra"));
}

#[test]
fn config_decides_by_title_and_mode() {
    let tools = ToolRegistry::new(&["end_turn".to_string()]);
    let config = crate::config::Config::default();
    let mut settings = AcpSettings::from_config(&config);
    let ask = ask(all());
    assert_eq!(
        from_config(&ask, &settings, &tools),
        None,
        "asks by default"
    );
    settings.denied_tools = vec!["Shell: rm x".into()];
    settings.permission_mode = PermissionMode::Allow;
    assert_eq!(from_config(&ask, &settings, &tools), Some(false));
    settings.denied_tools.clear();
    assert_eq!(from_config(&ask, &settings, &tools), Some(true));
    settings.permission_mode = PermissionMode::Deny;
    settings.allowed_tools = vec!["Shell: rm x".into()];
    assert_eq!(from_config(&ask, &settings, &tools), Some(true));
}

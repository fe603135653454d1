//! What answers a `can_use_tool` request, by the host's rules
//! ([`crate::agent::host::permissions`]): the host's own chat tools run,
//! then `agent.denied_tools`, then `agent.allowed_tools`, then
//! `agent.permission_mode`, which for `ask` hands the request to the host as
//! an [`AgentEvent::PermissionAsk`] and answers once its [`Responder`]
//! resolves, off the driver's loop. The wire format is `protocol`'s; the
//! decision is made here, once.
//!
//! A tool is named in `denied_tools` and `allowed_tools` by its whole name
//! as the agent sends it (`Bash`, `mcp__server__tool`); patterns such as
//! `Bash(rm:*)` are the CLI's own `--allowedTools` syntax and never match
//! here.

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc;

use super::protocol::{self, CanUseTool};
pub use crate::agent::host::permissions::{Decision, Rules, not_allowed};
use crate::agent::tools::{ToolName, ToolRegistry};
use crate::agent::{self, AgentEvent, Permission, Responder};
use crate::config::PermissionMode;

/// The answer to `ask` when config decides it; `None` for `ask` mode.
pub fn answer_from_config(ask: &CanUseTool, decision: Decision) -> Option<Value> {
    match decision {
        Decision::ChatTool | Decision::Allowed | Decision::Mode(PermissionMode::Allow) => {
            Some(protocol::permission_allow(&ask.input, &ask.tool_use_id))
        }
        Decision::Denied | Decision::Mode(PermissionMode::Deny) => {
            Some(protocol::permission_deny(&not_allowed(&ask.tool_name)))
        }
        Decision::Mode(PermissionMode::Ask) => None,
    }
}

/// The answer to `ask` with no one to ask: chat tools and `allowed` tools
/// run, every other tool is denied (`agent.permission_mode = "deny"`).
pub fn answer_unasked(ask: &CanUseTool, tools: &ToolRegistry, allowed: &[String]) -> Value {
    let rules = Rules {
        allowed,
        denied: &[],
        mode: PermissionMode::Deny,
    };
    let decision = rules.decide(&ToolName::parse(ask.tool_name.as_str()), tools);
    answer_from_config(ask, decision)
        .unwrap_or_else(|| protocol::permission_deny(&not_allowed(&ask.tool_name)))
}

/// [`answer_unasked`] for a `can_use_tool` request read as JSON.
pub fn permission(request: &Value, tools: &ToolRegistry, allowed: &[String]) -> Value {
    answer_unasked(
        &CanUseTool::deserialize(request).unwrap_or_default(),
        tools,
        allowed,
    )
}

/// Answers one `can_use_tool` request exactly once through `reply` (which
/// takes the answer's body): from config at once, or, for `ask`, by emitting
/// an [`AgentEvent::PermissionAsk`] and answering when its responder
/// resolves, in a task of its own, so the driver goes on serving lines.
pub(super) fn serve(
    ask: CanUseTool,
    rules: Rules<'_>,
    tools: &ToolRegistry,
    events: &mpsc::UnboundedSender<AgentEvent>,
    pid: u32,
    reply: impl FnOnce(Value) + Send + 'static,
) {
    let tool = ToolName::parse(ask.tool_name.as_str());
    let decision = rules.decide(&tool, tools);
    let call_id = tool_use_id(&ask.tool_use_id);
    if let Some(answer) = answer_from_config(&ask, decision) {
        if decision != Decision::ChatTool {
            tracing::info!(pid, call_id = %call_id, tool = %tool, ?decision, behavior = %answer["behavior"], "tool decided by config");
        }
        return reply(answer);
    }
    tracing::info!(pid, call_id = %call_id, tool = %tool, "tool permission asked of the host");
    let (responder, rx) = Responder::new(format!("can_use_tool {tool} ({call_id})"));
    let tool_use = ask.tool_use_id.clone();
    // An event nobody receives drops its responder, which denies.
    let _ = events.send(AgentEvent::PermissionAsk(agent::PermissionAsk {
        id: call_id,
        tool,
        input: ask.input,
        remember: agent::Remember::ByTool,
        reply: responder,
    }));
    tokio::spawn(async move {
        reply(match rx.await {
            Ok(Permission::Allow { input }) => protocol::permission_allow(&input, &tool_use),
            Ok(Permission::Deny { message }) => protocol::permission_deny(&message),
            // Not reachable: a dropped responder answers Deny itself.
            Err(_) => protocol::permission_deny("the host dropped the request"),
        });
    });
}

/// The tool-use id as text (the CLI sends a string).
fn tool_use_id(id: &Value) -> String {
    match id {
        Value::String(id) => id.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn registry() -> ToolRegistry {
        ToolRegistry::new(&["end_turn".to_string()])
    }

    fn list(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    /// One row of the decision table: (tool, allowed_tools, denied_tools,
    /// permission_mode, decision).
    type Row = (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
        PermissionMode,
        Decision,
    );

    #[test]
    fn the_decision_order_is_chat_tool_denied_allowed_mode() {
        use Decision::*;
        use PermissionMode::{Allow, Ask, Deny};
        let rows: &[Row] = &[
            // The host's own chat tools run whatever the config says.
            ("mcp__telegram-tools__send", &[], &[], Deny, ChatTool),
            (
                "mcp__telegram-tools__end_turn",
                &[],
                &["mcp__telegram-tools__end_turn"],
                Deny,
                ChatTool,
            ),
            ("mcp__telegram-tools__react", &[], &[], Ask, ChatTool),
            // Only registered chat tools of our own server.
            ("mcp__telegram-tools__teleport", &[], &[], Deny, Mode(Deny)),
            ("mcp__other-server__send", &[], &[], Ask, Mode(Ask)),
            // denied_tools beats allowed_tools and every mode.
            ("Bash", &["Bash"], &["Bash"], Allow, Denied),
            ("Bash", &[], &["Bash"], Allow, Denied),
            ("Bash", &[], &["Bash"], Ask, Denied),
            // allowed_tools beats the mode.
            ("Read", &["Read"], &["Bash"], Deny, Allowed),
            ("Read", &["Read"], &[], Ask, Allowed),
            // Whole names only: no prefix, case or pattern match.
            (
                "Bash",
                &["bash", "Bash(rm:*)", "Bas"],
                &["Bash(rm:*)"],
                Deny,
                Mode(Deny),
            ),
            ("mcp__other-server__send", &["send"], &[], Deny, Mode(Deny)),
            // Otherwise the mode.
            ("WebFetch", &["Read"], &["Bash"], Deny, Mode(Deny)),
            ("WebFetch", &["Read"], &["Bash"], Allow, Mode(Allow)),
            ("WebFetch", &["Read"], &["Bash"], Ask, Mode(Ask)),
            ("", &[], &[], Ask, Mode(Ask)),
        ];
        let tools = registry();
        for (tool, allowed, denied, mode, expect) in rows {
            let (allowed, denied) = (list(allowed), list(denied));
            let rules = Rules {
                allowed: &allowed,
                denied: &denied,
                mode: *mode,
            };
            assert_eq!(
                rules.decide(&ToolName::parse(*tool), &tools),
                *expect,
                "{tool} with allowed {allowed:?}, denied {denied:?}, mode {mode}"
            );
        }
    }

    #[test]
    fn with_no_one_to_ask_chat_tools_and_listed_tools_run_only() {
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
    fn config_answers_allow_with_the_input_and_deny_with_a_message() {
        let ask = CanUseTool {
            tool_name: "Bash".into(),
            input: json!({"command": "echo hi"}),
            tool_use_id: json!("toolu_1"),
        };
        let allow = json!({"behavior": "allow", "updatedInput": {"command": "echo hi"}, "toolUseID": "toolu_1"});
        for decision in [
            Decision::ChatTool,
            Decision::Allowed,
            Decision::Mode(PermissionMode::Allow),
        ] {
            assert_eq!(
                answer_from_config(&ask, decision),
                Some(allow.clone()),
                "{decision:?}"
            );
        }
        let deny = json!({"behavior": "deny", "message": not_allowed("Bash")});
        for decision in [Decision::Denied, Decision::Mode(PermissionMode::Deny)] {
            assert_eq!(
                answer_from_config(&ask, decision),
                Some(deny.clone()),
                "{decision:?}"
            );
        }
        assert_eq!(
            answer_from_config(&ask, Decision::Mode(PermissionMode::Ask)),
            None,
            "ask mode is the host's to answer"
        );
    }

    fn ask_bash() -> CanUseTool {
        CanUseTool {
            tool_name: "Bash".into(),
            input: json!({"command": "echo hi"}),
            tool_use_id: json!("toolu_7"),
        }
    }

    /// Serves `ask_bash` in ask mode; hands back the event and the answer's receiver.
    fn serve_ask() -> (agent::PermissionAsk, tokio::sync::oneshot::Receiver<Value>) {
        let (events, mut rx) = mpsc::unbounded_channel();
        let (answer_tx, answer_rx) = tokio::sync::oneshot::channel();
        let rules = Rules {
            allowed: &[],
            denied: &[],
            mode: PermissionMode::Ask,
        };
        serve(ask_bash(), rules, &registry(), &events, 1, move |body| {
            let _ = answer_tx.send(body);
        });
        let Ok(AgentEvent::PermissionAsk(ask)) = rx.try_recv() else {
            panic!("ask mode emits a PermissionAsk")
        };
        (ask, answer_rx)
    }

    #[tokio::test]
    async fn an_ask_is_answered_with_what_the_host_decided() {
        let (ask, mut answer) = serve_ask();
        assert_eq!(ask.id, "toolu_7");
        assert_eq!(ask.tool, ToolName::parse("Bash"));
        assert_eq!(ask.input, json!({"command": "echo hi"}));
        tokio::task::yield_now().await;
        assert!(
            answer.try_recv().is_err(),
            "nothing is answered before the host"
        );
        ask.reply.answer(Permission::Allow {
            input: json!({"command": "echo changed"}),
        });
        assert_eq!(
            answer.await.unwrap(),
            json!({"behavior": "allow", "updatedInput": {"command": "echo changed"}, "toolUseID": "toolu_7"})
        );
        let (ask, answer) = serve_ask();
        ask.reply.answer(Permission::Deny {
            message: "no, thanks".into(),
        });
        assert_eq!(
            answer.await.unwrap(),
            json!({"behavior": "deny", "message": "no, thanks"})
        );
        let (ask, answer) = serve_ask();
        drop(ask);
        assert_eq!(
            answer.await.unwrap()["behavior"],
            "deny",
            "an ask dropped unanswered is denied"
        );
    }

    #[test]
    fn config_decisions_are_answered_at_once_without_an_event() {
        let (events, mut rx) = mpsc::unbounded_channel();
        let (allowed, denied) = (list(&["Bash"]), list(&[]));
        let rules = Rules {
            allowed: &allowed,
            denied: &denied,
            mode: PermissionMode::Ask,
        };
        let answered = std::sync::Arc::new(std::sync::Mutex::new(None));
        let slot = std::sync::Arc::clone(&answered);
        serve(ask_bash(), rules, &registry(), &events, 1, move |body| {
            *slot.lock().unwrap() = Some(body);
        });
        assert!(rx.try_recv().is_err(), "no event for a config decision");
        assert_eq!(
            answered.lock().unwrap().as_ref().unwrap()["behavior"],
            "allow"
        );
    }
}

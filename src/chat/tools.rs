//! The chat tools the host serves (`send`, `end_turn`, `react`,
//! `send_file`), their
//! schemas, and terminator detection.
//!
//! Tool names arrive MCP-prefixed (`mcp__telegram-tools__end_turn`) almost
//! everywhere; [`bare_tool_name`] strips the prefix and every comparison of a
//! tool name in turnstile goes through it.

use serde_json::{Value, json};

use crate::agent::BatchCall;

/// The MCP server name under which the host's tools are served.
pub const TOOL_SERVER: &str = "telegram-tools";

/// Strips an MCP prefix: `mcp__<server>__<tool>` becomes `<tool>`, where the
/// server part ends at the first `__` after `mcp__`. Any other name is
/// returned unchanged.
pub fn bare_tool_name(name: &str) -> &str {
    let Some(rest) = name.strip_prefix("mcp__") else {
        return name;
    };
    match rest.find("__") {
        Some(at) if at > 0 && at + 2 < rest.len() => &rest[at + 2..],
        _ => name,
    }
}

/// A call of one of the chat tools, parsed from its bare name and input:
/// the turn actor serves these, never names compared as strings.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatTool {
    /// `send {text}`: a message to the chat; does not end the turn.
    Send {
        /// The message (Markdown); never empty.
        text: String,
    },
    /// `end_turn {text?}`: ends the turn once its batch resolved, with an
    /// optional last message.
    EndTurn {
        /// The last message, when there is one.
        text: Option<String>,
    },
    /// `react {emoji, end_turn?}`: a reaction to the user's last message.
    React {
        /// The emoji; never empty.
        emoji: String,
    },
    /// `send_file {path, caption?, as_photo?}`: a file from the working
    /// directory to the chat.
    SendFile {
        /// The path the agent gave (relative to its working directory, or
        /// absolute); checked before anything is sent.
        path: String,
        /// Its caption.
        caption: Option<String>,
        /// Send it as a photo rather than a document.
        as_photo: bool,
    },
}

/// Why a call of a chat tool cannot be served; the agent sees the text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolInputError {
    /// Not one of the chat tools.
    #[error("unknown tool `{0}`")]
    Unknown(String),
    /// `send` without text.
    #[error("`text` is empty")]
    EmptyText,
    /// `react` without an emoji.
    #[error("`emoji` is required")]
    NoEmoji,
    /// `send_file` without a path.
    #[error("`path` is required")]
    NoPath,
}

impl ChatTool {
    /// Parses a call by any form of its name (`send`, `mcp__telegram-tools__send`).
    pub fn parse(name: &str, input: &Value) -> Result<Self, ToolInputError> {
        let text = input
            .get("text")
            .and_then(Value::as_str)
            .filter(|t| !t.trim().is_empty())
            .map(str::to_string);
        match bare_tool_name(name) {
            "send" => text
                .map(|text| Self::Send { text })
                .ok_or(ToolInputError::EmptyText),
            "end_turn" => Ok(Self::EndTurn { text }),
            "react" => input
                .get("emoji")
                .and_then(Value::as_str)
                .filter(|e| !e.is_empty())
                .map(|emoji| Self::React {
                    emoji: emoji.to_string(),
                })
                .ok_or(ToolInputError::NoEmoji),
            "send_file" => input
                .get("path")
                .and_then(Value::as_str)
                .filter(|p| !p.trim().is_empty())
                .map(|path| Self::SendFile {
                    path: path.to_string(),
                    caption: input
                        .get("caption")
                        .and_then(Value::as_str)
                        .filter(|c| !c.trim().is_empty())
                        .map(str::to_string),
                    as_photo: input.get("as_photo").and_then(Value::as_bool) == Some(true),
                })
                .ok_or(ToolInputError::NoPath),
            _ => Err(ToolInputError::Unknown(name.to_string())),
        }
    }

    /// The bare name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Send { .. } => "send",
            Self::EndTurn { .. } => "end_turn",
            Self::React { .. } => "react",
            Self::SendFile { .. } => "send_file",
        }
    }
}

/// When a tool ends the turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Ends {
    /// Never.
    Never,
    /// Always.
    Always,
    /// When its input sets this boolean flag to `true`.
    WhenFlag(&'static str),
}

/// One host tool.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// Bare name.
    pub name: &'static str,
    /// Shown to the model.
    pub description: &'static str,
    /// JSON schema of the input.
    pub input_schema: Value,
    /// Whether it ends the turn.
    pub ends: Ends,
}

/// The host's tools plus the configured terminator names.
#[derive(Debug, Clone)]
pub struct ToolRegistry {
    /// The tools served to the agent.
    tools: Vec<ToolSpec>,
    /// Bare names that end a turn, from `turn.terminator_tools`.
    terminators: Vec<String>,
}

impl ToolRegistry {
    /// The built-in chat tools with the given terminator names.
    pub fn new(terminators: &[String]) -> Self {
        let tools = vec![
            ToolSpec {
                name: "send",
                description: "Send a message to the user in this chat. Does not end your turn.",
                input_schema: json!({
                    "type": "object",
                    "properties": {"text": {"type": "string", "description": "The message text (Markdown)."}},
                    "required": ["text"]
                }),
                ends: Ends::Never,
            },
            ToolSpec {
                name: "end_turn",
                description: "Finish your turn, optionally sending a last message. Call it once you have answered.",
                input_schema: json!({
                    "type": "object",
                    "properties": {"text": {"type": "string", "description": "An optional last message."}}
                }),
                ends: Ends::Always,
            },
            ToolSpec {
                name: "react",
                description: "React to the user's message with an emoji; set end_turn to finish your turn with it.",
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "emoji": {"type": "string"},
                        "end_turn": {"type": "boolean"}
                    },
                    "required": ["emoji"]
                }),
                ends: Ends::WhenFlag("end_turn"),
            },
            ToolSpec {
                name: "send_file",
                description: "Send a file from your working directory to the user in this chat (as a document, or as a photo with as_photo). Files the user sent you are in inbox/. Does not end your turn.",
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "The file, relative to your working directory (or absolute, inside it)."},
                        "caption": {"type": "string", "description": "An optional caption."},
                        "as_photo": {"type": "boolean", "description": "Send an image as a photo instead of a document."}
                    },
                    "required": ["path"]
                }),
                ends: Ends::Never,
            },
        ];
        Self {
            tools,
            terminators: terminators
                .iter()
                .map(|n| bare_tool_name(n).to_string())
                .collect(),
        }
    }

    /// The served tools.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// Looks a tool up by any form of its name.
    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        let bare = bare_tool_name(name);
        self.tools.iter().find(|t| t.name == bare)
    }

    /// Whether a call of `name` with `input` ends the turn.
    pub fn ends_turn(&self, name: &str, input: &Value) -> bool {
        let bare = bare_tool_name(name);
        if self.terminators.iter().any(|t| t == bare) {
            return true;
        }
        match self.get(bare).map(|t| &t.ends) {
            Some(Ends::Always) => true,
            Some(Ends::WhenFlag(flag)) => input.get(flag).and_then(Value::as_bool) == Some(true),
            Some(Ends::Never) | None => false,
        }
    }

    /// The first call of a batch that ends the turn, as its bare name.
    pub fn terminator_in<'a>(&self, calls: &'a [BatchCall]) -> Option<&'a str> {
        calls
            .iter()
            .find(|c| self.ends_turn(&c.name, &c.input))
            .map(|c| bare_tool_name(&c.name))
    }

    /// Bare names of every tool that always ends a turn.
    pub fn terminator_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.terminators.iter().map(String::as_str).collect();
        for tool in &self.tools {
            if tool.ends == Ends::Always && !names.contains(&tool.name) {
                names.push(tool.name);
            }
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> ToolRegistry {
        ToolRegistry::new(&["end_turn".to_string()])
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
        ];
        for (name, input, expect) in cases {
            assert_eq!(ChatTool::parse(name, &input), expect, "{name} {input}");
        }
    }

    #[test]
    fn every_registered_tool_parses() {
        for spec in registry().tools() {
            let input = json!({"text": "t", "emoji": "👍", "path": "out.txt"});
            let tool = ChatTool::parse(spec.name, &input).expect("served");
            assert_eq!(tool.name(), spec.name);
        }
    }

    #[test]
    fn strip_is_noop_on_names_without_a_full_prefix() {
        for name in [
            "end_turn",
            "Read",
            "mcp__incomplete",
            "not_mcp__server__tool",
            "mcp____tool",
            "mcp__server__",
        ] {
            assert_eq!(bare_tool_name(name), name, "{name}");
        }
    }

    #[test]
    fn strip_takes_the_server_up_to_the_first_double_underscore() {
        assert_eq!(bare_tool_name("mcp__telegram-tools__end_turn"), "end_turn");
        assert_eq!(bare_tool_name("mcp__a__b__c"), "b__c");
    }

    #[test]
    fn terminators_are_found_under_any_server_prefix() {
        let reg = registry();
        let names = reg.terminator_names();
        assert!(!names.is_empty());
        for bare in names {
            for name in [
                format!("mcp__telegram-tools__{bare}"),
                format!("mcp__teams-tools__{bare}"),
                format!("mcp__some-server-name__{bare}"),
                bare.to_string(),
            ] {
                assert!(reg.ends_turn(&name, &json!({})), "{name} must end the turn");
            }
        }
    }

    #[test]
    fn non_terminators_do_not_end_the_turn() {
        let reg = registry();
        for name in [
            "mcp__telegram-tools__send",
            "mcp__telegram-tools__react",
            "Read",
            "mcp__telegram-tools__end_turn_later",
        ] {
            assert!(!reg.ends_turn(name, &json!({})), "{name}");
        }
    }

    #[test]
    fn react_ends_the_turn_only_with_its_flag() {
        let reg = registry();
        assert!(reg.ends_turn(
            "mcp__telegram-tools__react",
            &json!({"emoji": "👍", "end_turn": true})
        ));
        assert!(!reg.ends_turn(
            "mcp__telegram-tools__react",
            &json!({"emoji": "👍", "end_turn": false})
        ));
    }

    #[test]
    fn configured_terminators_are_compared_bare() {
        let reg = ToolRegistry::new(&["mcp__x__finish".to_string()]);
        assert!(reg.ends_turn("mcp__telegram-tools__finish", &json!({})));
        assert!(reg.ends_turn("finish", &json!({})));
    }

    #[test]
    fn the_batch_terminator_is_found_beside_other_tools() {
        let reg = registry();
        let calls = vec![
            BatchCall {
                name: "mcp__telegram-tools__send".into(),
                input: json!({"text": "a"}),
            },
            BatchCall {
                name: "mcp__telegram-tools__end_turn".into(),
                input: json!({}),
            },
        ];
        assert_eq!(reg.terminator_in(&calls), Some("end_turn"));
        assert_eq!(reg.terminator_in(&calls[..1]), None);
    }
}

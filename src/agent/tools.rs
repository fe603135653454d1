//! The chat tools the host offers every agent (`send`, `end_turn`, `react`,
//! `send_file`): their names, descriptions and schemas, which calls end a
//! turn ([`ToolRegistry`]), and the typed values a backend hands the turn.
//!
//! A backend parses each tool call once, where it reads its protocol: a call
//! of a chat tool becomes a [`ChatCall`] (the [`ChatTool`] with its input,
//! and whether it ends the turn), a call of a resolved batch a
//! [`BatchCall`], any other tool name a [`ToolName`]. The turn compares no
//! names: it serves the typed call and shows the name. [`ToolName::parse`]
//! is the one place a tool's name is taken apart.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The MCP server name under which the host serves its chat tools to an
/// agent that speaks MCP: the agent calls them `mcp__telegram-tools__send`.
pub const TOOL_SERVER: &str = "telegram-tools";

/// The chat tools whose `text` argument the chat sees as it is written.
pub const STREAMED_TOOLS: [&str; 2] = ["send", "end_turn"];

/// A tool's name as an agent sent it, taken apart once.
///
/// An agent that speaks MCP names a server's tool `mcp__<server>__<tool>`,
/// the server ending at the first `__` after `mcp__`; any other name
/// (`Bash`, `send`) is the tool's own, with no server.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolName {
    /// The name as sent.
    full: String,
    /// Where the tool's own name starts in `full` (0 without a server).
    bare: usize,
}

/// What an MCP tool name starts with.
const MCP_PREFIX: &str = "mcp__";

impl ToolName {
    /// Takes `full` apart: `mcp__telegram-tools__end_turn` is `end_turn` of
    /// the server `telegram-tools`; a name without a whole prefix (no
    /// server, or nothing after it) is its own bare name.
    pub fn parse(full: impl Into<String>) -> Self {
        let full = full.into();
        let bare = full
            .strip_prefix(MCP_PREFIX)
            .and_then(|rest| match rest.find("__") {
                Some(at) if at > 0 && at + 2 < rest.len() => Some(MCP_PREFIX.len() + at + 2),
                _ => None,
            })
            .unwrap_or(0);
        Self { full, bare }
    }

    /// The name an agent that speaks MCP calls the host's tool `bare` by
    /// (`mcp__telegram-tools__send`).
    pub fn served_here(bare: &str) -> Self {
        Self::parse(format!("{MCP_PREFIX}{TOOL_SERVER}__{bare}"))
    }

    /// The name as the agent sent it: what a person is shown, and what an
    /// "always" rule or `agent.allowed_tools` names.
    pub fn full(&self) -> &str {
        &self.full
    }

    /// The tool's own name, without the server that serves it (`end_turn`,
    /// `search`, `Bash`).
    pub fn bare(&self) -> &str {
        &self.full[self.bare..]
    }

    /// The MCP server that serves it, when the name says.
    pub fn server(&self) -> Option<&str> {
        (self.bare > 0).then(|| &self.full[MCP_PREFIX.len()..self.bare - 2])
    }

    /// Whether the host's own server serves it (`mcp__telegram-tools__…`).
    pub fn is_served_here(&self) -> bool {
        self.server() == Some(TOOL_SERVER)
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

/// The bare name of a chat tool whose `text` argument streams
/// ([`STREAMED_TOOLS`]), named bare or by the host's own server; `None` for
/// any other tool (another server's `send` included).
pub fn streamed_tool(name: &ToolName) -> Option<&'static str> {
    if name.server().is_some() && !name.is_served_here() {
        return None;
    }
    STREAMED_TOOLS.iter().copied().find(|t| *t == name.bare())
}

/// A call of one of the chat tools, parsed from its name and input: the
/// turn serves these, never names compared as strings.
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
    /// `schedule {when, prompt}`: a prompt that runs in this conversation
    /// on its own (the conversation's, never another's).
    Schedule {
        /// `every 2h`, `at 09:00`, `cron 0 9 * * 1-5` or `in 30m`.
        when: String,
        /// What the agent will be asked.
        prompt: String,
    },
    /// `unschedule {id}`: removes one of this conversation's schedules.
    Unschedule {
        /// The schedule's id.
        id: i64,
    },
    /// `schedules`: this conversation's schedules.
    Schedules,
}

/// Why a call of a chat tool cannot be served; the agent sees the text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolInputError {
    /// Not one of the chat tools (the name as the agent sent it).
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
    /// A required argument is missing or empty (its name).
    #[error("`{0}` is required")]
    Missing(&'static str),
}

impl ChatTool {
    /// Parses a call by its bare name, under any server.
    pub fn parse(name: &ToolName, input: &Value) -> Result<Self, ToolInputError> {
        let text = input
            .get("text")
            .and_then(Value::as_str)
            .filter(|t| !t.trim().is_empty())
            .map(str::to_string);
        match name.bare() {
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
            "schedule" => Self::schedule(input),
            "unschedule" => input
                .get("id")
                .and_then(|id| {
                    id.as_i64()
                        .or_else(|| id.as_str()?.trim_start_matches('#').parse().ok())
                })
                .map(|id| Self::Unschedule { id })
                .ok_or(ToolInputError::Missing("id")),
            "schedules" => Ok(Self::Schedules),
            _ => Err(ToolInputError::Unknown(name.full().to_string())),
        }
    }

    /// `schedule {when, prompt}`.
    fn schedule(input: &Value) -> Result<Self, ToolInputError> {
        let field = |key: &'static str| {
            input
                .get(key)
                .and_then(Value::as_str)
                .filter(|v| !v.trim().is_empty())
                .map(str::to_string)
                .ok_or(ToolInputError::Missing(key))
        };
        Ok(Self::Schedule {
            when: field("when")?,
            prompt: field("prompt")?,
        })
    }

    /// The bare name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Send { .. } => "send",
            Self::EndTurn { .. } => "end_turn",
            Self::React { .. } => "react",
            Self::SendFile { .. } => "send_file",
            Self::Schedule { .. } => "schedule",
            Self::Unschedule { .. } => "unschedule",
            Self::Schedules => "schedules",
        }
    }
}

/// A call of a chat tool as the turn serves it, parsed where the backend
/// read it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatCall {
    /// The tool's bare name as called, for logs.
    pub name: String,
    /// The tool and its input, or why they cannot be served (the agent
    /// reads why).
    pub tool: Result<ChatTool, ToolInputError>,
    /// Whether the call ends the turn (`end_turn`, `react` with its
    /// `end_turn` flag, a name in `turn.terminator_tools`); said of a known
    /// tool even when its input is bad, never of an unknown one.
    pub ends_turn: bool,
}

/// One call of a resolved tool batch (any tool, the agent's own too), as
/// the turn sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchCall {
    /// The tool's bare name (`end_turn`, `Bash`).
    pub tool: String,
    /// Whether the call ends the turn.
    #[serde(default)]
    pub ends_turn: bool,
}

/// The first call of a batch that ends the turn: its bare name.
pub fn terminator(calls: &[BatchCall]) -> Option<&str> {
    calls.iter().find(|c| c.ends_turn).map(|c| c.tool.as_str())
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

/// The host's tools plus the configured terminator names: what a backend
/// offers the agent and parses its calls with.
#[derive(Debug, Clone)]
pub struct ToolRegistry {
    /// The tools served to the agent.
    tools: Vec<ToolSpec>,
    /// Bare names that end a turn, from `turn.terminator_tools`.
    terminators: Vec<String>,
}

impl Default for ToolRegistry {
    /// The chat tools with the default `turn.terminator_tools`.
    fn default() -> Self {
        Self::new(&crate::config::TurnConfig::default().terminator_tools)
    }
}

impl ToolRegistry {
    /// The built-in chat tools with the given terminator names (bare or
    /// MCP-prefixed; compared bare).
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
        let mut tools = tools;
        tools.extend(schedule_tools());
        Self {
            tools,
            terminators: terminators
                .iter()
                .map(|n| ToolName::parse(n.as_str()).bare().to_string())
                .collect(),
        }
    }

    /// The served tools.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// Looks a tool up by its bare name.
    pub fn get(&self, bare: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| t.name == bare)
    }

    /// Whether a call of the tool `bare` with `input` ends the turn.
    fn ends_turn(&self, bare: &str, input: &Value) -> bool {
        if self.terminators.iter().any(|t| t == bare) {
            return true;
        }
        match self.get(bare).map(|t| &t.ends) {
            Some(Ends::Always) => true,
            Some(Ends::WhenFlag(flag)) => input.get(flag).and_then(Value::as_bool) == Some(true),
            Some(Ends::Never) | None => false,
        }
    }

    /// A call of a chat tool (by its bare name, under any server), parsed
    /// for the turn.
    pub fn call(&self, name: &ToolName, input: &Value) -> ChatCall {
        let known = self.get(name.bare()).is_some();
        ChatCall {
            name: name.bare().to_string(),
            tool: ChatTool::parse(name, input),
            ends_turn: known && self.ends_turn(name.bare(), input),
        }
    }

    /// One call of a resolved batch, any tool under any server.
    pub fn batch_call(&self, name: &ToolName, input: &Value) -> BatchCall {
        BatchCall {
            tool: name.bare().to_string(),
            ends_turn: self.ends_turn(name.bare(), input),
        }
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

/// The schedule tools: a prompt that runs in this conversation later or
/// again, listed and removed; this conversation's only.
fn schedule_tools() -> [ToolSpec; 3] {
    [
        ToolSpec {
            name: "schedule",
            description: "Schedule a prompt to run in this chat on its own later or repeatedly, as a turn of yours marked ⏰ (e.g. a reminder, a recurring check). Use this, never any other scheduling or cron tool: only these survive restarts. Does not end your turn.",
            input_schema: json!({
                "type": "object",
                "properties": {
                    "when": {"type": "string", "description": "\"every 2h\", \"at 09:00\" (daily), \"cron 0 9 * * 1-5\" (five fields, the bot's time zone) or \"in 30m\" (once)."},
                    "prompt": {"type": "string", "description": "What you will be asked when it runs."}
                },
                "required": ["when", "prompt"]
            }),
            ends: Ends::Never,
        },
        ToolSpec {
            name: "unschedule",
            description: "Remove one of this chat's schedules by its id (see `schedules`). Does not end your turn.",
            input_schema: json!({
                "type": "object",
                "properties": {"id": {"type": "integer", "description": "The schedule's id."}},
                "required": ["id"]
            }),
            ends: Ends::Never,
        },
        ToolSpec {
            name: "schedules",
            description: "List this chat's schedules: id, name, when, next run, prompt. Does not end your turn.",
            input_schema: json!({"type": "object", "properties": {}}),
            ends: Ends::Never,
        },
    ]
}

#[cfg(test)]
mod tests;

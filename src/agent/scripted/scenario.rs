//! A scenario: which [`ScriptTurn`] the scripted agent plays for which
//! message, the steps of each, and how a scenario file is read.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Which turn the agent plays for which message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Tried in order; the first whose `contains` occurs in the message wins.
    #[serde(default)]
    pub rules: Vec<ScriptRule>,
    /// Played when no rule matches.
    #[serde(default = "ScriptTurn::echo")]
    pub default: ScriptTurn,
    /// The tokens each model call reports having read and written; absent:
    /// none reported (the echo agent has no model, so it claims no use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::agent::TokenUsage>,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            rules: Vec::new(),
            default: ScriptTurn::echo(),
            usage: None,
        }
    }
}

/// A scenario rule.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptRule {
    /// Text the user's message must contain.
    pub contains: String,
    /// The turn to play.
    pub turn: ScriptTurn,
    /// Played for the first this many messages it matches (in this
    /// process), then skipped; absent: always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
}

/// What the agent does in one turn.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptTurn {
    /// The steps, in order. Without a `result` step the agent emits a
    /// completed result with no text once the steps are done.
    pub steps: Vec<Step>,
    /// What the agent does after its result.
    #[serde(default)]
    pub after_result: AfterResult,
}

impl ScriptTurn {
    /// Replies with `echo: <text>` through `send`, then `end_turn`.
    pub fn echo() -> Self {
        Self {
            steps: vec![Step::Tools {
                calls: vec![
                    ScriptTool::new("mcp__telegram-tools__send", json!({"text": "echo: {text}"})),
                    ScriptTool::new("mcp__telegram-tools__end_turn", json!({})),
                ],
            }],
            after_result: AfterResult::Idle,
        }
    }
}

/// One step of a scripted turn.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Think for a while (emits nothing).
    Wait {
        /// How long, in milliseconds.
        ms: u64,
    },
    /// An assistant text block (not delivered by itself).
    Text {
        /// The text.
        text: String,
    },
    /// One assistant message with tool calls: run one after another, then
    /// the batch hook.
    Tools {
        /// The calls.
        calls: Vec<ScriptTool>,
    },
    /// Like `tools`, but no batch hook fires (an agent started without the
    /// PostToolBatch hook): the calls run and the loop goes on.
    ToolsWithoutHook {
        /// The calls.
        calls: Vec<ScriptTool>,
    },
    /// Asks to run a tool (`can_use_tool`) and waits for the answer, then
    /// tells the chat through `send`: `allowed: <input as run>` or
    /// `denied: <message>`.
    Ask {
        /// The tool's name (`Bash`).
        tool: String,
        /// Its input.
        input: Value,
    },
    /// The result line; the steps after it are not played.
    Result {
        /// The result text.
        #[serde(default)]
        text: String,
        /// Result subtype.
        #[serde(default = "success")]
        subtype: String,
        /// Whether the agent counts the turn as failed.
        #[serde(default)]
        is_error: bool,
        /// Terminal reason; absent means `completed`.
        #[serde(default)]
        terminal_reason: Option<String>,
        /// Model turns reported; absent means the calls played so far plus one.
        #[serde(default)]
        num_turns: Option<u32>,
        /// The model API refused for a usage limit (with `is_error`).
        #[serde(default)]
        limited: bool,
        /// The reset time the refusal named (Unix seconds).
        #[serde(default)]
        resets_at: Option<i64>,
    },
    /// Go silent before the result; only a kill ends it.
    HangForever,
    /// Exit with code 1 before the result.
    Fail {
        /// What broke.
        detail: String,
    },
    /// Report idle without running a turn (an idle resume).
    Idle,
    /// Fake CLI only: write this raw line (for malformed input).
    Raw {
        /// The line, written as it is.
        line: String,
    },
    /// Fake CLI only: write an assistant text line of about this many bytes.
    Big {
        /// Size of the line.
        bytes: usize,
    },
    /// The agent starts a tool call, as the live view sees it: an
    /// [`Activity::ToolStarted`] (`toolu_activity_N`); nothing runs and
    /// nothing is answered. (The fake CLI writes an `assistant` line with
    /// the tool_use block.)
    Activity {
        /// The tool's name as the agent sends it (`Bash`,
        /// `mcp__telegram-tools__send`).
        tool: String,
        /// Its input.
        #[serde(default = "empty_object")]
        input: Value,
    },
    /// Assistant text written piece by piece, `ms` apart: one
    /// [`Activity::Writing`] with [`WritingSource::Text`] per non-empty
    /// piece, then the whole text as an assistant text block (as the CLI
    /// writes its `assistant` line after the stream).
    Stream {
        /// The pieces, in order.
        pieces: Vec<String>,
        /// The pause between two pieces, in milliseconds.
        #[serde(default)]
        ms: u64,
    },
    /// A host tool's input JSON written piece by piece, `ms` apart: its
    /// top-level `text` field as [`Activity::Writing`] with
    /// [`WritingSource::ToolText`], decoded as the `claude` driver decodes
    /// `input_json_delta` pieces (only for the
    /// [`STREAMED_TOOLS`](super::tools::STREAMED_TOOLS), bare or
    /// `mcp__telegram-tools__`-prefixed; other tools write nothing). The
    /// call itself is a later `tools` step.
    StreamTool {
        /// The tool's name (`end_turn` or `mcp__telegram-tools__end_turn`).
        tool: String,
        /// The pieces of the input JSON, in order.
        pieces: Vec<String>,
        /// The pause between two pieces, in milliseconds.
        #[serde(default)]
        ms: u64,
    },
    /// Fake CLI only: send this control request and wait for its answer.
    /// After a batch the hook stopped, only these steps still run (a late,
    /// misbehaving request).
    Control {
        /// The `request` object.
        request: Value,
    },
}

fn success() -> String {
    "success".into()
}

fn empty_object() -> Value {
    json!({})
}

/// A scripted tool call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptTool {
    /// The tool name as the agent sends it.
    pub name: String,
    /// The input.
    #[serde(default)]
    pub input: Value,
    /// How long the agent takes before the call, in milliseconds.
    #[serde(default)]
    pub ms: u64,
}

impl ScriptTool {
    /// A call with no delay.
    pub fn new(name: &str, input: Value) -> Self {
        Self {
            name: name.into(),
            input,
            ms: 0,
        }
    }
}

/// What the agent does after its result.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum AfterResult {
    /// Report idle and wait for the next turn (a warm session).
    #[default]
    Idle,
    /// Exit 0.
    Exit,
    /// Stay silent and alive until killed: the post-result wedge.
    Hang,
}

/// Why a scenario file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a TOML scenario.
    #[error("{}: {source}", path.display())]
    Toml {
        /// The file.
        path: std::path::PathBuf,
        /// What the parser said.
        source: toml::de::Error,
    },
    /// The file is not a JSON scenario.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file.
        path: std::path::PathBuf,
        /// What the parser said.
        source: serde_json::Error,
    },
}

impl Scenario {
    /// Reads a scenario file (JSON, or TOML when the name ends in `.toml`).
    pub fn from_file(path: &Path) -> Result<Self, ScenarioError> {
        let at = || path.to_path_buf();
        let text = std::fs::read_to_string(path)
            .map_err(|source| ScenarioError::Read { path: at(), source })?;
        if path.extension().is_some_and(|e| e == "toml") {
            toml::from_str(&text).map_err(|source| ScenarioError::Toml { path: at(), source })
        } else {
            serde_json::from_str(&text).map_err(|source| ScenarioError::Json { path: at(), source })
        }
    }

    /// A scenario with one rule added.
    pub fn with_rule(mut self, contains: &str, turn: ScriptTurn) -> Self {
        self.rules.push(ScriptRule {
            contains: contains.into(),
            turn,
            times: None,
        });
        self
    }

    /// A scenario whose results report `input` tokens read and `output`
    /// written per model call.
    pub fn with_usage(mut self, input: u64, output: u64) -> Self {
        self.usage = Some(crate::agent::TokenUsage {
            input_tokens: input,
            output_tokens: output,
        });
        self
    }

    /// Adds a rule played for the first `times` messages it matches.
    pub fn with_rule_times(mut self, contains: &str, times: u32, turn: ScriptTurn) -> Self {
        self.rules.push(ScriptRule {
            contains: contains.into(),
            turn,
            times: Some(times),
        });
        self
    }

    /// The turn for `text`: the first rule that matches it and is not used
    /// up (`used` counts each rule's plays), else the default.
    pub(super) fn pick(
        &self,
        text: &str,
        used: &mut std::collections::HashMap<usize, u32>,
    ) -> &ScriptTurn {
        for (i, rule) in self.rules.iter().enumerate() {
            if !text.contains(&rule.contains) {
                continue;
            }
            let played = used.entry(i).or_default();
            if rule.times.is_some_and(|times| *played >= times) {
                continue;
            }
            *played += 1;
            return &rule.turn;
        }
        &self.default
    }
}

/// Replaces `{text}` in every string of a JSON value.
pub fn fill_value(value: &Value, text: &str) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace("{text}", text)),
        Value::Array(items) => Value::Array(items.iter().map(|v| fill_value(v, text)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill_value(v, text)))
                .collect(),
        ),
        other => other.clone(),
    }
}

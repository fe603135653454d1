//! What the agent is doing and writing, as it happens: the driver's
//! [`Activity`] events, made from `stream_event` lines (text and tool input
//! deltas) and `assistant` lines (tool calls).

use std::collections::{HashMap, HashSet};

use crate::agent::claude::protocol::{AssistantMessage, Delta, StreamBlock, StreamEvent};
use crate::agent::partial_json::StringField;
use crate::agent::tools::{ToolName, streamed_tool};
use crate::agent::{Activity, WritingSource};

/// The field of a streamed host tool's input that the chat shows.
const TEXT_FIELD: &str = "text";

/// The streams of the current API message and the tool calls already told.
#[derive(Debug, Default)]
pub(crate) struct Live {
    /// The current API message's id (from `message_start`).
    message: String,
    /// Its open content blocks, by index.
    blocks: HashMap<u64, Block>,
    /// Tool-use ids already reported this turn.
    told: HashSet<String>,
}

/// An open content block.
#[derive(Debug)]
enum Block {
    /// Assistant text.
    Text,
    /// A host tool whose `text` argument streams: its bare name and the
    /// extractor of that field.
    ToolText(String, Box<StringField>),
    /// Anything else: its deltas are only a sign of life.
    Other,
}

impl Live {
    /// The activity a stream event shows, if any.
    pub(crate) fn on_stream(&mut self, event: StreamEvent) -> Option<Activity> {
        match event {
            StreamEvent::MessageStart { message } => {
                self.message = message.id;
                self.blocks.clear();
                None
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                let block = match content_block {
                    StreamBlock::Text => Block::Text,
                    StreamBlock::ToolUse { name, .. } => {
                        match streamed_tool(&ToolName::parse(name)) {
                            Some(bare) => Block::ToolText(
                                bare.to_owned(),
                                Box::new(StringField::new(TEXT_FIELD)),
                            ),
                            None => Block::Other,
                        }
                    }
                    StreamBlock::Other => Block::Other,
                };
                self.blocks.insert(index, block);
                None
            }
            StreamEvent::ContentBlockDelta { index, delta } => {
                let (source, appended) = match (self.blocks.get_mut(&index), delta) {
                    // A text delta of a block whose start was missed is text all the same.
                    (Some(Block::Text) | None, Delta::TextDelta { text }) => {
                        (WritingSource::Text, text)
                    }
                    (
                        Some(Block::ToolText(tool, field)),
                        Delta::InputJsonDelta { partial_json },
                    ) => (
                        WritingSource::ToolText(tool.clone()),
                        field.push(&partial_json),
                    ),
                    _ => return None,
                };
                (!appended.is_empty()).then(|| Activity::Writing {
                    stream: format!("{}:{index}", self.message),
                    source,
                    appended,
                })
            }
            StreamEvent::ContentBlockStop { index } => {
                self.blocks.remove(&index);
                None
            }
            StreamEvent::MessageStop => {
                self.blocks.clear();
                None
            }
            StreamEvent::Other => None,
        }
    }

    /// The tool calls of an `assistant` line not reported yet.
    pub(crate) fn on_assistant(&mut self, message: &AssistantMessage) -> Vec<Activity> {
        message
            .tool_uses()
            .filter(|(id, _, _)| id.is_empty() || self.told.insert((*id).to_owned()))
            .map(|(id, name, input)| Activity::ToolStarted {
                id: id.to_owned(),
                name: ToolName::parse(name),
                input: input.clone(),
            })
            .collect()
    }

    /// The turn ended: forget its streams and tool calls.
    pub(crate) fn turn_ended(&mut self) {
        self.blocks.clear();
        self.told.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::claude::protocol::{CliLine, Line};
    use serde_json::{Value, json};

    fn event(value: Value) -> StreamEvent {
        match Line::from_value(&json!({"type": "stream_event", "event": value})) {
            Line::Cli(CliLine::StreamEvent { event, .. }) => event,
            other => panic!("not a stream event: {other:?}"),
        }
    }

    fn assistant(content: Value) -> AssistantMessage {
        match Line::from_value(
            &json!({"type": "assistant", "message": {"id": "m", "content": content}}),
        ) {
            Line::Cli(CliLine::Assistant { message, .. }) => message,
            other => panic!("not an assistant line: {other:?}"),
        }
    }

    /// Plays a message with one block started as `block` and these deltas.
    fn play(live: &mut Live, block: Value, deltas: &[Value]) -> Vec<Option<Activity>> {
        let mut out = vec![
            live.on_stream(event(
                json!({"type": "message_start", "message": {"id": "msg_1"}}),
            )),
            live.on_stream(event(
                json!({"type": "content_block_start", "index": 1, "content_block": block}),
            )),
        ];
        for delta in deltas {
            out.push(live.on_stream(event(
                json!({"type": "content_block_delta", "index": 1, "delta": delta}),
            )));
        }
        out.push(live.on_stream(event(json!({"type": "content_block_stop", "index": 1}))));
        out.push(live.on_stream(event(json!({"type": "message_stop"}))));
        out
    }

    fn writing(source: WritingSource, appended: &str) -> Option<Activity> {
        Some(Activity::Writing {
            stream: "msg_1:1".into(),
            source,
            appended: appended.into(),
        })
    }

    #[test]
    fn text_deltas_are_written_as_they_come() {
        let mut live = Live::default();
        let out = play(
            &mut live,
            json!({"type": "text", "text": ""}),
            &[
                json!({"type": "text_delta", "text": "Hel"}),
                json!({"type": "text_delta", "text": ""}),
                json!({"type": "text_delta", "text": "lo"}),
            ],
        );
        assert_eq!(
            out,
            vec![
                None,
                None,
                writing(WritingSource::Text, "Hel"),
                None,
                writing(WritingSource::Text, "lo"),
                None,
                None
            ]
        );
    }

    #[test]
    fn the_text_argument_of_send_and_end_turn_is_written_as_it_is_decoded() {
        for (name, bare) in [
            ("mcp__telegram-tools__end_turn", "end_turn"),
            ("mcp__telegram-tools__send", "send"),
        ] {
            let mut live = Live::default();
            let out = play(
                &mut live,
                json!({"type": "tool_use", "id": "toolu_1", "name": name, "input": {}}),
                &[
                    json!({"type": "input_json_delta", "partial_json": "{\"chat\": {\"text\": \"no\"}, \"te"}),
                    json!({"type": "input_json_delta", "partial_json": "xt\": \"Hi \\ud83e"}),
                    json!({"type": "input_json_delta", "partial_json": "\\udd80\\n\"}"}),
                ],
            );
            let source = WritingSource::ToolText(bare.into());
            assert_eq!(
                out,
                vec![
                    None,
                    None,
                    None,
                    writing(source.clone(), "Hi "),
                    writing(source, "🦀\n"),
                    None,
                    None
                ],
                "{name}"
            );
        }
    }

    #[test]
    fn other_tools_and_other_blocks_write_nothing() {
        let mut live = Live::default();
        for block in [
            json!({"type": "tool_use", "id": "t", "name": "Bash", "input": {}}),
            json!({"type": "tool_use", "id": "t", "name": "mcp__telegram-tools__react", "input": {}}),
            json!({"type": "tool_use", "id": "t", "name": "mcp__other__send", "input": {}}),
            json!({"type": "thinking", "thinking": ""}),
        ] {
            let out = play(
                &mut live,
                block.clone(),
                &[
                    json!({"type": "input_json_delta", "partial_json": "{\"text\": \"secret\"}"}),
                    json!({"type": "thinking_delta", "thinking": "hm"}),
                ],
            );
            assert!(out.iter().all(Option::is_none), "{block}: {out:?}");
        }
        // A text delta on a text block never turns into tool text, nor the other way round.
        let out = play(
            &mut live,
            json!({"type": "text", "text": ""}),
            &[json!({"type": "input_json_delta", "partial_json": "{\"text\": \"x\"}"})],
        );
        assert!(out.iter().all(Option::is_none), "{out:?}");
    }

    #[test]
    fn a_text_delta_without_its_block_start_is_still_text() {
        let mut live = Live::default();
        let got = live.on_stream(event(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}),
        ));
        assert_eq!(
            got,
            Some(Activity::Writing {
                stream: ":0".into(),
                source: WritingSource::Text,
                appended: "x".into()
            })
        );
    }

    #[test]
    fn each_tool_call_is_told_once_per_turn() {
        let mut live = Live::default();
        let line = assistant(json!([
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "cargo test"}},
            {"type": "text", "text": "x"}
        ]));
        assert_eq!(
            live.on_assistant(&line),
            vec![Activity::ToolStarted {
                id: "t1".into(),
                name: ToolName::parse("Bash"),
                input: json!({"command": "cargo test"})
            }]
        );
        assert_eq!(live.on_assistant(&line), vec![], "the same id again");
        let other = assistant(json!([
            {"type": "tool_use", "id": "t2", "name": "mcp__telegram-tools__send", "input": {"text": "hi"}}
        ]));
        assert_eq!(live.on_assistant(&other).len(), 1);
        live.turn_ended();
        assert_eq!(live.on_assistant(&line).len(), 1, "a new turn");
        assert_eq!(
            live.on_assistant(&assistant(json!([{"type": "text", "text": "x"}]))),
            vec![]
        );
    }
}

//! Text and a tool's input streamed in pieces, as the live view sees them.

use super::{Flow, ScriptedAgent};
use crate::agent::partial_json::StringField;
use crate::agent::scripted::ScriptTurn;
use crate::agent::tools::{ToolName, streamed_tool};
use crate::agent::{Activity, AgentEvent, WritingSource};

impl ScriptedAgent {
    /// Assistant text streamed in pieces, `ms` apart, then whole.
    pub(super) async fn play_stream(
        &mut self,
        pieces: &[String],
        ms: u64,
        turn: &ScriptTurn,
        user_text: &str,
        calls: u32,
    ) -> Option<Flow> {
        self.streams += 1;
        let stream = format!("msg_scripted_{}:0", self.streams);
        let mut whole = String::new();
        for (i, piece) in pieces.iter().enumerate() {
            if i > 0
                && ms > 0
                && let Some(flow) = self.pause(ms, turn, calls).await
            {
                return Some(flow);
            }
            let piece = piece.replace("{text}", user_text);
            whole.push_str(&piece);
            if !piece.is_empty() {
                self.emit(AgentEvent::Activity(Activity::Writing {
                    stream: stream.clone(),
                    source: WritingSource::Text,
                    appended: piece,
                }));
            }
        }
        self.emit(AgentEvent::Text(whole));
        None
    }

    /// A tool's input streamed in pieces, `ms` apart: its `text` as it
    /// grows when the tool shows one, else progress.
    pub(super) async fn play_stream_tool(
        &mut self,
        tool: &str,
        pieces: &[String],
        ms: u64,
        turn: &ScriptTurn,
        user_text: &str,
        calls: u32,
    ) -> Option<Flow> {
        self.streams += 1;
        let stream = format!("msg_scripted_{}:0", self.streams);
        let bare = streamed_tool(&ToolName::parse(tool));
        let mut field = StringField::new("text");
        for (i, piece) in pieces.iter().enumerate() {
            if i > 0
                && ms > 0
                && let Some(flow) = self.pause(ms, turn, calls).await
            {
                return Some(flow);
            }
            let appended = field.push(&piece.replace("{text}", user_text));
            match &bare {
                Some(bare) if !appended.is_empty() => {
                    self.emit(AgentEvent::Activity(Activity::Writing {
                        stream: stream.clone(),
                        source: WritingSource::ToolText(bare.to_string()),
                        appended,
                    }));
                }
                _ => self.emit(AgentEvent::Progress),
            }
        }
        None
    }
}

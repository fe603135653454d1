//! The CLI's requests, each answered exactly once: chat tool calls over
//! MCP, `can_use_tool`, the PostToolBatch hook, and a refusal for the rest
//! (and for all of them once the host is closing).

use serde_json::Value;

use super::Driver;
use super::answers::Refusal;
use crate::agent::claude::permissions::{self, Rules};
use crate::agent::claude::protocol::{
    self, ControlRequest, HookCallback, HookInput, McpMessage, McpRequest, PostToolBatch,
};
use crate::agent::host::mcp::hand_over;
use crate::agent::tools::TOOL_SERVER;
use crate::agent::{AgentEvent, Responder, ToolBatch};

/// Sends the answer to one request.
type Reply = Box<dyn FnOnce(Value) + Send>;

impl Driver {
    /// Answers a request from the CLI, exactly once.
    pub(super) fn on_request(&mut self, request_id: Option<String>, request: ControlRequest) {
        let Some(id) = request_id else {
            tracing::warn!(pid = self.pid, "control request without an id skipped");
            return;
        };
        let refusal = Refusal::of(&request);
        self.answers.expect(&id, refusal);
        let stopping = self.shutdown.is_closing();
        let answers = self.answers.clone();
        let reply: Reply = {
            let id = id.clone();
            Box::new(move |line: Value| {
                answers.answer(&id, line);
            })
        };
        match request {
            ControlRequest::McpMessage(message) => {
                self.on_mcp_message(id, message, stopping, reply)
            }
            ControlRequest::CanUseTool(_) | ControlRequest::HookCallback(_) if stopping => {
                tracing::info!(
                    pid = self.pid,
                    subtype = request.subtype(),
                    "agent request refused: the host is stopping"
                );
                reply(refusal.line(&id, "the host is stopping"));
            }
            ControlRequest::CanUseTool(ask) => {
                let settings = &self.settings;
                let rules = Rules {
                    allowed: &settings.allowed_tools,
                    denied: &settings.denied_tools,
                    mode: settings.permission_mode,
                };
                permissions::serve(
                    ask,
                    rules,
                    &self.tools,
                    &self.events,
                    self.pid,
                    move |body| {
                        reply(protocol::control_success(&id, body));
                    },
                );
            }
            ControlRequest::HookCallback(HookCallback {
                input: HookInput::PostToolBatch(batch),
                ..
            }) => self.on_batch(id, &batch, reply),
            ControlRequest::HookCallback(HookCallback {
                input: HookInput::Other,
                ..
            }) => reply(protocol::control_success(&id, serde_json::json!({}))),
            ControlRequest::Unknown { subtype } => {
                let shown: String = subtype.chars().take(protocol::SHOWN_CHARS).collect();
                tracing::warn!(
                    pid = self.pid,
                    subtype = %shown,
                    "unknown control request refused"
                );
                reply(protocol::control_error(
                    &id,
                    &format!("unsupported request `{subtype}`"),
                ));
            }
        }
    }

    /// An MCP message for `telegram-tools`: answered at once, or a chat
    /// tool call handed to the turn (refused once the host is closing).
    fn on_mcp_message(&mut self, id: String, message: McpMessage, stopping: bool, reply: Reply) {
        let McpMessage {
            server_name,
            message,
        } = message;
        if server_name != TOOL_SERVER {
            return reply(protocol::control_error(
                &id,
                &format!("unknown MCP server `{server_name}`"),
            ));
        }
        match message.serve(&self.tools) {
            McpRequest::Answer(answer) => reply(protocol::mcp_response(&id, answer)),
            McpRequest::Call {
                rpc_id,
                tool_use_id,
                call,
            } => {
                let answer = hand_over(rpc_id, tool_use_id, call, stopping, &self.events);
                tokio::spawn(async move { reply(protocol::mcp_response(&id, answer.await)) });
            }
        }
    }

    /// The PostToolBatch hook: its calls go to the turn, whose answer goes
    /// back as the hook's output.
    fn on_batch(&mut self, id: String, batch: &PostToolBatch, reply: Reply) {
        let (responder, rx) = Responder::new("PostToolBatch hook");
        self.emit(AgentEvent::BatchResolved(ToolBatch {
            calls: batch.calls(&self.tools),
            reply: responder,
        }));
        tokio::spawn(async move {
            reply(match rx.await.map(|r| protocol::hook_output(&r)) {
                Ok(Ok(output)) => protocol::control_success(&id, output),
                Ok(Err(why)) => protocol::control_error(&id, &why),
                Err(_) => protocol::control_error(&id, "the host dropped the hook"),
            });
        });
    }
}

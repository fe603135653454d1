//! Turns: one `session/prompt` each, its updates streamed as the chat's
//! live view, its response the turn's result; `/stop` as `session/cancel`
//! with every waiting permission request answered `cancelled`; permission
//! requests decided by config or asked of the chat, answered once.

use std::collections::HashMap;

use serde_json::Value;

use super::{AskedChat, Driver, Purpose, Stage};
use crate::agent::acp::permission::{self, PermissionRequest};
use crate::agent::acp::updates::{self, PromptAnswer, Update};
use crate::agent::acp::wire;
use crate::agent::host::jsonrpc::{self, RpcError};
use crate::agent::{
    Activity, AgentEvent, Permission, PermissionAsk, Responder, ToolName, WritingSource,
};

impl Driver {
    /// A turn from the host: prompted now, or once the session is open and
    /// the prompt before it ended.
    pub(super) fn user_turn(&mut self, text: String) {
        match self.stage {
            Stage::Ready { .. } => self.prompt(text),
            _ => self.queued.push_back(text),
        }
    }

    /// Sends `session/prompt` with `text` (the session is ready).
    pub(super) fn prompt(&mut self, text: String) {
        let Stage::Ready { session, notice } = &mut self.stage else {
            self.queued.push_front(text);
            return;
        };
        let session = session.clone();
        let notice = notice.take();
        let id = self.request(
            Purpose::Prompt,
            "session/prompt",
            wire::prompt(&session, &text),
        );
        self.emit(AgentEvent::Init {
            session_id: session.clone(),
        });
        let mut answer = PromptAnswer::new(self.cost);
        if let Some(notice) = notice {
            let notice = format!("{notice}\n\n");
            let stream = answer.chunk(&notice, None);
            self.writing(stream, notice);
        }
        self.stage = Stage::Prompting {
            session,
            id,
            answer,
            cancelled: false,
            waiting: HashMap::new(),
        };
    }

    fn writing(&self, stream: String, appended: String) {
        self.emit(AgentEvent::Activity(Activity::Writing {
            stream,
            source: WritingSource::Text,
            appended,
        }));
    }

    /// The response to a prompt: its result, then idle; the next queued
    /// turn goes out.
    pub(super) fn prompted(&mut self, id: u64, outcome: Result<Value, RpcError>) {
        let idle = Stage::Starting {
            resume: None,
            settle: false,
            notice: None,
        };
        let stage = std::mem::replace(&mut self.stage, idle);
        let Stage::Prompting {
            session,
            id: running,
            answer,
            waiting,
            ..
        } = stage
        else {
            self.stage = stage;
            return tracing::warn!(
                pid = self.pid,
                id,
                "answer to a prompt that is not running skipped"
            );
        };
        self.stage = Stage::Ready {
            session,
            notice: None,
        };
        if running != id {
            tracing::warn!(
                pid = self.pid,
                id,
                running,
                "answer to an earlier prompt skipped"
            );
        }
        self.answer_cancelled(waiting);
        let (text, cost) = answer.finish();
        let result = match outcome {
            Ok(result) => {
                let stop = result
                    .get("stopReason")
                    .and_then(Value::as_str)
                    .unwrap_or("(none)");
                updates::result_for(stop, text, cost)
            }
            Err(error) => {
                tracing::warn!(pid = self.pid, cause = %error, "the agent answered the prompt with an error");
                updates::failed_prompt(&error, text)
            }
        };
        tracing::info!(pid = self.pid, stop_reason = ?result.stop_reason, "prompt ended (acp)");
        self.emit(AgentEvent::Result(result));
        self.emit(AgentEvent::Idle);
        if let Some(text) = self.queued.pop_front() {
            self.prompt(text);
        }
    }

    /// `/stop`: the running prompt is cancelled (the agent still answers
    /// it, `cancelled`); a turn not yet prompted is dropped.
    pub(super) fn interrupt(&mut self) {
        self.queued.clear();
        match &mut self.stage {
            Stage::Prompting { .. } => self.cancel_prompt(),
            Stage::Ready { .. } => self.emit(AgentEvent::Idle),
            Stage::Starting { settle, .. } | Stage::Opening { settle, .. } => *settle = true,
        }
    }

    /// `session/cancel` for the running prompt (once), and every waiting
    /// permission request answered `cancelled`, as the spec asks.
    pub(super) fn cancel_prompt(&mut self) {
        self.cancel_waiting();
        if let Stage::Prompting {
            cancelled, session, ..
        } = &mut self.stage
            && !*cancelled
        {
            *cancelled = true;
            let line = jsonrpc::notification("session/cancel", wire::cancel(session));
            self.write(line);
        }
    }

    /// Answers every permission request of the running prompt that waits
    /// for the chat `cancelled`.
    pub(super) fn cancel_waiting(&mut self) {
        if let Stage::Prompting { waiting, .. } = &mut self.stage {
            let waiting = std::mem::take(waiting);
            self.answer_cancelled(waiting);
        }
    }

    /// Answers each of `waiting` `cancelled`.
    fn answer_cancelled(&self, waiting: HashMap<String, AskedChat>) {
        for waiting in waiting.into_values() {
            tracing::info!(pid = self.pid, call_id = %waiting.ask.call_id, "permission request answered cancelled");
            let line = jsonrpc::result(&waiting.id, wire::permission_outcome(None));
            if let Some(out) = &self.out {
                let _ = out.send(line);
            }
        }
    }

    /// `session/request_permission`: refused while the host stops, decided
    /// by config, or asked of the chat.
    pub(super) fn permission(&mut self, id: Value, params: &Value) {
        let Some(ask) = PermissionRequest::read(params) else {
            tracing::warn!(pid = self.pid, "unreadable permission request refused");
            return self.write(jsonrpc::error(
                &id,
                jsonrpc::INVALID_PARAMS,
                "invalid params",
            ));
        };
        if self.shutdown.is_closing() {
            return self.write(jsonrpc::error(
                &id,
                jsonrpc::HOST_STOPPING,
                "the host is stopping",
            ));
        }
        let prompting = match &self.stage {
            Stage::Prompting {
                cancelled: false,
                session,
                ..
            } => *session == ask.session,
            _ => false,
        };
        if !prompting {
            tracing::warn!(pid = self.pid, call_id = %ask.call_id, "permission request outside a running prompt; cancelled");
            return self.write(jsonrpc::result(&id, wire::permission_outcome(None)));
        }
        if let Some(allowed) = permission::from_config(&ask, &self.settings) {
            tracing::info!(pid = self.pid, call_id = %ask.call_id, tool = %ask.tool, allowed, "tool decided by config");
            let option = if allowed { ask.allow() } else { ask.reject() };
            self.emit(AgentEvent::Progress);
            return self.write(jsonrpc::result(
                &id,
                wire::permission_outcome(option.as_ref()),
            ));
        }
        self.ask_chat(id, ask);
    }

    /// Hands `ask` to the turn; its answer comes back through `decided`.
    fn ask_chat(&mut self, id: Value, ask: PermissionRequest) {
        let key = id.to_string();
        tracing::info!(pid = self.pid, call_id = %ask.call_id, tool = %ask.tool, "tool permission asked of the host");
        let (reply, rx) = Responder::new(format!(
            "session/request_permission {} ({})",
            ask.tool, ask.call_id
        ));
        // An event nobody receives drops its responder, which denies.
        self.emit(AgentEvent::PermissionAsk(PermissionAsk {
            id: ask.call_id.clone(),
            tool: ask.tool.clone(),
            input: ask.input.clone(),
            remember: ask.remember,
            reply,
        }));
        let decided = self.decided.clone();
        let back = key.clone();
        tokio::spawn(async move {
            let permission = rx.await.unwrap_or(Permission::Deny {
                message: "the request was dropped unanswered".into(),
            });
            let _ = decided.send((back, permission));
        });
        match &mut self.stage {
            Stage::Prompting { waiting, .. } => {
                waiting.insert(key, AskedChat { id, ask });
            }
            // `permission` asks only while a prompt runs.
            _ => self.write(jsonrpc::result(&id, wire::permission_outcome(None))),
        }
    }

    /// The chat decided a permission request: answered, unless it was
    /// answered `cancelled` meanwhile.
    pub(super) fn decided(&mut self, key: &str, permission: &Permission) {
        let found = match &mut self.stage {
            Stage::Prompting { waiting, .. } => waiting.remove(key),
            _ => None,
        };
        let Some(waiting) = found else {
            return tracing::debug!(
                pid = self.pid,
                "decision for a permission request already answered; dropped"
            );
        };
        let option = waiting.ask.answer(permission);
        tracing::info!(pid = self.pid, call_id = %waiting.ask.call_id, option = ?option.as_ref().map(|o| o.0.to_string()), "permission request answered");
        self.write(jsonrpc::result(
            &waiting.id,
            wire::permission_outcome(option.as_ref()),
        ));
    }

    /// A `session/update`.
    pub(super) fn on_update(&mut self, params: &Value) {
        let session = self.stage.session().unwrap_or_default().to_owned();
        let update = updates::read(params, &session);
        let Stage::Prompting { answer, .. } = &mut self.stage else {
            // A loaded conversation's replay, or news between prompts.
            if let Update::Cost(usd) = update {
                self.cost = Some(usd);
            }
            return self.emit(AgentEvent::Progress);
        };
        let event = match update {
            Update::Chunk { text, message } => AgentEvent::Activity(Activity::Writing {
                stream: answer.chunk(&text, message),
                source: WritingSource::Text,
                appended: text,
            }),
            Update::ToolStarted { id, title, input } => {
                answer.next_piece();
                AgentEvent::Activity(Activity::ToolStarted {
                    id,
                    name: ToolName::parse(title),
                    input,
                })
            }
            Update::Plan(Some(step)) => AgentEvent::Activity(Activity::ToolStarted {
                id: "plan".into(),
                name: ToolName::parse("Plan"),
                input: serde_json::json!({ "description": step }),
            }),
            Update::Cost(usd) => {
                answer.cost(usd);
                self.cost = answer.session_cost();
                AgentEvent::Progress
            }
            Update::Plan(None) | Update::Other => AgentEvent::Progress,
            Update::Unknown(kind) => {
                tracing::debug!(pid = self.pid, kind = %kind.escape_debug(), "session update of an unknown kind skipped");
                AgentEvent::Unknown(format!("session/update {kind}"))
            }
        };
        self.emit(event);
    }
}

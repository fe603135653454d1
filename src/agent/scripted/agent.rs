//! The agent side of a scripted session: a task that plays the scenario's
//! turn for each user message, step by step, while it serves the host's
//! commands (a `/stop`, a close, a kill).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

mod streams;

use super::{AfterResult, Recent, Scenario, ScriptTool, ScriptTurn, Step, fill_value, lock};
use crate::agent::tools::{ToolName, ToolRegistry};
use crate::agent::{
    Activity, AgentEvent, AgentResult, HookReply, Permission, PermissionAsk, Responder,
    ResultStatus, SessionCommand, TerminalReason, ToolBatch, ToolCall, ToolReply,
};

/// The agent side of a scripted session.
pub(super) struct ScriptedAgent {
    pub(super) commands: mpsc::UnboundedReceiver<SessionCommand>,
    pub(super) events: mpsc::UnboundedSender<AgentEvent>,
    pub(super) scenario: Arc<Scenario>,
    /// What its tool calls are parsed with.
    pub(super) tools: Arc<ToolRegistry>,
    pub(super) session_id: String,
    /// User turns that arrived while a turn ran, and steered messages the
    /// running turn ended before reading (tagged): each runs as a turn.
    pub(super) queued: VecDeque<(Option<i64>, String)>,
    /// Messages steered into the running turn, not read yet.
    pub(super) steers: VecDeque<(i64, String)>,
    /// Where tool results are recorded.
    pub(super) log: Arc<std::sync::Mutex<Recent>>,
    /// Streams and activities played so far (numbers their ids).
    pub(super) streams: u64,
}

/// Whether the session goes on after a turn.
enum Flow {
    Next,
    Exit,
}

/// What interrupted a wait.
enum Woken<T> {
    Done(T),
    Command(SessionCommand),
    HostGone,
}

impl ScriptedAgent {
    pub(super) async fn run(mut self) {
        loop {
            let text = match self.queued.pop_front() {
                Some((tag, text)) => {
                    // Read only now, as the next turn: the receipt comes
                    // after the last turn's result.
                    if let Some(tag) = tag {
                        self.emit(AgentEvent::SteerRead(tag));
                    }
                    text
                }
                None => match self.commands.recv().await {
                    None => return,
                    Some(SessionCommand::UserTurn(text)) => text,
                    Some(SessionCommand::Steer { tag, text }) => {
                        self.emit(AgentEvent::SteerRead(tag));
                        text
                    }
                    Some(SessionCommand::Interrupt) => continue,
                    // In-process: nothing outlives an exec; closed.
                    Some(SessionCommand::Close | SessionCommand::HandOver) => {
                        return self.exit(Some(0), "closed");
                    }
                    Some(SessionCommand::Kill) => return self.exit(None, "killed"),
                },
            };
            if let Flow::Exit = self.play(&text).await {
                return;
            }
        }
    }

    fn emit(&self, event: AgentEvent) {
        let _ = self.events.send(event);
    }

    fn exit(&self, code: Option<i32>, detail: &str) {
        self.emit(AgentEvent::Exited {
            code,
            detail: detail.into(),
        });
    }

    /// Waits for `fut` while serving commands; a user turn is queued.
    async fn wait<T>(&mut self, fut: impl Future<Output = T>) -> Woken<T> {
        tokio::pin!(fut);
        loop {
            tokio::select! {
                out = &mut fut => return Woken::Done(out),
                cmd = self.commands.recv() => match cmd {
                    None => return Woken::HostGone,
                    Some(SessionCommand::UserTurn(text)) => self.queued.push_back((None, text)),
                    Some(SessionCommand::Steer { tag, text }) => self.steers.push_back((tag, text)),
                    Some(other) => return Woken::Command(other),
                },
            }
        }
    }

    /// Handles a command that arrived mid-turn.
    /// Waits `ms`, unless a command or the host's going ends the turn
    /// first: then how it ends.
    async fn pause(&mut self, ms: u64, turn: &ScriptTurn, calls: u32) -> Option<Flow> {
        match self
            .wait(tokio::time::sleep(Duration::from_millis(ms)))
            .await
        {
            Woken::Done(()) => None,
            Woken::Command(cmd) => Some(self.on_command(cmd, turn, calls).await),
            Woken::HostGone => Some(Flow::Exit),
        }
    }

    async fn on_command(&mut self, cmd: SessionCommand, turn: &ScriptTurn, calls: u32) -> Flow {
        match cmd {
            SessionCommand::Interrupt => {
                self.emit(AgentEvent::Result(AgentResult {
                    subtype: ResultStatus::Failed("error_during_execution".into()),
                    is_error: true,
                    stop_reason: None,
                    terminal_reason: Some(TerminalReason::AbortedStreaming),
                    text: String::new(),
                    num_turns: calls + 1,
                    total_cost_usd: 0.0,
                    usage: self.usage(calls + 1),
                    ..AgentResult::default()
                }));
                self.after_result(turn.after_result).await
            }
            SessionCommand::Close | SessionCommand::HandOver => {
                self.exit(Some(0), "closed");
                Flow::Exit
            }
            SessionCommand::Kill => {
                self.exit(None, "killed");
                Flow::Exit
            }
            SessionCommand::UserTurn(text) => {
                self.queued.push_back((None, text));
                Flow::Next
            }
            SessionCommand::Steer { tag, text } => {
                self.steers.push_back((tag, text));
                Flow::Next
            }
        }
    }

    /// Plays the scenario's turn for `user_text`, step by step.
    async fn play(&mut self, user_text: &str) -> Flow {
        Recent::push(&mut lock(&self.log).prompts, user_text.to_string());
        let turn = self
            .scenario
            .pick(user_text, &mut lock(&self.log).picks)
            .clone();
        self.emit(AgentEvent::Init {
            session_id: self.session_id.clone(),
        });
        let mut calls: u32 = 0;
        let mut text = user_text.to_string();
        for (i, step) in turn.steps.iter().enumerate() {
            if let Some(flow) = self.play_step(step, &turn, &text, &mut calls).await {
                return flow;
            }
            // A tool boundary with more of the turn to come: the next model
            // call reads what was steered in meanwhile (as the CLI does).
            let boundary = matches!(
                step,
                Step::Wait { .. }
                    | Step::Tools { .. }
                    | Step::ToolsWithoutHook { .. }
                    | Step::Ask { .. }
            );
            if boundary && i + 1 < turn.steps.len() {
                self.read_steers(&mut text);
            }
        }
        self.emit(AgentEvent::Result(AgentResult {
            subtype: ResultStatus::Success,
            stop_reason: Some("end_turn".into()),
            terminal_reason: Some(TerminalReason::Completed),
            num_turns: calls + 1,
            usage: self.usage(calls + 1),
            ..AgentResult::default()
        }));
        self.after_result(turn.after_result).await
    }

    /// Plays one step; `Some` when the turn ends there, and how.
    async fn play_step(
        &mut self,
        step: &Step,
        turn: &ScriptTurn,
        user_text: &str,
        calls: &mut u32,
    ) -> Option<Flow> {
        let fill = |s: &str| s.replace("{text}", user_text);
        match step {
            Step::Wait { ms } => return self.pause(*ms, turn, *calls).await,
            Step::Text { text } => self.emit(AgentEvent::Text(fill(text))),
            Step::Tools { calls: tools } | Step::ToolsWithoutHook { calls: tools } => {
                *calls += 1;
                let hook = matches!(step, Step::Tools { .. });
                return self.play_tools(tools, hook, turn, user_text, *calls).await;
            }
            Step::Ask { tool, input } => {
                return self.play_ask(tool, input, turn, user_text, *calls).await;
            }
            Step::Result {
                text,
                subtype,
                is_error,
                terminal_reason,
                num_turns,
                limited,
                resets_at,
            } => {
                self.emit(AgentEvent::Result(AgentResult {
                    subtype: subtype.as_str().into(),
                    is_error: *is_error,
                    stop_reason: Some("end_turn".into()),
                    terminal_reason: Some(
                        terminal_reason
                            .as_deref()
                            .map_or(TerminalReason::Completed, TerminalReason::from),
                    ),
                    text: fill(text),
                    num_turns: num_turns.unwrap_or(*calls + 1),
                    total_cost_usd: 0.0,
                    limited: *limited && *is_error,
                    resets_at: *resets_at,
                    usage: self.usage(num_turns.unwrap_or(*calls + 1)),
                }));
                return Some(self.after_result(turn.after_result).await);
            }
            Step::HangForever => return Some(self.hang().await),
            Step::Fail { detail } => {
                self.exit(Some(1), detail);
                return Some(Flow::Exit);
            }
            Step::Idle => {
                self.emit(AgentEvent::Idle);
                return Some(Flow::Next);
            }
            Step::Activity { tool, input } => {
                self.streams += 1;
                self.emit(AgentEvent::Activity(Activity::ToolStarted {
                    id: format!("toolu_activity_{}", self.streams),
                    name: ToolName::parse(tool.as_str()),
                    input: fill_value(input, user_text),
                }));
            }
            Step::Stream { pieces, ms } => {
                return self.play_stream(pieces, *ms, turn, user_text, *calls).await;
            }
            Step::StreamTool { tool, pieces, ms } => {
                return self
                    .play_stream_tool(tool, pieces, *ms, turn, user_text, *calls)
                    .await;
            }
            Step::Raw { .. } | Step::Big { .. } | Step::Control { .. } => {
                self.emit(AgentEvent::Progress);
            }
        }
        None
    }

    /// Waits for `fut` while serving commands: its output, or how the turn
    /// ends when a command or the host's going comes first.
    async fn settle<T>(
        &mut self,
        fut: impl Future<Output = T>,
        turn: &ScriptTurn,
        calls: u32,
    ) -> Result<T, Flow> {
        match self.wait(fut).await {
            Woken::Done(out) => Ok(out),
            Woken::Command(cmd) => Err(self.on_command(cmd, turn, calls).await),
            Woken::HostGone => Err(Flow::Exit),
        }
    }

    /// A batch of tool calls, each served in turn, then (with `hook`) the
    /// PostToolBatch hook.
    async fn play_tools(
        &mut self,
        tools: &[ScriptTool],
        hook: bool,
        turn: &ScriptTurn,
        user_text: &str,
        calls: u32,
    ) -> Option<Flow> {
        let mut batch = Vec::new();
        for (i, tool) in tools.iter().enumerate() {
            let input = fill_value(&tool.input, user_text);
            if tool.ms > 0 {
                let pause = tokio::time::sleep(Duration::from_millis(tool.ms));
                if let Err(flow) = self.settle(pause, turn, calls).await {
                    return Some(flow);
                }
            }
            let name = ToolName::parse(tool.name.as_str());
            let (reply, rx) = Responder::new(format!("tool call {}", tool.name));
            self.emit(AgentEvent::ToolCall(ToolCall {
                id: format!("toolu_{calls}_{i}"),
                call: self.tools.call(&name, &input),
                reply,
            }));
            let result = match self.settle(rx, turn, calls).await {
                Ok(result) => result,
                Err(flow) => return Some(flow),
            };
            let shown = match result {
                Ok(ToolReply::Ok(text)) => format!("Ok: {text}"),
                Ok(ToolReply::Error(text)) => format!("Error: {text}"),
                Ok(other) => format!("{other:?}"),
                Err(err) => format!("no answer: {err:?}"),
            };
            Recent::push(
                &mut lock(&self.log).tool_results,
                (tool.name.clone(), shown),
            );
            self.emit(AgentEvent::Progress);
            batch.push(self.tools.batch_call(&name, &input));
        }
        if !hook {
            return None;
        }
        let (reply, rx) = Responder::new("PostToolBatch hook");
        self.emit(AgentEvent::BatchResolved(ToolBatch {
            calls: batch,
            reply,
        }));
        match self.settle(rx, turn, calls).await {
            Ok(Ok(HookReply::Stop { .. })) => {
                self.emit(AgentEvent::Result(AgentResult {
                    subtype: ResultStatus::Success,
                    is_error: false,
                    stop_reason: Some("tool_use".into()),
                    terminal_reason: Some(TerminalReason::HookStopped),
                    text: String::new(),
                    num_turns: calls,
                    total_cost_usd: 0.0,
                    usage: self.usage(calls),
                    ..AgentResult::default()
                }));
                Some(self.after_result(turn.after_result).await)
            }
            Ok(_) => None,
            Err(flow) => Some(flow),
        }
    }

    /// A permission ask, then a `send` telling the chat how it was decided.
    async fn play_ask(
        &mut self,
        tool: &str,
        input: &Value,
        turn: &ScriptTurn,
        user_text: &str,
        calls: u32,
    ) -> Option<Flow> {
        let input = fill_value(input, user_text);
        let (reply, rx) = Responder::new(format!("permission ask {tool}"));
        self.emit(AgentEvent::PermissionAsk(PermissionAsk {
            id: format!("toolu_ask_{calls}"),
            tool: ToolName::parse(tool),
            input,
            remember: crate::agent::Remember::ByTool,
            reply,
        }));
        let text = match self.settle(rx, turn, calls).await {
            Ok(Ok(Permission::Allow { input })) => format!("allowed: {input}"),
            Ok(Ok(Permission::Deny { message })) => format!("denied: {message}"),
            Ok(Err(_)) => "denied: no answer".to_string(),
            Err(flow) => return Some(flow),
        };
        let (reply, rx) = Responder::new("tool call send");
        self.emit(AgentEvent::ToolCall(ToolCall {
            id: format!("toolu_told_{calls}"),
            call: self
                .tools
                .call(&ToolName::parse("send"), &json!({ "text": text })),
            reply,
        }));
        match self.settle(rx, turn, calls).await {
            Ok(_) => {
                self.emit(AgentEvent::Progress);
                None
            }
            Err(flow) => Some(flow),
        }
    }

    /// Reads every steered message into the running turn: its receipt, and
    /// its text joins what the rest of the turn answers.
    fn read_steers(&mut self, text: &mut String) {
        while let Some((tag, steered)) = self.steers.pop_front() {
            self.emit(AgentEvent::SteerRead(tag));
            Recent::push(&mut lock(&self.log).steered, steered.clone());
            text.push('\n');
            text.push_str(&steered);
        }
    }

    async fn after_result(&mut self, after: AfterResult) -> Flow {
        // What was steered in and not read runs as the next turn, by the
        // agent itself, with no idle in between (as the CLI does).
        let next = !self.steers.is_empty();
        while let Some((tag, text)) = self.steers.pop_front() {
            self.queued.push_back((Some(tag), text));
        }
        match after {
            AfterResult::Idle if next => Flow::Next,
            AfterResult::Idle => {
                self.emit(AgentEvent::Idle);
                Flow::Next
            }
            AfterResult::Exit => {
                self.exit(Some(0), "exited after result");
                Flow::Exit
            }
            AfterResult::Hang => self.hang().await,
        }
    }

    /// What a result of `calls` model calls reports having used: the
    /// scenario's figures per call, or nothing when it sets none.
    fn usage(&self, calls: u32) -> crate::agent::TokenUsage {
        let per_call = self.scenario.usage.unwrap_or_default();
        crate::agent::TokenUsage {
            input_tokens: per_call.input_tokens.saturating_mul(u64::from(calls)),
            output_tokens: per_call.output_tokens.saturating_mul(u64::from(calls)),
        }
    }

    /// Wedged: deaf to everything but a kill.
    async fn hang(&mut self) -> Flow {
        loop {
            match self.commands.recv().await {
                None => return Flow::Exit,
                Some(SessionCommand::Kill) => {
                    self.exit(None, "killed");
                    return Flow::Exit;
                }
                Some(_) => {}
            }
        }
    }
}

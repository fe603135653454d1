//! The `scripted` backend: an in-process, deterministic agent driven by a
//! [`Scenario`]. The demo, the tests and the benchmarks use it to walk every
//! path of the turn contract without spawning processes.
//!
//! A scenario picks a [`ScriptTurn`] per user message: the first rule whose
//! `contains` occurs in the message, else the default (an echo through
//! `send` and `end_turn`). `{text}` in any string is replaced by the user's
//! message.

mod agent;
mod scenario;

use std::collections::VecDeque;

use self::agent::ScriptedAgent;
pub use self::scenario::{
    AfterResult, Scenario, ScenarioError, ScriptRule, ScriptTool, ScriptTurn, Step, fill_value,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

use super::tools::ToolRegistry;
use super::{AgentBackend, AgentError, AgentSession, BoxFuture, OpenSession};

/// The in-process backend.
#[derive(Debug)]
pub struct ScriptedBackend {
    /// The turns it plays.
    scenario: Arc<Scenario>,
    /// The chat tools its calls are parsed with.
    tools: Arc<ToolRegistry>,
    /// Numbers the sessions it opens, for their ids.
    opened: AtomicU64,
    /// What its sessions saw, for tests.
    log: Arc<std::sync::Mutex<Recent>>,
}

/// How many entries of each kind the [`ScriptLog`] keeps: the newest, so a
/// scripted bot that runs for long does not grow with every turn.
pub const LOG_LIMIT: usize = 1_000;

/// What the scripted sessions saw.
#[derive(Debug, Default, Clone)]
pub struct ScriptLog {
    /// Each session opened: its conversation's key and the session id resumed.
    pub opens: Vec<(String, Option<String>)>,
    /// Each session opened: the model asked for and whether as a fork.
    pub choices: Vec<(Option<String>, bool)>,
    /// Each session opened: its project's name and workdir, if any.
    pub projects: Vec<Option<(String, std::path::PathBuf)>>,
    /// Each tool call's name and the host's result (`Ok: …`, `Error: …`).
    pub tool_results: Vec<(String, String)>,
    /// Each message steered into a running turn and read there, in order.
    pub steered: Vec<String>,
    /// Each user turn's text as the session got it, in order.
    pub prompts: Vec<String>,
}

/// The newest [`LOG_LIMIT`] entries of each list of a [`ScriptLog`].
#[derive(Debug, Default)]
struct Recent {
    opens: VecDeque<(String, Option<String>)>,
    choices: VecDeque<(Option<String>, bool)>,
    projects: VecDeque<Option<(String, std::path::PathBuf)>>,
    tool_results: VecDeque<(String, String)>,
    steered: VecDeque<String>,
    prompts: VecDeque<String>,
    /// How often each rule was played (for `times`).
    picks: std::collections::HashMap<usize, u32>,
}

impl Recent {
    fn push<T>(list: &mut VecDeque<T>, entry: T) {
        if list.len() >= LOG_LIMIT {
            list.pop_front();
        }
        list.push_back(entry);
    }
}

/// Locks the log, ignoring poisoning.
fn lock(log: &std::sync::Mutex<Recent>) -> std::sync::MutexGuard<'_, Recent> {
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ScriptedBackend {
    /// A backend playing `scenario`, its tool calls parsed with the
    /// default chat tools and terminators.
    pub fn new(scenario: Scenario) -> Self {
        Self {
            scenario: Arc::new(scenario),
            tools: Arc::default(),
            opened: AtomicU64::new(0),
            log: Arc::default(),
        }
    }

    /// The same backend, its tool calls parsed with `tools` (as
    /// `turn.terminator_tools` configures them).
    pub fn with_tools(mut self, tools: Arc<ToolRegistry>) -> Self {
        self.tools = tools;
        self
    }

    /// Sessions opened so far.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// A copy of what the sessions saw (the newest [`LOG_LIMIT`] of each).
    pub fn log(&self) -> ScriptLog {
        let log = lock(&self.log);
        ScriptLog {
            opens: log.opens.iter().cloned().collect(),
            choices: log.choices.iter().cloned().collect(),
            projects: log.projects.iter().cloned().collect(),
            tool_results: log.tool_results.iter().cloned().collect(),
            steered: log.steered.iter().cloned().collect(),
            prompts: log.prompts.iter().cloned().collect(),
        }
    }
}

impl AgentBackend for ScriptedBackend {
    fn steers(&self) -> bool {
        true
    }

    fn open(&self, request: OpenSession) -> BoxFuture<Result<AgentSession, AgentError>> {
        let n = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
        let key = request.conversation.key();
        {
            let mut log = lock(&self.log);
            Recent::push(&mut log.opens, (key.clone(), request.resume.clone()));
            Recent::push(&mut log.choices, (request.model.clone(), request.fork));
            let project = request.project.as_ref();
            let project = project.map(|p| (p.name.clone(), p.workdir.clone()));
            Recent::push(&mut log.projects, project);
        }
        // A fork is a copy with an id of its own.
        let session_id = request
            .resume
            .filter(|_| !request.fork)
            .unwrap_or_else(|| format!("{}{key}-{n}", super::SCRIPTED_SESSION_PREFIX));
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let agent = ScriptedAgent {
            commands: cmd_rx,
            events: ev_tx,
            scenario: Arc::clone(&self.scenario),
            tools: Arc::clone(&self.tools),
            session_id,
            queued: VecDeque::new(),
            steers: VecDeque::new(),
            log: Arc::clone(&self.log),
            streams: 0,
        };
        tokio::spawn(agent.run());
        Box::pin(async move {
            Ok(AgentSession {
                commands: cmd_tx,
                events: ev_rx,
                label: format!("scripted#{n}"),
            })
        })
    }
}

#[cfg(test)]
mod tests;

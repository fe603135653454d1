//! [`Timed`]: an agent backend that wraps another and stamps, as each event
//! leaves the agent, the moments the benchmarks start their clocks from: a
//! tool batch holding a terminator has resolved, a `result` arrived, and a
//! piece of text being written (the live view's input) came out.
//!
//! Each session's events pass through one forwarding task (commands go
//! straight to the inner session), so the stamp is taken before the turn
//! actor sees the event and everything after it (delivery to the actor,
//! deciding the outcome, TurnEnded, the typing actor) is inside the measure.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;
use turnstile::agent::{
    Activity, AgentBackend, AgentError, AgentEvent, AgentSession, BoxFuture, OpenSession,
    SessionCommand,
};

/// What was stamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    /// A batch holding a terminator resolved (PostToolBatch).
    TerminatorResolved,
    /// The agent's `result`.
    Result,
    /// Text being written (an [`Activity::Writing`] with a non-empty piece:
    /// assistant text, or the `text` of `send`/`end_turn` as it streams).
    Writing,
    /// The turn's prompt reached the agent (a `SessionCommand::UserTurn`
    /// left the host): with the claude backend, what the first model
    /// request follows.
    Prompt,
}

/// One stamp.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    /// The session's chat.
    pub chat: i64,
    /// What.
    pub kind: MarkKind,
    /// When the event left the agent.
    pub at: Instant,
}

/// The wrapper.
pub struct Timed {
    inner: Arc<dyn AgentBackend>,
    marks: Arc<Mutex<Vec<Mark>>>,
}

impl Timed {
    /// Wraps `inner` (whose batches say which call ends the turn).
    pub fn new(inner: Arc<dyn AgentBackend>) -> Self {
        Self {
            inner,
            marks: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Every stamp so far, in order.
    pub fn marks(&self) -> Vec<Mark> {
        self.marks.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

impl AgentBackend for Timed {
    fn open(&self, request: OpenSession) -> BoxFuture<Result<AgentSession, AgentError>> {
        let chat = request.conversation.chat.0;
        let opening = self.inner.open(request);
        let marks = Arc::clone(&self.marks);
        Box::pin(async move {
            let mut session = opening.await?;
            // The host's commands pass through, the prompts stamped.
            let (to_agent, mut from_host) = mpsc::unbounded_channel::<SessionCommand>();
            let agent_commands = std::mem::replace(&mut session.commands, to_agent);
            let prompts = Arc::clone(&marks);
            tokio::spawn(async move {
                while let Some(command) = from_host.recv().await {
                    if matches!(command, SessionCommand::UserTurn(_)) {
                        let at = Instant::now();
                        if let Ok(mut m) = prompts.lock() {
                            m.push(Mark {
                                chat,
                                kind: MarkKind::Prompt,
                                at,
                            });
                        }
                    }
                    if agent_commands.send(command).is_err() {
                        return;
                    }
                }
            });
            let (tx, rx) = mpsc::unbounded_channel();
            let mut from_agent = std::mem::replace(&mut session.events, rx);
            tokio::spawn(async move {
                while let Some(event) = from_agent.recv().await {
                    let kind = match &event {
                        AgentEvent::BatchResolved(batch) if batch.terminator().is_some() => {
                            Some(MarkKind::TerminatorResolved)
                        }
                        AgentEvent::Result(_) => Some(MarkKind::Result),
                        AgentEvent::Activity(Activity::Writing { appended, .. })
                            if !appended.is_empty() =>
                        {
                            Some(MarkKind::Writing)
                        }
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        let at = Instant::now();
                        if let Ok(mut m) = marks.lock() {
                            m.push(Mark { chat, kind, at });
                        }
                    }
                    if tx.send(event).is_err() {
                        return;
                    }
                }
            });
            Ok(session)
        })
    }

    fn closed(&self) -> BoxFuture<()> {
        self.inner.closed()
    }

    fn steers(&self) -> bool {
        self.inner.steers()
    }
}

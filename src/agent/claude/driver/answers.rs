//! The way into the CLI's stdin and the CLI's requests still waiting for
//! the host: each is answered at most once, and the close path refuses what
//! is left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::agent::claude::protocol::{self, ControlRequest};

/// The way into the CLI's stdin, and the requests from the CLI still
/// waiting for an answer: each is answered at most once, and one whose
/// answer could not be written stays pending, so the close path refuses it.
#[derive(Clone)]
pub(super) struct Answers {
    /// Shared with the tasks waiting for the host's answers.
    inner: Arc<Mutex<AnswersInner>>,
    /// For logs.
    pid: u32,
}

struct AnswersInner {
    /// Lines to stdin; `None` once stdin is closed.
    out: Option<mpsc::UnboundedSender<Value>>,
    /// Request ids from the CLI not yet answered, with how each is refused.
    pending: HashMap<String, Refusal>,
}

/// How a request from the CLI is refused when the host will not serve it
/// (the host is stopping, the session is closing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// A control-protocol error (`mcp_message`, hooks, unknown requests).
    ControlError,
    /// `can_use_tool`: denied, so the model reads why.
    Deny,
}

impl Refusal {
    /// How `request` is refused.
    pub(super) fn of(request: &ControlRequest) -> Self {
        match request {
            ControlRequest::CanUseTool(_) => Self::Deny,
            ControlRequest::HookCallback(_)
            | ControlRequest::McpMessage(_)
            | ControlRequest::Unknown { .. } => Self::ControlError,
        }
    }

    /// The line that refuses request `id`, saying `why`.
    pub(super) fn line(self, id: &str, why: &str) -> Value {
        match self {
            Self::ControlError => protocol::control_error(id, why),
            Self::Deny => protocol::control_success(id, protocol::permission_deny(why)),
        }
    }
}

impl Answers {
    pub(super) fn new(out: mpsc::UnboundedSender<Value>, pid: u32) -> Self {
        Self {
            inner: Arc::new(Mutex::new(AnswersInner {
                out: Some(out),
                pending: HashMap::new(),
            })),
            pid,
        }
    }

    fn lock(&self) -> MutexGuard<'_, AnswersInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes a host line; `false` when stdin is closed.
    pub(super) fn write(&self, line: Value) -> bool {
        match &self.lock().out {
            Some(out) => out.send(line).is_ok(),
            None => false,
        }
    }

    /// Notes a request from the CLI that needs an answer.
    pub(super) fn expect(&self, id: &str, refusal: Refusal) {
        if self
            .lock()
            .pending
            .insert(id.to_string(), refusal)
            .is_some()
        {
            tracing::warn!(
                pid = self.pid,
                request_id = id,
                "the agent reused a pending request id"
            );
        }
    }

    /// Answers a request once; a second answer is refused and logged.
    pub(super) fn answer(&self, id: &str, line: Value) -> bool {
        let mut inner = self.lock();
        let Some(refusal) = inner.pending.remove(id) else {
            tracing::warn!(
                pid = self.pid,
                request_id = id,
                "second answer to a request refused"
            );
            return false;
        };
        let sent = inner.out.as_ref().is_some_and(|out| out.send(line).is_ok());
        if !sent {
            // Still unanswered: the close path refuses it.
            inner.pending.insert(id.to_string(), refusal);
            tracing::debug!(
                pid = self.pid,
                request_id = id,
                "answer not written; request left pending"
            );
        }
        sent
    }

    /// Refuses every pending request (before closing stdin).
    pub(super) fn refuse_pending(&self, why: &str) {
        let mut inner = self.lock();
        let pending: Vec<(String, Refusal)> = inner.pending.drain().collect();
        for (id, refusal) in pending {
            tracing::info!(pid = self.pid, request_id = %id, ?refusal, "pending agent request refused: {why}");
            if let Some(out) = &inner.out {
                let _ = out.send(refusal.line(&id, why));
            }
        }
    }

    /// Nothing the CLI asked waits for an answer, and stdin is open.
    pub(super) fn is_idle(&self) -> bool {
        let inner = self.lock();
        inner.pending.is_empty() && inner.out.is_some()
    }

    /// Closes stdin.
    pub(super) fn close(&self) {
        self.lock().out = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers() -> (Answers, mpsc::UnboundedReceiver<Value>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Answers::new(tx, 1), rx)
    }

    #[test]
    fn a_request_is_answered_at_most_once() {
        let (answers, mut rx) = answers();
        answers.expect("r1", Refusal::ControlError);
        assert!(answers.answer("r1", serde_json::json!({"n": 1})));
        assert!(
            !answers.answer("r1", serde_json::json!({"n": 2})),
            "the second answer is refused"
        );
        assert_eq!(rx.try_recv().unwrap()["n"], 1);
        assert!(rx.try_recv().is_err(), "only one answer was written");
        assert!(!answers.answer("never-asked", serde_json::json!({})));
    }

    #[test]
    fn an_answer_that_could_not_be_written_stays_pending_and_the_close_path_refuses_it() {
        let (answers, rx) = answers();
        answers.expect("r1", Refusal::ControlError);
        answers.expect("r2", Refusal::Deny);
        drop(rx);
        assert!(
            !answers.answer("r1", serde_json::json!({})),
            "stdin is gone"
        );
        assert_eq!(answers.lock().pending.len(), 2, "still unanswered");
        let (tx, mut rx) = mpsc::unbounded_channel();
        answers.lock().out = Some(tx);
        answers.refuse_pending("the host is stopping");
        let mut lines: Vec<Value> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        lines.sort_by_key(|l| l["response"]["request_id"].to_string());
        assert_eq!(lines.len(), 2, "each refused once: {lines:?}");
        assert_eq!(lines[0]["response"]["subtype"], "error");
        assert_eq!(lines[0]["response"]["request_id"], "r1");
        assert_eq!(lines[0]["response"]["error"], "the host is stopping");
        assert_eq!(lines[1]["response"]["subtype"], "success");
        assert_eq!(lines[1]["response"]["request_id"], "r2");
        assert_eq!(
            lines[1]["response"]["response"],
            serde_json::json!({"behavior": "deny", "message": "the host is stopping"}),
            "a permission ask is denied"
        );
        assert!(answers.lock().pending.is_empty());
        assert!(
            !answers.answer("r2", serde_json::json!({"behavior": "allow"})),
            "a refused ask takes no later answer"
        );
    }
}

//! How a turn ends and closes: TurnEnded goes out once, then the session
//! is waited for (up to the grace), handed back when it settled, or killed;
//! events after TurnEnded are logged and dropped.

use std::sync::atomic::Ordering;
use std::time::Instant;

use actix::Context;

use super::link::Settled;
use super::phase::{Leftover, Step, TurnPhase};
use super::{SessionReleased, TurnActor, TurnEnded};
use crate::agent::{AgentEvent, HookReply, SessionCommand, ToolReply};
use crate::chat::notices::{Ending, STOP_REASON, notice_for};
use crate::chat::outcome::{TurnEvent, TurnOutcome};
use crate::events::BotEvent;

impl TurnActor {
    /// An event after TurnEnded: closing the session, never delivering.
    pub(super) fn on_late_event(&mut self, event: AgentEvent, ctx: &mut Context<Self>) {
        match event {
            AgentEvent::ToolCall(call) => {
                tracing::warn!(call_id = %call.id, tool = %call.call.name, "tool call after the turn ended; refused and dropped");
                call.reply
                    .answer(ToolReply::Error("the turn has already ended".into()));
            }
            AgentEvent::BatchResolved(batch) => {
                batch.reply.answer(HookReply::Stop {
                    reason: STOP_REASON.into(),
                });
            }
            AgentEvent::Result(result) => {
                tracing::debug!(subtype = %result.subtype, "result after the turn ended; not delivered");
                self.steering.result_seen = true;
                if !self.continue_after_result(ctx) {
                    self.arm_grace(ctx);
                }
            }
            AgentEvent::SteerRead(tag) => self.steer_read(tag),
            AgentEvent::Idle => {
                if let Some(link) = self.phase.link_mut() {
                    link.settle(Settled::Idle);
                }
                self.release(ctx);
            }
            AgentEvent::Exited { .. } => self.release(ctx),
            AgentEvent::PermissionAsk(ask) => {
                tracing::warn!(call_id = %ask.id, tool = %ask.tool, "permission ask after the turn ended; denied");
                ask.reply.answer(crate::agent::Permission::Deny {
                    message: "the turn has already ended".into(),
                });
            }
            AgentEvent::Text(_)
            | AgentEvent::Progress
            | AgentEvent::Activity(_)
            | AgentEvent::Init { .. } => {}
            AgentEvent::Unknown(raw) => {
                let shown: String = raw.chars().take(200).collect();
                tracing::debug!(event = %shown, "late unknown event dropped");
            }
        }
    }

    /// Sends TurnEnded and starts closing the session.
    pub(super) fn finish(&mut self, outcome: TurnOutcome, ctx: &mut Context<Self>) {
        // Typing stops first, now (not when TurnEnded reaches the typing
        // actor), and before TurnEnded is stamped: the outbox, on its own
        // thread, stamps a sendChatAction before it looks at the lease, so
        // every one it lets go is stamped before TurnEnded.
        self.spec.typing.end();
        let at = Instant::now();
        // Still opening: the agent never had the prompt (its start failed).
        let agent_started = !matches!(self.phase, TurnPhase::Opening { .. });
        self.disarm_live_clocks(ctx);
        self.step(Step::Ended(outcome.clone()));
        self.close_approvals(
            match outcome {
                TurnOutcome::Interrupted => "the turn was stopped",
                TurnOutcome::HostStopping => "the bot is stopping",
                _ => "the turn ended",
            },
            ctx,
        );
        self.open.store(false, Ordering::SeqCst);
        // The status goes (or folds) and an unfinished preview with it.
        self.view.finish();
        let replied = self.announce_end(&outcome, at);
        let ending = Ending {
            replied,
            retry: self.deps.retry_interrupted,
            restarting: self.deps.shutdown.is_restarting(),
            agent_started,
            parks: !self.deps.limit_retry.is_zero(),
        };
        if let Some(notice) = notice_for(&outcome, ending) {
            self.deliver(notice);
        }
        if self.settled() {
            return self.release(ctx);
        }
        // The agent runs a steered message as its next turn: the session
        // goes back to the chat with it now.
        if self.steering.result_seen && self.steering.waiting() && self.may_hand_back() {
            return self.release(ctx);
        }
        match outcome {
            TurnOutcome::NoProgress | TurnOutcome::ForceClosedAfterResult => self.kill(ctx),
            TurnOutcome::Interrupted | TurnOutcome::BudgetExceeded => {
                self.send(SessionCommand::Interrupt);
                self.arm_grace(ctx);
            }
            TurnOutcome::HostStopping => {
                self.send(SessionCommand::Close);
                self.arm_grace(ctx);
            }
            _ => self.arm_grace(ctx),
        }
    }

    /// TurnEnded to who waits for it, the bus and the log; answers whether
    /// a reply may have left.
    fn announce_end(&mut self, outcome: &TurnOutcome, at: Instant) -> bool {
        let (api_calls, cost_usd) = self
            .log
            .iter()
            .filter_map(|e| match e {
                TurnEvent::Result(r) => Some((r.num_turns, r.total_cost_usd)),
                _ => None,
            })
            .fold((0u32, 0.0), |(n, c), (dn, dc)| {
                (n.saturating_add(dn), c + dc)
            });
        let replied = self.delivered || self.lane.is_some();
        let ended = TurnEnded {
            turn: self.spec.turn,
            outcome: outcome.clone(),
            session_id: self.session_id.clone(),
            replied,
            api_calls,
            cost_usd,
            started: self.started,
            at,
            steered: self.steering.read(),
        };
        for to in &self.ended_to {
            to.do_send(ended.clone());
        }
        self.deps.events.publish(BotEvent::TurnEnded {
            chat: self.spec.to.chat,
            turn: self.spec.turn,
            outcome: outcome.clone(),
            session_id: self.session_id.clone(),
            at,
        });
        tracing::info!(
            outcome = outcome.label(),
            finished = outcome.finished(),
            delivered = self.delivered,
            elapsed_ms = self.started.elapsed().as_millis() as u64,
            "turn ended"
        );
        replied
    }

    /// Force-closes the session and releases nothing.
    pub(super) fn kill(&mut self, ctx: &mut Context<Self>) {
        self.send(SessionCommand::Kill);
        self.deps.events.publish(BotEvent::SessionKilled {
            chat: self.spec.to.chat,
            turn: self.spec.turn,
        });
        // It has not settled (one that did was released), so nothing is
        // handed back.
        self.release(ctx);
    }

    /// Hands the session back (when it settled idle) and stops.
    pub(super) fn release(&mut self, ctx: &mut Context<Self>) {
        if self.phase.is_released() {
            return;
        }
        let hand_back = self.may_hand_back();
        let session = match self.step(Step::Released) {
            Some(Leftover::Link(link)) if hand_back => link.into_session(),
            Some(Leftover::Link(link)) => {
                // It would run what `/stop` cut: closed, not kept.
                self.send_to(Some(&link), SessionCommand::Kill);
                None
            }
            _ => None,
        };
        let carried = self.carried(session.is_some());
        self.released_to.do_send(SessionReleased {
            turn: self.spec.turn,
            session,
            carried,
        });
        // A question decided before Telegram answered its `sendMessage`
        // still gets its decision shown.
        self.stop_once_questions_shown(ctx);
    }
}

impl TurnActor {
    /// What one of the turn's results says it used, for `/usage` and the
    /// metrics, whenever it arrives (after a terminator it comes late).
    pub(super) fn account(&self, result: &crate::agent::AgentResult) {
        let used = crate::state::TurnUsage {
            api_calls: result.num_turns,
            input_tokens: result.usage.input_tokens,
            output_tokens: result.usage.output_tokens,
            cost_usd: result.total_cost_usd,
        };
        self.deps
            .events
            .metrics()
            .usage(used.input_tokens, used.output_tokens, used.cost_usd);
        self.deps.inbox.record_usage(self.spec.to, used);
    }
}

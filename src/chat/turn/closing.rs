//! How a turn ends and closes: TurnEnded goes out once, then the session
//! is waited for (up to the grace), handed back when it settled, or killed;
//! events after TurnEnded are logged and dropped.

use std::time::Instant;

use actix::Context;

use super::link::Settled;
use super::phase::{Leftover, TurnPhase, TurnStep};
use super::{SessionReleased, TurnActor, TurnEnded};
use crate::agent::{AgentEvent, HookReply, SessionCommand, ToolReply};
use crate::chat::notices::{Ending, STOP_REASON, bounded, notice_for};
use crate::chat::outcome::{TurnEvent, TurnOutcome};
use crate::events::{BotEvent, FeedItem};
use crate::state::{TurnRecord, TurnUsage, now_ms};

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
            | AgentEvent::AuthFailed(_)
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
        self.step(TurnStep::Ended(outcome.clone()));
        self.close_approvals(
            match outcome {
                TurnOutcome::Interrupted => "the turn was stopped",
                TurnOutcome::HostStopping => "the bot is stopping",
                _ => "the turn ended",
            },
            ctx,
        );
        // The status goes (or folds) and an unfinished preview with it.
        self.view.finish();
        let replied = self.announce_end(&outcome, at);
        let ending = Ending {
            replied,
            retry: self.deps.agent.retry_interrupted,
            restarting: self.deps.books.shutdown.is_restarting(),
            agent_started,
            parks: !self.deps.agent.limit_retry.is_zero(),
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
            // An agent that cannot authenticate would retry for minutes.
            TurnOutcome::NoProgress
            | TurnOutcome::ForceClosedAfterResult
            | TurnOutcome::Unauthenticated { .. } => self.kill(ctx),
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
    /// a reply may have left. The turn's record waits for its accounting
    /// to close ([`TurnActor::close_account`]).
    fn announce_end(&mut self, outcome: &TurnOutcome, at: Instant) -> bool {
        let ended_at = now_ms();
        let took = i64::try_from(at.duration_since(self.started).as_millis()).unwrap_or(i64::MAX);
        self.accounting.record = Some(TurnRecord {
            chat_id: self.spec.to.chat.0,
            turn: self.spec.turn.get(),
            started_at: ended_at.saturating_sub(took),
            ended_at,
            outcome: outcome.label().to_string(),
            finished: outcome.finished(),
            api_calls: 0,
            cost_usd: 0.0,
        });
        let replied = self.said.replied();
        let ended = TurnEnded {
            turn: self.spec.turn,
            outcome: outcome.clone(),
            session_id: self.session_id.clone(),
            replied,
            started: self.started,
            at,
            steered: self.steering.read(),
        };
        for to in &self.ended_to {
            to.do_send(ended.clone());
        }
        self.deps.books.events.publish(BotEvent::TurnEnded {
            chat: self.spec.to.chat,
            turn: self.spec.turn,
            outcome: outcome.clone(),
            session_id: self.session_id.clone(),
            at,
        });
        self.deps.books.events.feed(
            self.spec.to,
            FeedItem::TurnEnded {
                turn: self.spec.turn,
                outcome: outcome.clone(),
            },
        );
        tracing::info!(
            outcome = outcome.label(),
            finished = outcome.finished(),
            delivered = self.said.delivered(),
            elapsed_ms = self.started.elapsed().as_millis() as u64,
            "turn ended"
        );
        if let TurnOutcome::AgentError { reason } = outcome {
            // The agent's own words, which the reason alone does not carry.
            let said = self.log.iter().rev().find_map(|event| match event {
                TurnEvent::Result(result) => Some(result.text.as_str()),
                _ => None,
            });
            tracing::error!(
                %reason,
                cause = %bounded(said.unwrap_or_default(), 500),
                "the agent stopped with an error"
            );
        }
        replied
    }

    /// Force-closes the session and releases nothing.
    pub(super) fn kill(&mut self, ctx: &mut Context<Self>) {
        self.send(SessionCommand::Kill);
        self.deps.books.events.publish(BotEvent::SessionKilled {
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
        // No event of the session is read after this: every result the
        // turn will have is in.
        self.close_account();
        let hand_back = self.may_hand_back();
        let session = match self.step(TurnStep::Released) {
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

/// What a turn's results used, summed as they arrive (after a terminator
/// the result comes after TurnEnded), and its record, written once the
/// turn is done with its session.
#[derive(Debug, Default)]
pub(super) struct Account {
    /// Every result's use, summed.
    used: TurnUsage,
    /// How many results came.
    results: u32,
    /// The turn's record, from TurnEnded on (its use filled in at the close).
    record: Option<TurnRecord>,
    /// Written already.
    closed: bool,
}

impl TurnActor {
    /// Adds what one of the turn's results says it used, whenever it
    /// arrives.
    pub(super) fn account(&mut self, result: &crate::agent::AgentResult) {
        let used = &mut self.accounting.used;
        used.api_calls = used.api_calls.saturating_add(result.num_turns);
        used.input_tokens = used.input_tokens.saturating_add(result.usage.input_tokens);
        used.output_tokens = used
            .output_tokens
            .saturating_add(result.usage.output_tokens);
        if result.total_cost_usd.is_finite() && result.total_cost_usd > 0.0 {
            used.cost_usd += result.total_cost_usd;
        }
        self.accounting.results = self.accounting.results.saturating_add(1);
    }

    /// Closes the turn's accounting, once: no result can come any more
    /// (its session is released or killed, or the turn aborted). Writes
    /// one `usage` row for the turn (when a result came; `/usage` counts
    /// its rows as turns), the turn's record (when TurnEnded went out),
    /// and the metrics.
    pub(super) fn close_account(&mut self) {
        if std::mem::replace(&mut self.accounting.closed, true) {
            return;
        }
        let used = self.accounting.used;
        let metrics = self.deps.books.events.metrics();
        if self.accounting.results > 0 {
            // The row first: whoever saw the metric and then asks
            // `/usage` finds it (the store runs its jobs in order).
            let to = self.spec.to;
            (self.deps.books.inbox).tell("recording usage", move |store| {
                store.record_usage(to, &used)
            });
            metrics.usage(used.input_tokens, used.output_tokens, used.cost_usd);
        }
        if let Some(mut record) = self.accounting.record.take() {
            record.api_calls = used.api_calls;
            record.cost_usd = used.cost_usd;
            metrics.turn_used(used.api_calls, used.cost_usd);
            tracing::info!(
                outcome = %record.outcome,
                duration_ms = record.ended_at.saturating_sub(record.started_at),
                api_calls = used.api_calls,
                cost_usd = used.cost_usd,
                results = self.accounting.results,
                "turn recorded"
            );
            (self.deps.books.inbox)
                .tell("recording a turn", move |store| store.record_turn(&record));
        }
    }
}

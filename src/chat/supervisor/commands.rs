//! The chat's commands: `/stop`, `/new` and `/handoff` (a [`ChatCommand`], matched on
//! the [`Command`] the intake parsed), `/status`, and what the dispatcher and
//! the host ask of it (retire, stop for the host).

use actix::{ActorContext, AsyncContext, Handler};

use super::state::{ChatState, ChatStep};
use super::{ChatCommand, ChatSupervisor, DescribeChat, RetireChat, StopChatForHost};
use crate::chat::notices;
use crate::chat::notices::{stopping, terminal};
use crate::chat::turn::{ButtonPressed, InterruptTurn, StopForHost};
use crate::incoming::{Command, Source};
use crate::telegram::outbox::{AnswerCallback, Purge};

impl Handler<ChatCommand> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, msg: ChatCommand, ctx: &mut Self::Context) {
        self.touched(ctx);
        match msg.command {
            Command::Stop => self.stop(msg.source, ctx),
            Command::New => self.forget_session(ctx),
            Command::Handoff => self.hand_off(ctx),
            other => tracing::debug!(
                command = other.word(),
                "not a command the chat acts on; ignored"
            ),
        }
        self.watch_idle(ctx);
    }
}

impl ChatSupervisor {
    /// `/stop`: interrupts the running turn, drops what it queued for the
    /// chat and Telegram has not taken, and drops the messages queued
    /// behind it (and what waits to be routed behind a message the turn
    /// has not answered for). What else waits for Telegram goes on: an
    /// earlier turn's answer, notices, echoes. One typed at the terminal
    /// is said here, so the chat sees where the stop came from.
    fn stop(&mut self, source: Source, ctx: &mut actix::Context<Self>) {
        let held: Vec<i64> = (self.awaiting.iter_mut())
            .flat_map(|held| held.drain(..))
            .map(|p| p.message.update_id)
            .collect();
        let dropped = self.queue.len() + held.len();
        let ids: Vec<i64> = self.queue.drain(..).map(|p| p.message.update_id).collect();
        self.events.metrics().queued(-(ids.len() as i64));
        self.inbox.dropped(ids.into_iter().chain(held).collect());
        // A slot on its way stays on its way: with the queue empty it
        // starts nothing.
        self.step(ChatStep::WindowClosed, ctx);
        match self.state.running() {
            Some(running) => {
                // What the turn queued and Telegram has not got yet goes
                // (the rest of the chat's queue stays, in order); the stop
                // notice below is queued after it.
                let (to, turn) = (self.to, running.turn);
                self.outbox.do_send(Purge { to, turn });
                running.addr.do_send(InterruptTurn);
                self.said_where(source);
                self.say(stopping::stopped(dropped));
            }
            None => {
                self.said_where(source);
                match self.cancel_parked(ctx) {
                    0 if dropped > 0 => self.say(stopping::queue_dropped(dropped)),
                    0 => self.say(notices::NOTHING_TO_STOP),
                    parked => self.say(stopping::retry_cancelled(parked + dropped)),
                }
            }
        }
    }

    /// A stop typed at the terminal, shown in the chat as every typed line
    /// is (`dispatcher/typed.rs` leaves it to the stop).
    fn said_where(&self, source: Source) {
        if source == Source::Terminal {
            self.say(terminal::typed(&format!("/{}", Command::Stop.word())));
        }
    }

    /// `/new`: forgets the agent session; the next turn starts fresh.
    fn forget_session(&mut self, ctx: &mut actix::Context<Self>) {
        let to = self.to;
        self.inbox.tell("forgetting the session id", move |store| {
            store.set_session(to, None)
        });
        self.close_warm(ctx);
        self.forget_through = self.turn_ids.last();
        self.say(stopping::FRESH_CONVERSATION);
    }
}

impl Handler<RetireChat> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, _msg: RetireChat, ctx: &mut Self::Context) {
        tracing::debug!("idle chat retired");
        ctx.stop();
    }
}

impl Handler<StopChatForHost> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, msg: StopChatForHost, ctx: &mut Self::Context) {
        // Queued messages stay queued in the inbox: the next process runs them.
        if let Some(parked) = self.step(ChatStep::HostStopping, ctx).parked() {
            // Their rows stay parked in the inbox: the next process runs
            // them at their time.
            ctx.cancel_future(parked.timer());
            self.events.metrics().parked(-1);
            tracing::info!("parked messages left for the next start");
        }
        self.release_warm_for_host(ctx);
        if msg.end_running
            && let Some(running) = self.state.running()
        {
            running.addr.do_send(StopForHost);
        }
    }
}

impl Handler<DescribeChat> for ChatSupervisor {
    type Result = String;

    fn handle(&mut self, _msg: DescribeChat, _ctx: &mut Self::Context) -> String {
        let state = match &self.state {
            _ if self.handed_off.is_some() => "handed off to the host".to_string(),
            ChatState::Running(r, ..) => format!(
                "turn {} running for {:.1}s",
                r.turn,
                r.started.elapsed().as_secs_f64()
            ),
            ChatState::Settling(turn, ..) => format!("turn {turn} ended, session closing"),
            ChatState::Idle(_)
            | ChatState::Merging(_)
            | ChatState::WaitingForSlot(_)
            | ChatState::Stopped => "idle".to_string(),
        };
        match self.parked_line() {
            Some(parked) => format!(
                "chat {}: {state}, {} queued, {parked}",
                self.to,
                self.queue.len()
            ),
            None => format!("chat {}: {state}, {} queued", self.to, self.queue.len()),
        }
    }
}

impl Handler<ButtonPressed> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, press: ButtonPressed, ctx: &mut Self::Context) {
        self.touched(ctx);
        match self.state.running() {
            Some(running) => running.addr.do_send(press),
            None => {
                if let Some(unbutton) = press.unbutton() {
                    self.outbox.do_send(unbutton);
                }
                self.outbox.do_send(AnswerCallback {
                    chat: press.chat,
                    id: press.callback,
                    text: notices::QUESTION_EXPIRED.into(),
                    alert: false,
                });
            }
        }
        self.watch_idle(ctx);
    }
}

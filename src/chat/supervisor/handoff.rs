//! `/handoff`: the conversation goes on at the host, in the agent's own
//! program or through `turnstile attach`. While it is handed off the chat
//! holds no agent process of it (the warm one is let go, a prewarm skips
//! it, a schedule's run is skipped) and is not retired, so it remembers;
//! a row in the store keeps it across a restart. The next message (from
//! the chat or typed at the host) takes it back: the row goes, the chat
//! is told, and its turn resumes the same session, which the agent's own
//! program appended to.
//!
//! A session never has two writers: `/handoff` is refused while a turn
//! is under way or a message waits for one.

use actix::{ActorFutureExt, AsyncContext, Context, Handler, Message, WrapFuture};

use super::{ChatSupervisor, UserMessage};
use crate::agent::host::seal::shell_word;
use crate::chat::notices::{STORE_UNREADABLE, handoff};

/// At start: an earlier process handed the conversation off with this
/// session, and it was not taken back.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct HandedOffBefore(pub String);

impl ChatSupervisor {
    /// Whether a turn runs, starts or settles here, or a message waits for
    /// one (queued, held behind a steered one, or parked).
    fn busy(&self) -> bool {
        !self.state.at_rest() || !self.queue.is_empty() || self.awaiting.is_some()
    }

    /// The `turnstile attach` command that follows this conversation.
    fn attach_command(&self) -> String {
        let config = (self.turns.agent.config_file.as_deref())
            .map(|file| shell_word(&file.to_string_lossy()));
        handoff::attach_command(config.as_deref(), &self.to.key())
    }

    /// Stops the idle timer: a handed-off chat is kept, so it knows.
    fn keep_while_handed_off(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.idle_timer.take() {
            ctx.cancel_future(timer);
        }
    }

    /// `/handoff`: refused while busy; otherwise the warm session is let
    /// go, the session written down as handed off, and the chat told how
    /// to go on at the host. Nothing else reaches the chat until the row
    /// is written, so a message right after takes it back, after it.
    pub(super) fn hand_off(&mut self, ctx: &mut Context<Self>) {
        if self.busy() {
            tracing::info!("/handoff refused: a turn is under way or a message waits for one");
            return self.say(handoff::BUSY);
        }
        if self.warm.is_some() {
            tracing::info!("warm session closed: the conversation is handed off");
        }
        self.close_warm(ctx);
        let request = self.turns.session_request(self.to);
        let (inbox, to) = (self.inbox.clone(), self.to);
        let written = async move {
            let request = request.await?;
            if let Some(id) = request.resume.clone() {
                inbox
                    .ask("writing the handoff", move |s| s.hand_off(to, &id))
                    .await?;
            }
            Some(request)
        };
        ctx.wait(written.into_actor(self).map(|request, act, ctx| {
            let attach = act.attach_command();
            let Some(request) = request else {
                return act.say(STORE_UNREADABLE);
            };
            let Some(id) = request.resume.clone() else {
                return act.say(handoff::nothing_yet(&attach));
            };
            tracing::info!(session = %id, "conversation handed off to the host");
            act.handed_off = Some(id);
            act.keep_while_handed_off(ctx);
            let own = act.turns.agent.backend.handoff(&request);
            act.say(handoff::handed_off(&attach, &own));
        }));
    }

    /// A message for a handed-off conversation: a schedule's run is
    /// skipped (its row dropped, the chat told), anything else takes the
    /// conversation back (the row goes, the chat is told first). Whether
    /// the message goes on to its turn.
    pub(super) fn takes_back(&mut self, msg: &UserMessage) -> bool {
        let Some(session) = &self.handed_off else {
            return true;
        };
        let update_id = msg.message.update_id;
        if msg.message.is_scheduled() {
            tracing::info!(
                update_id,
                "a schedule's run skipped: the conversation is handed off to the host"
            );
            self.inbox.dropped(vec![update_id]);
            self.say(handoff::SCHEDULE_SKIPPED);
            return false;
        }
        tracing::info!(update_id, session = %session, "conversation taken back from the host");
        let to = self.to;
        self.inbox.tell("taking the handoff back", move |s| {
            s.take_back(to).map(drop)
        });
        self.handed_off = None;
        self.say(handoff::TAKEN_BACK);
        true
    }
}

impl Handler<HandedOffBefore> for ChatSupervisor {
    type Result = ();

    fn handle(&mut self, HandedOffBefore(session): HandedOffBefore, ctx: &mut Self::Context) {
        self.touched(ctx);
        tracing::info!(session = %session, "the conversation is still handed off to the host");
        self.handed_off = Some(session);
        self.keep_while_handed_off(ctx);
    }
}

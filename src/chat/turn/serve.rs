//! How a turn serves the chat tools and gets its replies out: every text of
//! a turn leaves through one [`ReplyRelay`], which first records durably that
//! the turn's messages were replied to, then hands the texts to the outbox
//! in order. A `send` is answered when Telegram took its text, or shortly
//! after the text was accepted for delivery (kept in the state store and
//! handed to the outbox), whichever comes first: delivery goes on without
//! the turn, whatever Telegram does.

use actix::{AsyncContext, Context};
use tokio::sync::mpsc;
use tracing::Instrument as _;

use super::TurnActor;
use super::pending::{answer_when_delivered, answer_when_delivered_or_accepted};
use super::phase::TurnStep;
use super::watchdogs::TelegramAnswered;
use crate::agent::tools::{ChatTool, ToolInputError};
use crate::agent::{Responder, ToolCall, ToolReply};
use crate::chat::naming::TopicNaming;
use crate::chat::notices;
use crate::state::StoreHandle;
use crate::telegram::files::outgoing;
use crate::telegram::outbox::{Outbox, React, SendFile, SendText};

/// The way a turn's texts leave: opened at the first reply, it writes
/// "replied" for the turn's messages and only then forwards each text to the
/// outbox, in the order given. It outlives the turn actor, so nothing queued
/// is lost when the actor stops.
pub(super) struct ReplyRelay {
    /// Texts and files to forward, each with whom to tell once it is
    /// accepted for delivery; closed when the turn actor drops it.
    tx: mpsc::UnboundedSender<(Outgoing, Option<Accepted>)>,
    /// Counts what `tx` holds, for a stopping host.
    forwarding: Forwarding,
    /// Where each text is kept until Telegram takes it.
    inbox: StoreHandle,
}

/// How many texts and files the reply relays hold that have not reached
/// the outbox yet (each waits for its turn's "replied" write). A stopping
/// host waits for none to be left before it flushes the outbox, or a notice
/// queued as the turn ended could reach the outbox after the flush and be
/// refused by the stopped outbox.
pub type Forwarding = crate::in_flight::InFlight;

/// Told once a text is accepted for delivery: kept in the state store and
/// handed to the outbox.
pub(super) type Accepted = tokio::sync::oneshot::Sender<()>;

/// What a turn sends to its chat.
#[derive(Debug)]
pub(super) enum Outgoing {
    Text(SendText),
    File(SendFile),
    /// More of the turn's messages (steered in and read) are replied to
    /// from here on: written before anything after it goes out.
    Replied(Vec<i64>),
}

/// What the agent sent in a turn, against `turn.max_messages` and
/// `turn.max_output`.
#[derive(Debug, Default)]
pub(super) struct TurnOutput {
    messages: u32,
    bytes: u64,
    /// The chat was told about a limit (once a turn).
    told: bool,
}

/// What the limits make of one more message.
enum Allowance {
    /// It goes, whole.
    Whole,
    /// It goes cut to this many bytes.
    Cut(usize),
    /// It does not go; the agent is told why.
    Refused(String, String),
}

impl ReplyRelay {
    /// Opens the relay: the "replied" write is asked now. Its first text,
    /// once out, names the topic when `naming` is given and it waits for a
    /// name (`chat::naming`).
    pub(super) fn open(
        inbox: &StoreHandle,
        update_ids: Vec<i64>,
        outbox: actix::Addr<Outbox>,
        forwarding: Forwarding,
        mut naming: Option<TopicNaming>,
    ) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<(Outgoing, Option<Accepted>)>();
        let durable = inbox.replying(update_ids);
        let handed = forwarding.clone();
        let store = inbox.clone();
        let inbox = inbox.clone();
        actix::spawn(
            async move {
                durable.await;
                while let Some((out, accepted)) = rx.recv().await {
                    match out {
                        Outgoing::Text(mut send) => {
                            if let Some(naming) = naming.take() {
                                naming.watch(&mut send, &inbox, outbox.clone());
                            }
                            outbox.do_send(send);
                        }
                        Outgoing::File(send) => outbox.do_send(send),
                        Outgoing::Replied(rows) => inbox.replying(rows).await,
                    }
                    if let Some(accepted) = accepted {
                        // Its text was kept by a write asked before this:
                        // durable once the store is past it.
                        let flushed = inbox.flushed();
                        actix::spawn(async move {
                            flushed.await;
                            let _ = accepted.send(());
                        });
                    }
                    handed.done(1);
                }
            }
            .in_current_span(),
        );
        Self {
            tx,
            forwarding,
            inbox: store,
        }
    }

    /// Queues a text or file behind the "replied" write. A text or a file
    /// is kept in the state store now (a file's bytes in its spool), ahead
    /// of the turn's end, so a turn that counts as done has them kept.
    pub(super) fn send(&self, mut out: Outgoing, accepted: Option<Accepted>) {
        match &mut out {
            Outgoing::Text(send) => {
                send.kept = Some(self.inbox.keep_outgoing(
                    send.to,
                    send.reply_to.map(|m| m.0),
                    &send.text,
                    send.markdown,
                ));
            }
            Outgoing::File(send) => send.kept = send.keep_in(&self.inbox),
            Outgoing::Replied(_) => {}
        }
        self.forwarding.add(1);
        if let Err(mpsc::error::SendError((out, _))) = self.tx.send((out, accepted)) {
            self.forwarding.done(1);
            // Not reachable while the relay's task lives (it ends only after
            // the relay is dropped); fall back to dropping loudly.
            tracing::error!(?out, "reply relay closed; dropped");
        }
    }
}

/// What a turn has said to the chat. The relay opens (and "replied" is
/// recorded) at the first text; a text counts as delivered once Telegram
/// took it, or at once for a notice or the answer.
pub(super) enum Said {
    /// Nothing yet.
    Nothing,
    /// Texts queued on the relay; none delivered yet.
    Queued(ReplyRelay),
    /// A text reached the chat (or counts as if it had).
    Delivered(ReplyRelay),
}

impl Said {
    /// The relay, once opened.
    pub(super) fn relay(&mut self) -> Option<&mut ReplyRelay> {
        match self {
            Self::Nothing => None,
            Self::Queued(relay) | Self::Delivered(relay) => Some(relay),
        }
    }

    /// Whether the turn replied: a text was queued.
    pub(super) fn replied(&self) -> bool {
        !matches!(self, Self::Nothing)
    }

    /// Whether a text reached the chat.
    pub(super) fn delivered(&self) -> bool {
        matches!(self, Self::Delivered(_))
    }

    /// A text of the relay reached the chat.
    pub(super) fn delivered_now(&mut self) {
        if let Self::Queued(_) = self
            && let Self::Queued(relay) = std::mem::replace(self, Self::Nothing)
        {
            *self = Self::Delivered(relay);
        }
    }
}

impl TurnActor {
    /// Serves one call of a chat tool.
    pub(super) fn serve_tool(&mut self, call: ToolCall, ctx: &mut Context<Self>) {
        let ToolCall { id, call, reply } = call;
        if self.deps.books.shutdown.is_closing() {
            tracing::info!(call_id = %id, tool = %call.name, "tool call refused: the host is stopping");
            reply.answer(ToolReply::Refused("the host is stopping".into()));
            return;
        }
        if call.ends_turn {
            self.step(TurnStep::EndingCall);
        }
        let tool = match call.tool {
            Ok(tool) => tool,
            Err(err) => {
                if let ToolInputError::Unknown(_) = err {
                    tracing::warn!(call_id = %id, tool = %call.name, "unknown tool called");
                }
                reply.answer(ToolReply::Error(err.to_string()));
                return;
            }
        };
        let tool_name = tool.name();
        match tool {
            ChatTool::React { emoji } => self.react(id, emoji, reply, ctx),
            ChatTool::EndTurn { text: None } => {
                reply.answer(ToolReply::Ok(
                    "the turn will end once this batch is done".into(),
                ));
            }
            ChatTool::SendFile {
                path,
                caption,
                as_photo,
            } => self.send_file(id, &path, caption, as_photo, reply, ctx),
            ChatTool::Send { text } | ChatTool::EndTurn { text: Some(text) } => {
                self.send_text(id, tool_name, text, reply, ctx);
            }
            tool @ (ChatTool::Schedule { .. }
            | ChatTool::Unschedule { .. }
            | ChatTool::Schedules) => {
                let pending = self.pending_tool(id, tool_name, reply);
                self.schedule_tool(tool, pending, ctx);
            }
        }
    }

    /// `react`: the emoji on the user's last message.
    fn react(
        &mut self,
        id: String,
        emoji: String,
        reply: Responder<ToolReply>,
        ctx: &mut Context<Self>,
    ) {
        let chat = self.spec.to.chat;
        let tool_name = "react";
        let Some(message_id) = self.spec.reply_to else {
            reply.answer(ToolReply::Error(
                "there is no user message to react to".into(),
            ));
            return;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.deps.out.outbox.do_send(React {
            chat,
            message_id,
            emoji,
            reply: tx,
        });
        let pending = self.pending_tool(id, tool_name, reply);
        self.wait_for_telegram(ctx);
        let turn = ctx.address();
        actix::spawn(
            async move {
                let outcome = rx.await;
                turn.do_send(TelegramAnswered);
                let value = match outcome {
                    Ok(Ok(())) => ToolReply::Ok("reacted".into()),
                    Ok(Err(err)) => ToolReply::Error(err.to_string()),
                    Err(_) => ToolReply::Failed("the outbox has stopped".into()),
                };
                pending.done(&turn, value);
            }
            .in_current_span(),
        );
    }

    /// `send_file`: a file of the workdir, opened once, sent when the
    /// turn's limits allow one more message.
    fn send_file(
        &mut self,
        id: String,
        path: &str,
        caption: Option<String>,
        as_photo: bool,
        reply: Responder<ToolReply>,
        ctx: &mut Context<Self>,
    ) {
        let tool_name = "send_file";
        if self.root.is_none() {
            // Which directory is the conversation's: read first.
            let path = path.to_string();
            return self.find_root(ctx, move |act, ctx| {
                act.send_file(id, &path, caption, as_photo, reply, ctx);
            });
        }
        let workdir = self.workdir();
        let file = match outgoing(&workdir, path, as_photo) {
            Ok(file) => file,
            Err(why) => {
                tracing::warn!(call_id = %id, path = %path.escape_debug(), cause = %why, "send_file refused");
                reply.answer(ToolReply::Error(why));
                return;
            }
        };
        if let Allowance::Refused(why, notice) = self.allowance(0) {
            self.tell_limit(notice);
            reply.answer(ToolReply::Error(why));
            return;
        }
        let (send, rx) = SendFile::new(self.to(), file, caption, as_photo);
        self.reply(Outgoing::File(send));
        let pending = self.pending_tool(id, tool_name, reply);
        self.wait_for_telegram(ctx);
        answer_when_delivered(rx, pending, ctx.address(), |_| "the file was sent".into());
    }

    /// `send` (or `end_turn` with a text): the text, cut at the turn's
    /// output limit, into the preview's slot when there is one.
    fn send_text(
        &mut self,
        id: String,
        tool_name: &'static str,
        text: String,
        reply: Responder<ToolReply>,
        ctx: &mut Context<Self>,
    ) {
        let (text, cut) = match self.allowance(text.len()) {
            Allowance::Refused(why, notice) => {
                self.tell_limit(notice);
                reply.answer(ToolReply::Error(why));
                return;
            }
            Allowance::Whole => (text, None),
            Allowance::Cut(keep) => {
                let mut end = keep.saturating_sub(notices::CUT_MARK.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                (format!("{}{}", &text[..end], notices::CUT_MARK), Some(end))
            }
        };
        let into = self.view.take_preview();
        let (send, delivered) = SendText::tracked(self.to(), text);
        let (accepted, on_accepted) = tokio::sync::oneshot::channel();
        self.reply_with(
            Outgoing::Text(send.markdown().into_slot(into)),
            Some(accepted),
        );
        if cut.is_some() {
            self.tell_limit(notices::too_much_output(self.deps.agent.config.max_output));
        }
        let pending = self.pending_tool(id, tool_name, reply);
        self.wait_for_telegram(ctx);
        let turn = ctx.address();
        answer_when_delivered_or_accepted((delivered, on_accepted), pending, turn, cut);
    }

    /// Queues a text for the chat through the turn's reply relay (opening it,
    /// and so recording "replied", at the first text).
    pub(super) fn reply(&mut self, out: Outgoing) {
        self.reply_with(out, None);
    }

    /// As [`TurnActor::reply`], telling `accepted` once the text is
    /// accepted for delivery.
    fn reply_with(&mut self, mut out: Outgoing, accepted: Option<Accepted>) {
        match &mut out {
            Outgoing::Text(send) => {
                if self.said.relay().is_none() {
                    // The turn's first message answers the one that started it.
                    send.reply_to = self.spec.answer_to;
                }
                send.turn = Some(self.spec.turn);
            }
            Outgoing::File(send) => send.turn = Some(self.spec.turn),
            Outgoing::Replied(_) => {}
        }
        let read = std::mem::take(&mut self.steering.unmarked);
        let relay_was_new = self.said.relay().is_none();
        if relay_was_new {
            self.spec.update_ids.extend(read.iter().copied());
            self.said = Said::Queued(ReplyRelay::open(
                &self.deps.books.inbox,
                self.spec.update_ids.clone(),
                self.deps.out.outbox.clone(),
                self.deps.out.forwarding.clone(),
                TopicNaming::of(self.spec.to, &self.spec.text),
            ));
        }
        let Some(relay) = self.said.relay() else {
            return;
        };
        if !read.is_empty() && !relay_was_new {
            relay.send(Outgoing::Replied(read), None);
        }
        relay.send(out, accepted);
    }

    /// Queues an untracked notice; it counts as delivered at once.
    pub(super) fn deliver(&mut self, text: String) {
        self.reply(Outgoing::Text(SendText::new(self.to(), text)));
        self.said.delivered_now();
    }

    /// Queues the agent's result text (Markdown, in place of its preview),
    /// within the turn's limits; it counts as delivered at once.
    pub(super) fn deliver_answer(&mut self, text: String) {
        let text = match self.allowance(text.len()) {
            Allowance::Refused(_, notice) => return self.tell_limit(notice),
            Allowance::Whole => text,
            Allowance::Cut(keep) => {
                let mut end = keep.saturating_sub(notices::CUT_MARK.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                format!("{}{}", &text[..end], notices::CUT_MARK)
            }
        };
        let into = self.view.take_preview();
        let send = SendText::new(self.to(), text).markdown().into_slot(into);
        self.reply(Outgoing::Text(send));
        self.said.delivered_now();
    }

    /// Counts one more message of `len` bytes against the turn's limits.
    fn allowance(&mut self, len: usize) -> Allowance {
        let config = &self.deps.agent.config;
        if self.output.messages >= config.max_messages {
            return Allowance::Refused(
                notices::messages_refused(config.max_messages),
                notices::too_many_messages(config.max_messages),
            );
        }
        let left = config.max_output.saturating_sub(self.output.bytes);
        if len > 0 && left == 0 {
            return Allowance::Refused(
                notices::output_refused(config.max_output),
                notices::too_much_output(config.max_output),
            );
        }
        self.output.messages += 1;
        let len = len as u64;
        if len <= left {
            self.output.bytes += len;
            return Allowance::Whole;
        }
        self.output.bytes = config.max_output;
        Allowance::Cut(usize::try_from(left).unwrap_or(usize::MAX))
    }

    /// Tells the chat, once a turn, that a limit was reached.
    fn tell_limit(&mut self, notice: String) {
        if std::mem::replace(&mut self.output.told, true) {
            return;
        }
        tracing::warn!(notice = %notice, "the agent reached a limit of the turn");
        self.reply(Outgoing::Text(SendText::new(self.to(), notice)));
    }
}

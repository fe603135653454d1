//! Dispatcher: checks access, handles commands, and routes chat messages to
//! each chat's [`ChatSupervisor`], starting one on demand and retiring one
//! that reports itself idle. It owns the [`TurnSlots`] that cap concurrent
//! turns; each chat runs its own hard deadline.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use actix::{Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, WrapFuture};
use teloxide::types::{CallbackQuery, ChatId, MessageId, UpdateKind, UserId};
use tokio::sync::{Semaphore, mpsc};

use crate::chat::commands::{self, Abilities, Command, Parsed, Who};
use crate::chat::notices::{bounded, counted, not_accepted};
use crate::chat::slots::TurnSlots;
use crate::chat::supervisor::{
    ChatReport, ChatSettings, ChatSupervisor, DescribeChat, NewSession, RetireChat, StopChat,
    StopChatForHost, UserMessage,
};
use crate::chat::turn::{ButtonPressed, TurnDeps, describe_rule};
use crate::config::{AccessConfig, DispatcherConfig, GroupMode};
use crate::events::{BotEvent, EventBus};
use crate::ids::Conversation;
use crate::ops::panics::contain;
use crate::state::{InboxRow, InboxState, now_ms};
use crate::telegram::addressing::strip_address;
use crate::telegram::files::attachments;
use crate::telegram::intake::UpdateReceived;
use crate::telegram::outbox::{AnswerCallback, SendText};

/// The longest text handed to an agent; longer input is cut (Telegram itself
/// caps messages at 4096 characters).
const MAX_INPUT_CHARS: usize = 16_384;

/// The host is stopping: no new turns; with `end_running`, running ones end
/// with `HostStopping`. Answers how many chats hold a turn.
#[derive(Message, Debug)]
#[rtype(result = "usize")]
pub struct StopDispatching {
    /// End the running turns now (the drain is over).
    pub end_running: bool,
}

/// What the dispatcher asks of the host process.
#[derive(Debug, Clone, PartialEq)]
pub enum HostRequest {
    /// `/restart`: drain, then re-execute; tell `chat` once back.
    Restart {
        /// Where the command came from.
        chat: ChatId,
    },
}

/// How many turns are running now.
#[derive(Message, Debug)]
#[rtype(result = "usize")]
pub struct RunningTurns;

/// What the dispatcher hands a chat's supervisor.
#[derive(Debug)]
enum ForChat {
    Message(UserMessage),
    Stop,
    New,
    Press(ButtonPressed),
}

/// A chat the dispatcher routes to.
struct ChatEntry {
    /// The chat's supervisor.
    addr: actix::Addr<ChatSupervisor>,
    /// Items routed to it: it is retired only when it reports idle having
    /// received all of them, so nothing lands in a stopping mailbox.
    routed: u64,
}

/// The actor.
pub struct Dispatcher {
    /// What turns need.
    deps: TurnDeps,
    /// Who may talk to the bot.
    access: AccessConfig,
    /// Queueing and concurrency.
    config: DispatcherConfig,
    /// The cap on concurrent turns.
    slots: TurnSlots,
    /// Numbers turns.
    next_turn: Arc<AtomicU64>,
    /// Live conversations (chats, and forum topics of chats).
    chats: HashMap<Conversation, ChatEntry>,
    /// The bot's username, stripped from the front of messages.
    username: String,
    /// When each refused user was last told so.
    refused: HashMap<UserId, Instant>,
    /// When each stranger's button press was last answered: at most once
    /// per `access.refusal_cooldown`, so presses cost Telegram nothing.
    refused_presses: HashMap<UserId, Instant>,
    /// No new turns once set.
    stopping: bool,
    /// `agent.keep_warm`, handed to each supervisor.
    keep_warm: Duration,
    /// `agent.max_warm` slots, shared by every supervisor.
    warm_slots: Arc<Semaphore>,
    /// Where `/restart` goes.
    host: mpsc::UnboundedSender<HostRequest>,
    /// This process's start (unix seconds): older `/restart`s are ignored.
    started_at: i64,
    /// Where it reports.
    events: EventBus,
}

impl Dispatcher {
    /// A dispatcher.
    pub fn new(
        deps: TurnDeps,
        access: AccessConfig,
        config: DispatcherConfig,
        (keep_warm, max_warm): (Duration, usize),
        host: mpsc::UnboundedSender<HostRequest>,
        slots: TurnSlots,
        username: String,
    ) -> Self {
        let events = deps.events.clone();
        let warm_slots = Arc::new(Semaphore::new(max_warm));
        events
            .metrics()
            .watch_warm(Arc::clone(&warm_slots), max_warm);
        Self {
            deps,
            access,
            config,
            slots,
            next_turn: Arc::new(AtomicU64::new(0)),
            chats: HashMap::new(),
            username,
            refused: HashMap::new(),
            refused_presses: HashMap::new(),
            stopping: false,
            keep_warm,
            warm_slots,
            host,
            started_at: now_ms() / 1000,
            events,
        }
    }

    fn say(&self, to: Conversation, text: impl Into<String>) {
        self.deps.outbox.do_send(SendText::new(to, text));
    }

    fn is_admin(&self, user: UserId) -> bool {
        self.access.is_admin(user.0)
    }

    /// Whether everyone in `chat` may talk to the bot (`access.allowed_chats`).
    fn is_allowed_chat(&self, chat: ChatId) -> bool {
        self.access.is_allowed_chat(chat.0)
    }

    fn is_allowed(&self, user: UserId) -> bool {
        self.access.is_allowed(user.0)
    }

    fn supervisor(&mut self, chat: Conversation, ctx: &mut Context<Self>) -> &mut ChatEntry {
        let deps = self.deps.clone();
        let settings = ChatSettings {
            merge_window: self.config.merge_window,
            queue_limit: self.config.queue_limit,
            idle_eviction: self.config.idle_eviction,
            keep_warm: self.keep_warm,
            warm_slots: Arc::clone(&self.warm_slots),
        };
        let slots = self.slots.clone();
        let next_turn = Arc::clone(&self.next_turn);
        let me = ctx.address().recipient();
        self.chats.entry(chat).or_insert_with(|| ChatEntry {
            addr: ChatSupervisor::new(chat, deps, settings, me, slots, next_turn).start(),
            routed: 0,
        })
    }

    fn route(&mut self, chat: Conversation, msg: UserMessage, ctx: &mut Context<Self>) {
        self.deliver(chat, ForChat::Message(msg), ctx);
    }

    /// Hands something to the chat's supervisor, counting it.
    fn deliver(&mut self, chat: Conversation, item: ForChat, ctx: &mut Context<Self>) {
        let entry = self.supervisor(chat, ctx);
        entry.routed += 1;
        match item {
            ForChat::Message(msg) => entry.addr.do_send(msg),
            ForChat::Stop => entry.addr.do_send(StopChat),
            ForChat::New => entry.addr.do_send(NewSession),
            ForChat::Press(press) => entry.addr.do_send(press),
        }
    }

    /// A stranger's message: logged, and once per cooldown answered with
    /// their user id (in a group, as a reply to their message, so the id is
    /// plainly theirs).
    fn refuse(&mut self, to: Conversation, user: UserId, reply_to: Option<MessageId>) {
        let chat = to.chat;
        tracing::warn!(
            user_id = user.0,
            chat_id = chat.0,
            "message from a user not on the allowlist refused"
        );
        self.events.publish(BotEvent::AccessDenied { chat, user });
        if due(&mut self.refused, user, self.access.refusal_cooldown) {
            self.deps
                .outbox
                .do_send(SendText::new(to, refusal(user)).replying_to(reply_to));
        }
    }

    /// A command this bot knows, from `user` (admins' commands refused to
    /// everyone else).
    fn command(
        &mut self,
        chat: Conversation,
        user: UserId,
        (command, args): (Command, &str),
        asked: Asked,
        ctx: &mut Context<Self>,
    ) {
        let Asked { date, private } = asked;
        let admin = self.is_admin(user);
        if command.who() == Who::Admins && !admin {
            self.say(chat, format!("Only admins can use /{}.", command.word()));
            return;
        }
        match command {
            Command::Permissions => self.permissions(chat, args, ctx),
            Command::Stop if self.chats.contains_key(&chat) => {
                self.deliver(chat, ForChat::Stop, ctx);
            }
            Command::Stop => self.say(chat, "Nothing to stop."),
            Command::New => self.deliver(chat, ForChat::New, ctx),
            Command::Status => self.status(chat, private, ctx),
            Command::Restart => self.restart(chat, user, date),
            Command::Start => self.say(chat, commands::greeting(admin, &self.abilities(private))),
            Command::Help => self.say(chat, commands::help(admin, &self.abilities(private))),
        }
    }

    /// What the bot takes in a private chat or a group, for `/start` and `/help`.
    fn abilities(&self, private: bool) -> Abilities {
        let policy = self.deps.files.policy();
        Abilities {
            max_download: policy.max_download,
            transcribes: !policy.transcribe.is_empty(),
            mention_in_group: (!private && self.access.group_mode == GroupMode::Mention)
                .then(|| self.username.clone()),
        }
    }

    /// `/permissions`: the tools that run without asking in this chat;
    /// `/permissions clear` forgets them.
    fn permissions(&mut self, to: Conversation, args: &str, ctx: &mut Context<Self>) {
        let chat = to.chat;
        let outbox = self.deps.outbox.clone();
        if args.eq_ignore_ascii_case("clear") {
            let cleared = self.deps.inbox.clear_always(chat);
            ctx.spawn(
                async move {
                    let text = match cleared.await {
                        Some(0) => "No tool was allowed without asking in this chat.".to_string(),
                        Some(n) => format!(
                            "🔐 Forgot {}; every tool asks again.",
                            counted(n, "tool approval", "tool approvals")
                        ),
                        None => "⚠️ The approvals could not be cleared; try again.".to_string(),
                    };
                    outbox.do_send(SendText::new(to, text));
                }
                .into_actor(self),
            );
            return;
        }
        let rules = self.deps.inbox.always_rules(chat);
        ctx.spawn(
            async move {
                let rules = rules.await;
                let text = if rules.is_empty() {
                    "Every tool asks before it runs in this chat.".to_string()
                } else {
                    format!(
                        "🔐 These run without asking in this chat:\n{}\n/permissions clear forgets them.",
                        rules
                            .iter()
                            .map(|grant| format!("• {}", describe_rule(&grant.rule)))
                            .collect::<Vec<_>>()
                            .join("\n")
                    )
                };
                outbox.do_send(SendText::new(to, text));
            }
            .into_actor(self),
        );
    }

    /// A button pressed under one of the bot's questions: checked against
    /// the allowlist, then routed to the chat that asked; anything else is
    /// answered "expired" at once.
    fn button(&mut self, query: CallbackQuery, ctx: &mut Context<Self>) {
        let user = query.from.id;
        let to = press_conversation(&query);
        let chat = to.chat;
        let answer = |act: &Self, text: &str| {
            act.deps.outbox.do_send(AnswerCallback {
                chat,
                id: query.id.to_string(),
                text: text.to_string(),
                alert: false,
            });
        };
        if !self.is_allowed(user) && !self.is_allowed_chat(chat) {
            self.events.publish(BotEvent::AccessDenied { chat, user });
            if !due(
                &mut self.refused_presses,
                user,
                self.access.refusal_cooldown,
            ) {
                tracing::debug!(
                    user_id = user.0,
                    chat_id = chat.0,
                    "button press from a user not on the allowlist ignored (refused lately)"
                );
                return;
            }
            tracing::warn!(
                user_id = user.0,
                chat_id = chat.0,
                "button press from a user not on the allowlist refused"
            );
            return answer(
                self,
                "Sorry, this bot only answers the people it was set up for.",
            );
        }
        let name = query
            .from
            .username
            .clone()
            .map_or_else(|| query.from.first_name.clone(), |u| format!("@{u}"));
        let press = query.data.as_deref().and_then(|data| {
            ButtonPressed::parse(
                data,
                chat,
                user,
                name,
                self.is_admin(user),
                query.id.to_string(),
            )
        });
        match (press, self.chats.contains_key(&to)) {
            (Some(press), true) => self.deliver(to, ForChat::Press(press), ctx),
            _ => answer(self, "This question has expired."),
        }
    }

    /// `/restart` from an admin: ignored when older than this process,
    /// otherwise told and handed to the host, which drains and re-executes.
    fn restart(&mut self, to: Conversation, user: UserId, date: i64) {
        let chat = to.chat;
        if date < self.started_at {
            tracing::warn!(
                chat_id = chat.0,
                user_id = user.0,
                date,
                started_at = self.started_at,
                "/restart older than this process ignored"
            );
            return;
        }
        if self.stopping {
            self.say(to, "Already stopping.");
            return;
        }
        let running = self.slots.running();
        tracing::warn!(
            chat_id = chat.0,
            user_id = user.0,
            running,
            "/restart requested"
        );
        self.say(
            to,
            if running == 0 {
                "🔄 Restarting.".to_string()
            } else {
                format!(
                    "🔄 Restarting; waiting for {} first.",
                    counted(running, "running turn", "running turns")
                )
            },
        );
        if self.host.send(HostRequest::Restart { chat }).is_err() {
            tracing::error!("no host is listening for /restart");
        }
    }

    /// `/status`: every chat for an admin in a private chat with the bot;
    /// in a group (even for an admin) only that chat, so no other chat's id
    /// is shown to the group's members.
    fn status(&mut self, chat: Conversation, private: bool, ctx: &mut Context<Self>) {
        let header = if private {
            commands::status_header(self.chats.len(), self.slots.running(), self.slots.free())
        } else {
            "This chat only (ask in a private chat with the bot for all chats).".to_owned()
        };
        let asks: Vec<_> = self
            .chats
            .iter()
            .filter(|(id, _)| private || id.chat == chat.chat)
            .map(|(_, e)| e.addr.send(DescribeChat))
            .collect();
        let outbox = self.deps.outbox.clone();
        ctx.spawn(
            async move {
                let lines = futures_util::future::join_all(asks).await;
                let mut text = header;
                for line in lines.into_iter().flatten() {
                    text.push('\n');
                    text.push_str(&line);
                }
                outbox.do_send(SendText::new(chat, text));
            }
            .into_actor(self),
        );
    }
}

/// What a stranger is told: that the bot is not for them, and their user
/// id, which the operator adds to `access.allowed_users` to let them in.
fn refusal(user: UserId) -> String {
    format!(
        "Sorry, this bot only answers the people it was set up for. Your Telegram user id is {}; to be let in, ask the bot's operator to add it to access.allowed_users.",
        user.0
    )
}

/// Whether `user` is due a refusal now: none within `cooldown`. Notes it
/// when so, and forgets entries past the cooldown.
fn due(refused: &mut HashMap<UserId, Instant>, user: UserId, cooldown: Duration) -> bool {
    let now = Instant::now();
    let due = refused
        .get(&user)
        .is_none_or(|at| now.duration_since(*at) >= cooldown);
    if due {
        refused.retain(|_, at| now.duration_since(*at) < cooldown);
        refused.insert(user, now);
    }
    due
}

/// Who asked a command, and where.
#[derive(Debug, Clone, Copy)]
struct Asked {
    /// Telegram's date of the message (unix seconds).
    date: i64,
    /// Whether it came from a private chat with the bot.
    private: bool,
}

impl Actor for Dispatcher {
    type Context = Context<Self>;
}

impl Handler<UpdateReceived> for Dispatcher {
    type Result = ();

    /// One update; should handling it panic, it is dropped with an ERROR
    /// log and the next one is handled as usual.
    fn handle(&mut self, UpdateReceived(update): UpdateReceived, ctx: &mut Self::Context) {
        let update_id = i64::from(update.id.0);
        if let Err(panic) = contain(|| self.update(update, ctx)) {
            tracing::error!(update_id, %panic, "handling the update panicked; dropped");
            self.deps.inbox.dropped(vec![update_id]);
        }
    }
}

impl Dispatcher {
    /// Checks, answers or routes one update.
    fn update(&mut self, update: teloxide::types::Update, ctx: &mut Context<Self>) {
        let update_id = i64::from(update.id.0);
        let message = match update.kind {
            UpdateKind::Message(message) => message,
            UpdateKind::CallbackQuery(query) => return self.button(query, ctx),
            UpdateKind::Error(raw) => {
                let shown: String = raw.to_string().chars().take(200).collect();
                tracing::warn!(update_id, raw = %shown, "update could not be parsed; skipped");
                return;
            }
            other => {
                tracing::debug!(update_id, kind = ?std::mem::discriminant(&other), "update kind not handled; skipped");
                return;
            }
        };
        let chat = message.chat.id;
        let topic = message.thread_id.filter(|_| message.is_topic_message);
        let to = Conversation::new(chat, topic);
        let in_group = message.chat.is_group() || message.chat.is_supergroup();
        let inbox = self.deps.inbox.clone();
        let done = move |state: InboxState| match state {
            InboxState::Dropped => inbox.dropped(vec![update_id]),
            _ => inbox.handled(update_id),
        };
        let Some(user) = message.from.as_ref().map(|u| u.id) else {
            tracing::debug!(
                update_id,
                chat_id = chat.0,
                "message without a sender; skipped"
            );
            done(InboxState::Done);
            return;
        };
        let files = attachments(&message);
        let Some(text) = message
            .text()
            .or(message.caption())
            .or(if files.is_empty() { None } else { Some("") })
        else {
            tracing::debug!(
                update_id,
                chat_id = chat.0,
                "message without text or files; skipped"
            );
            done(InboxState::Done);
            return;
        };
        if !self.is_allowed(user) && !self.is_allowed_chat(chat) {
            done(InboxState::Dropped);
            self.refuse(to, user, in_group.then_some(message.id));
            return;
        }
        let text = strip_address(text, &self.username);
        let text = text.trim();
        if text.is_empty() && files.is_empty() {
            tracing::debug!(update_id, chat_id = chat.0, "empty message; skipped");
            done(InboxState::Done);
            return;
        }
        match commands::parse(text, &self.username) {
            Parsed::Text => {}
            Parsed::Known(command, args) => {
                let asked = Asked {
                    date: message.date.timestamp(),
                    private: message.chat.is_private(),
                };
                self.command(to, user, (command, args), asked, ctx);
                done(InboxState::Done);
                return;
            }
            Parsed::Unknown(word) => {
                tracing::debug!(update_id, chat_id = chat.0, command = %word, "unknown command answered with a pointer to /help");
                self.say(to, commands::unknown(&word));
                done(InboxState::Done);
                return;
            }
            Parsed::ForAnotherBot => {
                tracing::debug!(
                    update_id,
                    chat_id = chat.0,
                    "command for another bot; skipped"
                );
                done(InboxState::Done);
                return;
            }
        }
        if self.stopping {
            done(InboxState::Dropped);
            self.say(to, not_accepted(self.deps.shutdown.is_restarting()));
            return;
        }
        let mut text = text.to_string();
        if text.chars().count() > MAX_INPUT_CHARS {
            tracing::warn!(
                update_id,
                chat_id = chat.0,
                "message cut to {MAX_INPUT_CHARS} characters"
            );
            text = text.chars().take(MAX_INPUT_CHARS).collect();
        }
        let msg = UserMessage {
            text,
            message_id: message.id,
            update_id,
            from: user,
            at: Instant::now(),
            files,
            album: message.media_group_id().map(|g| g.0.clone()),
            in_group,
        };
        self.route(to, msg, ctx);
    }
}

/// Sent once at start, before any update: the inbox rows a previous
/// process left (read on the store thread before the intake wrote anything).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Recover(pub std::pin::Pin<Box<dyn std::future::Future<Output = Vec<InboxRow>> + Send>>);

impl Handler<Recover> for Dispatcher {
    type Result = ();

    fn handle(&mut self, Recover(rows): Recover, ctx: &mut Self::Context) {
        // Nothing else is handled until the rows are routed, so a new message
        // never overtakes a recovered one.
        ctx.wait(
            rows.into_actor(self)
                .map(|rows, act, ctx| act.recover(rows, ctx)),
        );
    }
}

impl Dispatcher {
    fn recover(&mut self, rows: Vec<InboxRow>, ctx: &mut Context<Self>) {
        let (mut requeued, mut retried, mut reported) = (0, 0, 0);
        let mut refused = 0;
        for row in rows {
            let m = row.message;
            let to = m.conversation();
            let chat = to.chat;
            let sender = u64::try_from(m.user_id).ok().map(UserId);
            if !sender.is_some_and(|user| self.is_allowed(user)) && !self.is_allowed_chat(chat) {
                // Allowed when it was accepted, not any more: it never reaches an agent.
                refused += 1;
                tracing::warn!(
                    update_id = m.update_id,
                    chat_id = chat.0,
                    user_id = m.user_id,
                    "recovered message from a user no longer on the allowlist; dropped"
                );
                self.deps.inbox.dropped(vec![m.update_id]);
                continue;
            }
            let retry = match row.state {
                InboxState::Queued => {
                    requeued += 1;
                    true
                }
                InboxState::Running if self.deps.retry_interrupted => {
                    retried += 1;
                    true
                }
                _ => false,
            };
            if retry {
                let msg = UserMessage {
                    text: m.text,
                    message_id: teloxide::types::MessageId(
                        i32::try_from(m.message_id).unwrap_or(0),
                    ),
                    update_id: m.update_id,
                    from: sender.unwrap_or(UserId(0)),
                    at: Instant::now(),
                    files: m.files,
                    album: None,
                    // Group and supergroup ids are negative.
                    in_group: chat.0 < 0,
                };
                self.route(to, msg, ctx);
                continue;
            }
            reported += 1;
            let excerpt = bounded(&m.text, 80);
            let text = if row.state == InboxState::Replied {
                format!(
                    "⚠️ turnstile restarted while answering “{excerpt}”; the answer above may be incomplete. Send it again if you need more."
                )
            } else {
                format!(
                    "⚠️ turnstile restarted before it could answer “{excerpt}”. Send it again if you still need an answer."
                )
            };
            self.say(to, text);
            self.deps.inbox.reported(m.update_id);
        }
        if requeued + retried + reported + refused > 0 {
            tracing::info!(
                requeued,
                retried,
                reported,
                refused,
                "recovered the inbox of the previous process"
            );
        }
    }
}

impl Handler<ChatReport> for Dispatcher {
    type Result = ();

    fn handle(&mut self, report: ChatReport, _ctx: &mut Self::Context) {
        match report {
            ChatReport::Idle { chat, received } => {
                let Some(entry) = self.chats.get(&chat) else {
                    return;
                };
                if entry.routed != received {
                    // Something is on its way to it: it is not idle.
                    return;
                }
                if let Some(entry) = self.chats.remove(&chat) {
                    tracing::debug!(chat = %chat, "idle chat evicted");
                    entry.addr.do_send(RetireChat);
                }
            }
        }
    }
}

impl Handler<StopDispatching> for Dispatcher {
    type Result = usize;

    fn handle(&mut self, msg: StopDispatching, _ctx: &mut Self::Context) -> usize {
        self.stopping = true;
        self.slots.close();
        for entry in self.chats.values() {
            entry.addr.do_send(StopChatForHost {
                end_running: msg.end_running,
            });
        }
        self.slots.running()
    }
}

impl Handler<RunningTurns> for Dispatcher {
    type Result = usize;

    fn handle(&mut self, _msg: RunningTurns, _ctx: &mut Self::Context) -> usize {
        self.slots.running()
    }
}

/// The conversation a button press belongs to: the question's chat and
/// topic (a press without its message: the presser's private chat).
pub(crate) fn press_conversation(query: &CallbackQuery) -> Conversation {
    let chat = query
        .message
        .as_ref()
        .map(|m| m.chat().id)
        .unwrap_or(ChatId(i64::try_from(query.from.id.0).unwrap_or(0)));
    let topic = query
        .message
        .as_ref()
        .and_then(|m| m.regular_message())
        .filter(|m| m.is_topic_message)
        .and_then(|m| m.thread_id);
    Conversation::new(chat, topic)
}

//! Dispatcher: takes each message as the intake read it ([`Incoming`]),
//! checks access, answers commands (`commands.rs`), and routes text to each
//! conversation's [`ChatSupervisor`], starting one on demand and retiring
//! one that reports itself idle; at start it recovers the inbox
//! (`recovery.rs`). It owns the [`TurnSlots`] that cap concurrent turns;
//! each chat runs its own hard deadline.

mod commands;
mod handoff;
mod menus;
mod messages;
mod prewarm;
mod recovery;
mod schedules;
mod topics;
mod typed;

pub use recovery::Recover;
pub use typed::{TerminalAnswer, Typed};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Addr, AsyncContext, Context, Handler, Message};
use teloxide::types::{ChatId, UserId};
use tokio::sync::{Semaphore, mpsc};

use crate::chat::notices;
use crate::chat::slots::TurnSlots;
use crate::chat::supervisor::{
    ChatCommand, ChatReport, ChatSettings, ChatSupervisor, DeliveryEnd, RetireChat,
    StopChatForHost, UserMessage,
};
use crate::chat::turn::{ButtonPressed, TurnServices};
use crate::config::{AccessConfig, DispatcherConfig};
use crate::events::{BotEvent, EventBus};
use crate::ids::{Conversation, Topics};
use crate::incoming::{Callback, Incoming, Press};
use crate::ops::logging::StartInSpan;
use crate::ops::panics::contain;
use crate::schedule::RunDue;
use crate::shutdown::Shutdown;
use crate::state::{StoreHandle, TurnIds, now_ms};
use crate::telegram::addressing::BotIdentity;
use crate::telegram::files::Files;
use crate::telegram::intake::UpdateReceived;
use crate::telegram::outbox::{AnswerCallback, Outbox, Polled, Seen, SendText, Unbutton};

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
    /// `/restart`: drain, then re-execute; tell `to` once back.
    Restart {
        /// Where the command came from: the chat, and its topic.
        to: Conversation,
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
    /// `/stop`, `/new` or `/handoff`.
    Command(ChatCommand),
    Press(ButtonPressed),
    /// The delivery its last messages came in is whole.
    DeliveryEnd,
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
    /// What turns use, handed to each chat for its turns.
    turns: Arc<TurnServices>,
    /// The way out to Telegram.
    outbox: Addr<Outbox>,
    /// The inbox, and each conversation's choices.
    inbox: StoreHandle,
    /// Whether the host is stopping or restarting.
    shutdown: Shutdown,
    /// Fetches the files users send (its policy, for `/files`).
    files: Files,
    /// The models and projects a conversation may choose.
    choices: Arc<crate::chat::menus::Choices>,
    /// The conversations' schedules.
    schedules: crate::schedule::ScheduleBook,
    /// `dispatcher.on_interrupted == "retry"`.
    retry_interrupted: bool,
    /// Settings each chat gets, the same for all.
    chat_settings: ChatSettings,
    /// Who may talk to the bot.
    access: AccessConfig,
    /// The cap on concurrent turns.
    slots: TurnSlots,
    /// Numbers turns, on from the previous processes' ids.
    turn_ids: Arc<TurnIds>,
    /// Live conversations (chats, and forum topics of chats).
    chats: HashMap<Conversation, ChatEntry>,
    /// The bot's username, stripped from the front of messages.
    username: String,
    /// Which topics are conversations: with private chats' on, `/new` and
    /// `/fork` in a private chat open a topic.
    topics: Topics,
    /// When each refused user was last told so.
    refused: HashMap<UserId, Instant>,
    /// When each stranger's button press was last answered: at most once
    /// per `access.refusal_cooldown`, so presses cost Telegram nothing.
    refused_presses: HashMap<UserId, Instant>,
    /// No new turns once set.
    stopping: bool,
    /// Where `/restart` goes.
    host: mpsc::UnboundedSender<HostRequest>,
    /// This process's start (unix seconds): older `/restart`s are ignored.
    started_at: i64,
    /// The live `/model` and `/sessions` lists (a press on another expired).
    lists: crate::chat::menus::Lists,
    /// Where it reports.
    events: EventBus,
    /// Set while a message of the intake's current delivery is handled.
    in_delivery: bool,
    /// Conversations routed a message of the current delivery: each gets
    /// [`DeliveryEnd`] when the delivery is whole.
    delivery: Vec<Conversation>,
    /// Numbers the intake's deliveries.
    deliveries: u64,
    /// Conversations whose `/new` waits for its topic: what came for them
    /// meanwhile (not presses), held until Telegram answers.
    opening: HashMap<Conversation, Vec<ForChat>>,
}

/// What a dispatcher starts from, beside what its chats' turns use: its
/// settings, the cap on turns and their numbering, and who to ask for a
/// restart.
pub struct DispatcherStart {
    /// `[access]`.
    pub access: AccessConfig,
    /// `[dispatcher]`.
    pub config: DispatcherConfig,
    /// `agent.keep_warm`.
    pub keep_warm: Duration,
    /// `agent.max_warm`.
    pub max_warm: usize,
    /// `agent.limit_retry_max`: the longest wait before a turn refused for
    /// a usage limit runs again (the chats' setting; a turn does not read it).
    pub limit_retry_max: Duration,
    /// Where `/restart` goes.
    pub host: mpsc::UnboundedSender<HostRequest>,
    /// The cap on concurrent turns, shared with the stop's drain.
    pub slots: TurnSlots,
    /// Numbers turns, on from the previous processes' ids.
    pub turn_ids: Arc<TurnIds>,
    /// Who the bot is: its username (`/cmd@Bot`) and whether it has
    /// topics in private chats.
    pub me: BotIdentity,
}

impl Dispatcher {
    /// A dispatcher; its chats' turns use `turns`.
    pub fn new(turns: TurnServices, start: DispatcherStart) -> Self {
        let DispatcherStart {
            access,
            config,
            keep_warm,
            max_warm,
            limit_retry_max,
            host,
            slots,
            turn_ids,
            me,
        } = start;
        let events = turns.books.events.clone();
        let warm_slots = Arc::new(Semaphore::new(max_warm));
        events
            .metrics()
            .watch_warm(Arc::clone(&warm_slots), max_warm);
        let chat_settings = ChatSettings {
            merge_window: config.merge_window,
            queue_limit: config.queue_limit,
            idle_eviction: config.idle_eviction,
            keep_warm,
            steer: config.busy == crate::config::Busy::Steer && turns.agent.backend.steers(),
            warm_slots,
            hard_deadline: turns.agent.config.hard_deadline,
            typing_interval: turns.agent.config.typing_interval,
            no_progress_timeout: turns.agent.config.no_progress_timeout,
            retry_interrupted: turns.agent.retry_interrupted,
            limit_retry: turns.agent.limit_retry,
            limit_retry_max,
        };
        Self {
            outbox: turns.out.outbox.clone(),
            inbox: turns.books.inbox.clone(),
            shutdown: turns.books.shutdown.clone(),
            files: turns.files.clone(),
            choices: Arc::clone(&turns.agent.choices),
            schedules: turns.schedules.clone(),
            retry_interrupted: turns.agent.retry_interrupted,
            chat_settings,
            turns: Arc::new(turns),
            access,
            slots,
            turn_ids,
            chats: HashMap::new(),
            username: me.username,
            topics: me.topics,
            in_delivery: false,
            delivery: Vec::new(),
            deliveries: 0,
            refused: HashMap::new(),
            refused_presses: HashMap::new(),
            stopping: false,
            host,
            started_at: now_ms() / 1000,
            lists: Default::default(),
            opening: HashMap::new(),
            events,
        }
    }

    fn say(&self, to: Conversation, text: impl Into<String>) {
        self.outbox.do_send(SendText::new(to, text));
    }

    fn is_admin(&self, user: UserId) -> bool {
        self.access.is_admin(user.0)
    }

    /// Whether `user` may talk to the bot in `chat` (`AccessConfig::admits`).
    fn admits(&self, user: UserId, chat: ChatId) -> bool {
        self.access.admits(user.0, chat.0)
    }

    /// Whether `m` may reach its chat: a person's message when its sender
    /// is let in; a schedule's run when the operator made the schedule
    /// (user 0) or its maker is still let in, so a schedule outlives no one's
    /// access; a line typed at the host (its socket admits admins only).
    fn may_run(&self, m: &Incoming) -> bool {
        use crate::incoming::Source::{Operator, Terminal};
        matches!(m.source, Operator | Terminal) || self.admits(m.from, m.to.chat)
    }

    fn supervisor(&mut self, chat: Conversation, ctx: &mut Context<Self>) -> &mut ChatEntry {
        let turns = Arc::clone(&self.turns);
        let settings = self.chat_settings.clone();
        let slots = self.slots.clone();
        let turn_ids = Arc::clone(&self.turn_ids);
        let me = ctx.address().recipient();
        self.chats.entry(chat).or_insert_with(|| {
            let supervisor = ChatSupervisor::new(chat, turns, settings, me, slots, turn_ids);
            let span = supervisor.span();
            ChatEntry {
                addr: supervisor.start_in(span),
                routed: 0,
            }
        })
    }

    /// Hands something to the chat's supervisor, counting it.
    fn deliver(&mut self, chat: Conversation, item: ForChat, ctx: &mut Context<Self>) {
        if let (Some(held), false) = (
            self.opening.get_mut(&chat),
            matches!(item, ForChat::Press(_)),
        ) {
            return held.push(item);
        }
        let entry = self.supervisor(chat, ctx);
        entry.routed += 1;
        match item {
            ForChat::Message(msg) => entry.addr.do_send(msg),
            ForChat::Command(command) => entry.addr.do_send(command),
            ForChat::Press(press) => entry.addr.do_send(press),
            ForChat::DeliveryEnd => entry.addr.do_send(DeliveryEnd),
        }
    }

    /// A stranger's message: logged, and in a private chat answered with
    /// their user id once per cooldown. In a group nothing is sent: any
    /// message there spends the group's pacing (a burst of 5, then 20 a
    /// minute) that its members' answers need, so strangers could delay
    /// them; a stranger learns their id by writing to the bot privately.
    fn refuse(&mut self, to: Conversation, user: UserId) {
        let chat = to.chat;
        tracing::warn!(
            user_id = user.0,
            chat_id = chat.0,
            "message from a user not on the allowlist refused"
        );
        self.events.publish(BotEvent::AccessDenied { chat, user });
        if !chat.is_user() {
            return;
        }
        if is_due(&self.refused, &user, self.access.refusal_cooldown) {
            due(&mut self.refused, user, self.access.refusal_cooldown);
            self.outbox
                .do_send(SendText::new(to, notices::refusal(user)));
        }
    }

    /// A button pressed under one of the bot's messages, read at the
    /// intake: checked against the allowlist, then acted on by its kind;
    /// an approval goes to the chat that asked, with whether the presser is
    /// an admin; anything else is answered "expired" at once.
    fn button(&mut self, press: Press, ctx: &mut Context<Self>) {
        let (user, to) = (press.from, press.to);
        let chat = to.chat;
        let answer = |act: &Self, press: &Press, text: &str| {
            act.outbox
                .do_send(AnswerCallback::new(chat, press.id.clone(), text));
        };
        if !self.admits(user, chat) {
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
            return answer(self, &press, notices::NOT_FOR_YOU);
        }
        match press.data.clone() {
            Callback::Unschedule(id) => self.unschedule_pressed(id, &press, ctx),
            Callback::Pick(pick) => self.picked(pick, &press, ctx),
            Callback::Approval(approval) if self.chats.contains_key(&to) => {
                let admin = self.is_admin(user);
                let pressed = ButtonPressed::new(press, approval, admin);
                self.deliver(to, ForChat::Press(pressed), ctx);
            }
            Callback::Approval(_) | Callback::Unknown => {
                // An approval whose turn is gone (with an earlier process,
                // say): its buttons go too.
                if let (Callback::Approval(_), Some(message_id)) = (&press.data, press.message) {
                    self.outbox.do_send(Unbutton { chat, message_id });
                }
                answer(self, &press, notices::QUESTION_EXPIRED);
            }
        }
    }
}

/// Whether `who` (a user, a group) is due a refusal now: none within
/// `cooldown`. Notes nothing.
fn is_due<K: Eq + std::hash::Hash>(
    refused: &HashMap<K, Instant>,
    who: &K,
    cooldown: Duration,
) -> bool {
    refused.get(who).is_none_or(|at| at.elapsed() >= cooldown)
}

/// Whether `who` is due a refusal now: none within `cooldown`. Notes it
/// when so, and forgets entries past the cooldown.
fn due<K: Eq + std::hash::Hash>(
    refused: &mut HashMap<K, Instant>,
    who: K,
    cooldown: Duration,
) -> bool {
    let now = Instant::now();
    let due = refused
        .get(&who)
        .is_none_or(|at| now.duration_since(*at) >= cooldown);
    if due {
        refused.retain(|_, at| now.duration_since(*at) < cooldown);
        refused.insert(who, now);
    }
    due
}

impl Actor for Dispatcher {
    type Context = Context<Self>;
}

impl Handler<UpdateReceived> for Dispatcher {
    type Result = ();

    /// One message or press; should handling it panic, it is dropped with
    /// an ERROR log and the next one is handled as usual.
    fn handle(&mut self, update: UpdateReceived, ctx: &mut Self::Context) {
        match update {
            UpdateReceived::Message(m) => {
                // Its id tells the outbox a copy sent again from one that
                // may show twice.
                self.outbox.do_send(Seen {
                    chat: m.to.chat,
                    message_id: m.message_id,
                });
                self.in_delivery = true;
                self.contained_message(m, ctx);
                self.in_delivery = false;
            }
            UpdateReceived::DeliveryEnd(left) => {
                // After the batch's `Seen`s: the outbox knows every message
                // that was in the chat when this poll left.
                self.outbox.do_send(Polled { left });
                self.deliveries += 1;
                for to in std::mem::take(&mut self.delivery) {
                    if self.chats.contains_key(&to) {
                        self.deliver(to, ForChat::DeliveryEnd, ctx);
                    }
                }
            }
            UpdateReceived::Press(press) => {
                let callback = press.id.clone();
                if let Err(panic) = contain(|| self.button(press, ctx)) {
                    tracing::error!(callback, %panic, "handling the button press panicked; dropped");
                }
            }
        }
    }
}

impl Handler<RunDue> for Dispatcher {
    type Result = ();

    /// A schedule's run, claimed and queued: routed as a message just
    /// received (the schedule's maker was checked when it was made); one
    /// made in a private topic runs in the chat while the mode is off.
    fn handle(&mut self, RunDue(mut run): RunDue, ctx: &mut Self::Context) {
        run.to = self.topics.now(run.to);
        self.contained_message(run, ctx);
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

//! The turn's contract with its chat: what a turn is for ([`TurnSpec`]),
//! the services every turn shares ([`TurnServices`]), and the messages between
//! a turn and its supervisor and typing actor.

use std::sync::Arc;
use std::time::Instant;

use actix::{Addr, Message};
use teloxide::types::{MessageId, UserId};

use super::Forwarding;
use crate::agent::{AgentBackend, AgentSession};
use crate::attachment::Attachment;
use crate::chat::outcome::TurnOutcome;
use crate::config::{ProgressConfig, TurnConfig};
use crate::events::{EventBus, Gauges};
use crate::ids::{Conversation, TurnId};
use crate::incoming::{Author, Incoming};
use crate::shutdown::Shutdown;
use crate::state::StoreHandle;
use crate::telegram::TypingLease;
use crate::telegram::files::Files;
use crate::telegram::outbox::Outbox;

/// Someone whose message a turn answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    /// Their Telegram id.
    pub id: UserId,
    /// How Telegram names them.
    pub author: Author,
}

impl Sender {
    /// Adds the sender of `m` to `list`, unless it has them already.
    pub fn add(list: &mut Vec<Sender>, m: &Incoming) {
        if !list.iter().any(|s| s.id == m.from) {
            list.push(Sender {
                id: m.from,
                author: m.author.clone(),
            });
        }
    }
}

/// Sent once per turn, to the supervisor and to the typing actor, when the
/// turn is over.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct TurnEnded {
    /// The turn.
    pub turn: TurnId,
    /// How it ended.
    pub outcome: TurnOutcome,
    /// The agent's session id, kept for `--resume`.
    pub session_id: Option<String>,
    /// Whether a reply may have left (sent or still on its way): such a
    /// turn is never run again.
    pub replied: bool,
    /// When the turn started.
    pub started: Instant,
    /// When the turn ended.
    pub at: Instant,
    /// Messages steered into the turn that the agent read there: answered
    /// with the turn's own (their rows end as its rows do).
    pub steered: Vec<Incoming>,
}

/// Sent once per turn, after [`TurnEnded`], when the session is settled (and
/// handed back for reuse) or gone.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SessionReleased {
    /// The turn.
    pub turn: TurnId,
    /// A settled session the chat's next turn may reuse.
    pub session: Option<AgentSession>,
    /// Messages steered into the turn that it ended before the agent read
    /// them, oldest first: they are the chat's next turn. With `session`
    /// handed back and each `written`, the agent is already running them
    /// as its next turn by itself.
    pub carried: Vec<Carried>,
}

/// A message steered into a turn that ended before the agent read it.
#[derive(Debug, Clone)]
pub struct Carried {
    /// The message.
    pub message: Incoming,
    /// When it was accepted.
    pub at: Instant,
    /// Whether it was written to the session handed back.
    pub written: bool,
}

/// A message for the conversation while this turn runs
/// (`dispatcher.busy = "steer"`): written to the agent at once. Answers
/// whether the turn took it; one it did not take (the turn has ended, or
/// `/stop` was asked) waits for the next turn.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub struct SteerTurn {
    /// The message.
    pub message: Incoming,
    /// When it was accepted.
    pub at: Instant,
}

/// `/stop`: interrupt the turn.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct InterruptTurn;

/// The host is stopping: end the turn with `HostStopping` and close.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopForHost;

/// The hard deadline released the chat: kill the session and stop, silently.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct AbortTurn;

/// What a turn is for.
#[derive(Debug)]
pub struct TurnSpec {
    /// The conversation (the chat, or one forum topic of it): replies,
    /// typing and questions go there, and it has its own session and workdir.
    pub to: Conversation,
    /// Numbers the turn within the process.
    pub turn: TurnId,
    /// The user's text (merged messages joined).
    pub text: String,
    /// The user's last message, for reactions.
    pub reply_to: Option<MessageId>,
    /// The message the turn's answer replies to (in groups, the message
    /// that started the turn; in private chats none).
    pub answer_to: Option<MessageId>,
    /// Files the messages carried, fetched into the workdir before the
    /// agent hears of the turn.
    pub files: Vec<Attachment>,
    /// The inbox rows (update ids) this turn answers.
    pub update_ids: Vec<i64>,
    /// Who sent the last message the turn answers: who made a schedule
    /// the agent sets.
    pub from: Option<UserId>,
    /// Who sent the messages the turn answers (the merged burst), each
    /// once, in order; the messages steered into it add theirs. A group's
    /// question names them, and besides an admin only they decide it.
    pub senders: Vec<Sender>,
    /// The chat's typing lease for this turn, owned by the turn actor and
    /// ended by it at TurnEnded (or by its drop).
    pub typing: TypingLease,
    /// Set when the warm session handed to the turn already has the turn's
    /// messages (steered into the last turn, which ended before the agent
    /// read them): the agent runs them by itself, so the text is not
    /// written again unless a fresh session replaces it. Each message's
    /// row and id, for the receipt's reaction.
    pub adopted: Option<Vec<(i64, Option<MessageId>)>>,
}

/// The agent a turn runs and its settings: the same for every chat, so
/// every turn shares one behind an `Arc`.
pub struct AgentSetup {
    /// Opens sessions.
    pub backend: Arc<dyn AgentBackend>,
    /// The clocks.
    pub config: TurnConfig,
    /// What the chat sees while a turn works.
    pub progress: ProgressConfig,
    /// `dispatcher.on_interrupted == "retry"`.
    pub retry_interrupted: bool,
    /// `agent.limit_retry`: the first wait before a turn refused for a
    /// usage limit runs again (zero: reported, not retried).
    pub limit_retry: std::time::Duration,
    /// `agent.workdir`, absolute, with its `{chat}` placeholder: where each
    /// conversation's files are.
    pub workdir: std::path::PathBuf,
    /// The models and projects a conversation may choose (`/model`, `/project`).
    pub choices: Arc<crate::chat::menus::Choices>,
    /// The file the bot's config was read from, if any: `/handoff` names
    /// it in the `turnstile attach` command, which must find this bot's
    /// state file (and its socket) as the bot did.
    pub config_file: Option<std::path::PathBuf>,
}

/// The way out to the chat: the outbox, and the reply relays' texts not
/// yet handed to it.
#[derive(Clone)]
pub struct WayOut {
    /// The way out to Telegram.
    pub outbox: Addr<Outbox>,
    /// The reply relays' texts not yet handed to the outbox.
    pub forwarding: Forwarding,
}

/// Where a turn keeps and reports what happened, and learns that the host
/// stops: the durable store, the events, the live counts.
#[derive(Clone)]
pub struct Books {
    /// The durable inbox (and session ids, turn records, approval rules).
    pub inbox: StoreHandle,
    /// Where the turn reports what happened.
    pub events: EventBus,
    /// Live actor counts.
    pub gauges: Arc<Gauges>,
    /// Set once the host is stopping: agent requests are then refused.
    pub shutdown: Shutdown,
}

/// What a turn uses, and nothing else: each [`TurnActor`](super::TurnActor)
/// holds one. The start makes it once; the dispatcher hands one `Arc` of it
/// to each chat, which clones it for each turn it starts (handles and
/// `Arc`s: the settings themselves are not copied).
#[derive(Clone)]
pub struct TurnServices {
    /// The agent and its settings.
    pub agent: Arc<AgentSetup>,
    /// The way out to the chat (answers, questions, reactions).
    pub out: WayOut,
    /// The store, the events, the stop.
    pub books: Books,
    /// Fetches the files users send.
    pub files: Files,
    /// The conversations' schedules (`/schedule`, the agent's tools).
    pub schedules: crate::schedule::ScheduleBook,
}

impl TurnServices {
    /// The working directory of `to`.
    pub fn workdir_of(&self, to: Conversation) -> std::path::PathBuf {
        crate::agent::host::seal::chat_path(&self.agent.workdir, &to.key())
    }
}

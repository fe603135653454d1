//! What the bot reports about itself as it runs: a broadcast of
//! [`BotEvent`]s that tests, benchmarks and `/status` can follow without
//! reaching into actors.

use std::time::Instant;

use teloxide::types::{ChatId, ThreadId, UserId};
use tokio::sync::broadcast;

use crate::ids::{Conversation, TurnId};
use crate::ops::metrics::Metrics;
use crate::outcome::TurnOutcome;

/// One thing that happened.
#[derive(Debug, Clone)]
pub enum BotEvent {
    /// A chat's turn started.
    TurnStarted {
        /// The chat.
        chat: ChatId,
        /// The forum topic, when the conversation is one.
        topic: Option<ThreadId>,
        /// The turn, numbered per process.
        turn: TurnId,
        /// When.
        at: Instant,
    },
    /// A turn ended (sent once per turn, when the turn actor sends TurnEnded).
    TurnEnded {
        /// The chat.
        chat: ChatId,
        /// The turn.
        turn: TurnId,
        /// How it ended.
        outcome: TurnOutcome,
        /// The agent's session id, when it reported one.
        session_id: Option<String>,
        /// When.
        at: Instant,
    },
    /// The typing actor ended a lease.
    TypingStopped {
        /// The chat.
        chat: ChatId,
        /// The turn whose lease ended.
        turn: TurnId,
        /// When.
        at: Instant,
    },
    /// The outbox wrote a `sendChatAction` request.
    ChatActionSent {
        /// The chat.
        chat: ChatId,
        /// When the request left.
        at: Instant,
    },
    /// A message left for Telegram and no answer came back (a network
    /// failure after it was sent, an answer that is not JSON, none in
    /// time): it may or may not have arrived; its lane sends it again.
    DeliveryUnknown {
        /// The chat.
        chat: ChatId,
        /// The turn that sent it, if a turn did.
        turn: Option<TurnId>,
        /// The Bot API method (`sendMessage`, `sendDocument`, `sendPhoto`).
        method: &'static str,
        /// When the outbox learnt it did not know.
        at: Instant,
    },
    /// A message from someone not allowed was refused.
    AccessDenied {
        /// The chat.
        chat: ChatId,
        /// The sender.
        user: UserId,
    },
    /// The agent session of a turn was force-closed.
    SessionKilled {
        /// The chat.
        chat: ChatId,
        /// The turn.
        turn: TurnId,
    },
    /// A message was steered into a running turn (written to its agent, or
    /// to be written once the turn's session is attached).
    Steered {
        /// The chat.
        chat: ChatId,
        /// The turn.
        turn: TurnId,
        /// The message's inbox row.
        update_id: i64,
    },
    /// After a start, a conversation's session was resumed in the
    /// background and is kept warm for its next message.
    Prewarmed {
        /// The chat.
        chat: ChatId,
        /// When it was kept.
        at: Instant,
    },
    /// What a conversation shows, as a frontend other than Telegram
    /// (`turnstile attach`) renders it.
    Feed {
        /// The conversation.
        to: Conversation,
        /// What it shows.
        item: FeedItem,
    },
}

/// One answer a question offers: a button's label, and what pressing it
/// says (its callback data), so another frontend can give the same answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Offer {
    /// The button's label.
    pub label: String,
    /// What the press says (the button's callback data).
    pub answer: String,
}

/// One thing a conversation shows: what `turnstile attach` follows.
#[derive(Debug, Clone, PartialEq)]
pub enum FeedItem {
    /// A message for the agent, routed to the conversation.
    Message {
        /// Who wrote it, as shown (`Ann (@ann)`, `terminal`, `schedule`).
        from: String,
        /// Its text.
        text: String,
    },
    /// A turn started.
    TurnStarted {
        /// The turn.
        turn: TurnId,
    },
    /// A text left for the chat (an answer, a notice).
    Said {
        /// The text.
        text: String,
    },
    /// The turn's status line: the tool running now and the calls so far,
    /// as the chat's status message shows them; one a tool call.
    Status {
        /// The line.
        text: String,
    },
    /// More of the answer being written (the text the chat previews),
    /// a piece at a time; the whole comes as [`FeedItem::Said`].
    Writing {
        /// What was written since the last piece.
        text: String,
        /// This piece begins a text that replaces the one before.
        fresh: bool,
    },
    /// A turn ended.
    TurnEnded {
        /// The turn.
        turn: TurnId,
        /// How it ended.
        outcome: TurnOutcome,
    },
    /// The agent asks the chat an approval (its question(s), as shown).
    Asked {
        /// Names the ask (the token in its options' answers).
        token: String,
        /// The question's text.
        question: String,
        /// What can answer it, as its buttons do.
        options: Vec<Offer>,
    },
    /// An approval was decided (by a press, a timeout, the turn's end).
    Decided {
        /// The ask decided.
        token: String,
        /// The decision, as the question shows it.
        decision: String,
    },
}

/// The broadcast sender everybody publishes on.
#[derive(Debug, Clone)]
pub struct EventBus {
    /// The channel; sends with no subscriber are dropped.
    tx: broadcast::Sender<BotEvent>,
    /// The Prometheus metrics, counted into by whoever holds the bus.
    metrics: std::sync::Arc<Metrics>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new()
    }
}

impl EventBus {
    /// A bus keeping up to 65,536 events for slow subscribers.
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(1 << 16);
        Self {
            tx,
            metrics: std::sync::Arc::new(Metrics::new()),
        }
    }

    /// The metrics of this bot.
    pub fn metrics(&self) -> &std::sync::Arc<Metrics> {
        &self.metrics
    }

    /// Publishes an event.
    pub fn publish(&self, event: BotEvent) {
        if self.tx.receiver_count() > 0 {
            let _ = self.tx.send(event);
        }
    }

    /// Shows `item` to whoever follows conversation `to` (`turnstile attach`).
    pub fn feed(&self, to: Conversation, item: FeedItem) {
        self.publish(BotEvent::Feed { to, item });
    }

    /// Follows the events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<BotEvent> {
        self.tx.subscribe()
    }
}

/// Live actor counts, for tests, benchmarks and `/status`.
#[derive(Debug, Default)]
pub struct Gauges {
    /// Live chat supervisors.
    pub supervisors: std::sync::atomic::AtomicI64,
    /// Live turn actors.
    pub turns: std::sync::atomic::AtomicI64,
    /// Live typing actors.
    pub typing: std::sync::atomic::AtomicI64,
    /// Woken whenever an actor stops.
    changed: tokio::sync::Notify,
}

impl Gauges {
    /// Counts an actor of one kind out and wakes waiters.
    pub fn leave(&self, kind: &std::sync::atomic::AtomicI64) {
        kind.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Resolves once no actor of any kind is alive.
    #[cfg(any(test, feature = "test-hooks"))]
    pub async fn all_stopped(&self) {
        loop {
            let changed = self.changed.notified();
            if self.total() == 0 {
                return;
            }
            changed.await;
        }
    }

    /// Live actors of every kind together.
    pub fn total(&self) -> i64 {
        use std::sync::atomic::Ordering::SeqCst;
        self.supervisors.load(SeqCst) + self.turns.load(SeqCst) + self.typing.load(SeqCst)
    }
}

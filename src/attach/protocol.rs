//! The attach protocol: JSON lines. The server's first line is
//! [`ServerLine::Hello`] with [`PROTOCOL_VERSION`]; then the client asks
//! ([`ClientLine`]) and the server answers and follows
//! ([`ServerLine`]), one object a line, tagged by `event` (server) and
//! `ask` (client).

use serde::{Deserialize, Serialize};

use crate::events::{FeedItem, Offer};
use crate::ids::Conversation;

/// The protocol's version, on the server's first line: 2 added
/// [`ServerLine::Status`] and [`ServerLine::Writing`].
pub const PROTOCOL_VERSION: u32 = 2;

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ask", rename_all = "snake_case")]
pub enum ClientLine {
    /// The conversations, latest active first.
    List,
    /// A conversation's recent history, then what it shows live.
    Follow {
        /// Its key: the chat id, then `_` and the topic in a topic.
        conversation: String,
    },
    /// A line for the followed conversation, as the operator's message.
    Say {
        /// The text.
        text: String,
    },
    /// An answer to the followed conversation's question, as the
    /// operator's press of its button.
    Answer {
        /// One of [`ServerLine::Asked`]'s options' `answer`.
        answer: String,
    },
}

/// What the server sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ServerLine {
    /// The first line.
    Hello {
        /// [`PROTOCOL_VERSION`].
        version: u32,
    },
    /// One conversation of a list.
    Conversation {
        /// Its key.
        conversation: String,
        /// The chat id.
        chat: i64,
        /// The topic, 0 for none.
        topic: i64,
        /// The first words of its latest turn.
        title: String,
        /// `idle`, `running`, `waiting for an approval`, `parked` or `handed off`.
        state: String,
        /// Its latest message's date (unix seconds).
        last_activity: i64,
    },
    /// The list is whole.
    Listed {
        /// How many conversations it held.
        count: usize,
    },
    /// The history is whole: what follows is live.
    Following {
        /// The conversation.
        conversation: String,
    },
    /// A message for the agent.
    Message {
        /// Who wrote it.
        from: String,
        /// Its text.
        text: String,
    },
    /// A turn started.
    TurnStarted {
        /// The turn.
        turn: u64,
    },
    /// A text left for the chat.
    Said {
        /// The text.
        text: String,
    },
    /// The turn's status line (the tool running now, the calls so far);
    /// live only, not kept in the history.
    Status {
        /// The line, as the chat's status message shows it.
        text: String,
    },
    /// More of the answer being written; live only: the history keeps the
    /// whole, as [`ServerLine::Said`].
    Writing {
        /// What was written since the last piece.
        text: String,
        /// This piece begins a text that replaces the one before.
        fresh: bool,
    },
    /// A turn ended.
    TurnEnded {
        /// The turn.
        turn: u64,
        /// How (`completed`, `terminated`, …).
        outcome: String,
    },
    /// The agent asks the chat an approval: answered in the chat, or here
    /// by [`ClientLine::Answer`] with one of its options.
    Asked {
        /// The question, as the chat shows it.
        question: String,
        /// Its answers, as its buttons offer them.
        options: Vec<Offer>,
    },
    /// An approval was decided.
    Decided {
        /// The decision, as the chat shows it.
        decision: String,
    },
    /// A typed line is in the inbox: it will be answered once.
    Accepted {
        /// Its inbox row.
        update_id: i64,
    },
    /// The client's buffer overflowed: this many lines were dropped.
    Missed {
        /// How many.
        count: u64,
    },
    /// The attachment ends.
    Bye {
        /// Why, in words.
        reason: String,
    },
    /// A request that could not be done.
    Error {
        /// What went wrong.
        message: String,
    },
}

impl ServerLine {
    /// The line a conversation's feed item becomes.
    pub fn of(item: &FeedItem) -> Self {
        match item {
            FeedItem::Message { from, text } => Self::Message {
                from: from.clone(),
                text: text.clone(),
            },
            FeedItem::TurnStarted { turn } => Self::TurnStarted { turn: turn.get() },
            FeedItem::Said { text } => Self::Said { text: text.clone() },
            FeedItem::TurnEnded { turn, outcome } => Self::TurnEnded {
                turn: turn.get(),
                outcome: outcome.label().to_string(),
            },
            FeedItem::Status { text } => Self::Status { text: text.clone() },
            FeedItem::Writing { text, fresh } => Self::Writing {
                text: text.clone(),
                fresh: *fresh,
            },
            FeedItem::Asked {
                question, options, ..
            } => Self::Asked {
                question: question.clone(),
                options: options.clone(),
            },
            FeedItem::Decided { decision, .. } => Self::Decided {
                decision: decision.clone(),
            },
        }
    }

    /// Whether the line is kept in a conversation's history: not the
    /// status line nor the pieces of an answer (the answer is kept whole).
    pub fn kept(&self) -> bool {
        !matches!(self, Self::Status { .. } | Self::Writing { .. })
    }

    /// The line as sent: JSON and a newline.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_else(|err| {
            format!(r#"{{"event":"error","message":"unencodable line: {err}"}}"#)
        });
        line.push('\n');
        line
    }
}

/// The conversation a client names: a key, as [`Conversation::key`] writes it.
pub fn conversation(key: &str) -> Option<Conversation> {
    Conversation::from_key(key.trim())
}

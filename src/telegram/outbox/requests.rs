//! The requests the [`Outbox`](super::Outbox) takes (the job each one
//! becomes on its chat's lane is in `jobs.rs`).

use std::time::Duration;

use actix::Message;

use teloxide::types::{ChatId, MessageId, ThreadId};
use tokio::sync::oneshot;

use super::error::OutboxError;
use super::keyboard::Button;
use crate::ids::{Conversation, TurnId};
use crate::telegram::files::OutgoingFile;
use crate::telegram::typing::TypingView;

/// How long Telegram waits for a callback query's answer; a later answer
/// is refused, so an [`AnswerCallback`] is never retried past it.
pub const CALLBACK_ANSWER_WINDOW: Duration = Duration::from_secs(15);

/// Sends text to a chat. Always queued, even when the sender goes away;
/// `reply` (when given) gets the ids of the sent messages.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SendText {
    /// Where: the chat, or one forum topic of it.
    pub to: Conversation,
    /// The message its first piece replies to (in groups, the message that
    /// started the turn); sent anyway when that message is gone.
    pub reply_to: Option<MessageId>,
    /// What; split when longer than Telegram allows.
    pub text: String,
    /// `text` is the agent's Markdown, rendered to Telegram's entities;
    /// otherwise it goes as plain text.
    pub markdown: bool,
    /// The live slot this message finishes: its first piece replaces what
    /// the slot shows (an edit of the preview), so nothing is shown twice.
    pub into: Option<Slot>,
    /// Who wants to know how it went.
    pub reply: Option<oneshot::Sender<Result<Vec<MessageId>, OutboxError>>>,
    /// The turn it answers, if any: its log context, and a [`Purge`] of
    /// that turn drops it while it waits.
    pub turn: Option<TurnId>,
    /// Its row in the state store, when its sender kept it there
    /// ([`crate::state::StoreHandle::keep_outgoing`]); otherwise the outbox
    /// keeps it (when it has a store).
    pub kept: Option<i64>,
}

impl SendText {
    /// A message nobody waits on.
    pub fn new(to: impl Into<Conversation>, text: impl Into<String>) -> Self {
        Self {
            to: to.into(),
            reply_to: None,
            text: text.into(),
            markdown: false,
            into: None,
            reply: None,
            turn: None,
            kept: None,
        }
    }

    /// A message and the receiver of its outcome.
    pub fn tracked(
        to: impl Into<Conversation>,
        text: impl Into<String>,
    ) -> (Self, oneshot::Receiver<Result<Vec<MessageId>, OutboxError>>) {
        let (tx, rx) = oneshot::channel();
        let mut send = Self::new(to, text);
        send.reply = Some(tx);
        (send, rx)
    }

    /// The same message, its first piece a reply to `message`.
    #[must_use]
    pub fn replying_to(mut self, message: Option<MessageId>) -> Self {
        self.reply_to = message;
        self
    }

    /// The same message, its text the agent's Markdown.
    #[must_use]
    pub fn markdown(mut self) -> Self {
        self.markdown = true;
        self
    }

    /// The same message, finishing what `slot` shows.
    #[must_use]
    pub fn into_slot(mut self, slot: Option<Slot>) -> Self {
        self.into = slot;
        self
    }

    /// The same message, sent by `turn`.
    #[must_use]
    pub fn for_turn(mut self, turn: TurnId) -> Self {
        self.turn = Some(turn);
        self
    }
}

/// One live message of a conversation (a turn's status line, the preview
/// of an answer being written): [`Show`] puts text in it, a [`SendText`]
/// with `into` finishes it, [`Clear`] removes or folds it. Its number is
/// unique in the process and never 0 (it is also a draft's `draft_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot(pub u32);

impl Slot {
    /// A slot no one has used.
    pub fn next() -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
        loop {
            let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if id != 0 {
                return Self(id);
            }
        }
    }
}

/// How a slot shows its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShowAs {
    /// A message, sent once and then edited.
    Message,
    /// A draft (`sendMessageDraft`, private chats only): nothing stays in
    /// the chat; the final text goes as a new message.
    Draft,
}

/// Shows `text` in a slot: the first time a message is sent, later its
/// text is edited. Live text gives way: it waits while real messages of the
/// chat are queued, it never takes the chat's last free send, and a newer
/// `Show` of the same slot replaces one still queued (only the latest is
/// sent).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Show {
    /// Where: the chat, or one forum topic of it.
    pub to: Conversation,
    /// Which live message.
    pub slot: Slot,
    /// The message its first send replies to (in groups, the message that
    /// started the turn, as the answer it becomes would).
    pub reply_to: Option<MessageId>,
    /// Its text (cut at 4096 units).
    pub text: String,
    /// `text` is Markdown.
    pub markdown: bool,
    /// As a message or as a draft.
    pub show_as: ShowAs,
    /// The turn whose live message it is: a [`Purge`] of that turn drops
    /// it while it waits.
    pub turn: Option<TurnId>,
}

/// Ends a slot: its message is deleted, or its text replaced by `fold`
/// (plain). A `Show` of the slot still queued is dropped.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Clear {
    /// Where: the chat, or one forum topic of it.
    pub to: Conversation,
    /// Which live message.
    pub slot: Slot,
    /// The line it keeps; `None` deletes it.
    pub fold: Option<String>,
}

/// Drops what a stopped turn queued that Telegram has not taken (`/stop`):
/// its texts, files, questions and live text, those waiting now and those
/// its reply relay hands over later (the lane remembers the turn while it
/// lives). A text being sent stops at its next piece. Everything else the
/// conversation has queued goes on, in order: an earlier turn's answers,
/// notices, the echo of a line typed at the terminal, other topics, and
/// typing, reactions, edits and clears (its own included).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Purge {
    /// Where: the chat, or one forum topic of it.
    pub to: Conversation,
    /// The stopped turn: what carries its id is dropped.
    pub turn: TurnId,
}

/// Sends a file as a document (`sendDocument`) or, when `as_photo`, a
/// photo (`sendPhoto`). Its bytes are read once from the descriptor the
/// sender opened and checked (never from a path), and every retry sends
/// those bytes. A file is never sent twice: an unknown outcome is not
/// retried.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SendFile {
    /// Where: the chat, or one forum topic of it.
    pub to: Conversation,
    /// The file, opened and checked by the sender.
    pub file: OutgoingFile,
    /// Its caption (cut at Telegram's 1024).
    pub caption: Option<String>,
    /// Send as a photo rather than a document.
    pub as_photo: bool,
    /// Who wants the sent message's id.
    pub reply: oneshot::Sender<Result<MessageId, OutboxError>>,
    /// The turn that sends it, if any: its log context, and a [`Purge`]
    /// of that turn drops it while it waits.
    pub turn: Option<TurnId>,
    /// Its row in the state store (its bytes in the spool), when its
    /// sender kept it there ([`SendFile::keep_in`]); otherwise the outbox
    /// keeps it (when it has a store).
    pub kept: Option<i64>,
}

impl SendFile {
    /// A file and the receiver of its outcome.
    pub fn new(
        to: impl Into<Conversation>,
        file: OutgoingFile,
        caption: Option<String>,
        as_photo: bool,
    ) -> (Self, oneshot::Receiver<Result<MessageId, OutboxError>>) {
        let to = to.into();
        let (tx, rx) = oneshot::channel();
        let send = Self {
            to,
            file,
            caption,
            as_photo,
            reply: tx,
            turn: None,
            kept: None,
        };
        (send, rx)
    }

    /// The same file, sent by `turn`.
    #[must_use]
    pub fn for_turn(mut self, turn: TurnId) -> Self {
        self.turn = Some(turn);
        self
    }
}

/// Sends a question: plain text (no parse mode) under rows of callback
/// buttons, never cut: a text longer than Telegram's 4096 is refused, and
/// what does not fit goes in [`QuestionFile`] sent just before it (the
/// question replies to it). `reply` gets the id of the question's message,
/// which an [`EditQuestion`] and the callback queries refer to.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SendQuestion {
    /// Where: the chat, or one forum topic of it.
    pub to: Conversation,
    /// The question.
    pub text: String,
    /// Rows of buttons, top to bottom.
    pub buttons: Vec<Vec<Button>>,
    /// A text file sent first, holding what the question is about in full.
    pub file: Option<QuestionFile>,
    /// Who wants the message id (or why there is none).
    pub reply: oneshot::Sender<Result<MessageId, OutboxError>>,
    /// The turn that asks, if any: its log context, and a [`Purge`] of
    /// that turn drops it while it waits.
    pub turn: Option<TurnId>,
    /// Its buttons mean something only to this process (an approval,
    /// decided by the turn that asks): a later process, finding it still
    /// waiting for Telegram, sends it without them, saying that the request
    /// ended.
    pub ends_with_process: bool,
}

impl SendQuestion {
    /// A question and the receiver of its message id.
    pub fn new(
        to: impl Into<Conversation>,
        text: impl Into<String>,
        buttons: Vec<Vec<Button>>,
    ) -> (Self, oneshot::Receiver<Result<MessageId, OutboxError>>) {
        let to = to.into();
        let (tx, rx) = oneshot::channel();
        let question = Self {
            to,
            text: text.into(),
            buttons,
            file: None,
            reply: tx,
            turn: None,
            ends_with_process: false,
        };
        (question, rx)
    }

    /// The same question, its buttons answered only by this process.
    #[must_use]
    pub fn ending_with_process(mut self) -> Self {
        self.ends_with_process = true;
        self
    }

    /// The same question, asked by `turn`.
    #[must_use]
    pub fn for_turn(mut self, turn: TurnId) -> Self {
        self.turn = Some(turn);
        self
    }

    /// The same question, `file` sent just before it: the question is sent
    /// only once the file is.
    #[must_use]
    pub fn with_file(mut self, file: Option<QuestionFile>) -> Self {
        self.file = file;
        self
    }
}

/// A text document sent with a question (`sendDocument`), for what is too
/// long for the question's own message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionFile {
    /// The file's name in the chat (`command.txt`).
    pub name: String,
    /// Its caption (cut at Telegram's 1024).
    pub caption: String,
    /// Its text (UTF-8).
    pub text: String,
}

/// Replaces a question's text and removes its buttons (the text shows the
/// decision). Telegram's "message is not modified" counts as success.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct EditQuestion {
    /// Where.
    pub chat: ChatId,
    /// The question's message.
    pub message_id: MessageId,
    /// The new text: plain, cut at 4096.
    pub text: String,
    /// Who wants to know how it went.
    pub reply: Option<oneshot::Sender<Result<(), OutboxError>>>,
}

impl EditQuestion {
    /// An edit nobody waits on.
    pub fn new(chat: ChatId, message_id: MessageId, text: impl Into<String>) -> Self {
        Self {
            chat,
            message_id,
            text: text.into(),
            reply: None,
        }
    }

    /// An edit and the receiver of its outcome.
    pub fn tracked(
        chat: ChatId,
        message_id: MessageId,
        text: impl Into<String>,
    ) -> (Self, oneshot::Receiver<Result<(), OutboxError>>) {
        let (tx, rx) = oneshot::channel();
        let mut edit = Self::new(chat, message_id, text);
        edit.reply = Some(tx);
        (edit, rx)
    }
}

/// Answers a callback query (stops the spinner on the pressed button).
/// Fire and forget: failures are logged; never retried past
/// [`CALLBACK_ANSWER_WINDOW`] from when the outbox got it. It takes no
/// lane and no pacing: it is no message, and waits behind none.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct AnswerCallback {
    /// The chat of the question (for the logs).
    pub chat: ChatId,
    /// The callback query's id.
    pub id: String,
    /// The notification (cut at 200 characters); empty shows none.
    pub text: String,
    /// ShownMessage as an alert the user must dismiss rather than a notification.
    pub alert: bool,
}

impl AnswerCallback {
    /// An answer showing `text` as a notification.
    pub fn new(chat: ChatId, id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            chat,
            id: id.into(),
            text: text.into(),
            alert: false,
        }
    }
}

/// Creates a forum topic named `name` in `chat` (a forum group);
/// `reply` gets its thread id. Never sent twice.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct CreateTopic {
    /// The forum group.
    pub chat: ChatId,
    /// The topic's name (Telegram takes 1 to 128 characters; cut to fit).
    pub name: String,
    /// Who wants the new topic's thread id (or why there is none).
    pub reply: oneshot::Sender<Result<ThreadId, OutboxError>>,
}

impl CreateTopic {
    /// A request and the receiver of the new topic's thread id.
    pub fn new(
        chat: ChatId,
        name: impl Into<String>,
    ) -> (Self, oneshot::Receiver<Result<ThreadId, OutboxError>>) {
        let (reply, rx) = oneshot::channel();
        let name = fit_topic_name(&name.into());
        (Self { chat, name, reply }, rx)
    }
}

/// Renames forum topic `topic` of `chat` to `name` (`editForumTopic`);
/// a failure is logged, nobody waits on it.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct RenameTopic {
    /// The chat.
    pub chat: ChatId,
    /// The topic.
    pub topic: ThreadId,
    /// Its new name (1 to [`TOPIC_NAME_LIMIT`] characters; cut to fit).
    pub name: String,
}

/// Telegram's longest topic name, in characters.
pub const TOPIC_NAME_LIMIT: usize = 128;

/// `name` cut to [`TOPIC_NAME_LIMIT`] characters.
pub(super) fn fit_topic_name(name: &str) -> String {
    name.chars().take(TOPIC_NAME_LIMIT).collect()
}

/// Shows "typing…" in a chat while `lease` is alive.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SendTyping {
    /// Where: the chat, or one forum topic of it.
    pub to: Conversation,
    /// Checked right before the request leaves: a dead lease sends nothing.
    pub lease: TypingView,
}

/// Sets a reaction on a message; `reply` gets the outcome.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct React {
    /// Where.
    pub chat: ChatId,
    /// Which message.
    pub message_id: MessageId,
    /// The emoji.
    pub emoji: String,
    /// Who wants to know how it went.
    pub reply: oneshot::Sender<Result<(), OutboxError>>,
}

/// A message of `chat` came in: its id exists and is no copy of the bot's
/// (see `resend.rs`: it tells a copy sent again from one that may show
/// twice).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Seen {
    /// The chat.
    pub chat: ChatId,
    /// The message.
    pub message_id: MessageId,
}

/// A `getUpdates` that left at `left` was answered, and the `Seen` of each
/// message it brought came before this (see `resend.rs`).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Polled {
    /// When the `getUpdates` left.
    pub left: std::time::Instant,
}

/// Resolves once every queued request has been sent or has failed.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Flush;

/// Refuses every later request (after a flush, at the end of a stop).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopOutbox;

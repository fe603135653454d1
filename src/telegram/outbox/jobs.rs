//! The job each request becomes on its chat's lane: what it carries, who
//! waits for it, which turn queued it (a `/stop` of that turn drops it).

use std::time::Instant;

use teloxide::types::{ChatId, MessageId, ThreadId};
use tokio::sync::oneshot;

use super::error::OutboxError;
use super::keyboard::{Button, Keyboard};
use super::post::{Anchor, Provenance};
use super::requests::{
    AnswerCallback, CALLBACK_ANSWER_WINDOW, Clear, EditQuestion, QuestionFile, SendFile,
    SendQuestion, Slot,
};
use crate::ids::{Conversation, TurnId};
use crate::telegram::format::TELEGRAM_TEXT_LIMIT;
use crate::telegram::typing::TypingView;

/// The longest notification text of an answered callback query.
const CALLBACK_TEXT_LIMIT: usize = 200;

/// Telegram's longest caption, in UTF-16 units.
pub(super) const CAPTION_LIMIT: usize = 1024;

/// Who waits for a question's message id.
pub(super) type QuestionReply = oneshot::Sender<Result<MessageId, OutboxError>>;

/// A text job: what, where, and who waits.
pub(super) struct TextJob {
    pub(super) text: String,
    pub(super) markdown: bool,
    pub(super) place: Anchor,
    pub(super) into: Option<Slot>,
    pub(super) reply: Option<oneshot::Sender<Result<Vec<MessageId>, OutboxError>>>,
    /// When it was first queued (in this process or, recovered from the
    /// state store, in an earlier one), by which turn, and whether it may
    /// have left before.
    pub(super) origin: Provenance,
    /// Its row in the state store, deleted once it is settled.
    pub(super) kept: Option<i64>,
}

/// A question job: its text under its buttons, and the file sent first.
pub(super) struct QuestionJob {
    pub(super) text: String,
    /// Its buttons, rows top to bottom (none: it goes without a keyboard).
    pub(super) buttons: Vec<Vec<Button>>,
    pub(super) topic: Option<ThreadId>,
    pub(super) file: Option<QuestionFile>,
    pub(super) reply: oneshot::Sender<Result<MessageId, OutboxError>>,
    /// When it was queued (here or, recovered, by an earlier process), by
    /// which turn, and whether it may have left before.
    pub(super) origin: Provenance,
    /// Its buttons mean something only to the process that asked.
    pub(super) ends_with_process: bool,
    /// Its row in the state store, deleted once it is settled.
    pub(super) kept: Option<i64>,
}

impl QuestionJob {
    /// Its buttons as Telegram takes them; none without buttons.
    pub(super) fn keyboard(&self) -> Option<Keyboard> {
        if self.buttons.is_empty() {
            return None;
        }
        Some(Keyboard::new(&self.buttons))
    }
}

/// A file job: the file, where it comes from, and its row.
pub(super) struct FileJob {
    pub(super) send: SendFile,
    /// When it was queued (here or, recovered, by an earlier process) and
    /// whether it may have left before.
    pub(super) origin: Provenance,
}

/// One queued request of a chat.
pub(super) enum Job {
    Text(TextJob),
    Clear(Clear),
    Typing(TypingView, Option<ThreadId>),
    File(FileJob),
    React(MessageId, String, oneshot::Sender<Result<(), OutboxError>>),
    Question(QuestionJob),
    Edit(
        MessageId,
        String,
        Option<oneshot::Sender<Result<(), OutboxError>>>,
    ),
    Topic(String, oneshot::Sender<Result<ThreadId, OutboxError>>),
    /// A forum topic renamed (`editForumTopic`); a failure is logged.
    Rename(ThreadId, String),
    /// A question's buttons removed, its text kept.
    Unbutton(MessageId),
}

/// A callback answer on its way, useless after `until`.
pub(super) struct CallbackAnswer {
    pub(super) id: String,
    pub(super) text: String,
    pub(super) alert: bool,
    pub(super) until: Instant,
}

impl CallbackAnswer {
    /// The answer to send, useless after the answer window.
    pub(super) fn new(msg: AnswerCallback) -> Self {
        Self {
            id: msg.id,
            text: cut_chars(&msg.text, CALLBACK_TEXT_LIMIT),
            alert: msg.alert,
            until: Instant::now() + CALLBACK_ANSWER_WINDOW,
        }
    }
}

impl Job {
    /// Tells whoever waits that the request was refused.
    pub(super) fn refuse(self, err: OutboxError) {
        match self {
            Self::Text(TextJob {
                reply: Some(reply), ..
            }) => {
                let _ = reply.send(Err(err));
            }
            Self::File(file) => {
                let _ = file.send.reply.send(Err(err));
            }
            Self::React(_, _, reply) | Self::Edit(_, _, Some(reply)) => {
                let _ = reply.send(Err(err));
            }
            Self::Question(question) => {
                let _ = question.reply.send(Err(err));
            }
            Self::Topic(_, reply) => {
                let _ = reply.send(Err(err));
            }
            Self::Text(TextJob { reply: None, .. })
            | Self::Clear(_)
            | Self::Typing(..)
            | Self::Edit(_, _, None)
            | Self::Rename(..)
            | Self::Unbutton(_) => {}
        }
    }

    /// Refuses the job of a turn `/stop` stopped (`Dropped`). A text that
    /// was to finish a live slot leaves a [`Clear`] of it, run in its
    /// place: the preview it would have replaced goes, as an interrupted
    /// turn's unfinished preview does, and the lane stops holding the slot.
    pub(super) fn stopped(self, chat: ChatId) -> Option<Self> {
        let clear = match &self {
            Self::Text(TextJob {
                into: Some(slot),
                place,
                ..
            }) => Some(Self::Clear(Clear {
                to: Conversation {
                    chat,
                    topic: place.topic,
                },
                slot: *slot,
                fold: None,
            })),
            _ => None,
        };
        self.refuse(OutboxError::Dropped);
        clear
    }

    /// An answer's method and when it was first queued: it waits for
    /// Telegram until it is settled (not typing, edits, live text).
    pub(super) fn waits_as(&self) -> Option<(&'static str, Instant)> {
        match self {
            Self::Text(job) => Some(("sendMessage", job.origin.born)),
            Self::File(file) => Some((
                if file.send.as_photo {
                    "sendPhoto"
                } else {
                    "sendDocument"
                },
                file.origin.born,
            )),
            Self::Question(question) => Some(("sendMessage", question.origin.born)),
            _ => None,
        }
    }

    /// Its row in the state store, if it is kept there, and whether the
    /// row has a spooled file.
    pub(super) fn kept(&self) -> Option<(i64, bool)> {
        match self {
            Self::Text(job) => job.kept.map(|row| (row, false)),
            Self::Question(job) => job.kept.map(|row| (row, false)),
            Self::File(job) => job.send.kept.map(|row| (row, true)),
            _ => None,
        }
    }

    /// The turn that queued the job, if any: its log context, and a
    /// `/stop` of that turn (`Purge`) drops the job while it waits. Only a
    /// turn's texts, files and questions carry one; typing, reactions,
    /// edits, clears and topics go on whatever is stopped.
    pub(super) fn turn(&self) -> Option<TurnId> {
        match self {
            Self::Text(job) => job.origin.turn,
            Self::File(file) => file.send.turn,
            Self::Question(question) => question.origin.turn,
            Self::Clear(_)
            | Self::Typing(..)
            | Self::React(..)
            | Self::Edit(..)
            | Self::Unbutton(_)
            | Self::Rename(..)
            | Self::Topic(..) => None,
        }
    }

    /// The job of a question, or why it cannot be sent (and who to tell).
    pub(super) fn question(msg: SendQuestion) -> Result<Self, (OutboxError, QuestionReply)> {
        if msg.text.trim().is_empty() {
            return Err((OutboxError::EmptyText, msg.reply));
        }
        let units = msg.text.encode_utf16().count();
        if units > TELEGRAM_TEXT_LIMIT {
            // Never a part of a question: its asker must attach the rest.
            let why = format!(
                "a question of {units} UTF-16 units is longer than Telegram's {TELEGRAM_TEXT_LIMIT}"
            );
            return Err((OutboxError::check(why), msg.reply));
        }
        let bad = msg
            .buttons
            .iter()
            .flatten()
            .find(|b| b.data.is_empty() || b.data.len() > 64);
        if let Some(bad) = bad {
            let why = format!(
                "callback data of button {:?} must be 1-64 bytes, not {}",
                bad.label,
                bad.data.len()
            );
            return Err((OutboxError::check(why), msg.reply));
        }
        Ok(Self::Question(QuestionJob {
            text: msg.text,
            buttons: msg.buttons,
            topic: msg.to.topic,
            file: msg.file,
            reply: msg.reply,
            origin: Provenance::now(msg.turn),
            ends_with_process: msg.ends_with_process,
            kept: None,
        }))
    }

    /// The job of an edit.
    pub(super) fn edit(msg: EditQuestion) -> Self {
        Self::Edit(
            msg.message_id,
            cut(&msg.text, TELEGRAM_TEXT_LIMIT),
            msg.reply,
        )
    }
}

/// `text` within `limit` UTF-16 units (as Telegram counts), ending in "…"
/// when cut.
pub(super) fn cut(text: &str, limit: usize) -> String {
    if text.encode_utf16().count() <= limit {
        return text.to_string();
    }
    let mut out = String::new();
    let mut units = 0;
    for c in text.chars() {
        if units + c.len_utf16() > limit - 1 {
            break;
        }
        units += c.len_utf16();
        out.push(c);
    }
    out.push('…');
    out
}

/// `text` within `limit` characters, ending in "…" when cut.
fn cut_chars(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_string();
    }
    let mut out: String = text.chars().take(limit - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use teloxide::types::ChatId;

    use super::*;

    #[test]
    fn cut_keeps_short_text_and_cuts_long_text_within_the_limit() {
        assert_eq!(cut("short", 10), "short");
        let long = "🦀".repeat(3000); // 6000 UTF-16 units
        let cut_text = cut(&long, TELEGRAM_TEXT_LIMIT);
        assert!(cut_text.encode_utf16().count() <= TELEGRAM_TEXT_LIMIT);
        assert!(cut_text.encode_utf16().count() >= TELEGRAM_TEXT_LIMIT - 2);
        assert!(cut_text.ends_with('…'));
        assert_eq!(cut_chars(&"a".repeat(300), 200).chars().count(), 200);
        assert_eq!(cut_chars("ok", 200), "ok");
    }

    #[test]
    fn a_question_with_bad_callback_data_is_refused() {
        let (q, _rx) = SendQuestion::new(ChatId(1), "ok?", vec![vec![Button::new("Yes", "")]]);
        assert!(matches!(
            Job::question(q),
            Err((OutboxError::Refused(_), _))
        ));
        let (q, _rx) = SendQuestion::new(
            ChatId(1),
            "ok?",
            vec![vec![Button::new("Yes", "y".repeat(65))]],
        );
        assert!(matches!(
            Job::question(q),
            Err((OutboxError::Refused(_), _))
        ));
        let (q, _rx) = SendQuestion::new(ChatId(1), " ", vec![vec![Button::new("Yes", "y")]]);
        assert!(matches!(Job::question(q), Err((OutboxError::EmptyText, _))));
        let (q, _rx) = SendQuestion::new(ChatId(1), "ok?", vec![vec![Button::new("Yes", "y")]]);
        assert!(matches!(Job::question(q), Ok(Job::Question(..))));
    }

    #[test]
    fn a_question_is_never_cut() {
        let yes = || vec![vec![Button::new("Yes", "y")]];
        let (q, _rx) = SendQuestion::new(ChatId(1), "a".repeat(TELEGRAM_TEXT_LIMIT + 1), yes());
        assert!(matches!(
            Job::question(q),
            Err((OutboxError::Refused(_), _))
        ));
        let whole = "a".repeat(TELEGRAM_TEXT_LIMIT);
        let (q, _rx) = SendQuestion::new(ChatId(1), whole.clone(), yes());
        assert!(matches!(Job::question(q), Ok(Job::Question(job)) if job.text == whole));
    }
}

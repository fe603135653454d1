//! Files kept for the next process ([`SendFile::keep_in`]), and what a
//! previous process left for Telegram made into jobs again: texts,
//! files (their bytes from the spool) and questions, each counted as
//! possibly sent before. A question whose buttons meant something only to
//! the process that asked (an approval: the request it asks about ended
//! with that process) goes without them, saying so; one it had shown
//! loses them, saying so too.

use std::path::PathBuf;

use teloxide::types::{ChatId, MessageId, ThreadId};

use super::jobs::{FileJob, Job, QuestionJob, TextJob, cut};
use super::post::{Anchor, Provenance};
use super::requests::{Button, QuestionFile, SendFile};
use crate::chat::notices::{QUESTION_ENDED, QUESTION_ENDED_SHOWN};
use crate::ids::Conversation;
use crate::state::{Kept, KeptFile, KeptQuestion, OutgoingRow, StoreHandle};
use crate::telegram::files::OutgoingFile;
use crate::telegram::format::TELEGRAM_TEXT_LIMIT;

impl SendFile {
    /// Keeps the file in `store` until it is settled: on the store thread,
    /// ahead of whatever is asked after it, its bytes (read from the
    /// descriptor) are copied into the state file's spool and its row is
    /// written. Its row id; `None` when the descriptor cannot be shared.
    pub fn keep_in(&self, store: &StoreHandle) -> Option<i64> {
        let reader = match self.file.try_clone() {
            Ok(reader) => reader,
            Err(err) => {
                tracing::error!(file = %self.file.name, cause = %err, "a file to send could not be kept; it goes from memory only");
                return None;
            }
        };
        let kept = KeptFile {
            name: self.file.name.clone(),
            caption: self.caption.clone(),
            as_photo: self.as_photo,
        };
        Some(store.keep_outgoing_file(self.to, kept, move |out| reader.copy_to(out)))
    }
}

/// The job of `row`, sent as coming from `origin`; `spooled`: where its
/// file's bytes are, if it is a file. `None` (logged) when it cannot be
/// sent: a file whose spooled copy is gone.
pub(super) fn job(
    mut row: OutgoingRow,
    origin: Provenance,
    spooled: Option<PathBuf>,
) -> Option<Job> {
    let chat = ChatId(row.chat_id);
    let topic = i32::try_from(row.topic)
        .ok()
        .filter(|t| *t != 0)
        .map(|t| ThreadId(MessageId(t)));
    let to = Conversation { chat, topic };
    match row.kept.take() {
        None => Some(Job::Text(TextJob {
            text: row.text,
            markdown: row.markdown,
            place: Anchor {
                topic,
                reply_to: row.reply_to.map(MessageId),
            },
            into: None,
            reply: None,
            origin,
            kept: Some(row.id),
        })),
        Some(Kept::File(file)) => file_job(to, row.id, file, origin, spooled),
        Some(Kept::Question(question)) => Some(question_job(to, row, question, origin)),
    }
}

fn file_job(
    to: Conversation,
    row: i64,
    kept: KeptFile,
    origin: Provenance,
    spooled: Option<PathBuf>,
) -> Option<Job> {
    let opened = spooled
        .ok_or_else(|| std::io::Error::other("no spool"))
        .and_then(|path| OutgoingFile::spooled(&path, kept.name.clone(), kept.as_photo));
    let file = match opened {
        Ok(file) => file,
        Err(err) => {
            tracing::error!(chat_id = to.chat.0, row, file = %kept.name, cause = %err, "the kept copy of a file waiting for telegram is gone; it is not sent");
            return None;
        }
    };
    let (mut send, _nobody) = SendFile::new(to, file, kept.caption, kept.as_photo);
    send.kept = Some(row);
    Some(Job::File(FileJob { send, origin }))
}

/// The edit that ends an approval question a previous process showed as
/// `message_id` (its request ended with that process): its buttons go, and
/// a line says why.
pub(super) fn ended(text: &str, message_id: i32) -> Job {
    // Room for the line that says why it has no buttons.
    let room = TELEGRAM_TEXT_LIMIT - QUESTION_ENDED_SHOWN.encode_utf16().count() - 2;
    let text = format!("{}\n\n{QUESTION_ENDED_SHOWN}", cut(text, room));
    Job::Edit(MessageId(message_id), text, None)
}

fn question_job(to: Conversation, row: OutgoingRow, kept: KeptQuestion, origin: Provenance) -> Job {
    let (text, buttons) = if kept.ends_with_process {
        // Room for the line that says why it has no buttons.
        let room = TELEGRAM_TEXT_LIMIT - QUESTION_ENDED.encode_utf16().count() - 2;
        (
            format!("{}\n\n{QUESTION_ENDED}", cut(&row.text, room)),
            Vec::new(),
        )
    } else {
        let buttons = kept
            .buttons
            .into_iter()
            .map(|r| r.into_iter().map(|(l, d)| Button::new(l, d)).collect())
            .collect();
        (row.text, buttons)
    };
    let file = kept.file.map(|(name, caption, text)| QuestionFile {
        name,
        caption,
        text,
    });
    let (reply, _nobody) = tokio::sync::oneshot::channel();
    Job::Question(QuestionJob {
        text,
        buttons,
        topic: to.topic,
        file,
        reply,
        origin,
        ends_with_process: kept.ends_with_process,
        kept: Some(row.id),
    })
}

//! Running each kind of job: the Bot API request it makes, all through
//! [`deliver`] (one retry path) and `telegram::call`. A message that may or
//! may not have arrived is settled in `resend.rs` ([`Post::settle`]).

use std::time::Instant;

use serde::Serialize;
use teloxide::payloads::{
    AnswerCallbackQuery, CreateForumTopic, EditForumTopic, SendChatAction, SendDocument,
    SendMessage, SendPhoto, SetMessageReaction,
};
use teloxide::requests::Payload;
use teloxide::types::{
    CallbackQueryId, ChatAction, InputFile, Message, MessageId, ReactionType, ReplyParameters,
    ThreadId,
};

use super::deliver::{RequestTerms, Telegram, deliver};
use super::error::OutboxError;
use super::jobs::{CAPTION_LIMIT, CallbackAnswer, FileJob, Job, QuestionJob, TextJob, cut};
use super::keyboard::SendKeyboard;
use super::live::{self, ShownMessage};
use super::post::{Anchor, LaneView, Post, Provenance, lock};
use super::requests::{Clear, QuestionFile, SendFile, Slot, fit_topic_name};
use crate::chat::notices::undelivered;
use crate::events::BotEvent;
use crate::telegram::call::{FilePart, call, call_with_file};
use crate::telegram::format::{self, Rendered, TELEGRAM_TEXT_LIMIT};
use crate::telegram::typing::TypingView;

impl Post<'_> {
    /// Runs one job of the chat's lane.
    pub(super) async fn run(&mut self, lane: &mut impl LaneView, job: Job) {
        match job {
            Job::Typing(lease, topic) => self.typing(&lease, topic).await,
            Job::Text(job) => self.text(lane, job).await,
            Job::Clear(clear) => self.clear(lane, clear).await,
            Job::React(message_id, emoji, reply) => {
                let _ = reply.send(self.react(message_id, emoji).await);
            }
            Job::File(file) => self.file(file).await,
            Job::Question(question) => self.question(question).await,
            Job::Topic(name, reply) => {
                let _ = reply.send(self.topic(name).await);
            }
            Job::Rename(topic, name) => self.rename(topic, name).await,
            Job::Unbutton(message_id) => self.unbutton(message_id).await,
            Job::Edit(message_id, text, reply) => {
                let rendered = Rendered::plain(text);
                let result =
                    live::edit(self.telegram, self.chat, self.pacing, message_id, &rendered).await;
                if let Err(err) = &result {
                    tracing::warn!(message_id = message_id.0, cause = %err, "question not edited");
                }
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
            }
        }
    }

    /// "typing…", only while `lease` is alive: looked at before each
    /// attempt, so no retry outlives it. Takes no pacing.
    async fn typing(&mut self, lease: &TypingView, topic: Option<ThreadId>) {
        let (telegram, chat, events) = (self.telegram, self.chat, self.events);
        let result = deliver(
            telegram,
            None,
            RequestTerms::idempotent("sendChatAction"),
            |_| {
                // Stamped before the lease is looked at: a lease ended (on the
                // actors' thread) after this look ended after this stamp.
                let at = Instant::now();
                if !lease.may_show() {
                    return None;
                }
                events.publish(BotEvent::ChatActionSent { chat, at });
                let mut payload = SendChatAction::new(chat, ChatAction::Typing);
                payload.message_thread_id = topic;
                Some(async move { call(&telegram.bot, &payload).await })
            },
        )
        .await;
        match result {
            Ok(_) | Err(OutboxError::Dropped) => {}
            Err(err) => tracing::debug!(cause = %err, "sendChatAction failed"),
        }
    }

    async fn text(&mut self, lane: &mut impl LaneView, job: TextJob) {
        let TextJob {
            text,
            markdown,
            place,
            into,
            reply,
            origin,
            kept: _,
        } = job;
        if let Some(id) = place.reply_to {
            lock(self.known).saw(id);
        }
        let outcome = self.pieces(lane, text, markdown, place, into, origin).await;
        if let Err((err, delivered)) = &outcome
            && !self.expired(place.topic, err, "a message").await
        {
            tracing::warn!(cause = %err, delivered_pieces = delivered, "message not delivered");
        }
        if let Some(reply) = reply {
            let _ = reply.send(outcome.map_err(|(err, _)| err));
        }
    }

    /// Sends a text's pieces in order; the first one finishes the slot
    /// `into` (an edit of the message it shows) when there is one. Stops at
    /// the first failure, or when `/stop` stopped the turn that sent it.
    async fn pieces(
        &mut self,
        lane: &mut impl LaneView,
        text: String,
        markdown: bool,
        mut place: Anchor,
        into: Option<Slot>,
        origin: Provenance,
    ) -> Result<Vec<MessageId>, (OutboxError, usize)> {
        let pieces = if markdown {
            format::pieces(&text)
        } else {
            format::split(&Rendered::plain(text), TELEGRAM_TEXT_LIMIT)
        };
        let mut ids = Vec::new();
        let mut shown = into.and_then(|slot| lane.close(slot));
        for piece in pieces {
            if lane.stopped() {
                return Err((OutboxError::Dropped, ids.len()));
            }
            if let Some(ShownMessage { id, rendered }) = shown.take() {
                // The preview may show exactly this piece already.
                if rendered == piece {
                    ids.push(id);
                    place.reply_to = None;
                    continue;
                }
                match live::edit(self.telegram, self.chat, self.pacing, id, &piece).await {
                    Ok(()) => {
                        ids.push(id);
                        place.reply_to = None;
                        continue;
                    }
                    // The preview is gone (deleted by the user, too old to
                    // edit): the text goes as a new message.
                    Err(err) => {
                        tracing::info!(message_id = id.0, cause = %err, "preview not replaced; sending the text anew");
                    }
                }
            }
            let sent = self.piece(place, &piece, origin).await;
            // Only the first piece is a reply.
            place.reply_to = None;
            match sent {
                Ok(id) => ids.push(id),
                Err(err) => return Err((err, ids.len())),
            }
        }
        Ok(ids)
    }

    /// Sends one piece of text: entities, never a parse mode, so nothing in
    /// the text can fail to parse; should Telegram refuse them all the same,
    /// the piece goes once more as plain text.
    pub(super) async fn piece(
        &mut self,
        place: Anchor,
        piece: &Rendered,
        origin: Provenance,
    ) -> Result<MessageId, OutboxError> {
        let mut terms = RequestTerms::once("sendMessage");
        if !piece.entities.is_empty() {
            terms = terms.or_plain();
        }
        let (telegram, chat) = (self.telegram, self.chat);
        self.settle(terms, place.topic, origin, |plain| {
            let mut payload = SendMessage::new(chat, piece.text.as_str());
            payload.message_thread_id = place.topic;
            payload.reply_parameters = place
                .reply_to
                .map(|message| ReplyParameters::new(message).allow_sending_without_reply());
            if !plain && !piece.entities.is_empty() {
                payload.entities = Some(piece.entities.clone());
            }
            Some(async move { call(&telegram.bot, &payload).await.map(|m| m.id) })
        })
        .await
    }

    async fn clear(&mut self, lane: &mut impl LaneView, clear: Clear) {
        let Some(ShownMessage { id, .. }) = lane.close(clear.slot) else {
            return;
        };
        let (telegram, chat) = (self.telegram, self.chat);
        let result = match &clear.fold {
            Some(line) => {
                let line = Rendered::plain(cut(line, TELEGRAM_TEXT_LIMIT));
                live::edit(telegram, chat, self.pacing, id, &line).await
            }
            None => live::delete(telegram, chat, self.pacing, id).await,
        };
        if let Err(err) = result {
            tracing::warn!(message_id = id.0, cause = %err, "live message not cleared");
        }
    }

    /// A forum topic: never twice, paced as a message.
    async fn topic(&mut self, name: String) -> Result<ThreadId, OutboxError> {
        let (telegram, chat) = (self.telegram, self.chat);
        let result = deliver(
            telegram,
            Some(&mut *self.pacing),
            RequestTerms::once("createForumTopic"),
            |_| {
                let payload = CreateForumTopic::new(chat, name.as_str());
                Some(async move { call(&telegram.bot, &payload).await.map(|t| t.thread_id) })
            },
        )
        .await;
        if let Err(err) = &result {
            tracing::warn!(cause = %err, "forum topic not created");
        }
        result
    }

    /// A topic's new name: may go twice (the same name), paced as a
    /// message; a failure is logged and nothing else.
    async fn rename(&mut self, topic: ThreadId, name: String) {
        let name = fit_topic_name(&name);
        let (telegram, chat) = (self.telegram, self.chat);
        let result = deliver(
            telegram,
            Some(&mut *self.pacing),
            RequestTerms::idempotent("editForumTopic"),
            |_| {
                let mut payload = EditForumTopic::new(chat, topic);
                payload.name = Some(name.clone());
                Some(async move { call(&telegram.bot, &payload).await.map(|_| ()) })
            },
        )
        .await;
        match result {
            Ok(()) => tracing::info!(topic = topic.0.0, "topic named after its first message"),
            Err(err) => {
                tracing::warn!(topic = topic.0.0, cause = %err, "topic not named; it keeps its name")
            }
        }
    }

    /// A reaction: may go twice, takes no pacing.
    async fn react(&mut self, message_id: MessageId, emoji: String) -> Result<(), OutboxError> {
        let (telegram, chat) = (self.telegram, self.chat);
        let terms = RequestTerms::idempotent("setMessageReaction");
        deliver(telegram, None, terms, |_| {
            let mut payload = SetMessageReaction::new(chat, message_id);
            payload.reaction = Some(vec![ReactionType::Emoji {
                emoji: emoji.clone(),
            }]);
            Some(async move { call(&telegram.bot, &payload).await.map(|_| ()) })
        })
        .await
    }

    async fn file(&mut self, job: FileJob) {
        let FileJob { send: file, origin } = job;
        let result = self.upload(&file, origin).await;
        if let Err(err) = &result
            && !self.expired(file.to.topic, err, "a file").await
        {
            tracing::warn!(file = %file.file.name, cause = %err, "file not delivered");
        }
        let _ = file.reply.send(result);
    }

    /// Sends a file as a document or a photo.
    async fn upload(
        &mut self,
        file: &SendFile,
        sent: Provenance,
    ) -> Result<MessageId, OutboxError> {
        // Read once, off this thread, from the descriptor the turn opened
        // and checked; every attempt sends these bytes.
        let unreadable = |e: std::io::Error| OutboxError::Unreadable(std::sync::Arc::new(e));
        let reader = file.file.try_clone().map_err(unreadable)?;
        let bytes = tokio::task::spawn_blocking(move || reader.read())
            .await
            .map_err(|e| unreadable(std::io::Error::other(e)))?
            .map_err(unreadable)?;
        let part = FilePart {
            field: if file.as_photo { "photo" } else { "document" },
            name: file.file.name.clone(),
            bytes: bytes::Bytes::from(bytes),
        };
        let caption = file.caption.as_deref().map(|c| cut(c, CAPTION_LIMIT));
        if file.as_photo {
            self.send_photo(file.to.topic, caption, &part, sent).await
        } else {
            self.send_document(file.to.topic, caption, &part, sent)
                .await
        }
    }

    async fn send_photo(
        &mut self,
        topic: Option<ThreadId>,
        caption: Option<String>,
        part: &FilePart,
        sent: Provenance,
    ) -> Result<MessageId, OutboxError> {
        let chat = self.chat;
        self.upload_as("sendPhoto", topic, sent, part, || {
            let mut payload = SendPhoto::new(chat, InputFile::memory(part.bytes.clone()));
            payload.caption = caption.clone();
            payload.message_thread_id = topic;
            payload
        })
        .await
    }

    async fn send_document(
        &mut self,
        topic: Option<ThreadId>,
        caption: Option<String>,
        part: &FilePart,
        sent: Provenance,
    ) -> Result<MessageId, OutboxError> {
        let chat = self.chat;
        self.upload_as("sendDocument", topic, sent, part, || {
            let mut payload = SendDocument::new(chat, InputFile::memory(part.bytes.clone()));
            payload.caption = caption.clone();
            payload.message_thread_id = topic;
            payload
        })
        .await
    }

    /// Sends `part` with the payload `make` builds as `method` (an answer,
    /// of `topic`, queued at `born` by `turn`), settling an unknown outcome
    /// as a message's. The file goes as `part`; the payload's own is left
    /// out.
    async fn upload_as<P>(
        &mut self,
        method: &'static str,
        topic: Option<ThreadId>,
        origin: Provenance,
        part: &FilePart,
        make: impl Fn() -> P,
    ) -> Result<MessageId, OutboxError>
    where
        P: Payload<Output = Message> + Serialize,
    {
        let telegram = self.telegram;
        let terms = RequestTerms {
            upload: true,
            ..RequestTerms::once(method)
        };
        self.settle(terms, topic, origin, |_| {
            let payload = make();
            Some(async move {
                call_with_file(&telegram.bot, &payload, part)
                    .await
                    .map(|m| m.id)
            })
        })
        .await
    }

    /// A question: its file first (a question never goes without it), then
    /// its text under its buttons, replying to the file.
    async fn question(&mut self, question: QuestionJob) {
        let keyboard = question.keyboard();
        let waits = question.ends_with_process && keyboard.is_some();
        let QuestionJob {
            text,
            topic,
            file,
            reply,
            origin,
            ..
        } = question;
        let result = async {
            let file = match &file {
                Some(file) => Some(self.question_file(topic, file, origin).await?),
                None => None,
            };
            let (telegram, chat) = (self.telegram, self.chat);
            let terms = RequestTerms::once("sendMessage");
            self.settle(terms, topic, origin, |_| {
                let payload = SendKeyboard {
                    chat_id: chat,
                    text: text.clone(),
                    message_thread_id: topic,
                    reply_parameters: file.map(ReplyParameters::new),
                    reply_markup: keyboard.clone(),
                };
                Some(async move { call(&telegram.bot, &payload).await.map(|m| m.id) })
            })
            .await
        }
        .await;
        if let Err(err) = &result
            && !self.expired(topic, err, "a question").await
        {
            tracing::warn!(cause = %err, "question not delivered");
        }
        if let (Ok(id), true) = (&result, waits) {
            self.shown = Some(*id);
        }
        let _ = reply.send(result);
    }

    /// Sends the text file of a question (from memory, never twice).
    async fn question_file(
        &mut self,
        topic: Option<ThreadId>,
        file: &QuestionFile,
        sent: Provenance,
    ) -> Result<MessageId, OutboxError> {
        let part = FilePart {
            field: "document",
            name: file.name.clone(),
            bytes: bytes::Bytes::from(file.text.clone().into_bytes()),
        };
        let caption = Some(cut(&file.caption, CAPTION_LIMIT));
        self.send_document(topic, caption, &part, sent).await
    }

    /// When `err` says an answer outlived `telegram.max_pending_age`: logs
    /// it, counts it and tells the chat (once Telegram takes that). `false`
    /// for any other error.
    pub(super) async fn expired(
        &mut self,
        topic: Option<ThreadId>,
        err: &OutboxError,
        what: &str,
    ) -> bool {
        let OutboxError::Expired { method } = err else {
            return false;
        };
        let age = self.telegram.limits.max_pending_age;
        self.telegram.metrics.outbox().dropped(method);
        tracing::error!(
            method,
            max_pending_age = %humantime::format_duration(age),
            "telegram did not take a message within telegram.max_pending_age; dropped, the chat is told"
        );
        let notice = Rendered::plain(undelivered(what, age));
        let place = Anchor {
            topic,
            reply_to: None,
        };
        if let Err(err) = self.piece(place, &notice, Provenance::now(None)).await {
            tracing::warn!(cause = %err, "the notice of a dropped message was not delivered");
        }
        true
    }
}

/// Answers a callback query, with the retry rules of any request but no
/// pacing, never past its `until`.
pub(super) async fn answer_callback(telegram: &Telegram, answer: CallbackAnswer) {
    let CallbackAnswer {
        id,
        text,
        alert,
        until,
    } = answer;
    let terms = RequestTerms {
        until: Some(until),
        ..RequestTerms::idempotent("answerCallbackQuery")
    };
    let result = deliver(telegram, None, terms, |_| {
        let mut payload = AnswerCallbackQuery::new(CallbackQueryId(id.clone()));
        payload.show_alert = Some(alert);
        if !text.is_empty() {
            payload.text = Some(text.clone());
        }
        Some(async move { call(&telegram.bot, &payload).await.map(|_| ()) })
    })
    .await;
    if let Err(err) = result {
        tracing::warn!(callback_query_id = %id, cause = %err, "callback query not answered");
    }
}

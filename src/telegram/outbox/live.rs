//! The requests of live slots: a message sent and then edited, a draft
//! (`sendMessageDraft`, which teloxide 0.17 does not know), an edit that
//! finishes a slot, and a delete. All go through [`call`], so no 5xx makes
//! teloxide sleep 10 s.

use serde::Serialize;
use teloxide::payloads::{DeleteMessage, EditMessageText, SendMessage};
use teloxide::requests::Payload;
use teloxide::types::{ChatId, MessageEntity, MessageId, ReplyParameters, ThreadId, True};
use teloxide::{ApiError, RequestError};

use super::deliver::{RequestTerms, Telegram, deliver};
use super::error::OutboxError;
use super::pacing::Pacing;
use super::requests::Show;
use crate::telegram::call::call;
use crate::telegram::format::{self, Rendered, TELEGRAM_TEXT_LIMIT};

/// The message a live slot shows, and its text.
pub(super) struct ShownMessage {
    pub(super) id: MessageId,
    pub(super) rendered: Rendered,
}

/// The first 4096 units of what a slot shows.
pub(super) fn live_text(text: &str, markdown: bool) -> Rendered {
    let rendered = if markdown {
        format::render(text)
    } else {
        Rendered::plain(text)
    };
    format::split(&rendered, TELEGRAM_TEXT_LIMIT)
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// `sendMessageDraft` (Bot API 9.3): streams a partial message to a user in
/// a private chat; the draft vanishes when the bot sends anything else.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SendMessageDraft {
    pub(super) chat_id: ChatId,
    pub(super) draft_id: u32,
    pub(super) text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) message_thread_id: Option<ThreadId>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) entities: Vec<MessageEntity>,
}

impl Payload for SendMessageDraft {
    type Output = True;
    const NAME: &'static str = "sendMessageDraft";
}

fn entities(rendered: &Rendered) -> Option<Vec<MessageEntity>> {
    (!rendered.entities.is_empty()).then(|| rendered.entities.clone())
}

/// One attempt at showing a slot's text: a draft, an edit of the message it
/// shows, or its first message (whose id comes back). Entities Telegram
/// refuses are dropped and the text tried once more, plain.
pub(super) async fn show(
    telegram: &Telegram,
    chat: ChatId,
    show: &Show,
    rendered: &Rendered,
    draft: bool,
    shown: Option<MessageId>,
) -> Result<Option<MessageId>, RequestError> {
    let plain = Rendered::plain(rendered.text.clone());
    let mut attempt = once(telegram, chat, show, rendered, draft, shown).await;
    if let Err(RequestError::Api(ApiError::CantParseEntities(why))) = &attempt {
        tracing::info!(cause = %why, "live text formatting refused; shown plain");
        attempt = once(telegram, chat, show, &plain, draft, shown).await;
    }
    attempt
}

async fn once(
    telegram: &Telegram,
    chat: ChatId,
    show: &Show,
    rendered: &Rendered,
    draft: bool,
    shown: Option<MessageId>,
) -> Result<Option<MessageId>, RequestError> {
    if draft {
        let payload = SendMessageDraft {
            chat_id: chat,
            draft_id: show.slot.0,
            text: rendered.text.clone(),
            message_thread_id: show.to.topic,
            entities: rendered.entities.clone(),
        };
        let answer = call(&telegram.bot, &payload).await;
        telegram.metrics.telegram("sendMessageDraft", &answer);
        return answer.map(|_| None);
    }
    if let Some(message_id) = shown {
        let mut payload = EditMessageText::new(chat, message_id, rendered.text.clone());
        payload.entities = entities(rendered);
        let answer = call(&telegram.bot, &payload).await;
        telegram.metrics.telegram("editMessageText", &answer);
        return match answer {
            Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(None),
            Err(err) => Err(err),
        };
    }
    let mut payload = SendMessage::new(chat, rendered.text.clone());
    payload.message_thread_id = show.to.topic;
    payload.reply_parameters = show
        .reply_to
        .map(|message| ReplyParameters::new(message).allow_sending_without_reply());
    payload.entities = entities(rendered);
    let answer = call(&telegram.bot, &payload).await;
    telegram.metrics.telegram("sendMessage", &answer);
    answer.map(|message| Some(message.id))
}

/// Replaces a message's text (the last edit of a preview, a status folded to
/// its line, a question's decision), with the retry rules of an edit;
/// refused entities fall back to plain text once. Telegram's "message is
/// not modified" counts as done.
pub(super) async fn edit(
    telegram: &Telegram,
    chat: ChatId,
    pacing: &mut Pacing,
    message_id: MessageId,
    rendered: &Rendered,
) -> Result<(), OutboxError> {
    let mut terms = RequestTerms::idempotent("editMessageText");
    if !rendered.entities.is_empty() {
        terms = terms.or_plain();
    }
    deliver(telegram, Some(pacing), terms, |plain| {
        // No reply_markup: a question's buttons go.
        let mut payload = EditMessageText::new(chat, message_id, rendered.text.clone());
        payload.entities = entities(rendered).filter(|_| !plain);
        Some(async move {
            match call(&telegram.bot, &payload).await {
                Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
                Err(err) => Err(err),
            }
        })
    })
    .await
}

/// Deletes a message (a status line at the end of its turn).
pub(super) async fn delete(
    telegram: &Telegram,
    chat: ChatId,
    pacing: &mut Pacing,
    message_id: MessageId,
) -> Result<(), OutboxError> {
    let terms = RequestTerms::idempotent("deleteMessage");
    deliver(telegram, Some(pacing), terms, |_| {
        let payload = DeleteMessage::new(chat, message_id);
        Some(async move { call(&telegram.bot, &payload).await.map(|_| ()) })
    })
    .await
}

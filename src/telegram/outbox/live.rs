//! The requests of live slots: a message sent and then edited, a draft
//! (`sendMessageDraft`, which teloxide 0.17 does not know), an edit that
//! finishes a slot, and a delete. All go through [`call`], so no 5xx makes
//! teloxide sleep 10 s.

use serde::Serialize;
use teloxide::payloads::{DeleteMessage, EditMessageText, SendMessage};
use teloxide::requests::Payload;
use teloxide::types::{ChatId, MessageEntity, MessageId, ReplyParameters, ThreadId, True};
use teloxide::{ApiError, RequestError};

use super::retry::{Rule, deliver};
use super::{Bucket, OutboxError, Shared, Show};
use crate::telegram::call::call;
use crate::telegram::format::Rendered;

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
    shared: &Shared,
    chat: ChatId,
    show: &Show,
    rendered: &Rendered,
    draft: bool,
    shown: Option<MessageId>,
) -> Result<Option<MessageId>, RequestError> {
    let plain = Rendered::plain(rendered.text.clone());
    let mut attempt = once(shared, chat, show, rendered, draft, shown).await;
    if let Err(RequestError::Api(ApiError::CantParseEntities(why))) = &attempt {
        tracing::info!(chat_id = chat.0, cause = %why, "live text formatting refused; shown plain");
        attempt = once(shared, chat, show, &plain, draft, shown).await;
    }
    attempt
}

async fn once(
    shared: &Shared,
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
            message_thread_id: show.topic,
            entities: rendered.entities.clone(),
        };
        let answer = call(&shared.bot, &payload).await;
        shared
            .events
            .metrics()
            .telegram("sendMessageDraft", &answer);
        return answer.map(|_| None);
    }
    if let Some(message_id) = shown {
        let mut payload = EditMessageText::new(chat, message_id, rendered.text.clone());
        payload.entities = entities(rendered);
        let answer = call(&shared.bot, &payload).await;
        shared.events.metrics().telegram("editMessageText", &answer);
        return match answer {
            Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(None),
            Err(err) => Err(err),
        };
    }
    let mut payload = SendMessage::new(chat, rendered.text.clone());
    payload.message_thread_id = show.topic;
    payload.reply_parameters = show
        .reply_to
        .map(|message| ReplyParameters::new(message).allow_sending_without_reply());
    payload.entities = entities(rendered);
    let answer = call(&shared.bot, &payload).await;
    shared.events.metrics().telegram("sendMessage", &answer);
    answer.map(|message| Some(message.id))
}

/// Replaces a message's text (the last edit of a preview, a status folded to
/// its line), with the retry rules of an edit; refused entities fall back to
/// plain text once.
pub(super) async fn edit(
    shared: &Shared,
    chat: ChatId,
    bucket: &mut Bucket,
    message_id: MessageId,
    rendered: &Rendered,
) -> Result<(), OutboxError> {
    let rule = Rule {
        method: "editMessageText",
        idempotent: true,
        until: None,
    };
    let attempt = |rendered: Rendered| {
        let mut payload = EditMessageText::new(chat, message_id, rendered.text.clone());
        payload.entities = entities(&rendered);
        async move {
            match call(&shared.bot, &payload).await {
                Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
                Err(err) => Err(err),
            }
        }
    };
    let formatted = deliver(shared, chat, bucket, rule, || attempt(rendered.clone())).await;
    match formatted {
        Err(OutboxError::Refused(why))
            if !rendered.entities.is_empty() && is_entity_refusal(&why) =>
        {
            tracing::info!(chat_id = chat.0, cause = %why, "formatting refused; editing as plain text");
            let plain = Rendered::plain(rendered.text.clone());
            deliver(shared, chat, bucket, rule, || attempt(plain.clone())).await
        }
        other => other,
    }
}

/// Whether a refusal was about the entities.
fn is_entity_refusal(why: &str) -> bool {
    why.contains("can't parse entities") || why.contains("parse entities")
}

/// Deletes a message (a status line at the end of its turn).
pub(super) async fn delete(
    shared: &Shared,
    chat: ChatId,
    bucket: &mut Bucket,
    message_id: MessageId,
) -> Result<(), OutboxError> {
    let rule = Rule {
        method: "deleteMessage",
        idempotent: true,
        until: None,
    };
    deliver(shared, chat, bucket, rule, || {
        let payload = DeleteMessage::new(chat, message_id);
        async move { call(&shared.bot, &payload).await.map(|_| ()) }
    })
    .await
}

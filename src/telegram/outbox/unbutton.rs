//! Taking a question's buttons away, its text kept ([`Unbutton`]): a press
//! on a question that expired (its request ended, with an earlier process
//! or the turn) removes them, so nobody presses them in vain again.

use actix::Message;
use teloxide::payloads::EditMessageReplyMarkup;
use teloxide::types::{ChatId, MessageId};
use teloxide::{ApiError, RequestError};

use super::deliver::{RequestTerms, deliver};
use super::post::Post;
use crate::telegram::call::call;

/// Removes the buttons of `message_id` in `chat`; its text stays. Telegram's
/// "message is not modified" (no buttons left) counts as done.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Unbutton {
    /// Where.
    pub chat: ChatId,
    /// The question's message.
    pub message_id: MessageId,
}

impl Post<'_> {
    /// Runs an [`Unbutton`], with the retry rules of an edit.
    pub(super) async fn unbutton(&mut self, message_id: MessageId) {
        let (telegram, chat) = (self.telegram, self.chat);
        let terms = RequestTerms::idempotent("editMessageReplyMarkup");
        let removed = deliver(telegram, Some(&mut *self.pacing), terms, |_| {
            // No reply_markup: the buttons go.
            let payload = EditMessageReplyMarkup::new(chat, message_id);
            Some(async move {
                match call(&telegram.bot, &payload).await {
                    Ok(_) | Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(()),
                    Err(err) => Err(err),
                }
            })
        })
        .await;
        if let Err(err) = removed {
            tracing::warn!(message_id = message_id.0, cause = %err, "the buttons of an expired question were not removed");
        }
    }
}

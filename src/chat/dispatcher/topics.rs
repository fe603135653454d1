//! `/sessions` in a private chat with topics: the session picked opens in
//! a topic of its own (`createForumTopic`), and the conversation it was
//! picked in goes on as it was. Every topic the bot opens in a private
//! chat waits for a name from its first message (`chat::naming`).

use actix::{AsyncContext, Context, WrapFuture};

use super::Dispatcher;
use crate::chat::notices::settings;
use crate::chat::notices::{STORE_UNREADABLE, bounded};
use crate::ids::Conversation;
use crate::incoming::Press;
use crate::state::StoreHandle;
use crate::telegram::outbox::{AnswerCallback, CreateTopic, EditQuestion, SendText};

/// Notes that `into`, a topic the bot opened in a private chat, waits for
/// a name from its first message.
pub(super) fn await_name(inbox: &StoreHandle, into: Conversation) {
    if into.chat.is_user() {
        inbox.tell("noting a topic waits for a name", move |store| {
            store.await_name(into)
        });
    }
}

impl Dispatcher {
    /// A press on session `id` of `/sessions` in a private chat with
    /// topics: a topic opens where that session goes on (a past one moves
    /// there, the current one is copied); the picker says where.
    pub(super) fn session_in_topic(&mut self, id: String, press: &Press, ctx: &mut Context<Self>) {
        let (from, callback, message) = (press.to, press.id.clone(), press.message);
        let (inbox, outbox) = (self.inbox.clone(), self.outbox.clone());
        let sessions = inbox.sessions(from);
        ctx.spawn(
            async move {
                let told = |text: String| {
                    outbox.do_send(AnswerCallback::new(
                        from.chat,
                        callback,
                        bounded(&text, 190),
                    ));
                    match message {
                        Some(message) => {
                            outbox.do_send(EditQuestion::new(from.chat, message, text))
                        }
                        None => outbox.do_send(SendText::new(from, text)),
                    }
                };
                let words = match sessions.await {
                    Ok(rows) => rows.into_iter().find(|r| r.id == id).map(|r| r.first_words),
                    Err(_) => return told(STORE_UNREADABLE.to_owned()),
                };
                let Some(words) = words else {
                    return told(settings::NOT_THIS_SESSION.to_owned());
                };
                let (create, created) =
                    CreateTopic::new(from.chat, settings::session_topic_name(&words));
                outbox.do_send(create);
                let thread = match created.await {
                    Ok(Ok(thread)) => thread,
                    Ok(Err(err)) => return told(settings::session_topic_failed(&err.to_string())),
                    Err(_) => {
                        return tracing::debug!("the outbox stopped before the topic was made");
                    }
                };
                let into = Conversation::new(from.chat, Some(thread));
                await_name(&inbox, into);
                let opened = inbox.read("opening a session in a topic", move |store| {
                    store.open_in(from, into, &id)
                });
                match opened.await {
                    Ok(Some(_)) => {
                        outbox.do_send(SendText::new(into, settings::session_topic_opened(&words)));
                        told(settings::session_topic_left(&words));
                    }
                    _ => told(settings::CHOICE_NOT_SAVED.to_owned()),
                }
            }
            .into_actor(self),
        );
    }
}

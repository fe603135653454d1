//! The dispatcher's side of what a conversation chooses: `/model`,
//! `/sessions` (each with a button per entry), `/fork`, `/usage`, and a
//! press on a list's button. A choice is written by the conversation's
//! supervisor ([`Choose`]), so a turn ending meanwhile cannot undo it. Only
//! the latest list of each kind in a conversation is live; a press on an
//! older one is answered "expired".

use actix::{ActorFutureExt, AsyncContext, Context, WrapFuture};
use futures_util::future::BoxFuture;
use teloxide::types::CallbackQuery;

use super::Dispatcher;
use crate::chat::choices::{self, ListKind, Pick};
use crate::chat::notices::bounded;
use crate::chat::supervisor::{Choose, Chosen};
use crate::ids::Conversation;
use crate::incoming::Incoming;
use crate::telegram::outbox::{AnswerCallback, Button, EditQuestion, SendQuestion, SendText};

/// How many conversations an admin's `/usage` lists.
const TOP_CONVERSATIONS: usize = 5;

/// What the answer to a [`Chosen`] says, for a model or a session.
fn chosen_text(chosen: &Chosen, what: &str) -> String {
    match chosen {
        Chosen::Done => what.to_owned(),
        Chosen::Unknown => "⚠️ That session is not one of this conversation's.".to_owned(),
        Chosen::Forked(_) | Chosen::NothingToFork | Chosen::Failed => {
            "⚠️ That could not be saved; try again.".to_owned()
        }
    }
}

impl Dispatcher {
    /// Hands a choice to the conversation's supervisor (starting one),
    /// which writes it; resolves with how it went.
    fn choose(
        &mut self,
        to: Conversation,
        choice: Choose,
        ctx: &mut Context<Self>,
    ) -> BoxFuture<'static, Chosen> {
        let entry = self.supervisor(to, ctx);
        entry.routed += 1;
        let sent = entry.addr.send(choice);
        Box::pin(async move { sent.await.unwrap_or(Chosen::Failed) })
    }

    /// `/model`: what runs, with a button per listed model; `/model NAME`
    /// switches to a listed one; with no list, switching is off.
    pub(super) fn model(&mut self, asked: &Incoming, ctx: &mut Context<Self>) {
        let (to, name) = (asked.to, asked.text.trim());
        let models = std::sync::Arc::clone(&self.deps.models);
        let outbox = self.deps.outbox.clone();
        if !name.is_empty() && !models.listed.is_empty() {
            let Some(model) = models.find(name).map(str::to_owned) else {
                return self.say(to, choices::model_refused(name, &models));
            };
            let chosen = self.choose(to, Choose::Model(Some(model.clone())), ctx);
            let done = format!("🧠 From the next message on, this conversation runs with {model}.");
            ctx.spawn(
                async move {
                    let text = chosen_text(&chosen.await, &done);
                    outbox.do_send(SendText::new(to, text));
                }
                .into_actor(self),
            );
            return;
        }
        let list = (!models.listed.is_empty())
            .then(|| self.lists.show(to, ListKind::Models, models.listed.clone()));
        let stored = self.deps.inbox.model(to);
        ctx.spawn(
            async move {
                let stored = stored.await;
                let Some(list) = list else {
                    let text = choices::model_fixed(&models, stored.as_deref());
                    return outbox.do_send(SendText::new(to, text));
                };
                let current = models.running(stored.as_deref());
                let buttons = models
                    .listed
                    .iter()
                    .enumerate()
                    .map(|(entry, model)| {
                        let pick = Pick {
                            kind: ListKind::Models,
                            list,
                            entry,
                        };
                        vec![Button::new(
                            choices::model_label(model, &current),
                            pick.data(),
                        )]
                    })
                    .collect();
                let text = choices::model_menu(&models, stored.as_deref());
                outbox.do_send(SendQuestion::new(to, text, buttons).0);
            }
            .into_actor(self),
        );
    }

    /// `/sessions`: the latest ten, a button each.
    pub(super) fn sessions(&mut self, to: Conversation, ctx: &mut Context<Self>) {
        let rows = self.deps.inbox.sessions(to);
        ctx.spawn(rows.into_actor(self).map(move |rows, act, _ctx| {
            let text = choices::sessions_text(&rows);
            if rows.is_empty() {
                return act.say(to, text);
            }
            let ids = rows.iter().map(|r| r.id.clone()).collect();
            let list = act.lists.show(to, ListKind::Sessions, ids);
            let buttons = rows
                .iter()
                .enumerate()
                .map(|(entry, row)| {
                    let pick = Pick {
                        kind: ListKind::Sessions,
                        list,
                        entry,
                    };
                    vec![Button::new(choices::session_label(row), pick.data())]
                })
                .collect();
            act.deps
                .outbox
                .do_send(SendQuestion::new(to, text, buttons).0);
        }));
    }

    /// A press on a `/model` or `/sessions` button (by someone the
    /// dispatcher admitted to the chat, so someone who may use both): the
    /// choice is made if the list is the live one, else "expired".
    pub(super) fn picked(
        &mut self,
        pick: Pick,
        to: Conversation,
        query: &CallbackQuery,
        ctx: &mut Context<Self>,
    ) {
        let callback = query.id.to_string();
        let outbox = self.deps.outbox.clone();
        let Some(entry) = self.lists.chosen(to, pick).map(str::to_owned) else {
            return outbox.do_send(AnswerCallback::new(
                to.chat,
                callback,
                "This list has expired; ask for it again.",
            ));
        };
        self.lists.close(to, pick.kind);
        let (choice, done) = match pick.kind {
            ListKind::Models => (
                Choose::Model(Some(entry.clone())),
                format!("🧠 From the next message on, this conversation runs with {entry}."),
            ),
            ListKind::Sessions => (
                Choose::Session(entry),
                "🗂 The next message goes on in the session picked. /sessions lists them."
                    .to_owned(),
            ),
        };
        let chosen = self.choose(to, choice, ctx);
        let message = query.message.as_ref().map(|m| m.id());
        ctx.spawn(
            async move {
                let text = chosen_text(&chosen.await, &done);
                outbox.do_send(AnswerCallback::new(to.chat, callback, bounded(&text, 190)));
                match message {
                    Some(message) => outbox.do_send(EditQuestion::new(to.chat, message, text)),
                    None => outbox.do_send(SendText::new(to, text)),
                }
            }
            .into_actor(self),
        );
    }

    /// `/fork`: the conversation goes on from a copy of its session; the
    /// original stays in `/sessions`.
    pub(super) fn fork(&mut self, to: Conversation, ctx: &mut Context<Self>) {
        let chosen = self.choose(to, Choose::Fork, ctx);
        let outbox = self.deps.outbox.clone();
        ctx.spawn(
            async move {
                let text = match chosen.await {
                    Chosen::Forked(words) => format!(
                        "🍴 Forked. The next message goes on from a copy of the session “{}”; the original stays in /sessions.",
                        bounded(&words, 60)
                    ),
                    Chosen::NothingToFork => {
                        "Nothing to fork yet: this conversation has no session.".to_owned()
                    }
                    _ => "⚠️ The fork could not be saved; try again.".to_owned(),
                };
                outbox.do_send(SendText::new(to, text));
            }
            .into_actor(self),
        );
    }

    /// `/usage`: this conversation's turns, model calls, tokens and cost
    /// today, in 7 and in 30 days; an admin in a private chat also gets
    /// the bot's and the conversations that cost most.
    pub(super) fn usage(
        &mut self,
        to: Conversation,
        admin: bool,
        private: bool,
        ctx: &mut Context<Self>,
    ) {
        let inbox = self.deps.inbox.clone();
        let mine = inbox.usage(Some(to));
        let whole =
            (admin && private).then(|| (inbox.usage(None), inbox.usage_top(TOP_CONVERSATIONS)));
        let outbox = self.deps.outbox.clone();
        ctx.spawn(
            async move {
                let mut text = format!(
                    "📊 This conversation:\n{}",
                    choices::usage_lines(&mine.await)
                );
                if let Some((all, top)) = whole {
                    text.push_str(&choices::usage_admin(&all.await, &top.await));
                }
                outbox.do_send(SendText::new(to, text));
            }
            .into_actor(self),
        );
    }
}

//! The menus a conversation chooses from: `/model`, `/sessions` and
//! `/project`, each with a button per entry, a press on one of those
//! buttons (a [`Pick`]), and `/fork`. A choice is written by the
//! conversation's supervisor ([`Choose`]), so a turn ending meanwhile
//! cannot undo it. Only the latest list of each kind in a conversation is
//! live; a press on an older one is answered "expired".

use actix::{ActorFutureExt, AsyncContext, Context, WrapFuture};
use futures_util::future::BoxFuture;

use super::topics::await_name;
use super::{Dispatcher, ForChat};
use crate::chat::menus::{self, ListKind, Pick};
use crate::chat::notices;
use crate::chat::notices::settings;
use crate::chat::notices::{STORE_UNREADABLE, bounded};
use crate::chat::supervisor::{ChatCommand, Choose, Chosen};
use crate::ids::Conversation;
use crate::incoming::{Command, Incoming, Press, Source};
use crate::telegram::outbox::{
    AnswerCallback, Button, CreateTopic, EditQuestion, OutboxError, SendQuestion, SendText,
};

/// What the answer to a [`Chosen`] says, for a model or a session.
fn chosen_text(chosen: &Chosen, what: &str) -> String {
    match chosen {
        Chosen::Done => what.to_owned(),
        Chosen::Unknown => settings::NOT_THIS_SESSION.to_owned(),
        Chosen::Forked(_) | Chosen::NothingToFork | Chosen::Failed => {
            settings::CHOICE_NOT_SAVED.to_owned()
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
        let offered = std::sync::Arc::clone(&self.choices);
        let models = &offered.models;
        let outbox = self.outbox.clone();
        if !name.is_empty() && !models.listed.is_empty() {
            let Some(model) = models.find(name).map(str::to_owned) else {
                return self.say(to, menus::model_refused(name, models));
            };
            let chosen = self.choose(to, Choose::Model(Some(model.clone())), ctx);
            let done = settings::model_switched(&model);
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
        let stored = (self.inbox).read("reading the model", move |store| store.model(to));
        ctx.spawn(
            async move {
                let models = &offered.models;
                let Ok(stored) = stored.await else {
                    return outbox.do_send(SendText::new(to, STORE_UNREADABLE));
                };
                let Some(list) = list else {
                    let text = menus::model_fixed(models, stored.as_deref());
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
                            menus::model_label(model, &current),
                            pick.data(),
                        )]
                    })
                    .collect();
                let text = menus::model_menu(models, stored.as_deref());
                outbox.do_send(SendQuestion::new(to, text, buttons).0);
            }
            .into_actor(self),
        );
    }

    /// `/sessions`: the latest ten, a button each.
    pub(super) fn sessions(&mut self, to: Conversation, ctx: &mut Context<Self>) {
        let rows = self.inbox.sessions(to);
        ctx.spawn(rows.into_actor(self).map(move |rows, act, _ctx| {
            let Ok(rows) = rows else {
                return act.say(to, STORE_UNREADABLE);
            };
            let text = menus::sessions_text(&rows);
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
                    vec![Button::new(menus::session_label(row), pick.data())]
                })
                .collect();
            act.outbox.do_send(SendQuestion::new(to, text, buttons).0);
        }));
    }

    /// A press on a `/model` or `/sessions` button (by someone the
    /// dispatcher admitted to the chat, so someone who may use both): the
    /// choice is made if the list is the live one, else "expired".
    pub(super) fn picked(&mut self, pick: Pick, press: &Press, ctx: &mut Context<Self>) {
        let (to, callback) = (press.to, press.id.clone());
        let outbox = self.outbox.clone();
        let Some(entry) = self.lists.chosen(to, pick).map(str::to_owned) else {
            return outbox.do_send(AnswerCallback::new(
                to.chat,
                callback,
                notices::LIST_EXPIRED,
            ));
        };
        let user = press.from.0;
        if pick.kind == ListKind::Projects
            && let Some(project) = self.choices.projects.get(&entry)
            && !project.admits(user)
        {
            let text = notices::menus::PROJECT_NOT_ALLOWED;
            return outbox.do_send(AnswerCallback::new(to.chat, callback, text));
        }
        self.lists.close(to, pick.kind);
        if pick.kind == ListKind::Sessions && self.opens_topics(to) {
            return self.session_in_topic(entry, press, ctx);
        }
        let (choice, done) = match pick.kind {
            ListKind::Projects => (Choose::Project(entry.clone()), settings::moved(&entry)),
            ListKind::Models => (
                Choose::Model(Some(entry.clone())),
                settings::model_switched(&entry),
            ),
            ListKind::Sessions => (Choose::Session(entry), settings::SESSION_PICKED.to_owned()),
        };
        let chosen = self.choose(to, choice, ctx);
        let message = press.message;
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

    /// `/project`: where this conversation works, a button per project
    /// the asker may move it to (and one to leave); `/project NAME` moves
    /// it (`none`: out of any), if the asker may.
    pub(super) fn project(&mut self, asked: &Incoming, ctx: &mut Context<Self>) {
        let (to, name, user) = (asked.to, asked.text.trim(), asked.from.0);
        let offered = std::sync::Arc::clone(&self.choices);
        let projects = &offered.projects;
        if !name.is_empty() && !projects.by_name.is_empty() {
            return self.move_to_project(to, name, user, ctx);
        }
        let mut entries: Vec<String> = projects
            .by_name
            .iter()
            .filter(|(_, p)| p.admits(user))
            .map(|(n, _)| n.clone())
            .collect();
        entries.push(String::new());
        let list = (!projects.by_name.is_empty())
            .then(|| self.lists.show(to, ListKind::Projects, entries.clone()));
        let current = (self.inbox).read("reading the project", move |store| store.project(to));
        let outbox = self.outbox.clone();
        ctx.spawn(
            async move {
                let projects = &offered.projects;
                let Ok(current) = current.await else {
                    return outbox.do_send(SendText::new(to, STORE_UNREADABLE));
                };
                let text = menus::projects_text(projects, &current);
                let Some(list) = list else {
                    return outbox.do_send(SendText::new(to, text));
                };
                let buttons = entries
                    .iter()
                    .enumerate()
                    .map(|(entry, name)| {
                        let pick = Pick {
                            kind: ListKind::Projects,
                            list,
                            entry,
                        };
                        vec![Button::new(
                            menus::project_label(name, &current),
                            pick.data(),
                        )]
                    })
                    .collect();
                outbox.do_send(SendQuestion::new(to, text, buttons).0);
            }
            .into_actor(self),
        );
    }

    /// `/project NAME` from `user`: moved if the project exists and lets
    /// them; `none` leaves any.
    fn move_to_project(
        &mut self,
        to: Conversation,
        name: &str,
        user: u64,
        ctx: &mut Context<Self>,
    ) {
        let offered = std::sync::Arc::clone(&self.choices);
        let projects = &offered.projects;
        let chosen = if name.eq_ignore_ascii_case(menus::NO_PROJECT) {
            Some(String::new())
        } else {
            projects.find(name).map(str::to_owned)
        };
        let Some(chosen) = chosen else {
            let known: Vec<&str> = projects.by_name.keys().map(String::as_str).collect();
            return self.say(to, settings::no_such_project(name, &known));
        };
        if projects.get(&chosen).is_some_and(|p| !p.admits(user)) {
            return self.say(to, settings::project_refused(&chosen));
        }
        let done = settings::moved(&chosen);
        let written = self.choose(to, Choose::Project(chosen), ctx);
        let outbox = self.outbox.clone();
        ctx.spawn(
            async move {
                let text = chosen_text(&written.await, &done);
                outbox.do_send(SendText::new(to, text));
            }
            .into_actor(self),
        );
    }

    /// Whether `/new` and `/fork` in `to` open a topic: a private chat
    /// while the bot's topics mode is on.
    pub(super) fn opens_topics(&self, to: Conversation) -> bool {
        self.topics.private && to.chat.0 > 0
    }

    /// `/new` in a private chat with topics: a topic for the fresh
    /// conversation (`createForumTopic`), while the one it was asked in
    /// goes on as it was. If Telegram makes no topic, the conversation
    /// starts afresh where it is, as elsewhere. What is written where
    /// `/new` was asked meanwhile waits for Telegram's answer, so it never
    /// reaches the old session ahead of a fresh start. `source`: where
    /// `/new` was given.
    pub(super) fn new_in_topic(
        &mut self,
        from: Conversation,
        source: Source,
        ctx: &mut Context<Self>,
    ) {
        let (create, created) = CreateTopic::new(from.chat, notices::NEW_TOPIC_NAME.to_owned());
        self.outbox.do_send(create);
        self.opening.entry(from).or_default();
        let outbox = self.outbox.clone();
        ctx.spawn(created.into_actor(self).map(move |made, act, ctx| {
            let held = act.opening.remove(&from).unwrap_or_default();
            match made {
                Ok(Ok(thread)) => {
                    let into = Conversation::new(from.chat, Some(thread));
                    await_name(&act.inbox, into);
                    outbox.do_send(SendText::new(into, notices::NEW_TOPIC_OPENED));
                    outbox.do_send(SendText::new(from, notices::NEW_TOPIC_ELSEWHERE));
                }
                // Telegram said no: no topic was made.
                Ok(Err(err @ (OutboxError::Refused(_) | OutboxError::Blocked))) => {
                    tracing::warn!(cause = %err, "no topic for /new; the conversation starts afresh where it is");
                    let command = Command::New;
                    act.deliver(from, ForChat::Command(ChatCommand { command, source }), ctx);
                }
                // The topic may exist: the conversation is not started
                // afresh, so its session is never lost to a topic that may
                // have been made.
                Ok(Err(err)) => {
                    tracing::warn!(cause = %err, "a topic for /new was not confirmed; the conversation goes on as it was");
                    outbox.do_send(SendText::new(from, notices::NEW_TOPIC_UNCONFIRMED));
                }
                Err(_) => tracing::debug!("the outbox stopped before /new's topic was made"),
            }
            // Written where /new was asked: after the fresh start, if any.
            for item in held {
                act.deliver(from, item, ctx);
            }
        }));
    }

    /// `/fork`: in a forum topic, or in a private chat with topics, a new
    /// topic starts from a copy of this conversation's session and both go
    /// on; elsewhere the conversation goes on from a copy and the original
    /// stays in `/sessions`.
    pub(super) fn fork(&mut self, to: Conversation, ctx: &mut Context<Self>) {
        if to.topic.is_some() || self.opens_topics(to) {
            return self.fork_into_topic(to, ctx);
        }
        let chosen = self.choose(to, Choose::Fork, ctx);
        let outbox = self.outbox.clone();
        ctx.spawn(
            async move {
                let text = match chosen.await {
                    Chosen::Forked(words) => settings::forked(&words),
                    Chosen::NothingToFork => notices::NOTHING_TO_FORK.to_owned(),
                    _ => notices::FORK_NOT_SAVED.to_owned(),
                };
                outbox.do_send(SendText::new(to, text));
            }
            .into_actor(self),
        );
    }

    /// `/fork` in a forum topic, or in a private chat with topics: a topic
    /// named after the session's first words (`createForumTopic`), whose
    /// first turn resumes a copy of it with this conversation's model.
    fn fork_into_topic(&mut self, from: Conversation, ctx: &mut Context<Self>) {
        let inbox = self.inbox.clone();
        let outbox = self.outbox.clone();
        let sessions = inbox.sessions(from);
        ctx.spawn(
            async move {
                let Ok(sessions) = sessions.await else {
                    return outbox.do_send(SendText::new(from, STORE_UNREADABLE));
                };
                let Some(current) = sessions.into_iter().find(|s| s.current) else {
                    return outbox.do_send(SendText::new(from, notices::NOTHING_TO_FORK));
                };
                let name = match current.first_words.as_str() {
                    "" => "Fork".to_owned(),
                    words => bounded(words, 60),
                };
                let (create, created) =
                    CreateTopic::new(from.chat, settings::fork_topic_name(&name));
                outbox.do_send(create);
                let thread = match created.await {
                    Ok(Ok(thread)) => thread,
                    Ok(Err(err)) => {
                        let private = from.chat.is_user();
                        let text = settings::fork_topic_failed(&err.to_string(), private);
                        return outbox.do_send(SendText::new(from, text));
                    }
                    Err(_) => return,
                };
                let into = Conversation::new(from.chat, Some(thread));
                await_name(&inbox, into);
                let text = match inbox.fork(from, into).await {
                    Some(_) => {
                        outbox.do_send(SendText::new(into, settings::fork_topic_opened(&name)));
                        settings::fork_topic_left(&name)
                    }
                    None => notices::FORK_NOT_SAVED.to_owned(),
                };
                outbox.do_send(SendText::new(from, text));
            }
            .into_actor(self),
        );
    }
}

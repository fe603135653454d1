//! The dispatcher's side of schedules: `/schedule every|at|cron|in …`,
//! `/schedules` with a ❌ button under each (the operator's shown 🔒, with
//! none), and a ❌ pressed. The bounds are the [`ScheduleBook`]'s.
//!
//! [`ScheduleBook`]: crate::schedule::ScheduleBook

use actix::{AsyncContext, Context, WrapFuture};

use super::Dispatcher;
use crate::chat::notices::schedules;
use crate::chat::notices::{self, bounded};
use crate::ids::Conversation;
use crate::incoming::{Callback, Incoming, Press};
use crate::schedule::words::read_command;
use crate::schedule::{Listed, MAX_PER_CONVERSATION};
use crate::state::{Origin, now_ms};
use crate::telegram::outbox::{AnswerCallback, Button, EditQuestion, SendQuestion, SendText};

/// One schedule, as a line of `/schedules`.
fn line(s: &Listed) -> String {
    let lock = schedules::lock(s.locked);
    let next = s.next.as_deref().unwrap_or("never again");
    format!(
        "{lock}{} · {} · next {next}\n   {}",
        s.name,
        s.when,
        bounded(&s.prompt, 80)
    )
}

impl Dispatcher {
    /// `/schedule …`: read, checked against the bounds, added.
    pub(super) fn schedule(&mut self, asked: &Incoming, ctx: &mut Context<Self>) {
        let to = asked.to;
        let (when, prompt) = match read_command(&asked.text, now_ms()) {
            Ok(read) => read,
            Err(err) => return self.say(to, schedules::unreadable(&err.to_string())),
        };
        if prompt.is_empty() {
            return self.say(to, schedules::no_prompt());
        }
        let made_by = i64::try_from(asked.from.0).unwrap_or(0);
        let added = self.schedules.add(to, when, prompt, made_by, Origin::Chat);
        let outbox = self.outbox.clone();
        ctx.spawn(
            async move {
                let text = match added.await {
                    Ok(s) => schedules::scheduled(&s.name, &s.when, s.next.as_deref()),
                    Err(why) => schedules::not_scheduled(&why.to_string()),
                };
                outbox.do_send(SendText::new(to, text));
            }
            .into_actor(self),
        );
    }

    /// `/schedules`: this conversation's, each removable one with a ❌.
    pub(super) fn list_schedules(&mut self, to: Conversation, ctx: &mut Context<Self>) {
        let list = self.schedules.list(to);
        let outbox = self.outbox.clone();
        ctx.spawn(
            async move {
                let Ok(list) = list.await else {
                    return outbox.do_send(SendText::new(to, notices::STORE_UNREADABLE));
                };
                if list.is_empty() {
                    let text = schedules::none_here();
                    return outbox.do_send(SendText::new(to, text));
                }
                let own = list.iter().filter(|s| !s.locked).count();
                let mut text = schedules::listed(own, MAX_PER_CONVERSATION);
                for s in &list {
                    text.push('\n');
                    text.push_str(&line(s));
                }
                let buttons = list
                    .iter()
                    .filter(|s| !s.locked)
                    .map(|s| {
                        vec![Button::new(
                            schedules::remove(&s.name),
                            Callback::Unschedule(s.id).data(),
                        )]
                    })
                    .collect();
                let (question, _id) = SendQuestion::new(to, text, buttons);
                outbox.do_send(question);
            }
            .into_actor(self),
        );
    }

    /// A ❌ pressed (by someone the dispatcher admitted): the schedule, if
    /// it is this conversation's and not the operator's, is removed; the
    /// list's message says so and loses its buttons.
    pub(super) fn unschedule_pressed(&mut self, id: i64, press: &Press, ctx: &mut Context<Self>) {
        let to = press.to;
        let removed = self.schedules.remove(id, to);
        let outbox = self.outbox.clone();
        let (callback, message) = (press.id.clone(), press.message);
        ctx.spawn(
            async move {
                let text = match removed.await {
                    Ok(done) => schedules::remove(&done.to_string()),
                    Err(why) => schedules::not_removed(&why.to_string()),
                };
                outbox.do_send(AnswerCallback::new(to.chat, callback, bounded(&text, 190)));
                match message {
                    Some(message) => outbox.do_send(EditQuestion::new(
                        to.chat,
                        message,
                        schedules::removed_on_list(&text),
                    )),
                    None => outbox.do_send(SendText::new(to, text)),
                }
            }
            .into_actor(self),
        );
    }
}

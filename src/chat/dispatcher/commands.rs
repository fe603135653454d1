//! The dispatcher's side of the commands: each [`Command`] the intake
//! parsed is checked against who may use it ([`Who`]), then answered here
//! or handed to the chat's supervisor.

use actix::{AsyncContext, Context, WrapFuture};
use teloxide::types::UserId;

use super::{Dispatcher, ForChat, HostRequest};
use crate::chat::menus;
use crate::chat::notices;
use crate::chat::notices::STORE_UNREADABLE;
use crate::chat::notices::help::{self, Abilities};
use crate::chat::notices::settings;
use crate::chat::supervisor::{ChatCommand, DescribeChat};
use crate::chat::turn::describe_rule;
use crate::config::GroupMode;
use crate::ids::Conversation;
use crate::incoming::{Command, Incoming, Source, Who};
use crate::state::ReadFailed;
use crate::telegram::outbox::SendText;

/// How many conversations an admin's `/usage` lists.
const TOP_CONVERSATIONS: usize = 5;

impl Dispatcher {
    /// A command this bot knows, read at the intake from `asked` (its
    /// arguments are the message's text); an admins' command is refused to
    /// everyone else. A line typed at the host runs with the operator's
    /// rights: whoever can open the attach socket is an admin.
    pub(super) fn command(&mut self, command: Command, asked: &Incoming, ctx: &mut Context<Self>) {
        let (to, user, private) = (asked.to, asked.from, asked.is_private());
        let admin = self.is_admin(user) || asked.source == Source::Terminal;
        if command.who() == Who::Admins && !admin {
            self.say(to, notices::only_admins(command.word()));
            return;
        }
        match command {
            Command::Permissions => self.permissions(to, &asked.text, ctx),
            Command::Schedule => self.schedule(asked, ctx),
            Command::Schedules => self.list_schedules(to, ctx),
            Command::Stop if !self.chats.contains_key(&to) => {
                self.say(to, notices::NOTHING_TO_STOP)
            }
            Command::New if self.opens_topics(to) => self.new_in_topic(to, asked.source, ctx),
            Command::Stop | Command::New | Command::Handoff => {
                let source = asked.source;
                self.deliver(to, ForChat::Command(ChatCommand { command, source }), ctx)
            }
            Command::Model => self.model(asked, ctx),
            Command::Sessions => self.sessions(to, ctx),
            Command::Fork => self.fork(to, ctx),
            Command::Project => self.project(asked, ctx),
            Command::Usage => self.usage(to, admin, private, ctx),
            Command::Status => self.status(to, private, ctx),
            Command::Restart => self.restart(to, user, asked.date),
            Command::Start => self.say(to, help::greeting(admin, &self.abilities(private))),
            Command::Help => self.say(to, help::help(admin, &self.abilities(private))),
        }
    }

    /// What the bot takes in a private chat or a group, for `/start` and `/help`.
    fn abilities(&self, private: bool) -> Abilities {
        let policy = self.files.policy();
        Abilities {
            max_download: policy.max_download,
            transcribes: !policy.transcribe.is_empty(),
            mention_in_group: (!private && self.access.group_mode == GroupMode::Mention)
                .then(|| self.username.clone()),
        }
    }

    /// `/permissions`: the tools that run without asking in this
    /// conversation, in the project it is in now; `/permissions clear`
    /// forgets them.
    fn permissions(&mut self, to: Conversation, args: &str, ctx: &mut Context<Self>) {
        let outbox = self.outbox.clone();
        if args.eq_ignore_ascii_case("clear") {
            let cleared = self.inbox.clear_always_here(to);
            ctx.spawn(
                async move {
                    let text = match cleared.await {
                        Some(0) => settings::NO_APPROVALS.to_string(),
                        Some(n) => settings::approvals_forgotten(&settings::tool_approvals(n)),
                        None => settings::APPROVALS_NOT_CLEARED.to_string(),
                    };
                    outbox.do_send(SendText::new(to, text));
                }
                .into_actor(self),
            );
            return;
        }
        let rules = self.inbox.always_rules_here(to);
        ctx.spawn(
            async move {
                let Ok((project, rules)) = rules.await else {
                    return outbox.do_send(SendText::new(to, STORE_UNREADABLE));
                };
                let here = settings::approvals_here(&project);
                let text = if rules.is_empty() {
                    settings::no_approvals_listed(&here)
                } else {
                    let rules: Vec<String> = (rules.iter())
                        .map(|grant| settings::rule_line(&describe_rule(&grant.rule)))
                        .collect();
                    settings::approvals_listed(&here, &rules.join("\n"))
                };
                outbox.do_send(SendText::new(to, text));
            }
            .into_actor(self),
        );
    }

    /// `/restart` from an admin: ignored when older than this process,
    /// otherwise told and handed to the host, which drains and re-executes.
    fn restart(&mut self, to: Conversation, user: UserId, date: i64) {
        let chat = to.chat;
        if date < self.started_at {
            tracing::warn!(
                chat_id = chat.0,
                user_id = user.0,
                date,
                started_at = self.started_at,
                "/restart older than this process ignored"
            );
            return;
        }
        if self.stopping {
            self.say(to, notices::ALREADY_STOPPING);
            return;
        }
        let running = self.slots.running();
        tracing::warn!(
            chat_id = chat.0,
            user_id = user.0,
            running,
            "/restart requested"
        );
        self.say(to, notices::restarting(running));
        if self.host.send(HostRequest::Restart { to }).is_err() {
            tracing::error!("no host is listening for /restart");
        }
    }

    /// `/status`: every chat for an admin in a private chat with the bot;
    /// in a group (even for an admin) only that chat, so no other chat's id
    /// is shown to the group's members.
    fn status(&mut self, chat: Conversation, private: bool, ctx: &mut Context<Self>) {
        let header = if private {
            help::status_header(self.chats.len(), self.slots.running(), self.slots.free())
        } else {
            help::STATUS_THIS_CHAT.to_owned()
        };
        let asks: Vec<_> = self
            .chats
            .iter()
            .filter(|(id, _)| private || id.chat == chat.chat)
            .map(|(id, e)| {
                let to = *id;
                let project = (self.inbox).read("reading the project", move |s| s.project(to));
                let line = e.addr.send(DescribeChat);
                async move { (line.await, project.await) }
            })
            .collect();
        let outbox = self.outbox.clone();
        ctx.spawn(
            async move {
                let lines = futures_util::future::join_all(asks).await;
                let mut text = header;
                for (line, project) in lines {
                    let Ok(line) = line else { continue };
                    text.push('\n');
                    text.push_str(&line);
                    text.push_str(&help::status_project(project.as_deref()));
                }
                outbox.do_send(SendText::new(chat, text));
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
        let inbox = self.inbox.clone();
        let mine = inbox.usage(Some(to));
        let whole =
            (admin && private).then(|| (inbox.usage(None), inbox.usage_top(TOP_CONVERSATIONS)));
        let outbox = self.outbox.clone();
        ctx.spawn(
            async move {
                let text = async {
                    let mut text = settings::usage_here(&menus::usage_lines(&mine.await?));
                    if let Some((all, top)) = whole {
                        text.push_str(&menus::usage_admin(&all.await?, &top.await?));
                    }
                    Ok::<_, ReadFailed>(text)
                };
                let text = text.await.unwrap_or_else(|_| STORE_UNREADABLE.to_owned());
                outbox.do_send(SendText::new(to, text));
            }
            .into_actor(self),
        );
    }
}

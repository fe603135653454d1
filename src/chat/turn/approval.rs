//! Tool approvals in the chat: a `can_use_tool` the config does not decide
//! becomes a question with inline buttons (**Allow**, **Always in this
//! chat**, **Deny**); Claude Code's own `AskUserQuestion` becomes its options
//! as buttons. While a question waits, typing pauses and the no-progress and
//! budget clocks stand still; `turn.approval_timeout` denies it when nobody
//! answers. Every ask is answered exactly once: by a press, the timeout, the
//! turn's end (`/stop`, a host stop), or, should the actor go, its dropped
//! responder.
//!
//! A question shows the whole input, never a part and nothing folded: a
//! Bash command byte for byte, anything that would not show written out
//! (`⟦U+202E⟧`, a tab, a blank ending a line); what does not fit one
//! message goes whole in a text file sent just before the question.
//! "Always" remembers a Bash call's exact command, any other tool's name,
//! and an ACP request (named by the agent's own words) whole, byte for
//! byte, or not at all; the press's author is who decided, in the chat,
//! the log and the stored rule.

mod question;
mod request;
mod shown;
mod verdict;

use std::collections::{BTreeMap, HashMap};

use actix::{
    ActorContext, ActorFutureExt, AsyncContext, Context, Handler, Message, SpawnHandle, WrapFuture,
};
use teloxide::types::{ChatId, MessageId, UserId};

use self::question::{
    Question, always_allows, logged_rule, one_line, question_messages, questions, rule_for, token,
    tool_message, whose,
};
pub(crate) use self::question::{describe_rule, summary};
use super::TurnActor;
use crate::agent::{Permission, PermissionAsk};
use crate::chat::notices;
use crate::events::{FeedItem, Offer};
use crate::incoming::{Approval, Choice, Press};
use crate::state::AlwaysRule;
use crate::telegram::outbox::{AnswerCallback, EditQuestion, SendQuestion, Unbutton};

/// The longest a turn that let its session go waits for the message ids of
/// questions it decided, to show each its decision.
const QUESTIONS_SHOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A button pressed in a chat, routed to the turn that asked.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct ButtonPressed {
    /// The chat the question is in.
    pub chat: ChatId,
    /// Names the ask (unguessable).
    pub token: String,
    /// What was chosen.
    pub(crate) choice: Choice,
    /// Who pressed.
    pub user: UserId,
    /// Their name, for "✅ Allowed by NAME".
    pub name: String,
    /// Whether they are an admin (who may answer any chat's question).
    pub admin: bool,
    /// The callback query, answered exactly once.
    pub callback: String,
    /// The question's message, when Telegram sent it.
    pub message: Option<MessageId>,
}

impl ButtonPressed {
    /// An approval press read at the intake, with who may decide applied:
    /// `admin` when the presser is one.
    pub(crate) fn new(press: Press, approval: Approval, admin: bool) -> Self {
        Self {
            chat: press.to.chat,
            token: approval.token,
            choice: approval.choice,
            user: press.from,
            name: press.name,
            admin,
            callback: press.id,
            message: press.message,
        }
    }

    /// The question expired (its request ended): its buttons go too.
    pub(crate) fn unbutton(&self) -> Option<Unbutton> {
        let message_id = self.message?;
        Some(Unbutton {
            chat: self.chat,
            message_id,
        })
    }
}

/// What an ask is about.
#[derive(Debug, Clone)]
enum Kind {
    /// A tool to run; `rule` is what "always" would remember (none when
    /// nothing can be named exactly: no "always" is offered), for the
    /// conversation in `project`, the one its rules were read for.
    Tool {
        rule: Option<AlwaysRule>,
        project: String,
    },
    /// Claude Code's question tool: each question answered by its options.
    Questions {
        questions: Vec<Question>,
        answers: BTreeMap<String, String>,
    },
}

/// An ask waiting for a person.
struct Waiting {
    ask: PermissionAsk,
    kind: Kind,
    /// The texts of the question messages, in order (one per question).
    texts: Vec<String>,
    /// Their message ids, once sent.
    messages: Vec<Option<MessageId>>,
    /// `turn.approval_timeout`.
    timer: SpawnHandle,
    /// Who sent the messages the turn answered when the agent asked: they
    /// (or an admin) decide it.
    deciders: Vec<UserId>,
}

/// Who pressed the button that decided an ask.
#[derive(Debug, Clone)]
struct Presser {
    /// Their Telegram id (stored with an "always" rule, logged).
    id: UserId,
    /// Their name, shown in the chat.
    name: String,
}

/// How an ask was decided, for the model and for the chat.
enum Verdict {
    Allowed { by: Presser, always: bool },
    Answered { by: Presser },
    Denied { by: Presser },
    TimedOut,
    Ended(&'static str),
}

impl Verdict {
    /// The person who decided, when one did.
    fn presser(&self) -> Option<&Presser> {
        match self {
            Self::Allowed { by, .. } | Self::Answered { by } | Self::Denied { by } => Some(by),
            Self::TimedOut | Self::Ended(_) => None,
        }
    }
}

/// The approvals a turn has waiting, by token.
#[derive(Default)]
pub(super) struct Approvals {
    waiting: HashMap<String, Waiting>,
    /// Asks decided before every message id of their question(s) came back
    /// from the outbox (a press can overtake the answer to `sendMessage`):
    /// the texts, the decision, and how many ids are still to come, so a
    /// late question still shows the decision.
    decided: HashMap<String, (Vec<String>, String, usize)>,
    /// The turn let its session go and waits for `decided` to empty.
    stop_armed: bool,
}

impl TurnActor {
    /// The agent asks to run a tool nobody decided in config.
    pub(super) fn ask_permission(&mut self, ask: PermissionAsk, ctx: &mut Context<Self>) {
        if self.deps.books.shutdown.is_closing() {
            tracing::info!(call_id = %ask.id, tool = %ask.tool, "permission ask refused: the host is stopping");
            ask.reply.answer(Permission::Deny {
                message: "the host is stopping".into(),
            });
            return;
        }
        if ask.tool.bare() == "AskUserQuestion"
            && let Some(questions) = questions(&ask.input)
        {
            return self.post(
                ask,
                Kind::Questions {
                    questions,
                    answers: BTreeMap::new(),
                },
                ctx,
            );
        }
        let rule = rule_for(&ask);
        // The project the turn started in; on a warm session whose turn
        // has not read it yet, the conversation's project now.
        let known = self.root.as_ref().map(|root| root.project.clone());
        let grants = match known {
            Some(project) => {
                let rules = self
                    .deps
                    .books
                    .inbox
                    .always_rules(self.to(), project.clone());
                Box::pin(async move { rules.await.ok().map(|rules| (project, rules)) })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = _>>>
            }
            None => {
                let here = self.deps.books.inbox.always_rules_here(self.to());
                Box::pin(async move { here.await.ok() })
            }
        };
        ctx.spawn(grants.into_actor(self).map(move |grants, act, ctx| {
            let Some((project, grants)) = grants else {
                tracing::warn!(call_id = %ask.id, "the conversation's approvals could not be read; asking");
                return act.post(ask, Kind::Tool { rule: None, project: String::new() }, ctx);
            };
            if !act.phase.holds_chat() {
                ask.reply.answer(Permission::Deny {
                    message: "the turn has already ended".into(),
                });
            } else if always_allows(&grants, &ask) {
                tracing::info!(call_id = %ask.id, rule = %rule.as_ref().map(logged_rule).unwrap_or_default(), "tool allowed: always in this chat");
                tracing::debug!(call_id = %ask.id, rule = ?rule, "the rule in full");
                let input = ask.input.clone();
                ask.reply.answer(Permission::Allow { input });
            } else {
                act.post(ask, Kind::Tool { rule, project }, ctx);
            }
        }));
    }

    /// Puts the question to the chat and waits.
    fn post(&mut self, ask: PermissionAsk, kind: Kind, ctx: &mut Context<Self>) {
        let token = token();
        let senders = self.senders();
        let whose = whose(&senders, !self.spec.to.chat.is_user());
        let messages = match &kind {
            Kind::Tool { rule, project } => {
                vec![tool_message(&ask, rule.is_some(), project, &token, &whose)]
            }
            Kind::Questions { questions, .. } => question_messages(questions, &token, &whose),
        };
        let texts: Vec<String> = messages.iter().map(|m| m.text.clone()).collect();
        let options = messages
            .iter()
            .flat_map(|m| m.keyboard.iter().flatten())
            .map(|b| Offer {
                label: b.label.clone(),
                answer: b.data.clone(),
            })
            .collect();
        tracing::info!(call_id = %ask.id, tool = %ask.tool, "asking the chat");
        self.deps.books.events.feed(
            self.spec.to,
            FeedItem::Asked {
                token: token.clone(),
                question: texts.join("\n\n"),
                options,
            },
        );
        for (i, message) in messages.into_iter().enumerate() {
            let (send, sent) = SendQuestion::new(self.to(), message.text, message.keyboard);
            // Decided by this turn alone: a later process that finds it
            // unsent sends it without buttons, saying the request ended.
            let send = send.with_file(message.file).ending_with_process();
            self.deps.out.outbox.do_send(send.for_turn(self.spec.turn));
            let token = token.clone();
            ctx.spawn(sent.into_actor(self).map(move |sent, act, ctx| {
                let id = match sent {
                    Ok(Ok(id)) => id,
                    Ok(Err(err)) => {
                        tracing::warn!(cause = %err, "the approval question could not be sent; denying");
                        return act.decide(&token, Verdict::Ended("the question could not be shown"), ctx);
                    }
                    Err(_) => return,
                };
                if let Some(waiting) = act.approvals.waiting.get_mut(&token) {
                    waiting.messages[i] = Some(id);
                    return;
                }
                // Decided before this question's id came back: show the
                // decision (or, when it is not known, that it is closed).
                let text = match act.approvals.decided.get_mut(&token) {
                    Some((texts, shown, left)) => {
                        let text = format!("{}\n\n{shown}", texts.get(i).map_or("", String::as_str));
                        *left = left.saturating_sub(1);
                        if *left == 0 {
                            act.approvals.decided.remove(&token);
                        }
                        text
                    }
                    None => crate::chat::notices::approval::QUESTION_CLOSED.to_string(),
                };
                act.deps
                    .out.outbox
                    .do_send(EditQuestion::new(act.spec.to.chat, id, text));
                // A turn that ended was waiting for this to show its decision.
                act.stop_once_questions_shown(ctx);
            }));
        }
        let timeout = self.deps.agent.config.approval_timeout;
        let timer = ctx.run_later(timeout, {
            let token = token.clone();
            move |act, ctx| act.decide(&token, Verdict::TimedOut, ctx)
        });
        let count = texts.len();
        self.approvals.waiting.insert(
            token,
            Waiting {
                ask,
                kind,
                texts,
                messages: vec![None; count],
                timer,
                deciders: senders.iter().map(|s| s.id).collect(),
            },
        );
        self.pause_for_person(ctx);
    }

    /// Answers the ask `token` and shows the decision on its question(s).
    fn decide(&mut self, token: &str, verdict: Verdict, ctx: &mut Context<Self>) {
        let Some(waiting) = self.approvals.waiting.remove(token) else {
            return;
        };
        ctx.cancel_future(waiting.timer);
        let Waiting {
            ask,
            kind,
            texts,
            messages,
            ..
        } = waiting;
        let presser = verdict.presser().cloned();
        let (permission, shown) = self.verdict_answer(verdict, kind, &ask.input);
        let user_id = presser.map(|p| p.id.0);
        tracing::info!(call_id = %ask.id, tool = %ask.tool, user_id, decision = %shown, "approval decided");
        self.deps.books.events.feed(
            self.spec.to,
            FeedItem::Decided {
                token: token.to_string(),
                decision: shown.to_string(),
            },
        );
        ask.reply.answer(permission);
        let left = messages.iter().filter(|id| id.is_none()).count();
        for (text, id) in texts.iter().zip(messages) {
            if let Some(id) = id {
                self.deps.out.outbox.do_send(EditQuestion::new(
                    self.spec.to.chat,
                    id,
                    format!("{text}\n\n{shown}"),
                ));
            }
        }
        if left > 0 {
            self.approvals
                .decided
                .insert(token.to_string(), (texts, shown, left));
        }
        self.resume_after_person(ctx);
    }

    /// Stops the actor once its session was let go and every question
    /// decided before its message id came back shows its decision (at most
    /// [`QUESTIONS_SHOWN_WAIT`] after the release).
    pub(super) fn stop_once_questions_shown(&mut self, ctx: &mut Context<Self>) {
        if !self.phase.is_released() {
            return;
        }
        if self.approvals.decided.is_empty() {
            return ctx.stop();
        }
        if !self.approvals.stop_armed {
            self.approvals.stop_armed = true;
            ctx.run_later(QUESTIONS_SHOWN_WAIT, |act, ctx| {
                tracing::warn!("a question's message never came back; its decision is not shown");
                act.approvals.decided.clear();
                ctx.stop();
            });
        }
    }

    /// Every waiting ask is answered when the turn ends (`/stop`, a host
    /// stop, a watchdog): denied, and the questions say so.
    pub(super) fn close_approvals(&mut self, why: &'static str, ctx: &mut Context<Self>) {
        let tokens: Vec<String> = self.approvals.waiting.keys().cloned().collect();
        for token in tokens {
            self.decide(&token, Verdict::Ended(why), ctx);
        }
    }
}

impl Handler<ButtonPressed> for TurnActor {
    type Result = ();

    fn handle(&mut self, press: ButtonPressed, ctx: &mut Self::Context) {
        let answer = |act: &Self, text: &str| {
            // A press from the terminal has no callback query to answer.
            if press.callback.is_empty() {
                return;
            }
            act.deps.out.outbox.do_send(AnswerCallback {
                chat: press.chat,
                id: press.callback.clone(),
                text: text.to_string(),
                alert: false,
            });
        };
        let Some(waiting) = self.approvals.waiting.get_mut(&press.token) else {
            if let Some(unbutton) = press.unbutton() {
                self.deps.out.outbox.do_send(unbutton);
            }
            return answer(self, notices::QUESTION_EXPIRED);
        };
        if !(press.admin || waiting.deciders.contains(&press.user)) {
            tracing::warn!(
                user_id = press.user.0,
                "approval press by someone whose message the turn does not answer refused"
            );
            return answer(self, notices::approval::NOT_YOURS);
        }
        // Shown on the question: on one line, as the names it starts with.
        let by = Presser {
            id: press.user,
            name: one_line(&press.name),
        };
        match (press.choice, &mut waiting.kind) {
            (Choice::Allow | Choice::Always, Kind::Tool { rule, .. }) => {
                // "Always" is offered only where a rule can be remembered.
                let always = press.choice == Choice::Always && rule.is_some();
                answer(self, notices::approval::allowed(always));
                self.decide(&press.token, Verdict::Allowed { by, always }, ctx);
            }
            (Choice::Deny, _) => {
                answer(self, "Denied");
                self.decide(&press.token, Verdict::Denied { by }, ctx);
            }
            (Choice::Option { question, option }, Kind::Questions { questions, answers }) => {
                let Some((q, label)) = questions
                    .get(question)
                    .and_then(|q| q.options.get(option).map(|o| (q, o)))
                else {
                    return answer(self, notices::QUESTION_EXPIRED);
                };
                let label = label.clone();
                answers.insert(q.text.clone(), label.clone());
                let done = answers.len() == questions.len();
                answer(self, &label);
                if done {
                    self.decide(&press.token, Verdict::Answered { by }, ctx);
                }
            }
            _ => answer(self, notices::QUESTION_EXPIRED),
        }
    }
}

#[cfg(test)]
mod tests;

//! Tool approvals in the chat: a `can_use_tool` the config does not decide
//! becomes a question with inline buttons (**Allow**, **Always in this
//! chat**, **Deny**); Claude Code's own `AskUserQuestion` becomes its options
//! as buttons. While a question waits, typing pauses and the no-progress and
//! budget clocks stand still; `turn.approval_timeout` denies it when nobody
//! answers. Every ask is answered exactly once: by a press, the timeout, the
//! turn's end (`/stop`, a host stop), or, should the actor go, its dropped
//! responder.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;

use actix::{ActorFutureExt, AsyncContext, Context, Handler, Message, SpawnHandle, WrapFuture};
use serde_json::Value;
use teloxide::types::{ChatId, MessageId, UserId};

use super::TurnActor;
use crate::agent::{Permission, PermissionAsk};
use crate::chat::notices::bounded;
use crate::chat::tools::bare_tool_name;
use crate::telegram::outbox::{AnswerCallback, Button, EditQuestion, SendQuestion};

/// Callback data of an approval button: `ap:<token>:<y|a|n>`.
const TOOL_PREFIX: &str = "ap";
/// Callback data of a question option: `aq:<token>:<question>:<option>`.
const QUESTION_PREFIX: &str = "aq";

/// What a press chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice {
    /// Allow this once.
    Allow,
    /// Allow, and do not ask again in this chat.
    Always,
    /// Deny.
    Deny,
    /// Option `option` of question `question` (`AskUserQuestion`).
    Option {
        /// The question's index.
        question: usize,
        /// The option's index.
        option: usize,
    },
}

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
}

impl ButtonPressed {
    /// Parses callback data; `None` for anything that is not ours.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn parse(
        data: &str,
        chat: ChatId,
        user: UserId,
        name: String,
        admin: bool,
        callback: String,
    ) -> Option<Self> {
        let mut parts = data.split(':');
        let kind = parts.next()?;
        let token = parts.next()?.to_string();
        if token.len() != 32 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let choice = match (kind, parts.next()?, parts.next()) {
            (TOOL_PREFIX, "y", None) => Choice::Allow,
            (TOOL_PREFIX, "a", None) => Choice::Always,
            (TOOL_PREFIX, "n", None) => Choice::Deny,
            (QUESTION_PREFIX, q, Some(o)) => Choice::Option {
                question: q.parse().ok()?,
                option: o.parse().ok()?,
            },
            _ => return None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            chat,
            token,
            choice,
            user,
            name,
            admin,
            callback,
        })
    }
}

/// One option of an `AskUserQuestion` question.
#[derive(Debug, Clone)]
struct Question {
    /// The question text (the key of its answer).
    text: String,
    /// Option labels.
    options: Vec<String>,
}

/// What an ask is about.
#[derive(Debug, Clone)]
enum Kind {
    /// A tool to run; `rule` is what "always" remembers.
    Tool { rule: String },
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
}

/// How an ask was decided, for the model and for the chat.
enum Verdict {
    Allowed { by: String, always: bool },
    Answered { by: String },
    Denied { by: String },
    TimedOut,
    Ended(&'static str),
}

/// The approvals a turn has waiting, by token.
#[derive(Default)]
pub(super) struct Approvals {
    waiting: HashMap<String, Waiting>,
}

/// "always in this chat" remembers the tool name; for Bash, the command's
/// first word.
fn rule_for(tool: &str, input: &Value) -> String {
    match tool {
        "Bash" => {
            let first = input
                .get("command")
                .and_then(Value::as_str)
                .and_then(|c| c.split_whitespace().next())
                .unwrap_or("");
            format!("Bash({first})")
        }
        other => other.to_string(),
    }
}

/// A readable summary of what the tool would do.
pub(crate) fn summary(tool: &str, input: &Value) -> String {
    let field = |name: &str| input.get(name).and_then(Value::as_str).unwrap_or("");
    match bare_tool_name(tool) {
        "Bash" => format!("$ {}", bounded(field("command"), 600)),
        "Edit" | "MultiEdit" => {
            let mut out = field("file_path").to_string();
            let (old, new) = (field("old_string"), field("new_string"));
            if !old.is_empty() || !new.is_empty() {
                out.push_str(&format!(
                    "\n- {}\n+ {}",
                    bounded(old, 200),
                    bounded(new, 200)
                ));
            }
            out
        }
        "Write" => format!("{} ({} bytes)", field("file_path"), field("content").len()),
        "WebFetch" => field("url").to_string(),
        _ => bounded(&input.to_string(), 300),
    }
}

/// 128 random bits as hex, from the OS.
fn token() -> String {
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        // Never reached on Linux; still no predictable token: hash fresh
        // random keys with the time.
        use std::hash::{BuildHasher, Hasher};
        for chunk in bytes.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0),
            );
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `AskUserQuestion` questions, when the input has them.
fn questions(input: &Value) -> Option<Vec<Question>> {
    let list = input.get("questions")?.as_array()?;
    let questions: Vec<Question> = list
        .iter()
        .filter_map(|q| {
            let text = q.get("question")?.as_str()?.to_string();
            let options: Vec<String> = q
                .get("options")?
                .as_array()?
                .iter()
                .filter_map(|o| o.get("label").and_then(Value::as_str).map(str::to_string))
                .collect();
            (!options.is_empty()).then_some(Question { text, options })
        })
        .collect();
    (!questions.is_empty() && questions.len() == list.len()).then_some(questions)
}

impl TurnActor {
    /// The agent asks to run a tool nobody decided in config.
    pub(super) fn ask_permission(&mut self, ask: PermissionAsk, ctx: &mut Context<Self>) {
        if self.deps.shutdown.is_closing() {
            tracing::info!(chat_id = self.chat_id(), turn_id = self.spec.turn.get(), call_id = %ask.id, tool = %ask.tool, "permission ask refused: the host is stopping");
            ask.reply.answer(Permission::Deny {
                message: "the host is stopping".into(),
            });
            return;
        }
        if bare_tool_name(&ask.tool) == "AskUserQuestion"
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
        let rule = rule_for(&ask.tool, &ask.input);
        let rules = self.deps.inbox.always_rules(self.spec.chat);
        ctx.spawn(rules.into_actor(self).map(move |rules, act, ctx| {
            if !act.phase.is_live() {
                ask.reply.answer(Permission::Deny {
                    message: "the turn has already ended".into(),
                });
            } else if rules.contains(&rule) {
                tracing::info!(chat_id = act.chat_id(), turn_id = act.spec.turn.get(), call_id = %ask.id, %rule, "tool allowed: always in this chat");
                let input = ask.input.clone();
                ask.reply.answer(Permission::Allow { input });
            } else {
                act.post(ask, Kind::Tool { rule }, ctx);
            }
        }));
    }

    /// Puts the question to the chat and waits.
    fn post(&mut self, ask: PermissionAsk, kind: Kind, ctx: &mut Context<Self>) {
        let token = token();
        let (texts, keyboards): (Vec<String>, Vec<Vec<Vec<Button>>>) = match &kind {
            Kind::Tool { .. } => {
                let text = format!(
                    "🔐 The agent asks to use {}:\n{}",
                    ask.tool,
                    summary(&ask.tool, &ask.input)
                );
                let button = |label: &str, c: &str| Button {
                    label: label.into(),
                    data: format!("{TOOL_PREFIX}:{token}:{c}"),
                };
                let keyboard = vec![
                    vec![button("Allow", "y"), button("Always in this chat", "a")],
                    vec![button("Deny", "n")],
                ];
                (vec![text], vec![keyboard])
            }
            Kind::Questions { questions, .. } => questions
                .iter()
                .enumerate()
                .map(|(qi, q)| {
                    let text = format!("❓ {}", q.text);
                    let keyboard = q
                        .options
                        .iter()
                        .enumerate()
                        .map(|(oi, label)| {
                            vec![Button {
                                label: bounded(label, 60),
                                data: format!("{QUESTION_PREFIX}:{token}:{qi}:{oi}"),
                            }]
                        })
                        .collect();
                    (text, keyboard)
                })
                .unzip(),
        };
        tracing::info!(chat_id = self.chat_id(), turn_id = self.spec.turn.get(), call_id = %ask.id, tool = %ask.tool, "asking the chat");
        for (i, (text, keyboard)) in texts.iter().zip(keyboards).enumerate() {
            let (send, sent) = SendQuestion::new(self.to(), text.clone(), keyboard);
            self.deps.outbox.do_send(send);
            let token = token.clone();
            ctx.spawn(sent.into_actor(self).map(move |sent, act, ctx| {
                let id = match sent {
                    Ok(Ok(id)) => id,
                    Ok(Err(err)) => {
                        tracing::warn!(chat_id = act.chat_id(), turn_id = act.spec.turn.get(), cause = %err, "the approval question could not be sent; denying");
                        return act.decide(&token, Verdict::Ended("the question could not be shown"), ctx);
                    }
                    Err(_) => return,
                };
                match act.approvals.waiting.get_mut(&token) {
                    Some(waiting) => waiting.messages[i] = Some(id),
                    // Decided before the question even arrived: show that.
                    None => act.deps.outbox.do_send(EditQuestion::new(
                        act.spec.chat,
                        id,
                        "⌛ This question is closed.".to_string(),
                    )),
                }
            }));
        }
        let timeout = self.deps.config.approval_timeout;
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
        let (permission, shown) = match (&verdict, kind) {
            (Verdict::Allowed { by, always }, Kind::Tool { rule }) => {
                if *always {
                    self.deps.inbox.allow_always(
                        self.spec.chat,
                        rule.clone(),
                        self.spec.from.unwrap_or(UserId(0)),
                    );
                }
                let how = if *always {
                    format!(" (always in this chat: {rule})")
                } else {
                    String::new()
                };
                (
                    Permission::Allow {
                        input: ask.input.clone(),
                    },
                    format!("✅ Allowed by {by}{how}"),
                )
            }
            (Verdict::Answered { by }, Kind::Questions { answers, .. }) => {
                let mut input = ask.input.clone();
                if let Some(object) = input.as_object_mut() {
                    object.insert(
                        "answers".into(),
                        Value::Object(
                            answers
                                .into_iter()
                                .map(|(q, a)| (q, Value::String(a)))
                                .collect(),
                        ),
                    );
                }
                (Permission::Allow { input }, format!("✅ Answered by {by}"))
            }
            (Verdict::Denied { by }, _) => (
                Permission::Deny {
                    message: format!(
                        "{by} denied this in the chat. Do not try it again unless they ask for it."
                    ),
                },
                format!("❌ Denied by {by}"),
            ),
            (Verdict::TimedOut, _) => {
                let timeout = humantime::format_duration(self.deps.config.approval_timeout);
                (
                    Permission::Deny {
                        message: format!("Nobody in the chat answered within {timeout}; not run."),
                    },
                    format!("⌛ No answer in {timeout}"),
                )
            }
            (Verdict::Ended(why), _) => (
                Permission::Deny {
                    message: format!("Not run: {why}."),
                },
                format!("❌ Not run: {why}"),
            ),
            // A verdict of the other kind cannot be built for an ask.
            (Verdict::Allowed { .. } | Verdict::Answered { .. }, _) => (
                Permission::Deny {
                    message: "not run".into(),
                },
                "❌ Not run".to_string(),
            ),
        };
        tracing::info!(chat_id = self.chat_id(), turn_id = self.spec.turn.get(), call_id = %ask.id, tool = %ask.tool, decision = %shown, "approval decided");
        ask.reply.answer(permission);
        for (text, id) in texts.into_iter().zip(messages) {
            if let Some(id) = id {
                self.deps.outbox.do_send(EditQuestion::new(
                    self.spec.chat,
                    id,
                    format!("{text}\n\n{shown}"),
                ));
            }
        }
        self.resume_after_person(ctx);
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
            act.deps.outbox.do_send(AnswerCallback {
                chat: press.chat,
                id: press.callback.clone(),
                text: text.to_string(),
                alert: false,
            });
        };
        let Some(waiting) = self.approvals.waiting.get_mut(&press.token) else {
            return answer(self, "This question has expired.");
        };
        if !(press.admin || self.spec.from == Some(press.user)) {
            tracing::warn!(
                chat_id = self.chat_id(),
                turn_id = self.spec.turn.get(),
                user_id = press.user.0,
                "approval press by someone else refused"
            );
            return answer(
                self,
                "Only the person who asked, or an admin, can answer this.",
            );
        }
        let by = press.name.clone();
        match (press.choice, &mut waiting.kind) {
            (Choice::Allow | Choice::Always, Kind::Tool { .. }) => {
                let always = press.choice == Choice::Always;
                answer(
                    self,
                    if always {
                        "Allowed in this chat"
                    } else {
                        "Allowed"
                    },
                );
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
                    return answer(self, "This question has expired.");
                };
                let label = label.clone();
                answers.insert(q.text.clone(), label.clone());
                let done = answers.len() == questions.len();
                answer(self, &label);
                if done {
                    self.decide(&press.token, Verdict::Answered { by }, ctx);
                }
            }
            _ => answer(self, "This question has expired."),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn callback_data_parses_only_in_our_shapes() {
        let t = "0123456789abcdef0123456789abcdef";
        let parse = |d: &str| {
            ButtonPressed::parse(d, ChatId(1), UserId(2), "u".into(), false, "cb".into())
                .map(|p| p.choice)
        };
        assert_eq!(parse(&format!("ap:{t}:y")), Some(Choice::Allow));
        assert_eq!(parse(&format!("ap:{t}:a")), Some(Choice::Always));
        assert_eq!(parse(&format!("ap:{t}:n")), Some(Choice::Deny));
        assert_eq!(
            parse(&format!("aq:{t}:1:2")),
            Some(Choice::Option {
                question: 1,
                option: 2
            })
        );
        for bad in [
            format!("ap:{t}:x"),
            format!("ap:{t}:y:1"),
            format!("aq:{t}:1"),
            "ap:short:y".to_string(),
            format!("zz:{t}:y"),
            format!("ap:{}:y", "g".repeat(32)),
            String::new(),
        ] {
            assert_eq!(parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn tokens_are_128_random_bits() {
        let (a, b) = (token(), token());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn summaries_say_what_the_tool_would_do() {
        assert_eq!(
            summary("Bash", &json!({"command": "cargo test"})),
            "$ cargo test"
        );
        assert_eq!(
            summary("WebFetch", &json!({"url": "https://x.test/"})),
            "https://x.test/"
        );
        assert_eq!(
            summary("Write", &json!({"file_path": "a.txt", "content": "hello"})),
            "a.txt (5 bytes)"
        );
        assert!(
            summary(
                "Edit",
                &json!({"file_path": "a.rs", "old_string": "x", "new_string": "y"})
            )
            .contains("- x\n+ y")
        );
        let long = summary("Other", &json!({"blob": "z".repeat(1000)}));
        assert!(long.chars().count() <= 301, "{}", long.len());
    }

    #[test]
    fn always_remembers_the_tool_or_the_commands_first_word() {
        assert_eq!(
            rule_for("Bash", &json!({"command": "git status -s"})),
            "Bash(git)"
        );
        assert_eq!(rule_for("WebFetch", &json!({"url": "x"})), "WebFetch");
    }

    #[test]
    fn ask_user_question_options_are_read() {
        let input = json!({"questions": [
            {"question": "Which?", "header": "h", "options": [{"label": "A"}, {"label": "B"}], "multiSelect": false}
        ]});
        let qs = questions(&input).expect("parsed");
        assert_eq!(qs[0].text, "Which?");
        assert_eq!(qs[0].options, vec!["A", "B"]);
        assert!(questions(&json!({"questions": [{"question": "no options"}]})).is_none());
    }
}
